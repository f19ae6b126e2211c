"""The Gaussian mechanism and the source of privacy noise.

Three noise sources, recorded in the ledger (``noise_source``):

* ``secure`` (the default): every random bit comes from the operating system's CSPRNG
  (``os.urandom``, i.e. ``getrandom``), not from a seedable pseudo-random generator, so the
  noise cannot be reconstructed from a leaked or guessed seed (torch's Mersenne Twister has
  19,937 bits of state and is predictable from its output). Against the floating-point attacks
  on naive Gaussian samplers (Mironov 2012; Holohan & Braghin 2021, arXiv 2107.10138; Jin et
  al. 2022, arXiv 2112.05307), which read the private value from the low-order bits of
  ``value + noise``: each noise value is the sum of four independent Box-Muller normals
  divided by 2 (Holohan & Braghin's remedy, which Opacus's ``secure_mode`` uses), and the
  noisy output is rounded to a power-of-two grid about 2^-20 of the noise std (snapping,
  as Mironov proposed; post-processing, so it costs no privacy): the bits an attacker would
  read are no longer produced. One release of D x C numbers takes about 0.2 s per million.
* ``os-seeded``: torch's Mersenne Twister seeded with 63 bits of OS entropy (faster; for
  many small draws where the secure source would dominate the run time).
* ``fixed-seed:N``: reproducible noise, for tests only.
"""
from __future__ import annotations

import math
import os
import secrets

import numpy as np
import torch

from ..errors import DataValidationError, InvalidParameterError
from ..validation import check_positive

SECURE = "secure (OS CSPRNG; sum of 4 normals / 2; output snapped to a 2^-20 std grid)"
#: output grid of the secure mode: the largest power of two <= noise std x 2^-SNAP_BITS
SNAP_BITS = 20
#: secure draws of at most this many values are computed in numpy (:func:`_small_normals`; 1.5x faster a call at 8-64
#: values), larger ones in torch (its vectorised logarithm and sines win from about 600)
SMALL_DRAW = 512


class NoiseSource:
    """Where privacy noise comes from; ``policy`` is recorded in the ledger."""

    def __init__(self, seed: int | None = None, secure: bool | None = None):
        if seed is not None and secure:
            raise InvalidParameterError(
                "a fixed noise seed makes the noise reproducible, which a secure source must not be; "
                "pass seed=None for secure noise, or secure=False with a seed (testing only)."
            )
        self.secure = seed is None if secure is None else bool(secure)
        if seed is not None:
            self.policy = f"fixed-seed:{int(seed)} (testing only: noise is reproducible)"
            self.generator = torch.Generator(device="cpu").manual_seed(int(seed))
        elif self.secure:
            self.policy = SECURE
            self.generator = None
        else:
            self.policy = "os-seeded (torch Mersenne Twister seeded with 63 bits of OS entropy)"
            self.generator = torch.Generator(device="cpu").manual_seed(secrets.randbits(63))

    def normal(self, shape, dtype=torch.float64) -> torch.Tensor:
        """Standard normal draws of ``shape``."""
        if not self.secure:
            return torch.randn(shape, generator=self.generator, dtype=dtype)
        n = math.prod(shape)
        if n <= SMALL_DRAW:
            return torch.from_numpy(_small_normals(n)).reshape(shape).to(dtype)
        z = _csprng_normals(4 * n).reshape(4, n).sum(0) / 2.0   # N(0, 1): variance 4 / 4
        return z.reshape(shape).to(dtype)

    def gumbel(self, n: int) -> torch.Tensor:
        """``n`` standard Gumbel draws (float64), -log(-log U) with U uniform in (0, 1): 53-bit uniforms from the
        OS CSPRNG in secure mode, else from the generator. The exponential mechanism draws its choice as the argmax
        of score plus Gumbel noise (:func:`exponential_mechanism`)."""
        if self.secure:
            bits = torch.frombuffer(bytearray(os.urandom(8 * n)), dtype=torch.int64)
            u = (torch.bitwise_right_shift(bits, 11).to(torch.float64) + (2.0 ** 52 + 0.5)) * 2.0 ** -53
        else:
            u = torch.rand(n, generator=self.generator, dtype=torch.float64).clamp(2.0 ** -53, 1 - 2.0 ** -53)
        return -torch.log(-torch.log(u))

    def add_noise(self, value: torch.Tensor, std: float) -> torch.Tensor:
        """``value + N(0, std^2 I)`` in float64 (snapped to the secure grid in secure mode)."""
        if not self.secure:
            return value + std * self.normal(value.shape)
        grid = 2.0 ** math.floor(math.log2(std) - SNAP_BITS)
        if value.numel() <= SMALL_DRAW:                          # the same arithmetic in numpy (see SMALL_DRAW)
            v = value.detach().cpu().to(torch.float64).numpy()
            return torch.from_numpy(np.round((v + std * _small_normals(v.size).reshape(v.shape)) / grid) * grid)
        return torch.round((value + std * self.normal(value.shape)) / grid) * grid


