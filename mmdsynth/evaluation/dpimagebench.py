"""DPImageBench's utility protocol (Chen et al., CCS 2025; github.com/2019ChenGong/DPImageBench, read at commit
565f8d7), reimplemented: three classifiers trained on the synthetic images, each selected on a synthetic
validation split, their test accuracies on the real test split averaged.

Every setting, with where the benchmark sets it (``evaluation/evaluator.py`` unless named):

- classifiers ``resnet``, ``wrn``, ``resnext`` in that order (line 41); the reported accuracy is the mean of
  the three (lines 85-93), the spread their standard deviation;
- the synthetic set is shuffled with ``numpy.random.default_rng(0).permutation`` and split into the first
  55,000 for training and the rest for validation (lines 259-266); for other sizes mmdsynth keeps the same
  proportion (the last n // 12 images validate);
- MNIST / Fashion-MNIST (lines 285-301): WideResNet-40-4 with dropout 0.3 (``classifier/wrn.py``), ResNet-110
  with basic blocks (``classifier/resnet.py``), ResNeXt-29 8x64d (cardinality 8, widen 4,
  ``classifier/resnext.py``); Adam lr 0.01, no weight decay, StepLR(20 epochs, x0.2), batch 256, 50 epochs;
- CIFAR-10 (lines 270-283): WideResNet-28-10 (dropout 0.3), ResNet-164 (basic blocks), ResNeXt-28 (cardinality
  8, widen 10); SGD lr 0.1, momentum 0.9, weight decay 5e-4, StepLR(60, x0.2), batch 126, 200 epochs;
- an exponential moving average of the parameters, decay min(0.9999, (1 + t) / (10 + t)) after optimiser step
  t (lines 306, 346; ``ema.py`` lines 44-52); the average's weights are evaluated, batch-norm statistics are the
  live model's;
- inputs mapped to x * 2 - 1 (lines 332, 369, 390); no augmentation; images at their own size and channels;
- after every epoch the validation and test accuracies are measured; the test accuracy at the epoch with the
  best validation accuracy is kept, a tie going to the later epoch (``>=``, lines 414-416).

What mmdsynth does not copy: the benchmark's configurations mostly run ``eval.mode: val``, which selects on 5,000
*real* images held out of the generator's training set (``data/dataset_loader.py`` lines 38-59). An mmdsynth model
is trained on the whole private training split, so selecting on real images would read private data outside
the budget; this implementation selects on the synthetic validation split (the benchmark's ``syn`` mode,
lines 310-312) only, and says so in its result.

Cost: about 5.3 GMAC per 28x28 image forward through the three networks (12.3 for CIFAR-10), so one MNIST
evaluation (3 x 50 epochs x 55,000 images) is about 4e16 multiply-adds: GPU hours, CPU weeks. ``epochs`` and
``architectures`` can be overridden for smoke tests, and the result records every override.
"""
from __future__ import annotations

import copy
import logging
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..errors import InvalidParameterError, unknown_name
from ..runtime import default_device

logger = logging.getLogger(__name__)

CLASSIFIERS = ("resnet", "wrn", "resnext")
#: per dataset family: the three architectures' sizes and the training settings
SETTINGS = {
    "small": {"architectures": {"resnet": {"depth": 110}, "wrn": {"depth": 40, "widen": 4, "drop": 0.3},
                                "resnext": {"depth": 29, "cardinality": 8, "widen": 4}},
              "optimizer": "adam", "lr": 0.01, "step": 20, "batch_size": 256, "epochs": 50},
    "cifar": {"architectures": {"resnet": {"depth": 164}, "wrn": {"depth": 28, "widen": 10, "drop": 0.3},
                                "resnext": {"depth": 28, "cardinality": 8, "widen": 10}},
              "optimizer": "sgd", "lr": 0.1, "step": 60, "batch_size": 126, "epochs": 200},
}
EMA_DECAY = 0.9999


