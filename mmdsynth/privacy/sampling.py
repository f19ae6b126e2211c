"""Which private records a DP-SGD step reads: a secret choice, like the noise.

Amplification by subsampling (the accountant's ``PoissonSampledDpEvent``) holds only if nobody
can tell which records a step read. A sampler seeded from a public value (a ``--seed`` recorded
in ``model.json``) lets anyone recompute every batch, and the true epsilon is then that of the
unsampled steps a record took part in (issue 30: a claimed 1 was about 12.5 on MNIST).

:class:`PoissonSampler` therefore draws its coins from the same secure source as the noise:
the operating system's CSPRNG (``os.urandom``), one 53-bit uniform per record and step,
compared with ``round(q 2^53)`` (the inclusion probability is q to within 2^-53). It has no
state to save or resume: every step's coins are fresh. ``seed=`` gives a reproducible sample
for tests only; the ledger records the policy ("fixed-seed:N ... voids the guarantee"), and the
CLI never sets it.
"""
from __future__ import annotations

import os

import numpy as np
import torch

SECURE_SAMPLER = "secure (OS CSPRNG Poisson coins, fresh every step)"


class PoissonSampler:
    """Poisson sampling of record indices: each record in a step independently with rate q."""

    def __init__(self, seed: int | None = None):
        self.seed = None if seed is None else int(seed)
        if self.seed is None:
            self.generator = None
            self.policy = SECURE_SAMPLER
        else:
            self.generator = torch.Generator().manual_seed(self.seed)
            self.policy = (f"fixed-seed:{self.seed} (testing only: the sample is reproducible, which voids the "
                           f"guarantee's amplification by subsampling)")

    @property
    def secure(self) -> bool:
        return self.generator is None

    def sample(self, n: int, sample_rate: float) -> torch.Tensor:
        """Indices (int64, sorted) of the records in one Poisson batch of ``n`` records."""
        if self.generator is not None:
            return torch.nonzero(torch.rand(n, generator=self.generator) < sample_rate, as_tuple=True)[0]
        coins = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)   # uniform on [0, 2^53)
        threshold = np.uint64(round(float(sample_rate) * 2.0 ** 53))
        return torch.from_numpy(np.nonzero(coins < threshold)[0].astype(np.int64))

    def get_state(self) -> torch.Tensor | None:
        """The generator state of a test sampler (None for the secure one: nothing to resume)."""
        return None if self.generator is None else self.generator.get_state()

    def set_state(self, state: torch.Tensor | None) -> None:
        if self.generator is not None and state is not None:
            self.generator.set_state(state)
