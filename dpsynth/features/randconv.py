"""Embeddings of randomly initialised ConvNets: the feature map of DP distribution matching (NDPDC).

Distribution matching (Zhao and Bilen's DM; NDPDC privately) compares the mean embeddings of real and synthetic
images under randomly initialised ConvNets: the dataset-condensation ConvNet without its classifier, ``depth``
blocks of Conv 3x3 (``width`` filters, padding 1) -> InstanceNorm -> ReLU -> AvgPool 2. Here ``n_networks`` such
networks are drawn once from ``seed`` (public; PyTorch's default initialisation) and the features of a record are
the concatenation of each network's flattened output, each scaled to unit norm and the whole by 1/sqrt(n_networks):
``||phi(x)|| = 1`` exactly (a zero output stays zero), so a class-conditional mean embedding has sensitivity 2/m as
every other map's. Inputs in [0, 1] enter through the fixed map (x - 0.5) / 0.5.

Far fewer features than the e-NTK (MNIST: 8 networks x 64 x 3 x 3 = 4,608 against 636,010), so at the same
noise multiplier the noise's share of the released embedding is ~140 times smaller in squared norm, while the
convolutions keep what matters about images.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import InvalidParameterError
from ..validation import check_positive
from .base import FeatureMap, register


def random_convnet(channels: int, width: int, depth: int) -> nn.Sequential:
    layers, c = [], channels
    for _ in range(depth):
        layers += [nn.Conv2d(c, width, 3, padding=1), nn.GroupNorm(width, width, affine=False), nn.ReLU(),
                   nn.AvgPool2d(2)]
        c = width
    return nn.Sequential(*layers, nn.Flatten())


@register
class RandomConvFeatures(FeatureMap):
    name = "random-conv"
    norm_bound = 1.0

    def __init__(self, image_shape, n_networks: int = 8, width: int = 64, depth: int = 3, seed: int = 0):
        shape = tuple(int(s) for s in image_shape)
        if len(shape) != 3:
            raise InvalidParameterError(f"random-conv features take images (channels, height, width); got shape "
                                        f"{list(shape)}.")
        self.image_shape = shape
        self.n_networks = int(check_positive(n_networks, "n_networks", integer=True))
        self.width = int(check_positive(width, "width", integer=True))
        self.depth = int(check_positive(depth, "depth", integer=True))
        self.seed = int(seed)
        side_h, side_w = shape[1] >> self.depth, shape[2] >> self.depth
        if side_h < 1 or side_w < 1:
            raise InvalidParameterError(f"depth={self.depth} pools {shape[1]}x{shape[2]} images below one pixel; "
                                        f"use depth <= {int(math.log2(min(shape[1:])))}.")
        self.block = self.width * side_h * side_w
        self.networks = []
        for k in range(self.n_networks):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed * 1009 + k)
                net = random_convnet(shape[0], self.width, self.depth).eval()
            for p in net.parameters():
                p.requires_grad_(False)
            self.networks.append(net)

    @property
    def out_dim(self) -> int:
        return self.n_networks * self.block

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.reshape(x.shape[0], *self.image_shape).float() - 0.5) / 0.5
        scale = 1.0 / math.sqrt(self.n_networks)
        outs = []
        for net in self.networks:
            f = net(x)
            outs.append(f * (scale / f.norm(dim=1, keepdim=True).clamp_min(1e-12)))
        return torch.cat(outs, 1)

    def row_floats(self) -> int:
        """Working floats per record: the first block's activations dominate (width x h x w, a few copies)."""
        return 4 * self.width * self.image_shape[1] * self.image_shape[2]

    def to(self, device) -> "RandomConvFeatures":
        self.networks = [net.to(device) for net in self.networks]
        return self

    def spec(self) -> dict:
        return {"name": self.name, "image_shape": list(self.image_shape), "n_networks": self.n_networks,
                "width": self.width, "depth": self.depth, "seed": self.seed}