# -- the three architectures (same layers, widths and initialisation as the benchmark's files) ----------------
class _WideBlock(nn.Module):
    """Pre-activation block: BN-ReLU-conv3x3, BN-ReLU-dropout-conv3x3, a 1x1 convolution on the shortcut
    when the width changes (then the first BN-ReLU is shared with it)."""

    def __init__(self, c_in: int, c_out: int, stride: int, drop: float):
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(c_in), nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(c_out), nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.drop = drop
        self.shortcut = None if c_in == c_out else nn.Conv2d(c_in, c_out, 1, stride, 0, bias=False)

    def forward(self, x):
        pre = F.relu(self.bn1(x))
        out = F.relu(self.bn2(self.conv1(pre)))
        out = F.dropout(out, self.drop, self.training) if self.drop > 0 else out
        return self.conv2(out) + (x if self.shortcut is None else self.shortcut(pre))


class WideResNet(nn.Module):
    def __init__(self, channels: int, image_size: int, n_classes: int, depth: int = 40, widen: int = 4,
                 drop: float = 0.0):
        super().__init__()
        if (depth - 4) % 6:
            raise InvalidParameterError(f"WideResNet depth must be 6n + 4; got {depth}.")
        n, widths = (depth - 4) // 6, [16, 16 * widen, 32 * widen, 64 * widen]
        self.conv1 = nn.Conv2d(channels, widths[0], 3, 1, 1, bias=False)
        stages = []
        for i, stride in enumerate((1, 2, 2)):
            stages += [_WideBlock(widths[i] if j == 0 else widths[i + 1], widths[i + 1], stride if j == 0 else 1, drop)
                       for j in range(n)]
        self.blocks = nn.Sequential(*stages)
        self.bn, self.fc, self.pool = nn.BatchNorm2d(widths[3]), nn.Linear(widths[3], n_classes), image_size // 4
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x):
        out = F.relu(self.bn(self.blocks(self.conv1(x))))
        return self.fc(F.avg_pool2d(out, self.pool).flatten(1))


