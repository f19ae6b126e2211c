"""DP-NTK (empirical NTK features) and DP-MERF (random Fourier features)."""
from __future__ import annotations

from ..features import ENTKFeatures, MixedRFF, RandomFourierFeatures
from .base import KernelGeneratorMethod, register


@register
class DPNTK(KernelGeneratorMethod):
    """DP-NTK (Yang, Adamczewski, Sutherland, Li, Park, 2023): the mean embedding under
    normalised e-NTK features of a randomly initialised network, released once.

    ``arch``: ``fc_1l`` (fast factorised path), ``fc_2l``, ``cnn_2l`` or ``cnn``;
    ``widths``: one width per hidden layer (``ntk_width`` sets a single one, the paper's
    800 for MNIST); ``ntk_seed``: the network's initialisation (public).
    """

    method = "dp-ntk"

    def __init__(self, epsilon: float = 10.0, delta: float = 1e-5, *, arch: str = "fc_1l",
                 ntk_width: int | None = 800, widths=None, ntk_seed: int = 0, **kwargs):
        super().__init__(epsilon, delta, **kwargs)
        self.arch, self.ntk_width, self.widths, self.ntk_seed = arch, ntk_width, widths, ntk_seed

    def method_params(self) -> dict:
        return {"arch": self.arch, "ntk_width": self.ntk_width,
                "widths": list(self.widths) if self.widths is not None else None, "ntk_seed": self.ntk_seed}

    def feature_map(self, input_dim: int, n_classes: int) -> ENTKFeatures:
        widths = self.widths if self.widths is not None else (self.ntk_width,)
        return ENTKFeatures(input_dim, self.arch, widths, n_outputs=max(n_classes, 1), seed=self.ntk_seed)


@register
class DPMERF(KernelGeneratorMethod):
    """DP-MERF (Harder, Adamczewski, Park, 2021): random Fourier features of a Gaussian
    kernel. ``length_scale`` is a data-independent choice (default sqrt(d)/2 for inputs
    in [0, 1]), never a median heuristic on private data."""

    method = "dp-merf"

    def __init__(self, epsilon: float = 10.0, delta: float = 1e-5, *, n_features: int = 10000,
                 length_scale: float | None = None, rff_seed: int = 0, **kwargs):
        super().__init__(epsilon, delta, **kwargs)
        self.n_features, self.length_scale, self.rff_seed = n_features, length_scale, rff_seed

    def method_params(self) -> dict:
        return {"n_features": self.n_features, "length_scale": self.length_scale, "rff_seed": self.rff_seed}

    def feature_map(self, input_dim: int, n_classes: int) -> RandomFourierFeatures:
        return RandomFourierFeatures(input_dim, self.n_features, self.length_scale, seed=self.rff_seed)

    def table_feature_map(self, encoder, n_classes: int) -> MixedRFF:
        """Heterogeneous columns (DP-MERF Sec. 4.3): RFF on the numeric part, the one-hot part raw."""
        return MixedRFF(encoder.n_numeric, len(encoder.category_sizes), sum(encoder.category_sizes),
                        self.n_features, self.length_scale, seed=self.rff_seed)
