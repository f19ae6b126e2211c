"""The papers' randomly initialised networks whose e-NTK gives features.

PyTorch default initialisation, standard parameterisation, eval mode
(REFERENCE_NOTES.md, DP-NTK).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import InvalidParameterError, unknown_name


def fc_1l(input_dim: int, widths, n_outputs: int) -> nn.Module:
    (w,) = widths
    return nn.Sequential(nn.Linear(input_dim, w), nn.ReLU(), nn.LayerNorm(w, elementwise_affine=False),
                         nn.Linear(w, n_outputs))


def fc_2l(input_dim: int, widths, n_outputs: int) -> nn.Module:
    w1, w2 = widths
    return nn.Sequential(nn.Linear(input_dim, w1), nn.ReLU(), nn.Linear(w1, w2),
                         nn.LayerNorm(w2, elementwise_affine=False), nn.Linear(w2, n_outputs))


class _Tabular1dCNN(nn.Module):
    def __init__(self, input_dim, widths, n_outputs):
        super().__init__()
        w1, w2 = widths
        self.conv = nn.Conv1d(1, w1, kernel_size=1)
        self.fc1 = nn.Linear(w1 * input_dim, w2)
        self.fc2 = nn.Linear(w2, n_outputs)

    def forward(self, x):
        h = torch.relu(self.conv(x.reshape(x.shape[0], 1, -1)))
        return self.fc2(torch.relu(self.fc1(h.flatten(1))))


def cnn_2l(input_dim: int, widths, n_outputs: int) -> nn.Module:
    """Tabular: Conv1d(1, w1, k=1) -> ReLU -> Linear(w1*d, w2) -> ReLU -> Linear(w2, C)."""
    return _Tabular1dCNN(input_dim, widths, n_outputs)


def cnn(input_dim: int, widths, n_outputs: int) -> nn.Module:
    """32x32 colour: Conv2d(3, w, 3, padding 1) -> ReLU -> Linear(w*1024, C)."""
    (w,) = widths
    if input_dim != 3 * 32 * 32:
        raise InvalidParameterError(f"arch 'cnn' is for 3x32x32 images (input_dim 3072); got {input_dim}.")
    return nn.Sequential(nn.Unflatten(1, (3, 32, 32)), nn.Conv2d(3, w, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(w * 1024, n_outputs))


ARCHS = {"fc_1l": (fc_1l, 1), "fc_2l": (fc_2l, 2), "cnn_2l": (cnn_2l, 2), "cnn": (cnn, 1)}


def build_network(arch: str, input_dim: int, widths, n_outputs: int, seed: int) -> nn.Module:
    if arch not in ARCHS:
        raise unknown_name("NTK architecture", arch, ARCHS)
    builder, n_widths = ARCHS[arch]
    widths = tuple(int(w) for w in widths)
    if len(widths) != n_widths or min(widths) < 1:
        raise InvalidParameterError(
            f"arch {arch!r} takes {n_widths} positive width(s); got {list(widths)}."
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = builder(int(input_dim), widths, int(n_outputs))
    return net.eval()


def n_params(net: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in net.parameters())
