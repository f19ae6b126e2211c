"""DP-MEPF's perceptual features: the activations of an encoder's convolution layers.

Forward hooks capture the outputs (before their activation function) of the declared Conv2d
layers, flattened and concatenated into e(x). ``moments=(1, 2)`` gives phi(x) = [phi1 | phi2] with
phi1 = e(x) and phi2 = e(x)^2, each block scaled to unit L2 norm per record (a zero vector stays
zero). Each block is its own release (:meth:`parts`): a mean embedding of one block has
sensitivity 2/m under replace-one. Both blocks come from one forward pass, and the map is
differentiable, so the generator's features go through it too. Inputs are images in [0, 1],
mapped to the encoder's scale by the fixed (x - 0.5) / 0.5; grey images are repeated to 3 channels
for a colour encoder (colour images become their luminance for a grey one) and resized (bilinear)
to the encoder's input size when it differs.

:class:`PooledFeatures` is the same with the encoder's pooled representation (what its classifier
head reads) in place of the convolution activations: DP-MEPF's early-stopping proxy features.

The spec records the encoder file's sha256; rebuilding from a spec refuses a different file.
"""
from __future__ import annotations

import torch
from torch import nn

from .._io import sha256_file
from ..errors import ArtifactError, InvalidParameterError
from .base import FeatureMap, register
from .encoders import conv_layers, load_encoder, resolve_encoder


def _moments(moments) -> tuple[int, ...]:
    moments = (moments,) if isinstance(moments, int) else tuple(int(m) for m in moments)
    if not moments or any(m not in (1, 2) for m in moments) or len(set(moments)) != len(moments):
        raise InvalidParameterError(f"moments must be (1,), (2,) or (1, 2); got {moments!r}.")
    return moments


@register
class PerceptualFeatures(FeatureMap):
    name = "perceptual"

    def __init__(self, encoder: str | nn.Module, image_shape, *, moments=(1,), layers=None,
                 input_size: int | None = None, spec: dict | None = None, encoder_sha256: str | None = None):
        self.moments = _moments(moments)
        self.path, self.sha256 = None, None
        if not isinstance(encoder, nn.Module):
            path = resolve_encoder(encoder)
            self.path, self.sha256 = str(path), sha256_file(path)
            if encoder_sha256 is not None and encoder_sha256 != self.sha256:
                raise ArtifactError(
                    f"the encoder file {path} is not the one this feature map was built with (sha256 "
                    f"{self.sha256[:12]}..., recorded {encoder_sha256[:12]}...): features would differ from the "
                    f"release's. Put the original encoder file at that path."
                )
            encoder, spec = load_encoder(path)
        self.encoder, self.encoder_spec = encoder.eval(), dict(spec or {})
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        all_convs = conv_layers(self.encoder)
        self.layers = self._check_layers(layers, all_convs)
        self.image_shape = tuple(int(s) for s in image_shape)
        self.in_channels = self.encoder.get_submodule(all_convs[0]).in_channels
        self.input_size = int(input_size or self.encoder_spec.get("image_size") or self.image_shape[-1])
        self._width = None

    def _check_layers(self, layers, all_convs) -> list[str]:
        layers = list(layers) if layers is not None else all_convs
        unknown = [name for name in layers if name not in all_convs]
        if unknown or not layers:
            raise InvalidParameterError(f"layers must name Conv2d layers of the encoder; unknown: {unknown}. "
                                        f"Available: {all_convs}")
        return layers

    @property
    def norm_bound(self) -> float:
        return float(len(self.moments)) ** 0.5

    def _prepare(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *self.image_shape).to(torch.float32)
        if x.shape[1] == 1 and self.in_channels == 3:
            x = x.expand(-1, 3, -1, -1)
        elif x.shape[1] == 3 and self.in_channels == 1:          # colour into a grey encoder: luminance
            x = (x * torch.tensor([0.299, 0.587, 0.114], device=x.device)[None, :, None, None]).sum(1, keepdim=True)
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

    def raw(self, x: torch.Tensor) -> torch.Tensor:
        """e(x): the declared layers' activations, flattened and concatenated (not normalised)."""
        acts = self.activations(x)
        return torch.cat([acts[name].flatten(1) for name in self.layers], 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        e = self.raw(x)
        blocks = []
        for m in self.moments:
            phi = e if m == 1 else e * e
            norms = torch.linalg.vector_norm(phi, dim=1, keepdim=True)
            blocks.append(phi / torch.clamp(norms, min=torch.finfo(phi.dtype).tiny))
        return blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)

    def weighted_sum(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sum_i phi(x_i) w_i^T as (D, K), the generator's side, without materialising phi: each
        moment block is the layers' activations (or their squares) times the weights divided by
        the record's norm, e_l^T (W / ||e_i||), layer by layer. Same value and gradient as
        ``phi.T @ W`` (tested) in far fewer full-size passes: the normalisation's backward on the
        (n, D) features was most of a DP-MEPF step."""
        acts = self.activations(x)
        acts = [acts[name].flatten(1) for name in self.layers]
        w = weights.to(acts[0].dtype)
        out = []
        for m in self.moments:
            parts = acts if m == 1 else [a * a for a in acts]
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p, dim=1) for p in parts]), dim=0)
            scaled = w / torch.clamp(norm, min=torch.finfo(norm.dtype).tiny)[:, None]
            out.extend(p.T @ scaled for p in parts)
        return torch.cat(out, 0)

    @property
    def width(self) -> int:
        """Size of e(x) (one moment block)."""
        if self._width is None:
            with torch.no_grad():
                device = next(self.encoder.parameters()).device
                self._width = int(self.raw(torch.zeros(1, *self.image_shape, device=device)).shape[1])
        return self._width

    @property
    def out_dim(self) -> int:
        return self.width * len(self.moments)

    def parts(self) -> list[tuple[str, int, float]]:
        return [(f"phi{m}", self.width, 1.0) for m in self.moments]

    def row_floats(self) -> int:
        return 3 * self.out_dim      # activations, moments and their normalised copies

    def to(self, device) -> "PerceptualFeatures":
        self.encoder.to(device)
        return self

    def spec(self) -> dict:
        if self.path is None:
            raise InvalidParameterError("a perceptual feature map built from an in-memory encoder has no spec; save "
                                        "the encoder (features.encoders.save_encoder) and pass its path.")
        return {"name": self.name, "encoder": self.path, "encoder_sha256": self.sha256,
                "image_shape": list(self.image_shape), "moments": list(self.moments), "layers": self.layers,
                "input_size": self.input_size}


@register
class PooledFeatures(PerceptualFeatures):
    """Moments of the encoder's pooled representation (``encoder.embed``), for the DP early-stopping
    proxy: small (the head's input width), so a release of it is cheap to score against."""

    name = "pooled"

    def __init__(self, encoder, image_shape, *, moments=(1, 2), layers=None, **kwargs):
        if layers not in (None, ["pool"]):
            raise InvalidParameterError("pooled features read the encoder's pooled representation; layers is fixed.")
        super().__init__(encoder, image_shape, moments=moments, **kwargs)
        if not hasattr(self.encoder, "embed"):
            raise InvalidParameterError("the proxy encoder must be one of mmdsynth's architectures (it needs embed()).")

    def _check_layers(self, layers, all_convs) -> list[str]:
        return ["pool"]

    def raw(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder.embed(self._prepare(x)).flatten(1)

    def parts(self) -> list[tuple[str, int, float]]:
        return [(f"proxy_phi{m}", self.width, 1.0) for m in self.moments]