def _small_normals(n: int) -> np.ndarray:
    """``n`` secure standard normals as :meth:`NoiseSource.normal` draws them (the sum of four CSPRNG Box-Muller
    normals / 2), in numpy: the same bits and arithmetic as :func:`_csprng_normals`, for a small draw (a DP-SGD
    step's, a sampled release step's), which in torch pays more in per-operation overhead than in arithmetic."""
    return _small_csprng_normals(4 * n).reshape(4, n).sum(0) / 2.0


def _small_csprng_normals(n: int) -> np.ndarray:
    half = (n + 1) // 2
    k = np.frombuffer(os.urandom(16 * half), dtype=np.int64) >> 11      # arithmetic shift, as torch's
    u = (k.astype(np.float64) + (2.0 ** 52 + 0.5)) * 2.0 ** -53          # exact, in (0, 1)
    r = np.sqrt(-2.0 * np.log(u[:half]))
    theta = (2.0 * math.pi) * u[half:]
    return np.concatenate([r * np.cos(theta), r * np.sin(theta)])[:n]


def _csprng_normals(n: int) -> torch.Tensor:
    """``n`` standard normals (float64) from OS CSPRNG bits by the Box-Muller transform, with
    53-bit uniforms in (0, 1) (never 0, so the logarithm is finite)."""
    half = (n + 1) // 2
    bits = torch.frombuffer(bytearray(os.urandom(16 * half)), dtype=torch.int64)
    k = torch.bitwise_right_shift(bits, 11)            # arithmetic shift: 2^53 values in [-2^52, 2^52)
    u = (k.to(torch.float64) + (2.0 ** 52 + 0.5)) * 2.0 ** -53                     # exact, in (0, 1)
    u1, u2 = u[:half], u[half:]
    r = torch.sqrt(-2.0 * torch.log(u1))
    theta = (2.0 * math.pi) * u2
    return torch.cat([r * torch.cos(theta), r * torch.sin(theta)])[:n]


def gaussian_mechanism(value: torch.Tensor, sensitivity: float, noise_multiplier: float,
                       noise: NoiseSource) -> torch.Tensor:
    """Return ``value + N(0, (noise_multiplier * sensitivity)^2 I)``.

    ``sensitivity`` is the L2 sensitivity of ``value`` under replace-one
    neighbours, declared by the caller from a proof (not estimated from data).
    Noise is drawn in float64 on the CPU and added in float64. A statistic that is not
    finite is refused before any noise is drawn, and the error names no record: the
    feature maps bound every record's contribution, so this is a defect, not a data error.
    """
    sensitivity = check_positive(sensitivity, "sensitivity")
    noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
    value64 = value.detach().to(device="cpu", dtype=torch.float64)
    if not bool(np.isfinite(value64.numpy()).all()):          # numpy: a small step's check costs 4 us, not 21
        raise DataValidationError(
            "the statistic to be released is not finite; nothing was released. Every record's "
            "contribution is bounded before summation, so this points to a defect in the feature map: "
            "please report it."
        )
    return noise.add_noise(value64, noise_multiplier * sensitivity)


def exponential_mechanism(scores, sensitivity: float, epsilon0: float, noise: NoiseSource) -> int:
    """The index of one of ``scores`` (higher is better) drawn with probability proportional to
    ``exp(epsilon0 * score / (2 * sensitivity))``: the argmax of ``score * epsilon0 / (2 sensitivity)`` plus standard
    Gumbel noise (the Gumbel-max trick; the same distribution, no exponentials that could overflow). ``sensitivity``
    bounds how much one record changes any score (declared from a proof); the choice is ``epsilon0``-DP, and
    ``epsilon0^2 / 8``-zCDP (bounded range). Scores that are not finite are refused before any draw."""
    q = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    sensitivity, epsilon0 = check_positive(sensitivity, "sensitivity"), check_positive(epsilon0, "epsilon0")
    if q.numel() == 0:
        raise InvalidParameterError("the exponential mechanism needs at least one candidate.")
    if not bool(torch.isfinite(q).all()):
        raise DataValidationError("a score to select from is not finite; nothing was selected. Scores are bounded "
                                  "functions of the records, so this points to a defect: please report it.")
    return int(torch.argmax(q * (epsilon0 / (2.0 * sensitivity)) + noise.gumbel(q.numel())))
