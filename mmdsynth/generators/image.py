"""Class-conditional image generators.

Both take a Gaussian code and a one-hot label and output images in [0, 1]
(sigmoid), matching the loaders' pixel range. Their ``spec()`` is JSON and
rebuilds the same architecture with :func:`build_generator`.

* :class:`ConvGenerator`: the papers' (Fashion-)MNIST generator, for any
  ``C x H x W`` with H, W divisible by 4: code + one-hot -> FC(hidden) -> BN ->
  ReLU -> FC(c0 * H/4 * W/4) -> BN -> reshape -> upsample x2 -> conv -> ReLU ->
  upsample x2 -> conv -> sigmoid. With the defaults and 1x28x28 this is code 5 +
  10 labels, FC 200 -> FC 784 -> 16x7x7 -> 8x14x14 -> 1x28x28, as the DP-NTK /
  DP-MERF authors' ``ConvCondGen``. They upsampled bilinearly (align_corners=True):
  ``upsample="bilinear"``; the default nearest upsampling scored the same on MNIST
  (benchmarks/RESULTS.md) and runs as one phase-decomposed convolution per block
  (:func:`upsample_conv`), 1.6x faster per run. ``relu_after_fc=True`` (a ReLU
  after the second BN) is the variant mmdsynth used before, which scored lower;
  older saved generators are rebuilt with it.
* :class:`ResNetGenerator`: ResNet-style up-sampling blocks for 32x32 colour.
* :class:`FCGenerator`: fully connected (the DP-MERF / DP-HP authors' MNIST generator).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import InvalidParameterError
from .base import ConditionalGenerator


def _shape(image_shape) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in image_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise InvalidParameterError(f"image_shape must be (channels, height, width); got {image_shape!r}.")
    return shape


def _phase_matrices(k: int, like: torch.Tensor) -> tuple[torch.Tensor, int]:
    """S (2, k', k) and padding: for output phase a, low-resolution offset r collects the taps
    dy of a k-tap kernel (padding (k-1)/2) with floor((a + dy) / 2) = r."""
    p = (k - 1) // 2
    lo, hi = math.floor(-p / 2), math.floor((1 + p) / 2)
    S = torch.zeros(2, hi - lo + 1, k, dtype=like.dtype, device=like.device)
    for a in range(2):
        for dy in range(-p, p + 1):
            S[a, (a + dy) // 2 - lo, dy + p] = 1
    return S, -lo


def upsample_conv(x: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """``conv(nearest_upsample_x2(x))`` without building the upsampled tensor.

    Each of the four output phases (2i + a, 2j + b) sees a k' x k' window of ``x`` (k' = 3 for
    k = 3 or 5) whose weights are sums of the k x k kernel's taps; one convolution with 4x the
    output channels on the low-resolution input, then a pixel shuffle, gives the same result
    (tested) with 25/9 fewer multiply-adds for k = 5: at batch 5,000 the papers' generator's
    two convolutions (forward + backward) took 0.11-0.15 s instead of 0.47-0.71 s on this CPU.
    The parameters stay the k x k kernels, so saved generators load unchanged."""
    w = conv.weight                                                           # (o, i, k, k)
    S, pad = _phase_matrices(w.shape[-1], w)
    k2 = S.shape[1]
    wp = torch.einsum("ary,oiyx,bsx->oabirs", S, w, S).reshape(w.shape[0] * 4, w.shape[1], k2, k2)
    bias = conv.bias.repeat_interleave(4) if conv.bias is not None else None
    return nn.functional.pixel_shuffle(nn.functional.conv2d(x, wp, bias, padding=pad), 2)


class ConvGenerator(ConditionalGenerator):
    name = "conv"

    #: spec values of generators saved before these options existed
    LEGACY_SPEC = {"upsample": "nearest", "relu_after_fc": True}

    def __init__(self, image_shape=(1, 28, 28), n_classes: int = 10, code_dim: int = 5, hidden: int = 200,
                 channels=(16, 8), kernel_size: int = 5, upsample: str = "nearest", relu_after_fc: bool = False):
        super().__init__(n_classes, code_dim)
        if upsample not in ("bilinear", "nearest"):
            raise InvalidParameterError(
                f"upsample must be 'nearest' (default) or 'bilinear' (the authors'); got {upsample!r}.")
        self.upsample, self.relu_after_fc = upsample, bool(relu_after_fc)
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
            nn.Linear(self.hidden, c0 * (h // 4) * (w // 4)), nn.BatchNorm1d(c0 * (h // 4) * (w // 4)),
            *([nn.ReLU()] if self.relu_after_fc else []),
        )
        up = {"mode": "bilinear", "align_corners": True} if upsample == "bilinear" else {"mode": "nearest"}
        self.conv = nn.Sequential(
            nn.Upsample(scale_factor=2, **up), nn.Conv2d(c0, c1, self.kernel_size, padding=pad), nn.ReLU(),
            nn.Upsample(scale_factor=2, **up), nn.Conv2d(c1, c, self.kernel_size, padding=pad), nn.Sigmoid(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        _, h, w = self.image_shape
        x = self.fc(z).reshape(z.shape[0], self.channels[0], h // 4, w // 4)
        x = x.contiguous(memory_format=torch.channels_last)   # oneDNN's fast layout on CPU
        up1, conv1, act1, up2, conv2, act2 = self.conv
        if self.upsample == "nearest":
            return act2(upsample_conv(act1(upsample_conv(x, conv1)), conv2))
        return act2(conv2(up2(act1(conv1(up1(x))))))

    def spec(self) -> dict:
        return {"name": self.name, "image_shape": list(self.image_shape), "n_classes": self.n_classes,
                "code_dim": self.code_dim, "hidden": self.hidden, "channels": list(self.channels),
                "kernel_size": self.kernel_size, "upsample": self.upsample, "relu_after_fc": self.relu_after_fc}


class FCGenerator(ConditionalGenerator):
    """A fully connected image generator (the DP-MERF / DP-HP authors' MNIST ``FCCondGen``): code +
    one-hot -> [FC(h) -> BN -> ReLU] per hidden width (default 500, 500) -> FC(C H W) -> sigmoid,
    reshaped to ``image_shape``. Any image size."""

    name = "fc"

    def __init__(self, image_shape=(1, 28, 28), n_classes: int = 10, code_dim: int = 5, hidden=(500, 500)):
        super().__init__(n_classes, code_dim)
        self.image_shape = _shape(image_shape)
        self.hidden = tuple(int(h) for h in hidden)
        if not self.hidden or min(self.hidden) < 1:
            raise InvalidParameterError(f"hidden must list one or more positive widths; got {hidden!r}.")
        layers, width = [], self.code_dim + self.n_classes
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU()]
            width = h
        self.net = nn.Sequential(*layers, nn.Linear(width, math.prod(self.image_shape)), nn.Sigmoid())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z).reshape(z.shape[0], *self.image_shape)

    def spec(self) -> dict:
        return {"name": self.name, "image_shape": list(self.image_shape), "n_classes": self.n_classes,
                "code_dim": self.code_dim, "hidden": list(self.hidden)}


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
