"""Embeddings of randomly initialised ConvNets: the feature map of DP distribution matching (NDPDC).

Distribution matching (Zhao and Bilen's DM; NDPDC privately) compares the mean embeddings of real and synthetic
images under randomly initialised ConvNets: the dataset-condensation ConvNet without its classifier, ``depth``
blocks (default :func:`auto_depth`: 3 on 28 x 28 and 32 x 32 images) of Conv 3x3 (``width`` filters, padding 1)
-> InstanceNorm -> ReLU -> AvgPool 2. Here ``n_networks`` such networks are drawn once from ``seed`` (public;
PyTorch's default initialisation) and the features of a record are the concatenation of each network's flattened
output, each scaled to unit norm and the whole by 1/sqrt(n_networks): ``||phi(x)|| = 1`` exactly (a zero output
stays zero), so a class-conditional mean embedding has sensitivity 2/m as every other map's. Inputs in [0, 1] enter through the fixed map (x - 0.5) / 0.5.

``augment=True`` gives every network but the first its own fixed view of the image, drawn from ``seed`` with the
networks (public): an affine warp (rotation within +-15 degrees, scale 0.85-1.15, shift within 5 % of the side;
colour images also a horizontal flip half the time), applied to every record alike before the network, zero
outside the image. It plays the part of DM's differentiable augmentation (DSA) in a release made once: the learned
set must match the data under every view. A view is a fixed function of one record, so each record's features
still have norm 1 and the sensitivity is unchanged.

``pool``: average the last map down to ``pool x pool`` cells (None: keep it, 4 x 4 on 32 x 32 images). Fewer
features per network put less noise in the release (its squared norm is D sigma^2) at the price of the layout:
on CIFAR-10 at eps 1 the layout mattered more (2 x 2: 29.9 against 33.2 unpooled, ``benchmarks/RESULTS.md``).

The networks are independent column blocks (:attr:`n_blocks`): :meth:`block_loss` matches a subset of them,
which is what lets distillation take DM's cheap stochastic steps over many networks.

Far fewer features than the e-NTK (MNIST: 8 networks x 64 x 3 x 3 = 4,608 against 636,010), so at the same
noise multiplier the noise's share of the released embedding is ~140 times smaller in squared norm, while the
convolutions keep what matters about images.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import InvalidParameterError
from ..validation import check_positive
from .base import FeatureMap, register


def random_convnet(channels: int, width: int, depth: int, pool: int | None = None) -> nn.Sequential:
    layers, c = [], channels
    for _ in range(depth):
        layers += [nn.Conv2d(c, width, 3, padding=1), nn.GroupNorm(width, width, affine=False), nn.ReLU(inplace=True),
                   nn.AvgPool2d(2)]
        c = width
    if pool is not None:                       # the last map averaged down to pool x pool cells
        layers.append(nn.AdaptiveAvgPool2d(pool))
    return nn.Sequential(*layers, nn.Flatten())


def auto_depth(shape) -> int:
    """The default depth: DM's 3 blocks where the last convolution still sees at least 4 x 4 pixels (28 x 28 and
    32 x 32 images), fewer on small images (2 on 8 x 8 digits, where 3 blocks leave an instance norm over 2 x 2
    pixels and the features carry almost nothing: LogReg 0.13 against 0.87 at depth 2, eps 10)."""
    depth = 3
    while depth > 1 and min(shape[1:]) >> (depth - 1) < 4:
        depth -= 1
    return depth


@register
class RandomConvFeatures(FeatureMap):
    name = "random-conv"
    norm_bound = 1.0
    #: distillation matches 2 random networks a step (DM's stochastic steps): measured best with 32 networks
    #: (MNIST eps 1, dc protocol 93.6 over 3 seeds; benchmarks/RESULTS.md "Distillation")
    default_blocks_per_step = 2

    def __init__(self, image_shape, n_networks: int = 8, width: int = 64, depth: int | None = None, seed: int = 0,
                 augment: bool = False, pool: int | None = None):
        shape = tuple(int(s) for s in image_shape)
        if len(shape) != 3:
            raise InvalidParameterError(f"random-conv features take images (channels, height, width); got shape "
                                        f"{list(shape)}.")
        self.image_shape = shape
        self.n_networks = int(check_positive(n_networks, "n_networks", integer=True))
        self.width = int(check_positive(width, "width", integer=True))
        self.depth = auto_depth(shape) if depth is None else int(check_positive(depth, "depth", integer=True))
        self.seed = int(seed)
        self.augment = bool(augment)
        side_h, side_w = shape[1] >> self.depth, shape[2] >> self.depth
        if side_h < 1 or side_w < 1:
            raise InvalidParameterError(f"depth={self.depth} pools {shape[1]}x{shape[2]} images below one pixel; "
                                        f"use depth <= {int(math.log2(min(shape[1:])))}.")
        self.pool = None if pool is None else int(check_positive(pool, "pool", integer=True))
        if self.pool is not None and self.pool > min(side_h, side_w):
            raise InvalidParameterError(f"pool={self.pool} is larger than the last map ({side_h} x {side_w} at "
                                        f"depth {self.depth}); use pool <= {min(side_h, side_w)}, or None.")
        if self.pool is not None:
            side_h = side_w = self.pool
        self.block = self.width * side_h * side_w
        self.networks = []
        for k in range(self.n_networks):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed * 1009 + k)
                net = self._architecture().eval()
            for p in net.parameters():
                p.requires_grad_(False)
            self.networks.append(net)
        self.views = [self._draw_view(k) if self.augment and k > 0 else None for k in range(self.n_networks)]

    def _architecture(self) -> nn.Sequential:
        """One network's layers, freshly initialised from the global generator (seeded per network by the caller)."""
        return random_convnet(self.image_shape[0], self.width, self.depth, self.pool)

    @property
    def out_dim(self) -> int:
        return self.n_networks * self.block

    @property
    def n_blocks(self) -> int:
        return self.n_networks

    def _draw_view(self, k: int) -> torch.Tensor:
        """Network k's affine view (a 2 x 3 matrix for :func:`torch.nn.functional.affine_grid`), from the seed."""
        g = torch.Generator().manual_seed(self.seed * 1009 + k + 7_919_000)
        u = torch.rand(5, generator=g, dtype=torch.float64)
        angle = math.radians(30.0 * (float(u[0]) - 0.5))
        scale = 0.85 + 0.3 * float(u[1])
        flip = -1.0 if self.image_shape[0] == 3 and float(u[4]) < 0.5 else 1.0
        shift = [0.1 * (float(u[2]) - 0.5) * 2, 0.1 * (float(u[3]) - 0.5) * 2]
        c, s = math.cos(angle) * scale, math.sin(angle) * scale
        return torch.tensor([[c * flip, -s, shift[0]], [s * flip, c, shift[1]]], dtype=torch.float32)

    def _block(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """Network k's features of images ``x`` (already shaped, in [0, 1]): its view, the fixed input map, the
        network, unit norm, times 1/sqrt(n_networks)."""
        view = self.views[k]
        if view is not None:
            grid = F.affine_grid(view.to(x.device).expand(x.shape[0], 2, 3), list(x.shape), align_corners=False)
            x = F.grid_sample(x, grid, padding_mode="zeros", align_corners=False)
        f = self.networks[k]((x - 0.5) / 0.5)
        return f * ((1.0 / math.sqrt(self.n_networks)) / f.norm(dim=1, keepdim=True).clamp_min(1e-12))

    def _images(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.image_shape).float()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = self._images(x)
        return torch.cat([self._block(x, k) for k in range(self.n_networks)], 1)

    def block_features(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """Network ``k``'s features of records ``x`` (norm 1/sqrt(n_networks) each, 0 for a zero output)."""
        return self._block(self._images(x), int(k))

    def block_loss(self, target: torch.Tensor, x: torch.Tensor, weights: torch.Tensor, blocks) -> torch.Tensor:
        blocks = [int(k) for k in blocks]
        x = self._images(x)
        loss = 0.0
        for k in blocks:
            rows = target[k * self.block:(k + 1) * self.block]
            loss = loss + ((rows - self._block(x, k).to(weights.dtype).T @ weights) ** 2).sum()
        return loss * (self.n_networks / len(blocks))

    def row_floats(self) -> int:
        """Working floats per record: the first block's activations dominate (width x h x w, a few copies)."""
        return 4 * self.width * self.image_shape[1] * self.image_shape[2]

    def to(self, device) -> "RandomConvFeatures":
        self.networks = [net.to(device) for net in self.networks]
        self.views = [None if v is None else v.to(device) for v in self.views]
        return self

    def spec(self) -> dict:
        return {"name": self.name, "image_shape": list(self.image_shape), "n_networks": self.n_networks,
                "width": self.width, "depth": self.depth, "seed": self.seed, "augment": self.augment, "pool": self.pool}
