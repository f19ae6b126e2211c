"""Random Fourier features of a Gaussian kernel (DP-MERF).

phi(x) = sqrt(2/D) [cos(W x), sin(W x)], rows of W ~ N(0, I / l^2), D/2 rows:
||phi(x)||^2 = (2/D) * sum_j (cos^2 + sin^2) = 1 exactly, for every x.

The length scale ``l`` is a user choice or a fixed data-independent default
(never a median heuristic on private data, which would leak).
"""
from __future__ import annotations

import math

import torch

from ..errors import InvalidParameterError
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


@register
class MixedRFF(FeatureMap):
    """DP-MERF's features for heterogeneous tables (Harder et al. 2021, Sec. 4.3).

    Input: encoded rows (numeric columns in [0, 1] first, then one-hot blocks).
    phi(x) = [sqrt(a) RFF(x_num), sqrt(1 - a) x_cat / max(||x_cat||, sqrt(k))] with k
    categorical columns and a = 1/2 when both parts exist: a sum kernel of a Gaussian
    kernel on the numeric part and a linear kernel on the one-hot part. Both parts have
    norm <= 1 for every input (exactly 1 for encoded records), so ||phi(x)|| <= 1 and the
    embedding has the usual sensitivity 2/m (the reference's 2 sqrt(2)/m came from not
    weighting the parts).
    """

    name = "mixed_rff"
    norm_bound = 1.0

    def __init__(self, n_numeric: int, n_categorical_columns: int, onehot_dim: int, n_features: int = 1000,
                 length_scale: float | None = None, seed: int = 0):
        self.n_numeric, self.n_cat, self.onehot_dim = int(n_numeric), int(n_categorical_columns), int(onehot_dim)
        if self.n_numeric + self.onehot_dim < 1 or (self.n_cat == 0) != (self.onehot_dim == 0):
            raise InvalidParameterError("mixed_rff needs numeric columns and/or categorical columns with one-hot width.")
        self.rff = RandomFourierFeatures(self.n_numeric, n_features, length_scale, seed) if self.n_numeric else None
        self.a = 0.5 if (self.rff is not None and self.n_cat) else (1.0 if self.rff is not None else 0.0)

    @property
    def out_dim(self) -> int:
        return (self.rff.out_dim if self.rff is not None else 0) + self.onehot_dim

    def to(self, device) -> "MixedRFF":
        if self.rff is not None:
            self.rff.to(device)
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        parts = []
        if self.rff is not None:
            parts.append(math.sqrt(self.a) * self.rff(x[:, :self.n_numeric]))
        if self.n_cat:
            cat = x[:, self.n_numeric:]
            denom = torch.clamp(cat.norm(dim=1, keepdim=True), min=math.sqrt(self.n_cat))
            parts.append(math.sqrt(1.0 - self.a) * cat / denom)
        return torch.cat(parts, 1)

    def spec(self) -> dict:
        return {"name": self.name, "n_numeric": self.n_numeric, "n_categorical_columns": self.n_cat,
                "onehot_dim": self.onehot_dim, "n_features": self.rff.n_features if self.rff else 0,
                "length_scale": self.rff.length_scale if self.rff else None,
                "seed": self.rff.seed if self.rff else 0}
