"""Image encoders whose convolution activations give DP-MEPF's perceptual features.

Two families, defined here (torchvision does not work with this torch build) with torchvision's
parameter names, so that a torchvision VGG19 / ResNet18 state dict from a local file loads:

- ``vgg``: ``features`` (Conv 3x3 + ReLU, MaxPool at "M") then ``classifier``. Named configs:
  ``vgg_small`` (28x28 / 32x32 inputs: 32-64-128 channels) and ``vgg19`` (torchvision's layout).
- ``resnet``: ``conv1``/``bn1`` stem, ``layer1..layerK`` of BasicBlocks (``conv1``, ``bn1``,
  ``conv2``, ``bn2``, ``downsample.0/1``), ``fc``. ``resnet_small`` (a 3x3 stem, 16-32-64
  channels, one block per stage) and ``resnet18`` (torchvision's layout, 7x7 stem + max-pool).

An encoder is saved as safetensors plus a JSON spec beside it (``save_encoder``) and rebuilt by
``load_encoder``, which also reads a torchvision ``.pth`` state dict (``weights_only=True``: no code
runs). Nothing is ever downloaded.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .._io import SEAL, atomic_write, check_file_digest, read_sealed_json, sealed, sha256_file
from ..errors import ArtifactError, unknown_name

VGG_CONFIGS = {
    "vgg_small": [32, "M", 64, "M", 128, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}
RESNET_CONFIGS = {"resnet_small": ((16, 32, 64), (1, 1, 1), "small"), "resnet18": ((64, 128, 256, 512), (2, 2, 2, 2), "imagenet")}
ARCHS = [*VGG_CONFIGS, *RESNET_CONFIGS]


class VGG(nn.Module):
    def __init__(self, cfg, in_channels: int = 3, n_classes: int = 10):
        super().__init__()
        layers, c = [], in_channels
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=False)]
                c = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(c, n_classes)

    def embed(self, x):
        """The pooled representation the classifier head reads (DP-MEPF's early-stopping proxy)."""
        return self.pool(self.features(x)).flatten(1)

    def forward(self, x):
        return self.classifier(self.embed(x))


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, widths, blocks, stem: str = "small", in_channels: int = 3, n_classes: int = 10):
        super().__init__()
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(in_channels, widths[0], 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        else:
            self.conv1 = nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(widths[0])
        c = widths[0]
        for i, (w, n) in enumerate(zip(widths, blocks)):
            stage = [BasicBlock(c if j == 0 else w, w, (1 if i == 0 else 2) if j == 0 else 1) for j in range(n)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*stage))
            c = w
        self.n_stages = len(widths)
        self.fc = nn.Linear(c, n_classes)

    def embed(self, x):
        """The pooled representation the classifier head reads (DP-MEPF's early-stopping proxy)."""
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        for i in range(self.n_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return x.mean((2, 3))

    def forward(self, x):
        return self.fc(self.embed(x))


def build_encoder(arch: str, in_channels: int = 3, n_classes: int = 10) -> nn.Module:
    if arch in VGG_CONFIGS:
        return VGG(VGG_CONFIGS[arch], in_channels, n_classes)
    if arch in RESNET_CONFIGS:
        widths, blocks, stem = RESNET_CONFIGS[arch]
        return ResNet(widths, blocks, stem, in_channels, n_classes)
    raise unknown_name("encoder architecture", arch, ARCHS)


def conv_layers(net: nn.Module) -> list[str]:
    """Names of every Conv2d of ``net`` in forward order: DP-MEPF's feature layers."""
    return [name for name, m in net.named_modules() if isinstance(m, nn.Conv2d)]


def save_encoder(net: nn.Module, spec: dict, path) -> Path:
    """Weights as ``path`` (.safetensors) and the spec as ``path`` with suffix .json, sealed and
    holding the weights' sha256 (a damaged or edited file is refused on load, naming it)."""
    path = Path(path)
    with atomic_write(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}, str(tmp))
        digest = sha256_file(tmp)
    with atomic_write(path.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(sealed({**spec, "weights_sha256": digest}), indent=1))
    return path


