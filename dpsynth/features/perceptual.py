"""DP-MEPF's perceptual features: the activations of an encoder's convolution layers.

Forward hooks capture the outputs (before their activation function) of the declared Conv2d
layers, flattened and concatenated. ``moment=1`` gives phi1 = those features, ``moment=2`` gives
phi2 = their squares; each is scaled to unit L2 norm per record (a zero vector stays zero), so
``norm_bound`` is 1 and a mean embedding of either moment has sensitivity 2/m under replace-one
(each moment is its own release). Differentiable: the generator's features go through the same
map. Inputs are images in [0, 1], mapped to the encoder's scale by the fixed (x - 0.5) / 0.5; grey
images are repeated to 3 channels for a colour encoder and resized (bilinear) to the encoder's
input size when it differs.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import InvalidParameterError
from .base import FeatureMap, register
from .encoders import conv_layers, load_encoder


@register
class PerceptualFeatures(FeatureMap):
    name = "perceptual"
    norm_bound = 1.0

    def __init__(self, encoder: str | nn.Module, image_shape, *, moment: int = 1, layers=None,
                 input_size: int | None = None, spec: dict | None = None):
        if moment not in (1, 2):
            raise InvalidParameterError(f"moment must be 1 or 2; got {moment!r}.")
        self.path = encoder if isinstance(encoder, str) else None
        if isinstance(encoder, str):
            encoder, spec = load_encoder(encoder)
        self.encoder, self.encoder_spec = encoder.eval(), dict(spec or {})
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        all_convs = conv_layers(self.encoder)
        self.layers = list(layers) if layers is not None else all_convs
        unknown = [name for name in self.layers if name not in all_convs]
        if unknown or not self.layers:
            raise InvalidParameterError(f"layers must name Conv2d layers of the encoder; unknown: {unknown}. "
                                        f"Available: {all_convs}")
        self.moment, self.image_shape = moment, tuple(int(s) for s in image_shape)
        first = self.encoder.get_submodule(all_convs[0])
        self.in_channels = first.in_channels
        self.input_size = int(input_size or self.encoder_spec.get("image_size") or self.image_shape[-1])
        self._dim = None

    def _prepare(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image_shape).to(torch.float32)
        if x.shape[1] == 1 and self.in_channels == 3:
            x = x.expand(-1, 3, -1, -1)
        if x.shape[-1] != self.input_size:
            x = nn.functional.interpolate(x, size=(self.input_size, self.input_size), mode="bilinear",
                                          align_corners=False)
        return (x - 0.5) / 0.5

    def activations(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """{layer name: its output (n, ...)} for the declared layers only."""
        captured, handles = {}, []
        for name in self.layers:
            handles.append(self.encoder.get_submodule(name).register_forward_hook(
                lambda _m, _i, out, name=name: captured.__setitem__(name, out)))
        try:
            self.encoder(self._prepare(x))
        finally:
            for h in handles:
                h.remove()
        return captured

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        acts = self.activations(x)
        phi = torch.cat([acts[name].flatten(1) for name in self.layers], 1)
        if self.moment == 2:
            phi = phi * phi
        norms = torch.linalg.vector_norm(phi, dim=1, keepdim=True)
        return phi / torch.clamp(norms, min=torch.finfo(phi.dtype).tiny)

    @property
    def out_dim(self) -> int:
        if self._dim is None:
            with torch.no_grad():
                device = next(self.encoder.parameters()).device
                self._dim = int(self(torch.zeros(1, *self.image_shape, device=device)).shape[1])
        return self._dim

    def to(self, device) -> "PerceptualFeatures":
        self.encoder.to(device)
        return self

    def spec(self) -> dict:
        if self.path is None:
            raise InvalidParameterError("a PerceptualFeatures built from an in-memory encoder has no spec; save the "
                                        "encoder (features.encoders.save_encoder) and pass its path.")
        return {"name": self.name, "encoder": self.path, "image_shape": list(self.image_shape),
                "moment": self.moment, "layers": self.layers, "input_size": self.input_size}
