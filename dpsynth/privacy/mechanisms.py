"""The Gaussian mechanism and the source of privacy noise.

Privacy noise comes from a generator seeded by the operating system's entropy
pool unless the caller asks for a fixed seed (for tests); the choice is
recorded in the ledger as the ``seed_policy``.
"""
from __future__ import annotations

import secrets

import torch

from ..validation import check_positive


class NoiseSource:
    """A torch generator for privacy noise with a recorded seeding policy."""

    def __init__(self, seed: int | None = None):
        if seed is None:
            self.policy = "os-entropy"
            self._seed = secrets.randbits(63)
        else:
            self.policy = f"fixed-seed:{int(seed)} (testing only: noise is reproducible)"
            self._seed = int(seed)
        self.generator = torch.Generator(device="cpu").manual_seed(self._seed)

    def normal(self, shape, dtype=torch.float64) -> torch.Tensor:
        return torch.randn(shape, generator=self.generator, dtype=dtype)


def gaussian_mechanism(value: torch.Tensor, sensitivity: float, noise_multiplier: float,
                       noise: NoiseSource) -> torch.Tensor:
    """Return ``value + N(0, (noise_multiplier * sensitivity)^2 I)``.

    ``sensitivity`` is the L2 sensitivity of ``value`` under replace-one
    neighbours, declared by the caller from a proof (not estimated from data).
    Noise is drawn in float64 on the CPU and added in float64.
    """
    sensitivity = check_positive(sensitivity, "sensitivity")
    noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
    value64 = value.detach().to(device="cpu", dtype=torch.float64)
    std = noise_multiplier * sensitivity
    return value64 + std * noise.normal(value64.shape)
