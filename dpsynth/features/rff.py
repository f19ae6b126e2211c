"""Random Fourier features of a Gaussian kernel (DP-MERF).

phi(x) = sqrt(2/D) [cos(W x), sin(W x)], rows of W ~ N(0, I / l^2), D/2 rows:
||phi(x)||^2 = (2/D) * sum_j (cos^2 + sin^2) = 1 exactly, for every x.

The length scale ``l`` is a user choice or a fixed data-independent default
(never a median heuristic on private data, which would leak).
"""
from __future__ import annotations

import math

import torch

from ..validation import check_positive
from .base import FeatureMap, register


@register
class RandomFourierFeatures(FeatureMap):
    name = "rff"
    norm_bound = 1.0

    def __init__(self, input_dim: int, n_features: int = 1000, length_scale: float | None = None,
                 seed: int = 0):
        self.input_dim = int(check_positive(input_dim, "input_dim", integer=True))
        n_features = int(check_positive(n_features, "n_features", integer=True))
        self.n_features = n_features + (n_features % 2)  # cos/sin pairs
        # Default: sqrt(d)/2, data-independent; suits inputs scaled to [0, 1].
        self.length_scale = float(check_positive(length_scale, "length_scale")) if length_scale is not None \
            else math.sqrt(self.input_dim) / 2
        self.seed = int(seed)
        g = torch.Generator().manual_seed(self.seed)
        self.weights = torch.randn(self.n_features // 2, self.input_dim, generator=g,
                                   dtype=torch.float64) / self.length_scale

    @property
    def out_dim(self) -> int:
        return self.n_features

    def to(self, device) -> "RandomFourierFeatures":
        self.weights = self.weights.to(device)
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        w = self.weights.to(dtype=x.dtype, device=x.device)
        proj = x @ w.T
        return math.sqrt(2.0 / self.n_features) * torch.cat([torch.cos(proj), torch.sin(proj)], dim=1)

    def spec(self) -> dict:
        return {"name": self.name, "input_dim": self.input_dim, "n_features": self.n_features,
                "length_scale": self.length_scale, "seed": self.seed}
