"""DP-SGD on a support set: one step of Poisson sampling and the noisy clipped gradient.

:func:`private_gradient` runs one step of DP-KIP through the privacy engine (:func:`gradient_stages`, a
:class:`~mmdsynth.privacy.engine.Step` stage run by :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run`), which draws
the batch and adds the noise; the records are read
by the step's statistic, :class:`~mmdsynth.statistics.gradients.ClippedGradientSums`. For a
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

Two exact ways to get the clipped sum, both in :mod:`mmdsynth.statistics.gradients`: ``torch.func`` (vmap of grad,
no loop over records; ``clipped_gradients``, any kernel, the reference) and the factored closed form (FC ReLU NTK
only; ~15x faster on MNIST, float64), the default. Tests check they agree.
"""
from __future__ import annotations

import torch

from ..engines import as_source
from ..statistics.gradients import ClippedGradientSums
from .engine import Step


def gradient_stages(kernel, x_s: torch.Tensor, y_s: torch.Tensor, x_all: torch.Tensor | None = None,
                    y_all: torch.Tensor | None = None, *, reg: float, clip: float, private: bool, expected_batch: float,
                    persons=None, records=None, n: int | None = None):
    """The stage of one DP-SGD step (a planner's part, run by :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run` of a
    DP-SGD plan): a :class:`~mmdsynth.privacy.engine.Step` whose statistic,
    :class:`~mmdsynth.statistics.gradients.ClippedGradientSums`, sums the clipped gradients of the records the engine
    draws. Returns the mean gradient: the noisy sum over the public expected batch ``q N`` (``private`` False, the
    non-private baseline: the plain sum over the realised batch). ``records`` (a
    :class:`~mmdsynth.statistics.gradients.KernelRecords`) in place of ``x_all`` / ``y_all``: the run's records,
    which the engine binds the statistic to (a fit's planner holds none), ``n`` their public count."""
    statistic = ClippedGradientSums(kernel, x_s, y_s, x_all, y_all, reg=reg, clip=clip, persons=persons,
                                    records=records)
    if records is None:
        n = x_all.shape[0] if persons is None else persons.n_records
    total = yield Step(n, statistic, clip)
    scale = expected_batch if private else max(statistic.size, 1)
    return (total / scale).to(device=x_s.device, dtype=x_s.dtype)


def private_gradient(kernel, x_s: torch.Tensor, y_s: torch.Tensor, x_all: torch.Tensor, y_all: torch.Tensor, *,
                     reg: float, clip: float, engine, expected_batch: float, persons=None) -> torch.Tensor:
    """The mean gradient of one DP-SGD step, run by ``engine`` (a :class:`~mmdsynth.privacy.engine.PrivacyEngine`
    of a DP-SGD plan, :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run` of :func:`gradient_stages`):
    the engine draws the step's records from its secret sampler (every record of ``x_all``/``y_all`` in a one-step
    plan), :class:`~mmdsynth.statistics.gradients.ClippedGradientSums` sums their clipped gradients, the engine
    adds N(0, (sigma C)^2 I); the result is divided by the public expected batch ``q N`` (a Poisson batch may be
    empty). With a person as the privacy unit (``persons``: the rows' :class:`~mmdsynth.engines.persons.PersonTable`)
    the engine samples persons and the step reads every row of each, weighted by 1 / that person's row count: a
    person adds the mean of their rows' clipped gradients, norm <= C, so the step is the same mechanism over persons
    (q and N count persons). A non-private run (the engine's ``private=False``, benchmark only) divides the plain sum
    by the realised batch instead."""
    return engine.run(persons if persons is not None else as_source(x_all, y_all), gradient_stages(
        kernel, x_s, y_s, x_all, y_all, reg=reg, clip=clip, private=engine.private, expected_batch=expected_batch,
        persons=persons))
