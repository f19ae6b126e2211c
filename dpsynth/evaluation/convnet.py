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


def _images(x) -> torch.Tensor:
    """(n, C, H, W) float32 in the network's scale; accepts (n, H, W), (n, C, H, W) or (n, H*W)."""
    x = torch.as_tensor(np.asarray(x, dtype=np.float32))
    if x.ndim == 2:
        side = math.isqrt(x.shape[1])
        if side * side != x.shape[1]:
            raise ValueError(f"cannot read {x.shape[1]} values per row as a square grey image")
        x = x.reshape(-1, 1, side, side)
    elif x.ndim == 3:
        x = x[:, None]
    return (x - 0.5) / 0.5          # as given: a distilled set may leave [0, 1] (not clipped)


def train_convnet(x, y, n_classes: int, *, seed: int, epochs: int | None = None, width: int = 128,
                  batch_size: int = 256, device: str | torch.device = "cpu") -> ConvNet:
    """The protocol's training run on (x, y) (images in [0, 1]); returns the last model."""
    device = torch.device(device)
    xs, ys = _images(x).to(device), torch.as_tensor(np.asarray(y)).long().to(device)
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
            loss = nn.functional.cross_entropy(net(xs[idx]), ys[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
    return net.eval()


@torch.no_grad()
def convnet_accuracy(net: nn.Module, x_test, y_test, batch: int = 2000) -> float:
    """Test accuracy of an image classifier (inputs in [0, 1], mapped as in training)."""
    device = next(net.parameters()).device
    xt, yt = _images(x_test), torch.as_tensor(np.asarray(y_test)).long()
    correct = 0
    for start in range(0, len(yt), batch):
        pred = net(xt[start:start + batch].to(device)).argmax(1).cpu()
        correct += int((pred == yt[start:start + batch]).sum())
    return correct / len(yt)


def cnn_scores(x_syn, y_syn, x_test, y_test, *, n_classes: int | None = None, seeds=(0, 1, 2),
               epochs: int | None = None, width: int = 128, device: str | None = None) -> dict:
    """``cnn_acc`` (mean over training seeds), ``cnn_acc_std``, ``cnn_accs`` and the settings."""
    device = default_device(device)
    n_classes = n_classes or int(max(np.max(y_syn), np.max(y_test))) + 1
    accs = []
    for seed in seeds:
        t = time.perf_counter()
        net = train_convnet(x_syn, y_syn, n_classes, seed=seed, epochs=epochs, width=width, device=device)
        accs.append(convnet_accuracy(net, x_test, y_test))
        logger.info("ConvNet seed %d: acc %.4f (%.1f s)", seed, accs[-1], time.perf_counter() - t)
    return {"cnn_acc": float(np.mean(accs)), "cnn_acc_std": float(np.std(accs)), "cnn_accs": accs,
            "cnn_protocol": {"epochs": epochs or protocol_epochs(len(y_syn)), "width": width, "seeds": list(seeds),
                             "n_train": int(len(y_syn)), "device": str(device)}}