class _BasicBlock(nn.Module):
    """Post-activation block: conv3x3-BN-ReLU-conv3x3-BN, plus the shortcut (1x1 conv + BN when the shape
    changes), then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out)
        self.conv2, self.bn2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, channels: int, image_size: int, n_classes: int, depth: int = 110):
        super().__init__()
        if (depth - 2) % 6:
            raise InvalidParameterError(f"ResNet (basic blocks) depth must be 6n + 2; got {depth}.")
        n, widths = (depth - 2) // 6, (16, 32, 64)
        self.stem = nn.Sequential(nn.Conv2d(channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        blocks, c_in = [], 16
        for width, stride in zip(widths, (1, 2, 2)):
            for j in range(n):
                blocks.append(_BasicBlock(c_in, width, stride if j == 0 else 1))
                c_in = width
        self.blocks, self.pool, self.fc = nn.Sequential(*blocks), image_size // 4, nn.Linear(64, n_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):            # normal(0, sqrt(2 / (k * k * out))): Kaiming, fan out
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        return self.fc(F.avg_pool2d(self.blocks(self.stem(x)), self.pool).flatten(1))


class _NeXtBlock(nn.Module):
    """Bottleneck type C: 1x1 reduce to D = cardinality * c_out / widen, grouped 3x3, 1x1 expand (each with BN,
    ReLU after the first two), shortcut 1x1 conv + BN when the width changes, ReLU after the sum."""

    def __init__(self, c_in: int, c_out: int, stride: int, cardinality: int, widen: int):
        super().__init__()
        d = cardinality * c_out // widen
        self.reduce, self.bn_reduce = nn.Conv2d(c_in, d, 1, bias=False), nn.BatchNorm2d(d)
        self.conv, self.bn = nn.Conv2d(d, d, 3, stride, 1, groups=cardinality, bias=False), nn.BatchNorm2d(d)
        self.expand, self.bn_expand = nn.Conv2d(d, c_out, 1, bias=False), nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity() if c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn_reduce(self.reduce(x)))
        out = F.relu(self.bn(self.conv(out)))
        return F.relu(self.shortcut(x) + self.bn_expand(self.expand(out)))


class ResNeXt(nn.Module):
    def __init__(self, channels: int, image_size: int, n_classes: int, depth: int = 29, cardinality: int = 8,
                 widen: int = 4):
        super().__init__()
        n, stages = (depth - 2) // 9, [64, 64 * widen, 128 * widen, 256 * widen]
        if n < 1:
            raise InvalidParameterError(f"ResNeXt depth must be at least 11 (9n + 2); got {depth}.")
        self.stem = nn.Sequential(nn.Conv2d(channels, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        blocks = []
        for i, stride in enumerate((1, 2, 2)):
            blocks += [_NeXtBlock(stages[i] if j == 0 else stages[i + 1], stages[i + 1], stride if j == 0 else 1,
                                  cardinality, widen) for j in range(n)]
        self.blocks, self.pool, self.fc = nn.Sequential(*blocks), image_size // 4, nn.Linear(stages[3], n_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
        nn.init.kaiming_normal_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        return self.fc(F.avg_pool2d(self.blocks(self.stem(x)), self.pool, 1).flatten(1))


ARCHITECTURES = {"resnet": ResNet, "wrn": WideResNet, "resnext": ResNeXt}


def build_classifier(name: str, channels: int, image_size: int, n_classes: int, **sizes) -> nn.Module:
    if name not in ARCHITECTURES:
        raise unknown_name("DPImageBench classifier", name, ARCHITECTURES)
    return ARCHITECTURES[name](channels, image_size, n_classes, **sizes)


# -- the protocol ---------------------------------------------------------------------------------------------
class _EMA:
    """The benchmark's parameter average: decay min(0.9999, (1 + t) / (10 + t)) at update t."""

    def __init__(self, net: nn.Module):
        self.shadow = [p.detach().clone() for p in net.parameters()]
        self.updates = 0

    @torch.no_grad()
    def update(self, net: nn.Module):
        self.updates += 1
        decay = min(EMA_DECAY, (1 + self.updates) / (10 + self.updates))
        for s, p in zip(self.shadow, net.parameters()):
            s.sub_((1 - decay) * (s - p))

    def averaged(self, net: nn.Module) -> nn.Module:
        """A copy of ``net`` with the averaged parameters (buffers, i.e. BN statistics, from ``net``)."""
        out = copy.deepcopy(net)
        with torch.no_grad():
            for s, p in zip(self.shadow, out.parameters()):
                p.copy_(s)
        return out.eval()


def _family(dataset: str | None, image_size: int) -> str:
    return "cifar" if (dataset or "").startswith("cifar") or image_size == 32 and dataset is None else "small"


@torch.no_grad()
def _accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor, device, batch: int = 1000) -> float:
    correct = 0
    for start in range(0, len(y), batch):
        pred = net(x[start:start + batch].to(device) * 2 - 1).argmax(1).cpu()
        correct += int((pred == y[start:start + batch]).sum())
    return correct / len(y)


def select_by_validation(history: list[tuple[float, float]]) -> tuple[int, float]:
    """(epoch, test accuracy) at the best validation accuracy, a tie going to the later epoch."""
    best, chosen = -1.0, (0, float("nan"))
    for epoch, (val, test) in enumerate(history):
        if val >= best:
            best, chosen = val, (epoch, test)
    return chosen


