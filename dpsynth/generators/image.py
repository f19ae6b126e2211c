"""Class-conditional image generators.

Both take a Gaussian code and a one-hot label and output images in [0, 1]
(sigmoid), matching the loaders' pixel range. Their ``spec()`` is JSON and
rebuilds the same architecture with :func:`build_generator`.

* :class:`ConvGenerator`: the papers' (Fashion-)MNIST generator, for any
  ``C x H x W`` with H, W divisible by 4: code + one-hot -> FC(hidden) -> BN ->
  ReLU -> FC(c0 * H/4 * W/4) -> BN -> ReLU -> reshape -> upsample x2 -> conv ->
  ReLU -> upsample x2 -> conv -> sigmoid. With the defaults and 1x28x28 this is
  code 5 + 10 labels, FC 200 -> FC 784 -> 16x7x7 -> 8x14x14 -> 1x28x28.
* :class:`ResNetGenerator`: ResNet-style up-sampling blocks for 32x32 colour.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import InvalidParameterError
from .base import ConditionalGenerator


def _shape(image_shape) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in image_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise InvalidParameterError(f"image_shape must be (channels, height, width); got {image_shape!r}.")
    return shape


CONV_CHUNK = 1000


def _per_sample_convs(layers: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Apply layers that act on each sample independently (no batch norm) in chunks, in
    channels-last layout: identical results, 2.5x faster on CPU at batch 5,000 (measured:
    1.89 s -> 0.76 s per training step), because oneDNN's convolutions are slow on large
    NCHW batches."""
    x = x.contiguous(memory_format=torch.channels_last)
    if x.shape[0] <= CONV_CHUNK:
        return layers(x)
    return torch.cat([layers(c) for c in x.split(CONV_CHUNK)])


class ConvGenerator(ConditionalGenerator):
    name = "conv"

    def __init__(self, image_shape=(1, 28, 28), n_classes: int = 10, code_dim: int = 5, hidden: int = 200,
                 channels=(16, 8), kernel_size: int = 5):
        super().__init__(n_classes, code_dim)
        self.image_shape = _shape(image_shape)
        c, h, w = self.image_shape
        if h % 4 or w % 4:
            raise InvalidParameterError(
                f"the conv generator upsamples twice by 2, so height and width must be divisible by 4; "
                f"got {h}x{w}. Use generator='resnet' for 32x32 images."
            )
        self.hidden, self.channels, self.kernel_size = int(hidden), tuple(int(x) for x in channels), int(kernel_size)
        c0, c1 = self.channels
        pad = (self.kernel_size - 1) // 2
        self.fc = nn.Sequential(
            nn.Linear(self.code_dim + self.n_classes, self.hidden), nn.BatchNorm1d(self.hidden), nn.ReLU(),
            nn.Linear(self.hidden, c0 * (h // 4) * (w // 4)), nn.BatchNorm1d(c0 * (h // 4) * (w // 4)), nn.ReLU(),
        )
        self.conv = nn.Sequential(
            nn.Upsample(scale_factor=2), nn.Conv2d(c0, c1, self.kernel_size, padding=pad), nn.ReLU(),
            nn.Upsample(scale_factor=2), nn.Conv2d(c1, c, self.kernel_size, padding=pad), nn.Sigmoid(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        _, h, w = self.image_shape
        x = self.fc(z).reshape(z.shape[0], self.channels[0], h // 4, w // 4)
        return _per_sample_convs(self.conv, x)

    def spec(self) -> dict:
        return {"name": self.name, "image_shape": list(self.image_shape), "n_classes": self.n_classes,
                "code_dim": self.code_dim, "hidden": self.hidden, "channels": list(self.channels),
                "kernel_size": self.kernel_size}


class _UpBlock(nn.Module):
    """BN -> ReLU -> upsample -> conv3 -> BN -> ReLU -> conv3, plus an upsampled 1x1 shortcut."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(c_in), nn.ReLU(), nn.Upsample(scale_factor=2), nn.Conv2d(c_in, c_out, 3, padding=1),
            nn.BatchNorm2d(c_out), nn.ReLU(), nn.Conv2d(c_out, c_out, 3, padding=1),
        )
        self.skip = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(c_in, c_out, 1))

    def forward(self, x):
        return self.body(x) + self.skip(x)


class ResNetGenerator(ConditionalGenerator):
    name = "resnet"

    def __init__(self, image_shape=(3, 32, 32), n_classes: int = 10, code_dim: int = 100,
                 channels=(128, 64, 32)):
        super().__init__(n_classes, code_dim)
        self.image_shape = _shape(image_shape)
        c, h, w = self.image_shape
        self.channels = tuple(int(x) for x in channels)
        scale = 2 ** len(self.channels)
        if h % scale or w % scale:
            raise InvalidParameterError(
                f"the ResNet generator upsamples {len(self.channels)} times by 2, so height and width must be "
                f"divisible by {scale}; got {h}x{w}."
            )
        self.base = (h // scale, w // scale)
        self.fc = nn.Linear(self.code_dim + self.n_classes, self.channels[0] * self.base[0] * self.base[1])
        blocks = [_UpBlock(a, b) for a, b in zip(self.channels, self.channels[1:] + (self.channels[-1],))]
        self.blocks = nn.Sequential(*blocks)
        self.out = nn.Sequential(nn.BatchNorm2d(self.channels[-1]), nn.ReLU(),
                                 nn.Conv2d(self.channels[-1], c, 3, padding=1), nn.Sigmoid())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.fc(z).reshape(z.shape[0], self.channels[0], *self.base)
        return self.out(self.blocks(x.contiguous(memory_format=torch.channels_last)))

    def spec(self) -> dict:
        return {"name": self.name, "image_shape": list(self.image_shape), "n_classes": self.n_classes,
                "code_dim": self.code_dim, "channels": list(self.channels)}


def default_generator_spec(image_shape, n_classes: int) -> dict:
    """The papers' choice: conv for sizes divisible by 4 (MNIST, digits), ResNet for 32x32 colour."""
    c, h, w = image_shape
    if c == 3 and h == 32 and w == 32:
        return ResNetGenerator(image_shape, n_classes).spec()
    return ConvGenerator(image_shape, n_classes).spec()
