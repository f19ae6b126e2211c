"""The records themselves as features: phi(x) = x / sqrt(d) for records in [0, 1]^d.

Its class-conditional mean embedding is each class's mean record (times the class's share of the data): the
cheapest statistic a small learned set can be matched to. DP-KIP's ``start="pixels"`` spends a small share of its
plan on it to start the support set near each class's mean instead of N(0, I) noise.

``||phi(x)|| <= 1`` for every x in [0, 1]^d (images, encoded tables); records outside it are scaled back to norm 1
when summed (:meth:`FeatureMap.bounded`), so the sensitivity 2/m of a mean embedding holds for any input.
"""
from __future__ import annotations

import math

import torch

from ..validation import check_positive
from .base import FeatureMap, register


@register
class PixelFeatures(FeatureMap):
    name = "pixels"
    norm_bound = 1.0

    def __init__(self, input_dim: int):
        self.input_dim = int(check_positive(input_dim, "input_dim", integer=True))

    @property
    def out_dim(self) -> int:
        return self.input_dim

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1) * (1.0 / math.sqrt(self.input_dim))

    def spec(self) -> dict:
        return {"name": self.name, "input_dim": self.input_dim}
