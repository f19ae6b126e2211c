"""A fully connected generator with mixed output heads for encoded tables.

Layout of the output (the :class:`mmdsynth.data.encoding.TableEncoder` layout):
the numeric columns first, each through a sigmoid (the encoder scales numeric
columns to [0, 1] with their declared bounds, so outputs stay inside the
bounds), then one softmax block per categorical column. Architecture (DP-MERF /
DP-NTK tabular generator): [code, one-hot label] -> FC(4d) -> BN -> ReLU ->
FC(2d) -> BN -> ReLU -> FC(d). The label enters one-hot (the reference used a
scalar label, which imposes an order on classes).
"""
from __future__ import annotations

import torch
from torch import nn

from ..validation import check_positive
from .base import ConditionalGenerator


def table_heads(out: torch.Tensor, n_numeric: int, category_sizes) -> torch.Tensor:
    """Unconstrained outputs -> encoded rows: a sigmoid on each numeric column, a softmax on each categorical
    block (the :class:`~mmdsynth.data.encoding.TableEncoder` layout). Shared by the generator and by distillation's
    learned rows."""
    parts = [torch.sigmoid(out[:, :n_numeric])]
    start = n_numeric
    for k in category_sizes:
        parts.append(torch.softmax(out[:, start:start + k], dim=1))
        start += k
    return torch.cat(parts, 1)


class TableGenerator(ConditionalGenerator):
    name = "table"

    def __init__(self, n_numeric: int, category_sizes=(), n_classes: int = 2, code_dim: int = 10, hidden=None):
        super().__init__(n_classes, code_dim)
        self.n_numeric = int(check_positive(n_numeric, "n_numeric", integer=True, allow_zero=True))
        self.category_sizes = [int(check_positive(k, "category size", integer=True)) for k in category_sizes]
        d = self.n_numeric + sum(self.category_sizes)
        check_positive(d, "number of encoded columns", integer=True)
        self.hidden = tuple(int(h) for h in hidden) if hidden else (4 * d, 2 * d)
        layers, width = [], self.code_dim + self.n_classes
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, d))
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return table_heads(self.net(z), self.n_numeric, self.category_sizes)

    def spec(self) -> dict:
        return {"name": self.name, "n_numeric": self.n_numeric, "category_sizes": list(self.category_sizes),
                "n_classes": self.n_classes, "code_dim": self.code_dim, "hidden": list(self.hidden)}
