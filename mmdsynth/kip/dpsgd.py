"""DP-SGD on a support set: Poisson sampling and the noisy clipped gradient (data-touching #2).

:func:`private_gradient` is the only function of DP-KIP that reads private records, through the privacy
engine's :meth:`~mmdsynth.privacy.engine.PrivacyEngine.step`, which draws the batch and adds the noise. For a
batch drawn by :class:`~mmdsynth.privacy.sampling.PoissonSampler` (each record independently with
probability q, from the OS CSPRNG: the sample is as secret as the noise, which is what the
subsampled-Gaussian accountant assumes) it computes every record's gradient of the
KIP loss with respect to the support inputs, replaces a non-finite gradient by 0 and clips each
to L2 norm C (rules applied to each record alone) and sums; the engine adds Gaussian noise of std sigma * C;
the step divides by the expected batch size q N (public; dividing by the realised batch size would reveal it). Every
record's clipped gradient has norm <= C, so adding or removing one moves the sum by <= C and
replacing one by <= 2C: the step is the subsampled Gaussian mechanism that the accountant's
relation (replace-one by default: mixtures at +-C; or add/remove) prices, noise multiplier
sigma, calibrated beforehand for the whole schedule.

Two exact ways to get the clipped sum: ``torch.func`` (vmap of grad, no loop over records;
:func:`clipped_gradients`, any kernel, the reference) and the factored closed form of
:mod:`mmdsynth.kip.per_record` (FC ReLU NTK only; ~15x faster on MNIST, float64), the default.
Tests check they agree.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.func import grad, vmap

from ..privacy.mechanisms import bounded_rows
from .kernels import FCReLUKernel
from .krr import krr_loss
from .per_record import factored_clipped_sum


def clipped_gradients(kernel, x_s: torch.Tensor, y_s: torch.Tensor, x_b: torch.Tensor, y_b: torch.Tensor,
                      reg: float, clip: float) -> torch.Tensor:
    """(B, *x_s.shape) per-record gradients of the KIP loss w.r.t. ``x_s``, each made finite (a
    non-finite one becomes 0) and clipped to norm <= ``clip``."""
    def loss_one(xs, xt, yt):
        return krr_loss(kernel, xs, y_s, xt[None], yt[None], reg)

    g = vmap(grad(loss_one), in_dims=(None, 0, 0))(x_s, x_b, y_b)
    return bounded_rows(g.reshape(g.shape[0], -1), clip).reshape(g.shape)


def private_gradient(kernel, x_s: torch.Tensor, y_s: torch.Tensor, x_all: torch.Tensor, y_all: torch.Tensor, *,
                     reg: float, clip: float, engine, expected_batch: float, persons=None) -> torch.Tensor:
    """The mean gradient of one DP-SGD step, run by ``engine`` (a :class:`~mmdsynth.privacy.engine.PrivacyEngine`
    of a DP-SGD plan, :meth:`~mmdsynth.privacy.engine.PrivacyEngine.step`):
    the engine draws the step's records from its secret sampler (every record of ``x_all``/``y_all`` in a one-step
    plan), :func:`clipped_sum` sums their clipped gradients, the engine adds N(0, (sigma C)^2 I); the result is
    divided by the public expected batch ``q N`` (a Poisson batch may be empty). With a person as the privacy unit
    (``persons``: the rows' :class:`~mmdsynth.engines.persons.PersonTable`) the engine samples persons and the step
    reads every row of each, weighted by 1 / that person's row count: a person adds the mean of their rows' clipped
    gradients, norm <= C, so the step is the same mechanism over persons (q and N count persons). A non-private run
    (the engine's ``private=False``, benchmark only) divides the plain sum by the realised batch instead."""
    seen = {}

    def statistic(chosen: torch.Tensor) -> torch.Tensor:
        idx, w = person_rows(persons, chosen)
        idx = idx.to(x_all.device)
        seen["size"] = len(idx) if w is None else float(w.sum())
        return clipped_sum(kernel, x_s, y_s, x_all[idx], y_all[idx], reg, clip, weights=w)

    n = x_all.shape[0] if persons is None else persons.n_records
    total = engine.step(n, statistic, clip)
    scale = expected_batch if engine.private else max(seen["size"], 1)
    return (total / scale).to(device=x_s.device, dtype=x_s.dtype)


def person_rows(persons, chosen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the rows one DP-SGD step reads, their weights): the sampled records themselves (weights None), or with a
    person as the unit every row of each sampled person, weighted by 1 / that person's rows."""
    if persons is None:
        return chosen, None
    rows = np.flatnonzero(np.isin(persons.codes, chosen.numpy()))
    return torch.from_numpy(rows), torch.from_numpy(persons.data.weights[rows])


def clipped_sum(kernel, x_s, y_s, x_b, y_b, reg: float, clip: float, *, factored: bool = True,
                weights: torch.Tensor | None = None) -> torch.Tensor:
    """Sum of the clipped per-record gradients, each times its ``weights`` entry when given (zeros for an
    empty batch). Without noise this is NOT private: the engine's step (:func:`private_gradient`) is the only caller
    on private data.
    ``factored=False`` (or a kernel other than the FC ReLU NTK) uses the torch.func reference."""
    if not x_b.shape[0]:
        return torch.zeros_like(x_s)
    if factored and isinstance(kernel, FCReLUKernel):
        return factored_clipped_sum(kernel, x_s, y_s, x_b, y_b, reg, clip, weights)     # float64
    g = clipped_gradients(kernel, x_s.detach(), y_s, x_b.to(x_s.dtype), y_b.to(x_s.dtype), reg, clip)
    if weights is not None:
        g = g * torch.as_tensor(weights, dtype=g.dtype, device=g.device).reshape(-1, *([1] * (g.dim() - 1)))
    return g.sum(0)
