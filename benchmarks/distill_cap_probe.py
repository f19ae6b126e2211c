"""Issue 85's information-cap probes: statistics that are not in the library, measured on the exact embedding.

Each lever is a variant of dp-randconv's feature map (32 random ConvNets, width 64), its embedding of the first N
training images taken exactly (no noise: a benchmark-only probe, never a release), then ``distill_release`` (10
per class, 2,000 steps x 2 networks) and the ConvNet protocols, one JSON line appended to ``--out`` as
``distill.py`` writes them. A lever earns a place in the library only if it raises this cap (the plain map's line:
``distill.py --epsilon inf --train-subset 20000``).

- ``views``: each network's features of a record are the mean of its unit-norm features of ``--views`` V public
  views of the record: the image itself and V - 1 copies shifted by up to 2 pixels each way (zero fill; colour
  images flipped in every other one), fixed per network from the seed. A mean of unit vectors has norm <= 1, so the
  sensitivity would hold (checked here on every batch); distillation matches the same mean of the learned images.
  V times the compute of the release and the distillation.
- ``deep``: ``--convs-per-block`` convolutions (each with its norm and ReLU) before each pooling: deeper networks at
  the same resolution and the same output size.
- ``entk``: the e-NTK of a one-layer network (fc_1l 800) beside the ConvNets in one statistic,
  [sqrt(1 - s) conv(x), sqrt(s) e-NTK(x)], each part of norm 1 (``--ntk-share`` s); distillation matches the
  ConvNets on 2 networks a step and the e-NTK whole.

    MMDSYNTH_DATA_DIR=../shared/datasets OMP_NUM_THREADS=1 .venv/bin/python benchmarks/distill_cap_probe.py \
        --lever views --views 4 --out benchmarks/out/distill_cap.jsonl
"""
from __future__ import annotations

import argparse
import contextlib
import math
import time

import torch
from _rows import emit
from distill import scored
from torch import nn
from torch.nn import functional as F

from mmdsynth.data import load_dataset
from mmdsynth.embedding import mean_embedding
from mmdsynth.features.base import FeatureMap, register
from mmdsynth.features.entk import ENTKFeatures
from mmdsynth.features.randconv import RandomConvFeatures
from mmdsynth.methods.distill import distill_release
from mmdsynth.privacy.ledger import Ledger
from mmdsynth.release import Release


def shifted(x: torch.Tensor, dx: int, dy: int, flip: bool) -> torch.Tensor:
    """Images ``x`` (n, c, h, w) moved by (dx, dy) pixels, zero where nothing comes in; mirrored first if ``flip``."""
    if flip:
        x = x.flip(3)
    h, w = x.shape[2:]
    padded = F.pad(x, (2, 2, 2, 2))
    return padded[:, :, 2 - dy:2 - dy + h, 2 - dx:2 - dx + w]


@register
class AveragedViews(RandomConvFeatures):
    """Each network's unit-norm features averaged over its V public views (see the module docstring)."""
    name = "probe-conv-views"

    def __init__(self, image_shape, n_networks: int = 32, width: int = 64, views: int = 4, seed: int = 0):
        super().__init__(image_shape, n_networks, width, seed=seed)
        self.n_views = int(views)
        self.shifts = []
        for k in range(self.n_networks):
            g = torch.Generator().manual_seed(self.seed * 1009 + k + 15_485_863)
            moves = [(0, 0, False)]
            for v in range(1, self.n_views):
                dx, dy = torch.randint(-2, 3, (2,), generator=g).tolist()
                moves.append((dx, dy, self.image_shape[0] == 3 and v % 2 == 1))
            self.shifts.append(moves)

    def _block(self, x: torch.Tensor, k: int) -> torch.Tensor:
        total = sum(super(AveragedViews, self)._block(x if (dx, dy, flip) == (0, 0, False) else
                                                      shifted(x, dx, dy, flip), k)
                    for dx, dy, flip in self.shifts[k])
        out = total / self.n_views
        assert float(out.detach().norm(dim=1).max()) <= 1.0 / math.sqrt(self.n_networks) + 1e-5   # the norm bound holds
        return out

    def spec(self) -> dict:
        return {"name": self.name, "image_shape": list(self.image_shape), "n_networks": self.n_networks,
                "width": self.width, "views": self.n_views, "seed": self.seed}


