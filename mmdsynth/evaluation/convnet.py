"""The CNN protocol: the DP-KIP paper's downstream ConvNet trained on synthetic / distilled
images, tested on the real test split (``cnn_acc``).

Network (Zhao et al.'s ConvNet, used by DP-KIP's Table 2): 3 blocks of Conv 3x3 (128 filters,
padding 1) -> InstanceNorm (GroupNorm with one group per channel, affine) -> ReLU -> AvgPool 2,
then one linear layer. Fixed training settings, nothing chosen on the test set and no
validation split: SGD (lr 0.01, momentum 0.9, weight decay 5e-4), batch 256, lr x 0.1 at half
of training, the last model is tested. Epochs: 300 for sets of at most 10,000 images (distilled
sets: the dataset-condensation evaluation), 50 for larger ones (60,000 generated samples, as
DPImageBench trains). Inputs use the fixed public map (x - 0.5) / 0.5 and are not clipped (a DP-KIP
support set lives outside [0, 1]); no statistics of any data are used.
Three training seeds by default; the result is their mean, spread and list.

``protocol="dc"``: the dataset-condensation evaluation that NDPDC and Dosser report (VICO-UoE/DatasetCondensation
``utils.py`` ``evaluate_synset`` lines 337-361 with ``main_DM.py`` lines 21-28): the same ConvNet and optimiser,
1,000 epochs, lr x 0.1 at half, DSA augmentation (:mod:`mmdsynth.evaluation.augment`;
``color_crop_cutout_scale_rotate`` for grey images as NDPDC's README runs MNIST and Fashion-MNIST,
``color_crop_cutout_flip_scale_rotate`` for colour), inputs normalised with the published per-dataset constants
of that code (``get_dataset``, lines 13-51). No validation split, the last model tested.
"""
from __future__ import annotations

import logging
import math
import time

import numpy as np
import torch
from torch import nn

from ..runtime import default_device

logger = logging.getLogger(__name__)

