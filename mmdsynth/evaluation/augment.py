"""Differentiable Siamese augmentation (DSA, Zhao and Bilen 2021) as dataset-condensation evaluations use it.

The dataset-condensation protocol (VICO-UoE/DatasetCondensation ``utils.py``, ``epoch`` lines 309-311 and
``DiffAugment`` lines 495-520, ``ParamDiffAug`` lines 474-484; NDPDC and Dosser evaluate the same way) trains the
ConvNet on the small set with one augmentation family drawn per batch from the strategy string (e.g.
``color_crop_cutout_scale_rotate``) and its parameters drawn per image:

=========  ==========================================================================================
color      brightness + U(-0.5, 0.5); saturation: channel deviations x U(0, 2); contrast: deviations from
           the image mean x U(0.5, 1.5)
crop       translation by whole pixels up to 0.125 of the side, zeros shifted in
cutout     a square of half the side set to 0, centred anywhere in the image
flip       horizontal, with probability 0.5
scale      each axis by U(1/1.2, 1.2) (bilinear resampling, zeros outside)
rotate     U(-15, 15) degrees (bilinear resampling, zeros outside)
=========  ==========================================================================================

Applied to normalised images (zero is the dataset's mean colour), as there. All randomness comes from
``generator``: evaluation randomness, public.
"""
from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from ..errors import InvalidParameterError

FAMILIES = ("color", "crop", "cutout", "flip", "scale", "rotate")


def _u(n: int, g: torch.Generator, lo: float, hi: float, device) -> torch.Tensor:
    return (torch.rand(n, generator=g) * (hi - lo) + lo).to(device)


def _resample(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, align_corners=False)


def _color(x, g):
    n, dev = x.shape[0], x.device
    x = x + (_u(n, g, 0, 1, dev) - 0.5).view(n, 1, 1, 1)
    mean = x.mean(1, keepdim=True)
    x = (x - mean) * _u(n, g, 0, 2, dev).view(n, 1, 1, 1) + mean
    mean = x.mean((1, 2, 3), keepdim=True)
    return (x - mean) * _u(n, g, 0.5, 1.5, dev).view(n, 1, 1, 1) + mean


def _crop(x, g):
    n, _, h, w = x.shape
    sh, sw = int(h * 0.125 + 0.5), int(w * 0.125 + 0.5)
    dy = torch.randint(-sh, sh + 1, (n,), generator=g).tolist()
    dx = torch.randint(-sw, sw + 1, (n,), generator=g).tolist()
    padded = F.pad(x, (sw, sw, sh, sh))
    return torch.stack([padded[i, :, sh + dy[i]:sh + dy[i] + h, sw + dx[i]:sw + dx[i] + w] for i in range(n)])


def _cutout(x, g):
    n, _, h, w = x.shape
    ch, cw = int(h * 0.5 + 0.5), int(w * 0.5 + 0.5)
    cy = torch.randint(0, h + 1, (n,), generator=g).to(x.device)
    cx = torch.randint(0, w + 1, (n,), generator=g).to(x.device)
    rows = torch.arange(h, device=x.device).view(1, h, 1)
    cols = torch.arange(w, device=x.device).view(1, 1, w)
    inside = ((rows - cy.view(n, 1, 1)).abs() * 2 < ch) & ((cols - cx.view(n, 1, 1)).abs() * 2 < cw)
    return x * (~inside).unsqueeze(1).to(x.dtype)


def _flip(x, g):
    flip = (torch.rand(x.shape[0], generator=g) < 0.5).to(x.device).view(-1, 1, 1, 1)
    return torch.where(flip, x.flip(3), x)


def _scale(x, g):
    n, dev = x.shape[0], x.device
    theta = torch.zeros(n, 2, 3, device=dev)
    theta[:, 0, 0] = _u(n, g, 1 / 1.2, 1.2, dev)
    theta[:, 1, 1] = _u(n, g, 1 / 1.2, 1.2, dev)
    return _resample(x, theta)


def _rotate(x, g):
    n, dev = x.shape[0], x.device
    a = _u(n, g, -15.0, 15.0, dev) * math.pi / 180
    theta = torch.zeros(n, 2, 3, device=dev)
    theta[:, 0, 0], theta[:, 0, 1] = torch.cos(a), -torch.sin(a)
    theta[:, 1, 0], theta[:, 1, 1] = torch.sin(a), torch.cos(a)
    return _resample(x, theta)


_OPS = {"color": _color, "crop": _crop, "cutout": _cutout, "flip": _flip, "scale": _scale, "rotate": _rotate}


def check_strategy(strategy: str) -> list[str]:
    families = [f for f in str(strategy).split("_") if f]
    bad = [f for f in families if f not in _OPS]
    if not families or bad:
        raise InvalidParameterError(f"augmentation strategy {strategy!r}: families are joined by '_' from "
                                    f"{', '.join(FAMILIES)}; unknown: {bad or 'none given'}.")
    return families


def dsa_augment(x: torch.Tensor, strategy: str, generator: torch.Generator) -> torch.Tensor:
    """One family of ``strategy`` drawn for the batch, its parameters drawn per image (see the module)."""
    families = check_strategy(strategy)
    family = families[int(torch.randint(len(families), (1,), generator=generator))]
    return _OPS[family](x, generator)