@register
class DeeperBlocks(RandomConvFeatures):
    """Random ConvNets with ``convs_per_block`` convolutions before each pooling (same output size)."""
    name = "probe-conv-deep"

    def __init__(self, image_shape, n_networks: int = 32, width: int = 64, convs_per_block: int = 2, seed: int = 0):
        self.convs_per_block = int(convs_per_block)      # read by _architecture while the base class draws
        super().__init__(image_shape, n_networks, width, seed=seed)

    def _architecture(self) -> nn.Sequential:
        layers, c = [], self.image_shape[0]
        for _ in range(self.depth):
            for _ in range(self.convs_per_block):
                layers += [nn.Conv2d(c, self.width, 3, padding=1), nn.GroupNorm(self.width, self.width, affine=False),
                           nn.ReLU(inplace=True)]
                c = self.width
            layers.append(nn.AvgPool2d(2))
        return nn.Sequential(*layers, nn.Flatten())

    def spec(self) -> dict:
        return {"name": self.name, "image_shape": list(self.image_shape), "n_networks": self.n_networks,
                "width": self.width, "convs_per_block": self.convs_per_block, "seed": self.seed}


@register
class ConvPlusENTK(FeatureMap):
    """[sqrt(1 - s) x the ConvNets' features, sqrt(s) x the e-NTK's], each part of norm 1."""
    name = "probe-conv-entk"
    default_blocks_per_step = 2

    def __init__(self, image_shape, n_networks: int = 32, width: int = 64, ntk_width: int = 800,
                 n_outputs: int = 10, ntk_share: float = 0.2):
        self.image_shape, self.ntk_share = tuple(image_shape), float(ntk_share)
        self.conv = RandomConvFeatures(image_shape, n_networks, width)
        self.ntk = ENTKFeatures(int(math.prod(image_shape)), "fc_1l", (ntk_width,), n_outputs=n_outputs)
        self.a, self.b = math.sqrt(1 - self.ntk_share), math.sqrt(self.ntk_share)
        self.n_networks, self.width, self.ntk_width, self.n_outputs = n_networks, width, ntk_width, n_outputs

    @property
    def out_dim(self):
        return self.conv.out_dim + self.ntk.out_dim

    @property
    def n_blocks(self):
        return self.conv.n_blocks

    def __call__(self, x):
        return torch.cat([self.a * self.conv(x), self.b * self.ntk(x).to(torch.float32)], 1)

    def spec(self):
        return {"name": self.name, "image_shape": list(self.image_shape), "n_networks": self.n_networks,
                "width": self.width, "ntk_width": self.ntk_width, "n_outputs": self.n_outputs,
                "ntk_share": self.ntk_share}

    def _split(self, target):
        return target[:self.conv.out_dim], target[self.conv.out_dim:]

    def mmd_loss(self, target, x, weights):
        tc, tn = self._split(target)
        return (self.a ** 2 * self.conv.mmd_loss(tc / self.a, x, weights)
                + self.b ** 2 * self.ntk.mmd_loss(tn / self.b, x, weights))

    def block_loss(self, target, x, weights, blocks):
        tc, tn = self._split(target)
        return (self.a ** 2 * self.conv.block_loss(tc / self.a, x, weights, blocks)
                + self.b ** 2 * self.ntk.mmd_loss(tn / self.b, x, weights))

    def to(self, device):
        self.conv.to(device), self.ntk.to(device)
        return self


@contextlib.contextmanager
def started_at(offsets):
    """``distill_release``'s starting draw (its one ``torch.randn`` of the set's shape) moved by ``offsets`` (logits):
    the probe's start, without an option in the library."""
    real = torch.randn

    def randn(*args, **kwargs):
        out = real(*args, **kwargs)
        return out + offsets if offsets is not None and out.shape == offsets.shape else out
    torch.randn = randn
    try:
        yield
    finally:
        torch.randn = real


