"""Pretrain an encoder on a PUBLIC image dataset (``mmdsynth pretrain-encoder``).

A classifier of one of the project's encoder architectures is trained on the public dataset's
training split (Adam, cross-entropy, inputs mapped by (x - 0.5) / 0.5 as the perceptual features
map them), its accuracy is measured on that dataset's test split, and it is saved as safetensors
with a JSON spec (architecture, channels, classes, input size, dataset, epochs, test accuracy).
Training is checkpointed after every epoch (weights, optimiser, epoch, shuffling RNG) beside the
output, so an interrupted run resumes bit-for-bit with ``resume=True``; the checkpoint is deleted
when training ends. The data must be public: this step spends no privacy budget.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from .._io import load_checkpoint, remove_checkpoint, restore_optimizer, save_checkpoint
from ..errors import ArtifactError, InvalidParameterError
from ..evaluation.convnet import convnet_accuracy
from ..validation import check_positive
from ..features.encoders import build_encoder, save_encoder
from ..runtime import progress_rate


def _ckpt_paths(out: Path) -> tuple[Path, Path]:
    return out.with_suffix(".ckpt.safetensors"), out.with_suffix(".ckpt.json")


def pretrain_encoder(dataset: str, arch: str, out, *, epochs: int = 5, batch_size: int = 128, lr: float = 1e-3,
                     seed: int = 0, resume: bool = False, device: str = "cpu", progress: bool = True,
                     data_dir=None) -> dict:
    """Train ``arch`` on the public ``dataset`` and save it to ``out`` (.safetensors). Returns its spec."""
    from ..data import load_dataset

    out = _new_output(out, resume=resume)
    check_positive(epochs, "epochs", integer=True)
    check_positive(batch_size, "batch_size", integer=True)
    check_positive(lr, "lr")
    ckpt_t, ckpt_m = _ckpt_paths(out)
    if resume and not ckpt_m.exists():
        raise ArtifactError(f"nothing to resume: no checkpoint {ckpt_m}.")
    if ckpt_m.exists() and not resume:
        raise ArtifactError(f"{ckpt_m} holds an interrupted pretraining run: pass resume=True or remove it.")
    data = load_dataset(dataset, data_dir=data_dir)
    x, y = data.x_train, data.y_train.long()
    torch.manual_seed(seed)
    net = build_encoder(arch, int(x.shape[1]), data.n_classes).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    start = 0
    if resume:
        t, meta = load_checkpoint(ckpt_t, ckpt_m, "encoder pretraining")
        if meta["dataset"] != dataset or meta["arch"] != arch:
            raise ArtifactError(f"the checkpoint is for {meta['arch']} on {meta['dataset']}, not {arch} on {dataset}.")
        net.load_state_dict({k[4:]: v for k, v in t.items() if k.startswith("net.")})
        restore_optimizer(opt, t, meta)
        g.set_state(t["rng"])
        start, epochs, batch_size, lr, seed = meta["epoch"], meta["epochs"], meta["batch_size"], meta["lr"], meta["seed"]
    t0 = time.perf_counter()
    bar = tqdm(total=epochs, initial=start, disable=not progress, desc=f"pretrain {arch} on {dataset}", unit="epoch",
               **progress_rate())
    for epoch in range(start, epochs):
        net.train()
        for idx in torch.randperm(len(y), generator=g).split(batch_size):
            xb = (x[idx].to(device, torch.float32) - 0.5) / 0.5
            loss = nn.functional.cross_entropy(net(xb), y[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        _save_checkpoint(out, net, opt, g, {"epoch": epoch + 1, "epochs": epochs, "dataset": dataset, "arch": arch,
                                            "batch_size": batch_size, "lr": lr, "seed": seed})
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
        bar.update(1)
    bar.close()
    acc = convnet_accuracy(net.eval(), data.x_test, data.y_test)
    spec = {"arch": arch, "in_channels": int(x.shape[1]), "n_classes": data.n_classes,
            "image_size": int(x.shape[-1]), "dataset": dataset, "epochs": epochs, "batch_size": batch_size,
            "lr": lr, "seed": seed, "test_acc": acc, "train_s": round(time.perf_counter() - t0, 1)}
    save_encoder(net.cpu(), spec, out)
    remove_checkpoint(ckpt_t, ckpt_m)
    return spec


def random_encoder(arch: str, out, *, in_channels: int, image_size: int, n_classes: int = 10, seed: int = 0) -> dict:
    """Save ``arch`` at its seeded random initialisation, trained on nothing: public by construction
    (its weights depend on the seed alone), for private data with no public dataset at hand (CIFAR-10
    on a machine without ImageNet). Its spec names no dataset and no accuracy."""
    out = _new_output(out)
    check_positive(in_channels, "in_channels", integer=True)
    check_positive(image_size, "image_size", integer=True)
    torch.manual_seed(seed)
    net = build_encoder(arch, in_channels, n_classes)
    spec = {"arch": arch, "in_channels": in_channels, "n_classes": n_classes, "image_size": image_size,
            "dataset": None, "epochs": 0, "seed": seed, "test_acc": None, "init": "random"}
    save_encoder(net.eval(), spec, out)
    return spec


def _new_output(out, *, resume: bool = False) -> Path:
    """``out`` as a Path: a .safetensors file (the spec goes beside it) that does not exist yet,
    unless an interrupted run is being resumed into it."""
    out = Path(out)
    if out.suffix != ".safetensors":
        raise InvalidParameterError(f"out must end in .safetensors (the spec goes beside it); got {out.name!r}.")
    if out.exists() and not resume:
        raise ArtifactError(f"{out} exists; choose another out=PATH.")
    return out


def _save_checkpoint(out: Path, net, opt, g, meta: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tensors = {f"net.{k}": v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    save_checkpoint(*_ckpt_paths(out), {**tensors, "rng": g.get_state()}, meta, opt)