def encoder_dir() -> Path:
    """Where ``mmdsynth pretrain-encoder`` saves an encoder when no --out is given, and where
    encoder names are looked up: ``<cache>/encoders`` (MMDSYNTH_CACHE_DIR or ~/.cache/mmdsynth)."""
    from ..data.fetch import cache_dir

    return cache_dir() / "encoders"


def resolve_encoder(path_or_name) -> Path:
    """A weights file: ``path_or_name`` itself when it exists, else the named encoder
    ``<encoder_dir>/NAME.safetensors`` (names like ``fashion-mnist-vgg_small``, as
    ``mmdsynth pretrain-encoder`` names them)."""
    path = Path(path_or_name)
    if path.exists():
        return path
    named = encoder_dir() / f"{path.name}.safetensors"
    if path.suffix == "" and path.parent == Path(".") and named.exists():
        return named
    raise ArtifactError(
        f"no encoder weights at {path} (nor a named encoder {named}); train one on PUBLIC data with "
        f"`mmdsynth pretrain-encoder --dataset fashion-mnist --arch vgg_small` (saved as "
        f"{encoder_dir() / 'fashion-mnist-vgg_small.safetensors'}) or give a local torchvision VGG19 / "
        f"ResNet18 .pth file (nothing is downloaded)."
    )


def encoder_spec(path) -> dict:
    """The JSON spec of an mmdsynth encoder (architecture, the public dataset it was trained on, its
    accuracy) without loading its weights; ``{}`` for a torchvision ``.pth`` (no spec)."""
    path = resolve_encoder(path)
    if path.suffix != ".safetensors":
        return {}
    spec = read_sealed_json(path.with_suffix(".json"), "encoder spec")
    return {k: v for k, v in spec.items() if k != SEAL}


def load_encoder(path, arch: str | None = None) -> tuple[nn.Module, dict]:
    """(encoder in eval mode, spec) from mmdsynth's safetensors + JSON, or from a torchvision
    ``.pth`` state dict (``arch`` "vgg19" or "resnet18", guessed from the keys if not given;
    the classifier head is not needed for features and is ignored). ``path`` may also name
    an encoder in :func:`encoder_dir`."""
    path = resolve_encoder(path)
    if path.suffix == ".safetensors":
        spec = encoder_spec(path)
        if "weights_sha256" in spec:
            check_file_digest(path, spec["weights_sha256"], "encoder")
        try:
            state = load_file(str(path))
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"cannot read the encoder {path}: {exc}") from exc
        net = build_encoder(spec["arch"], spec["in_channels"], spec["n_classes"])
        net.load_state_dict(state)
        return net.eval(), spec
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise ArtifactError(f"cannot read {path} as a torchvision state dict: {exc}") from exc
    arch = arch or ("vgg19" if "features.0.weight" in state else "resnet18" if "layer1.0.conv1.weight" in state
                    else None)
    if arch not in ("vgg19", "resnet18"):
        raise ArtifactError(f"{path} is neither a torchvision VGG19 nor a ResNet18 state dict.")
    net = build_encoder(arch, 3, 1000)
    head = ("classifier.",) if arch == "vgg19" else ("fc.",)
    body = {k: v for k, v in state.items() if not k.startswith(head)}
    missing, unexpected = net.load_state_dict(body, strict=False)
    missing = [k for k in missing if not k.startswith(head)]
    if missing or unexpected:
        raise ArtifactError(f"{path} does not match torchvision's {arch}: missing {missing[:5]}, "
                            f"unexpected {unexpected[:5]}.")
    return net.eval(), {"arch": arch, "in_channels": 3, "n_classes": 1000, "source": f"torchvision:{path.name}"}
