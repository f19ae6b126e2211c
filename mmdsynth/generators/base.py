"""The generator interface: Gaussian codes and one-hot labels in, records out."""
from __future__ import annotations

import torch
from torch import nn

from ..validation import check_positive


class ConditionalGenerator(nn.Module):
    """Shared sampling logic: codes and labels in, (records, labels) out. Subclasses
    define ``forward(z)`` on ``z = [code, one-hot label]`` and a JSON ``spec()``."""

    name = ""

    def __init__(self, n_classes: int, code_dim: int):
        super().__init__()
        self.n_classes = int(check_positive(n_classes, "n_classes", integer=True))
        self.code_dim = int(check_positive(code_dim, "code_dim", integer=True))

    def _inputs(self, labels: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        dev = next(self.parameters()).device
        code = torch.randn(labels.shape[0], self.code_dim, generator=generator, device="cpu").to(dev)
        onehot = nn.functional.one_hot(labels.to(dev), self.n_classes).to(code.dtype)
        return torch.cat([code, onehot], 1)

    def draw_labels(self, n: int, generator: torch.Generator | None = None,
                    proportions: torch.Tensor | None = None) -> torch.Tensor:
        """Labels for ``n`` samples: uniform over classes, or from ``proportions``."""
        if proportions is None:
            return torch.randint(self.n_classes, (n,), generator=generator)
        return torch.multinomial(proportions.double().cpu(), n, replacement=True, generator=generator)

    def generate(self, labels: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self(self._inputs(labels, generator))

    def spec(self) -> dict:
        raise NotImplementedError
