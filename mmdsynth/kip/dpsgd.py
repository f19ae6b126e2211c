"""DP-SGD on a support set: Poisson sampling and the noisy clipped gradient (data-touching #2).

:func:`private_gradient` is the only function of DP-KIP that reads private records. For a
batch drawn by :class:`~mmdsynth.privacy.sampling.PoissonSampler` (each record independently with
probability q, from the OS CSPRNG: the sample is as secret as the noise, which is what the
subsampled-Gaussian accountant assumes) it computes every record's gradient of the
KIP loss with respect to the support inputs, replaces a non-finite gradient by 0 and clips each
to L2 norm C (rules applied to each record alone), sums, adds Gaussian noise of std sigma * C and
divides by the expected batch size q N (public; dividing by the realised batch size would reveal it). Every
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


def private_gradient(kernel, x_s: torch.Tensor, y_s: torch.Tensor, x_b: torch.Tensor, y_b: torch.Tensor, *,
                     reg: float, clip: float, engine, expected_batch: float,
                     weights: torch.Tensor | None = None) -> torch.Tensor:
    """The noisy mean gradient of one DP-SGD step: (sum of clipped per-record gradients +
    N(0, (sigma C)^2 I), the noise added by ``engine``, a
    :class:`~mmdsynth.privacy.engine.PrivacyEngine` of a DP-SGD plan) / (q N). ``x_b``/``y_b`` may be
    empty (a Poisson batch can be). With a person as the privacy unit the batch holds every row of each
    sampled person and ``weights`` is 1 / that person's row count: a person adds the mean of their rows'
    clipped gradients, norm <= C, so the step is the same mechanism over persons (q and N count persons)."""
    total = clipped_sum(kernel, x_s, y_s, x_b, y_b, reg, clip, weights=weights)
    noisy = engine.noisy_step(total, clip)
    return (noisy / expected_batch).to(device=x_s.device, dtype=x_s.dtype)


def clipped_sum(kernel, x_s, y_s, x_b, y_b, reg: float, clip: float, *, factored: bool = True,
                weights: torch.Tensor | None = None) -> torch.Tensor:
    """Sum of the clipped per-record gradients, each times its ``weights`` entry when given (zeros for an
    empty batch). Without noise this is NOT private: :func:`private_gradient` is the only caller on private
    data in a DP run; the non-private KIP baseline (epsilon = inf, benchmark only) divides it by the batch size.
    ``factored=False`` (or a kernel other than the FC ReLU NTK) uses the torch.func reference."""
    if not x_b.shape[0]:
        return torch.zeros_like(x_s)
    if factored and isinstance(kernel, FCReLUKernel):
        return factored_clipped_sum(kernel, x_s, y_s, x_b, y_b, reg, clip, weights)     # float64
    g = clipped_gradients(kernel, x_s.detach(), y_s, x_b.to(x_s.dtype), y_b.to(x_s.dtype), reg, clip)
    if weights is not None:
        g = g * torch.as_tensor(weights, dtype=g.dtype, device=g.device).reshape(-1, *([1] * (g.dim() - 1)))
    return g.sum(0)
