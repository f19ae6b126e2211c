"""DP-MEPF (Harder, Jalali Asadabadi, Sutherland, Park, 2023): perceptual features of a PUBLIC encoder."""
from __future__ import annotations

from ..errors import InvalidParameterError
from ..features.encoders import encoder_spec, resolve_encoder
from ..features.perceptual import PerceptualFeatures
from .base import KernelGeneratorMethod, register


@register
class DPMEPF(KernelGeneratorMethod):
    """Mean embeddings of perceptual features (the convolution activations of an encoder trained on
    PUBLIC data): phi1 = activations and phi2 = their squares, each unit norm per image and each its
    own Gaussian release (sensitivity 2/m); labelled generation embeds per class. With
    ``early_stopping`` (default) a proxy, the first and second moments of the pooled features of
    ``proxy_encoder`` (default: the same encoder), is released with ``proxy_multiplier`` (10) times
    the noise in the same plan, and ``sample`` uses the checkpoint closest to it.

    ``encoder``: a weights file from ``mmdsynth pretrain-encoder`` (or its name in the encoder
    folder), or a torchvision VGG19 / ResNet18 ``.pth``. It must not have seen the private data:
    fitting refuses an encoder whose spec names the dataset being fitted.
    ``moments``: ``(1, 2)`` (phi1 and phi2) or ``(1,)``; ``layers``: Conv2d names (default all).
    ``loss``: ``"mavg"`` (the paper's moving-average loss; ``mavg_lr``) or ``"direct"``.
    """

    method = "dp-mepf"
    data_kinds = ("image",)

    def __init__(self, epsilon: float = 10.0, delta: float = 1e-5, *, encoder: str | None = None,
                 moments=(1, 2), layers=None, early_stopping: bool = True, loss: str = "mavg",
                 iterations: int = 4000, batch_size: int = 100, lr: float = 1e-3, mavg_lr: float = 1e-2,
                 lr_step: int = 1000, **kwargs):
        super().__init__(epsilon, delta, iterations=iterations, batch_size=batch_size, lr=lr, lr_step=lr_step,
                         loss=loss, mavg_lr=mavg_lr, early_stopping=early_stopping, **kwargs)
        self.encoder, self.moments, self.layers = encoder, moments, layers

    def _encoder_path(self) -> str:
        if self.encoder is None:
            raise InvalidParameterError(
                "DP-MEPF needs an encoder trained on PUBLIC data: pass encoder=PATH. Make one "
                "with `mmdsynth pretrain-encoder --dataset fashion-mnist --arch vgg_small` (for MNIST), or give a "
                "torchvision VGG19 / ResNet18 .pth file."
            )
        return str(resolve_encoder(self.encoder))

    def default_proxy_encoder(self) -> str:
        return self._encoder_path()

    def _validate(self) -> None:
        super()._validate()
        self._encoder_path()

    def _release(self, X, y, dataset: str, budget):
        for path in {self._encoder_path(), str(resolve_encoder(self.proxy_encoder or self._encoder_path()))}:
            public = encoder_spec(path).get("dataset")
            if dataset and public == dataset:
                raise InvalidParameterError(
                    f"the encoder {path} was trained on {public!r}, the dataset being privatised: its weights "
                    f"depend on the private data, so DP-MEPF's guarantee would not hold. Use an encoder "
                    f"pretrained on a different, PUBLIC dataset (e.g. fashion-mnist for mnist)."
                )
        release = super()._release(X, y, dataset, budget)
        return release.with_note(self._encoder_note(dataset))

    def _encoder_note(self, dataset: str) -> str:
        """What the encoder check established, for the ledger: it compares dataset NAMES only."""
        trained = sorted({str(encoder_spec(p).get("dataset") or "unrecorded") for p in
                          {self._encoder_path(), str(resolve_encoder(self.proxy_encoder or self._encoder_path()))}})
        checked = (f"its recorded training dataset ({', '.join(trained)}) differs from this dataset's name "
                   f"({dataset!r})" if dataset else "no dataset name was given, so nothing was compared")
        return (f"encoder check: {checked}. A name check cannot show that the encoder never saw these records; "
                f"that its training data is public and not the private data is declared by whoever ran the fit")

    def image_feature_map(self, shape: tuple, n_classes: int) -> PerceptualFeatures:
        if len(shape) != 3:
            raise InvalidParameterError(f"DP-MEPF models images (channels, height, width); got records of shape "
                                        f"{tuple(shape)}. For flat records or tables use dp-ntk or dp-merf.")
        return PerceptualFeatures(self._encoder_path(), shape, moments=self.moments, layers=self.layers)

    def table_feature_map(self, encoder, n_classes: int):
        raise InvalidParameterError("DP-MEPF models images (its features come from an image encoder); "
                                    "for tables use dp-ntk or dp-merf.")
