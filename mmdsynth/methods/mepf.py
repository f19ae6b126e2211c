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
    ``loss``: ``"mavg"`` (the paper's moving-average loss, learned with Adam at ``mavg_lr``) or ``"direct"``
    (the squared MMD); ``beta1``: the generator's Adam beta1 (the authors': 0.5). DP early stopping:
    ``early_stopping``, ``proxy_encoder``, ``proxy_multiplier``, checkpoints scored every ``select_every``
    iterations (default iterations / 20) on ``select_samples`` generated images. Images only. Also takes the
    generator's and the run's options (:class:`~mmdsynth.methods.KernelGeneratorMethod`).
    """

    method = "dp-mepf"
    summary = "perceptual features of an encoder trained on public data (DP-MEPF)"
    param_help = {
        "moments": "[1, 2]: the features and their squares; [1]: the features only",
        "layers": "the encoder's Conv2d layers to embed (default all)",
        "loss": '"mavg" (the paper\'s moving average) or "direct" (the squared MMD)',
        "mavg_lr": "the moving average's learning rate",
        "beta1": "the generator's Adam beta1 (the authors': 0.5)",
        "early_stopping": "release a proxy and sample from the checkpoint closest to it",
        "proxy_encoder": "the proxy's encoder (default: the encoder)",
        "proxy_multiplier": "the proxy's noise, as a multiple of the embedding's",
        "select_samples": "generated images scored per checkpoint for early stopping",
    }
    param_choices = {"loss": ("mavg", "direct")}
    data_kinds = ("image",)
    #: images only, and every default in the signature but the training step's precision (the shared default)
    kind_defaults = {"image": {"precision": "float32"}}

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, encoder: str | None = None,
                 moments=(1, 2), layers=None, loss: str = "mavg", mavg_lr: float = 1e-2, beta1: float = 0.9,
                 early_stopping: bool = True, proxy_encoder: str | None = None, proxy_multiplier: float = 10.0,
                 select_every: int | None = None, select_samples: int = 2000, iterations: int = 4000,
                 batch_size: int = 100, lr: float = 1e-3, lr_step: int = 1000, **kwargs):
        super().__init__(epsilon, delta, iterations=iterations, batch_size=batch_size, lr=lr, lr_step=lr_step,
                         **kwargs)
        self.encoder, self.moments, self.layers = encoder, moments, layers
        self.loss, self.mavg_lr, self.beta1 = loss, mavg_lr, beta1
        self.early_stopping, self.proxy_encoder, self.proxy_multiplier = early_stopping, proxy_encoder, proxy_multiplier
        self.select_every, self.select_samples = select_every, select_samples

    def _encoder_path(self) -> str:
        if self._s.encoder is None:
            raise InvalidParameterError(
                "DP-MEPF needs an encoder trained on PUBLIC data: pass encoder=PATH. Make one "
                "with `mmdsynth pretrain-encoder --dataset fashion-mnist --arch vgg_small` (for MNIST), or give a "
                "torchvision VGG19 / ResNet18 .pth file."
            )
        return str(resolve_encoder(self._s.encoder))

    def default_proxy_encoder(self) -> str:
        return self._encoder_path()

    def _validate(self) -> None:
        super()._validate()
        self._encoder_path()

    def _array_release(self, fmap, facts, *, n_classes, proxy, dataset: str, budget, public_facts: dict):
        for path in {self._encoder_path(), str(resolve_encoder(self._s.proxy_encoder or self._encoder_path()))}:
            public = encoder_spec(path).get("dataset")
            if dataset and public == dataset:
                raise InvalidParameterError(
                    f"the encoder {path} was trained on {public!r}, the dataset being privatised: its weights "
                    f"depend on the private data, so DP-MEPF's guarantee would not hold. Use an encoder "
                    f"pretrained on a different, PUBLIC dataset (e.g. fashion-mnist for mnist)."
                )
        release = yield from super()._array_release(fmap, facts, n_classes=n_classes, proxy=proxy, dataset=dataset,
                                                     budget=budget, public_facts=public_facts)
        return release.with_note(self._encoder_note(dataset))

    def _encoder_note(self, dataset: str) -> str:
        """What the encoder check established, for the ledger: it compares dataset NAMES only."""
        trained = sorted({str(encoder_spec(p).get("dataset") or "unrecorded") for p in
                          {self._encoder_path(), str(resolve_encoder(self._s.proxy_encoder or self._encoder_path()))}})
        checked = (f"its recorded training dataset ({', '.join(trained)}) differs from this dataset's name "
                   f"({dataset!r})" if dataset else "no dataset name was given, so nothing was compared")
        return (f"encoder check: {checked}. A name check cannot show that the encoder never saw these records; "
                f"that its training data is public and not the private data is declared by whoever ran the fit")

    def image_feature_map(self, shape: tuple, n_classes: int) -> PerceptualFeatures:
        if len(shape) != 3:
            raise InvalidParameterError(f"DP-MEPF models images (channels, height, width); got records of shape "
                                        f"{tuple(shape)}. For flat records or tables use dp-ntk or dp-merf.")
        return PerceptualFeatures(self._encoder_path(), shape, moments=self._s.moments, layers=self._s.layers)

    def table_feature_map(self, encoder, n_classes: int):
        raise InvalidParameterError("DP-MEPF models images (its features come from an image encoder); "
                                    "for tables use dp-ntk or dp-merf.")