def train_and_select(name: str, x_train, y_train, x_val, y_val, x_test, y_test, *, n_classes: int, family: str,
                     device, epochs: int, sizes: dict, seed: int = 0) -> dict:
    """One classifier: train for ``epochs``, measure the averaged weights on validation and test after every
    epoch, keep the test accuracy of the best validation epoch."""
    s = SETTINGS[family]
    torch.manual_seed(seed)
    net = build_classifier(name, x_train.shape[1], x_train.shape[2], n_classes, **sizes).to(device)
    if s["optimizer"] == "adam":
        opt = torch.optim.Adam(net.parameters(), lr=s["lr"])
    else:
        opt = torch.optim.SGD(net.parameters(), lr=s["lr"], momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=s["step"], gamma=0.2)
    ema, g, history = _EMA(net), torch.Generator().manual_seed(seed), []
    t = time.perf_counter()
    for epoch in range(epochs):
        net.train()
        for idx in torch.randperm(len(y_train), generator=g).split(s["batch_size"]):
            loss = F.cross_entropy(net(x_train[idx].to(device) * 2 - 1), y_train[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            ema.update(net)
        sched.step()
        avg = ema.averaged(net)
        history.append((_accuracy(avg, x_val, y_val, device), _accuracy(avg, x_test, y_test, device)))
        logger.info("%s epoch %d: val %.4f test %.4f", name, epoch, *history[-1])
    epoch, test = select_by_validation(history)
    return {"test_acc_at_best_val": test, "best_epoch": epoch, "history": [list(h) for h in history],
            "train_s": round(time.perf_counter() - t, 1)}


def dpimagebench_scores(x_syn, y_syn, x_test, y_test, *, dataset: str | None = None, n_classes: int | None = None,
                        device: str | None = None, epochs: int | None = None, classifiers=CLASSIFIERS,
                        architectures: dict | None = None, seed: int = 0) -> dict:
    """DPImageBench's accuracy (the module docstring): ``dpimagebench_acc`` (mean over the classifiers),
    ``dpimagebench_acc_std`` and one block per classifier. Images in [0, 1], (n, C, H, W); labels 0..K-1.
    ``epochs`` / ``architectures`` (e.g. ``{"wrn": {"depth": 10, "widen": 1}}``) override the benchmark's
    settings for smoke tests; the result's ``protocol`` block lists what was overridden."""
    x = torch.as_tensor(np.asarray(x_syn), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(y_syn)).long()
    if x.dim() != 4 or len(x) != len(y) or len(y) < 24:
        raise InvalidParameterError(f"the DPImageBench protocol takes (n, C, H, W) images with one label each and "
                                    f"n >= 24; got images of shape {tuple(x.shape)} and {len(y)} labels.")
    unknown = [c for c in classifiers if c not in CLASSIFIERS]
    if unknown:
        raise unknown_name("DPImageBench classifier", unknown[0], CLASSIFIERS)
    family = _family(dataset, x.shape[-1])
    s = SETTINGS[family]
    order = torch.as_tensor(np.random.default_rng(0).permutation(len(y)))
    n_val = len(y) // 12                                  # 5,000 of 60,000 as in the benchmark
    x, y = x[order], y[order]
    xt = torch.as_tensor(np.asarray(x_test), dtype=torch.float32)
    yt = torch.as_tensor(np.asarray(y_test)).long()
    n_classes = n_classes or int(max(int(y.max()), int(yt.max()))) + 1
    device = default_device(device)
    epochs_used = int(epochs or s["epochs"])
    overrides = dict(architectures or {})
    blocks = {}
    for name in classifiers:
        sizes = {**s["architectures"][name], **overrides.get(name, {})}
        blocks[name] = train_and_select(name, x[:-n_val], y[:-n_val], x[-n_val:], y[-n_val:], xt, yt,
                                        n_classes=n_classes, family=family, device=device, epochs=epochs_used,
                                        sizes=sizes, seed=seed)
        blocks[name]["architecture"] = sizes
    accs = [blocks[c]["test_acc_at_best_val"] for c in classifiers]
    return {"dpimagebench_acc": float(np.mean(accs)), "dpimagebench_acc_std": float(np.std(accs)),
            "dpimagebench": blocks,
            "protocol": {"name": "dpimagebench", "source": "2019ChenGong/DPImageBench@565f8d7 evaluation/evaluator.py",
                         "family": family, "selection": "synthetic validation split (the benchmark's syn mode)",
                         "n_train": int(len(y) - n_val), "n_val": int(n_val), "epochs": epochs_used,
                         "faithful": epochs is None and not overrides, "device": str(device)}}