SMALL_SET, EPOCHS_SMALL, EPOCHS_LARGE = 10_000, 300, 50
PROTOCOLS = ("fixed", "dc", "dpimagebench")
DC_EPOCHS = 1000
#: the dataset-condensation code's normalisation constants (mean, std per channel), by mmdsynth dataset name
DC_NORMALISE = {"mnist": ((0.1307,), (0.3081,)), "fashion-mnist": ((0.2861,), (0.3530,)),
                "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))}


class ConvNet(nn.Module):
    def __init__(self, channels: int, n_classes: int, image_size: int, width: int = 128, depth: int = 3):
        super().__init__()
        layers, c, s = [], channels, image_size
        for _ in range(depth):
            layers += [nn.Conv2d(c, width, 3, padding=1), nn.GroupNorm(width, width, affine=True), nn.ReLU(),
                       nn.AvgPool2d(2)]
            c, s = width, s // 2
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(width * s * s, n_classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def protocol_epochs(n: int) -> int:
    """300 epochs for a distilled-size set (<= 10,000 images), 50 for a large generated one."""
    return EPOCHS_SMALL if n <= SMALL_SET else EPOCHS_LARGE


def _images(x, normalise=None) -> torch.Tensor:
    """(n, C, H, W) float32 in the network's scale; accepts (n, H, W), (n, C, H, W) or (n, H*W).
    ``normalise``: (means, stds) per channel instead of the fixed (x - 0.5) / 0.5."""
    x = torch.as_tensor(np.asarray(x, dtype=np.float32))
    if x.ndim == 2:
        side = math.isqrt(x.shape[1])
        if side * side != x.shape[1]:
            raise ValueError(f"cannot read {x.shape[1]} values per row as a square grey image")
        x = x.reshape(-1, 1, side, side)
    elif x.ndim == 3:
        x = x[:, None]
    if normalise is not None:
        mean, std = (torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in normalise)
        return (x - mean) / std
    return (x - 0.5) / 0.5          # as given: a distilled set may leave [0, 1] (not clipped)


def train_convnet(x, y, n_classes: int, *, seed: int, epochs: int | None = None, width: int = 128,
                  batch_size: int = 256, device: str | torch.device = "cpu", augment: str | None = None,
                  normalise=None) -> ConvNet:
    """The protocol's training run on (x, y) (images in [0, 1]); returns the last model. ``augment``: a DSA
    strategy applied to every training batch (:func:`~mmdsynth.evaluation.augment.dsa_augment`)."""
    from .augment import dsa_augment

    device = torch.device(device)
    xs, ys = _images(x, normalise).to(device), torch.as_tensor(np.asarray(y)).long().to(device)
    epochs = protocol_epochs(len(ys)) if epochs is None else epochs
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    net = ConvNet(xs.shape[1], n_classes, xs.shape[2], width).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [epochs // 2], 0.1)
    net.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(ys), generator=g).split(batch_size):
            idx = idx.to(device)
            batch = xs[idx] if augment is None else dsa_augment(xs[idx], augment, g)
            loss = nn.functional.cross_entropy(net(batch), ys[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
    return net.eval()


@torch.no_grad()
def convnet_accuracy(net: nn.Module, x_test, y_test, batch: int = 2000, normalise=None) -> float:
    """Test accuracy of an image classifier (inputs in [0, 1], mapped as in training)."""
    device = next(net.parameters()).device
    xt, yt = _images(x_test, normalise), torch.as_tensor(np.asarray(y_test)).long()
    correct = 0
    for start in range(0, len(yt), batch):
        pred = net(xt[start:start + batch].to(device)).argmax(1).cpu()
        correct += int((pred == yt[start:start + batch]).sum())
    return correct / len(yt)


def dc_settings(dataset: str, channels: int) -> dict:
    """The dataset-condensation protocol's settings for ``dataset`` (see the module docstring)."""
    from ..errors import InvalidParameterError

    if dataset not in DC_NORMALISE:
        raise InvalidParameterError(f"protocol 'dc' knows the normalisation of {', '.join(DC_NORMALISE)}; got "
                                    f"dataset {dataset!r}. Use protocol='fixed' for other images.")
    strategy = "color_crop_cutout_scale_rotate" if channels == 1 else "color_crop_cutout_flip_scale_rotate"
    return {"epochs": DC_EPOCHS, "augment": strategy, "normalise": DC_NORMALISE[dataset]}


def cnn_scores(x_syn, y_syn, x_test, y_test, *, n_classes: int | None = None, seeds=(0, 1, 2),
               epochs: int | None = None, width: int = 128, device: str | None = None, protocol: str = "fixed",
               dataset: str | None = None) -> dict:
    """``cnn_acc`` (mean over training seeds), ``cnn_acc_std``, ``cnn_accs`` and the settings. ``protocol``:
    "fixed" (mmdsynth's, the module docstring), "dc" (the dataset-condensation evaluation; needs ``dataset``) or
    "dpimagebench" (:mod:`mmdsynth.evaluation.dpimagebench`: the mean over its three classifiers, in ``cnn_accs``
    as resnet, wrn, resnext; one training run each, with the first of ``seeds``)."""
    from ..errors import unknown_name

    if protocol not in PROTOCOLS:
        raise unknown_name("ConvNet protocol", str(protocol), PROTOCOLS)
    device = default_device(device)
    n_classes = n_classes or int(max(np.max(np.asarray(y_syn)), np.max(np.asarray(y_test)))) + 1
    if protocol == "dpimagebench":          # three classifiers, selection on a synthetic validation split
        from .dpimagebench import CLASSIFIERS, dpimagebench_scores

        r = dpimagebench_scores(x_syn, y_syn, x_test, y_test, dataset=dataset, n_classes=n_classes, device=device,
                                epochs=epochs, seed=seeds[0] if len(seeds) else 0)
        return {"cnn_acc": r["dpimagebench_acc"], "cnn_acc_std": r["dpimagebench_acc_std"],
                "cnn_accs": [r["dpimagebench"][c]["test_acc_at_best_val"] for c in CLASSIFIERS],
                "cnn_protocol": {**r["protocol"], "classifiers": r["dpimagebench"]}}
    extra = dc_settings(dataset, _images(np.asarray(x_syn)[:1]).shape[1]) if protocol == "dc" else {}
    protocol_default = extra.pop("epochs", None) or protocol_epochs(len(y_syn))
    epochs = epochs or protocol_default
    accs = []
    for seed in seeds:
        t = time.perf_counter()
        net = train_convnet(x_syn, y_syn, n_classes, seed=seed, epochs=epochs, width=width, device=device, **extra)
        accs.append(convnet_accuracy(net, x_test, y_test, normalise=extra.get("normalise")))
        logger.info("ConvNet seed %d: acc %.4f (%.1f s)", seed, accs[-1], time.perf_counter() - t)
    return {"cnn_acc": float(np.mean(accs)), "cnn_acc_std": float(np.std(accs)), "cnn_accs": accs,
            "cnn_protocol": {"name": protocol, "epochs": epochs, "faithful": epochs == protocol_default,
                             "width": width, "seeds": list(seeds),
                             "n_train": int(len(y_syn)), "device": str(device),
                             **({"augment": extra["augment"]} if extra else {})}}
