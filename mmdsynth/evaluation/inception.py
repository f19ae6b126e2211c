"""Inception-v3 pool features for the FID, from a weights file the user provides.

Nothing is downloaded: pass the path of one of

* the FID network ported from TensorFlow (``pt_inception-2015-12-05-6726825d.pth`` of
  pytorch-fid; 1,008 logits). With it the blocks use the TensorFlow graph's pooling (average
  pools that do not count padding, a max pool in the last block) and inputs are scaled to
  [-1, 1]: the standard FID;
* torchvision's ImageNet ``inception_v3`` weights (1,000 logits): plain Inception-v3 pooling and
  ImageNet normalisation. Scores on it are *not* comparable with published FIDs, so the report
  names the variant.

Weights load from ``.safetensors``, or from ``.pth``/``.pt`` with ``torch.load(weights_only=True)``
(no code runs). Parameter names follow torchvision's ``Inception3`` (``Conv2d_1a_3x3.conv.weight``,
``Mixed_5b.branch1x1.bn.running_mean``, ...); auxiliary-classifier weights are ignored.
Images are resized to 299 x 299 (bilinear) and grey images repeated to three channels;
features are the 2,048 averaged activations before the classifier.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ArtifactError, InvalidParameterError

FID_LOGITS, IMAGENET_LOGITS = 1008, 1000
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class BasicConv2d(nn.Module):
    def __init__(self, cin, cout, **kw):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=False, **kw)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


def _avg(x, tf_pooling: bool):
    return F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=not tf_pooling)


class InceptionA(nn.Module):
    def __init__(self, cin, pool_features, tf_pooling):
        super().__init__()
        self.tf = tf_pooling
        self.branch1x1 = BasicConv2d(cin, 64, kernel_size=1)
        self.branch5x5_1 = BasicConv2d(cin, 48, kernel_size=1)
        self.branch5x5_2 = BasicConv2d(48, 64, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(cin, pool_features, kernel_size=1)

    def forward(self, x):
        return torch.cat([self.branch1x1(x), self.branch5x5_2(self.branch5x5_1(x)),
                          self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))),
                          self.branch_pool(_avg(x, self.tf))], 1)


class InceptionB(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.branch3x3 = BasicConv2d(cin, 384, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, stride=2)

    def forward(self, x):
        return torch.cat([self.branch3x3(x), self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))),
                          F.max_pool2d(x, 3, stride=2)], 1)


class InceptionC(nn.Module):
    def __init__(self, cin, c7, tf_pooling):
        super().__init__()
        self.tf = tf_pooling
        row, col = dict(kernel_size=(1, 7), padding=(0, 3)), dict(kernel_size=(7, 1), padding=(3, 0))
        self.branch1x1 = BasicConv2d(cin, 192, kernel_size=1)
        self.branch7x7_1 = BasicConv2d(cin, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, **row)
        self.branch7x7_3 = BasicConv2d(c7, 192, **col)
        self.branch7x7dbl_1 = BasicConv2d(cin, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, **col)
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, **row)
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, **col)
        self.branch7x7dbl_5 = BasicConv2d(c7, 192, **row)
        self.branch_pool = BasicConv2d(cin, 192, kernel_size=1)

    def forward(self, x):
        dbl = x
        for i in range(1, 6):
            dbl = getattr(self, f"branch7x7dbl_{i}")(dbl)
        return torch.cat([self.branch1x1(x), self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x))), dbl,
                          self.branch_pool(_avg(x, self.tf))], 1)


class InceptionD(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.branch3x3_1 = BasicConv2d(cin, 192, kernel_size=1)
        self.branch3x3_2 = BasicConv2d(192, 320, kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(cin, 192, kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(192, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192, 192, kernel_size=3, stride=2)

    def forward(self, x):
        b7 = x
        for i in range(1, 5):
            b7 = getattr(self, f"branch7x7x3_{i}")(b7)
        return torch.cat([self.branch3x3_2(self.branch3x3_1(x)), b7, F.max_pool2d(x, 3, stride=2)], 1)


class InceptionE(nn.Module):
    """``pool``: 'avg' (torchvision), 'avg_tf' (TF graph, padding not counted) or 'max'."""

    def __init__(self, cin, pool):
        super().__init__()
        self.pool = pool
        row, col = dict(kernel_size=(1, 3), padding=(0, 1)), dict(kernel_size=(3, 1), padding=(1, 0))
        self.branch1x1 = BasicConv2d(cin, 320, kernel_size=1)
        self.branch3x3_1 = BasicConv2d(cin, 384, kernel_size=1)
        self.branch3x3_2a = BasicConv2d(384, 384, **row)
        self.branch3x3_2b = BasicConv2d(384, 384, **col)
        self.branch3x3dbl_1 = BasicConv2d(cin, 448, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, **row)
        self.branch3x3dbl_3b = BasicConv2d(384, 384, **col)
        self.branch_pool = BasicConv2d(cin, 192, kernel_size=1)

    def forward(self, x):
        b3 = self.branch3x3_1(x)
        d3 = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        pooled = F.max_pool2d(x, 3, stride=1, padding=1) if self.pool == "max" else _avg(x, self.pool == "avg_tf")
        return torch.cat([self.branch1x1(x), self.branch3x3_2a(b3), self.branch3x3_2b(b3),
                          self.branch3x3dbl_3a(d3), self.branch3x3dbl_3b(d3), self.branch_pool(pooled)], 1)


class InceptionV3(nn.Module):
    """Inception-v3 up to its 2,048 pool features; ``variant`` 'fid' or 'torchvision'."""

    def __init__(self, variant: str = "fid"):
        super().__init__()
        if variant not in ("fid", "torchvision"):
            raise InvalidParameterError(f"Inception variant must be 'fid' or 'torchvision'; got {variant!r}.")
        self.variant = variant
        tf = variant == "fid"
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(32, 64, kernel_size=3, padding=1)
        self.Conv2d_3b_1x1 = BasicConv2d(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(80, 192, kernel_size=3)
        self.Mixed_5b = InceptionA(192, 32, tf)
        self.Mixed_5c = InceptionA(256, 64, tf)
        self.Mixed_5d = InceptionA(288, 64, tf)
        self.Mixed_6a = InceptionB(288)
        self.Mixed_6b = InceptionC(768, 128, tf)
        self.Mixed_6c = InceptionC(768, 160, tf)
        self.Mixed_6d = InceptionC(768, 160, tf)
        self.Mixed_6e = InceptionC(768, 192, tf)
        self.Mixed_7a = InceptionD(768)
        self.Mixed_7b = InceptionE(1280, "avg_tf" if tf else "avg")
        self.Mixed_7c = InceptionE(2048, "max" if tf else "avg")
        self.fc = nn.Linear(2048, FID_LOGITS if tf else IMAGENET_LOGITS)

    def preprocess(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1], (n, 1 or 3, h, w) -> the network's 299 x 299 input."""
        if x.shape[1] == 1:
            x = x.repeat(1, 3, 1, 1)
        x = F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False)
        if self.variant == "fid":
            return 2 * x - 1
        mean = torch.tensor(IMAGENET_MEAN, dtype=x.dtype).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, dtype=x.dtype).view(1, 3, 1, 1)
        return (x - mean) / std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pool features (n, 2048) of preprocessed input."""
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = F.max_pool2d(x, 3, stride=2)
        x = F.max_pool2d(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)), 3, stride=2)
        for name in ("5b", "5c", "5d", "6a", "6b", "6c", "6d", "6e", "7a", "7b", "7c"):
            x = getattr(self, f"Mixed_{name}")(x)
        return F.adaptive_avg_pool2d(x, 1).flatten(1)

    @torch.no_grad()
    def features(self, x, batch_size: int = 50) -> np.ndarray:
        """(n, 2048) float64 features of images in [0, 1]."""
        self.eval()
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        if x.dim() != 4 or x.shape[1] not in (1, 3):
            raise InvalidParameterError(f"Inception features need images (n, 1 or 3, h, w); got {tuple(x.shape)}.")
        return torch.cat([self(self.preprocess(b)) for b in x.split(batch_size)]).double().numpy()


def _read_state_dict(path: Path) -> dict:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        return load_file(str(path))
    if path.suffix in (".pth", ".pt"):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a non-tensor pickle is refused by weights_only
            raise ArtifactError(f"{path} is not a plain tensor state dict (loaded with weights_only=True): "
                                f"{exc}") from exc
        return state.get("state_dict", state) if isinstance(state, dict) else state
    raise InvalidParameterError(f"Inception weights must be .safetensors, .pth or .pt; got {path.name!r}.")


def load_inception(path) -> InceptionV3:
    """Inception-v3 with the weights in ``path``; the variant follows the classifier size."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"Inception weights file {path} does not exist. mmdsynth never downloads it: get "
                            f"pytorch-fid's pt_inception-2015-12-05-6726825d.pth (the standard FID network) "
                            f"on a connected machine and pass its path.")
    state = {k: v for k, v in _read_state_dict(path).items() if not k.startswith("AuxLogits.")}
    logits = tuple(state["fc.weight"].shape)[0] if "fc.weight" in state else None
    if logits not in (FID_LOGITS, IMAGENET_LOGITS):
        raise ArtifactError(f"{path} does not look like Inception-v3 weights: expected fc.weight with "
                            f"{FID_LOGITS} (FID) or {IMAGENET_LOGITS} (torchvision) rows, found "
                            f"{'no fc.weight' if logits is None else logits}.")
    net = InceptionV3("fid" if logits == FID_LOGITS else "torchvision")
    missing, unexpected = net.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ArtifactError(f"{path}: parameter names do not match torchvision's Inception3 layout; missing "
                            f"{missing[:5]}{'...' if len(missing) > 5 else ''}, unexpected "
                            f"{unexpected[:5]}{'...' if len(unexpected) > 5 else ''}.")
    return net.eval()


def inception_report(weights, x_real, x_fake) -> dict:
    """{'fid_network': 'inception-v3/<variant>', 'fid': value}."""
    from .frechet import frechet_distance_of

    net = load_inception(weights)
    return {"fid_network": f"inception-v3/{net.variant}", "fid": frechet_distance_of(net.features, x_real, x_fake)}