def feature_map(args, shape, n_classes):
    if args.lever == "plain":
        return RandomConvFeatures(shape, args.n_networks), {}, "the 32 ConvNets"
    if args.lever == "views":
        fmap = AveragedViews(shape, args.n_networks, views=args.views)
        return fmap, {"views": args.views}, f"each network's features averaged over {args.views} shifted views"
    if args.lever == "deep":
        fmap = DeeperBlocks(shape, args.n_networks, convs_per_block=args.convs_per_block)
        return fmap, {"convs_per_block": args.convs_per_block}, f"{args.convs_per_block} convolutions per block"
    fmap = ConvPlusENTK(shape, args.n_networks, n_outputs=n_classes, ntk_share=args.ntk_share)
    return fmap, {"entk_share": args.ntk_share, "ntk_width": 800}, "e-NTK (fc_1l 800) beside the ConvNets"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lever", required=True, choices=["plain", "views", "deep", "entk"])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--views", type=int, default=4)
    p.add_argument("--convs-per-block", type=int, default=2)
    p.add_argument("--ntk-share", type=float, default=0.2)
    p.add_argument("--n-networks", type=int, default=32)
    p.add_argument("--train-subset", type=int, default=20000)
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--per-class", type=int, default=10)
    p.add_argument("--start", default="noise", choices=["noise", "means"],
                   help="means: each class's images start at its exact mean image (logit), plus the usual noise")
    p.add_argument("--protocol", nargs="+", default=["fixed"], choices=["fixed", "dc"])
    p.add_argument("--out", default="benchmarks/out/distill_cap.jsonl")
    args = p.parse_args()
    data = load_dataset(args.dataset)
    x, y = data.x_train[:args.train_subset], data.y_train[:args.train_subset]
    t = time.perf_counter()
    fmap, extra, words = feature_map(args, tuple(data.shape), data.n_classes)
    exact = mean_embedding(fmap, x, y, data.n_classes)
    rel = Release({"embedding": exact}, fmap.spec(), {"name": data.name, "n_classes": data.n_classes,
                                                      "record_shape": list(data.shape)}, Ledger(()))
    release_s = time.perf_counter() - t
    t = time.perf_counter()
    start = None
    if args.start == "means":                   # exact class means: a probe of the start's worth, never a release
        xs = torch.as_tensor(x, dtype=torch.float32).reshape(len(x), *data.shape)
        means = torch.stack([xs[torch.as_tensor(y) == c].mean(0) for c in range(data.n_classes)])
        start = torch.logit(means.clamp(0.02, 0.98)).repeat_interleave(args.per_class, 0)
        words += ", the distilled images started at the exact class means"
    with started_at(start):
        dset = distill_release(rel, args.per_class, iterations=args.iterations, seed=0, smooth=False)
    distill_s = time.perf_counter() - t
    row = {"dataset": args.dataset, "method": "dp-randconv", "epsilon": float("inf"), "delta": 1e-5, "seed": 0,
           "per_class": args.per_class, "iterations": args.iterations, "lr": 0.05, "blocks_per_step": 2,
           "sample_rate": None, "neighbouring": "replace_one", "smooth": False, "train_subset": args.train_subset,
           "release_reused": False, "set": None,
           "probe": f"{words}; benchmarks/distill_cap_probe.py --lever {args.lever} --start {args.start}, not in the "
                    f"library",
           "start": args.start,
           "feature_spec": {"name": "random-conv", "n_networks": args.n_networks, "width": fmap.width, **extra},
           "release_s": round(release_s, 1), "distill_s": round(distill_s, 1), "loss_start": dset.info["loss_start"],
           "loss_final": dset.info["loss_final"]}
    scored(row, dset, data, args.protocol, cnn_seeds=1, dataset=args.dataset)
    emit(row, args.out)


if __name__ == "__main__":
    main()
