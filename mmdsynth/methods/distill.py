"""Distillation from a release: a small labelled set whose per-class feature means match a release.

NDPDC-style DP distribution matching is what an mmdsynth release already is: the noisy class-conditional
mean embedding of the private data under a feature map. :func:`distill_release` learns ``K`` records per
class so that their weighted feature sum matches it, with the loss the generators train on
(:func:`~mmdsynth.training.embedding_loss`: column c of the learned sum is ``p_c`` times class c's mean, ``p``
the released class proportions, uniform when the release holds none). It reads only the release: no private
data, no budget; the set carries the release's ledger and the sha256 of its tensors, and it can be re-run with
any ``K`` or settings for free.

Records are learned through bounded heads, so they stay in the data's domain: images through a sigmoid (values
in [0, 1]), table rows through :func:`~mmdsynth.generators.table.table_heads` (numeric columns in [0, 1] of their
bounds, a softmax per categorical block), decoded with the most likely category. The starting points are drawn
from ``seed`` (public randomness); nothing of the data is used to start.

On disk (:meth:`DistilledSet.save`): images as ``.npz`` with ``x`` (float32 in [0, 1], the release's record
shape), ``y`` (int64) and ``mmdsynth`` (a JSON string: format, ledger, how it was made); tables as ``.csv`` or
``.parquet`` beside ``<stem>.ledger.json``.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from .._io import LEDGER_SUFFIX, atomic_write   # the ledger beside a table set
from .._legacy import OLD_NAME, current_tag
from .._version import __version__
from ..errors import ArtifactError, InvalidParameterError
from ..features.base import build_feature_map
from ..generators.table import table_heads
from ..privacy.ledger import Ledger
from ..release import Release
from ..runtime import default_device
from ..training import batch_weights
from ..validation import check_positive
from .tables import encoder_of

FORMAT = "mmdsynth-distilled-set"
META_KEY = "mmdsynth"                  # the .npz array holding the set's JSON (ledger, settings)
#: defaults, measured on MNIST (benchmarks/distill.py, RESULTS.md)
ITERATIONS, LR = 2000, 0.05


@dataclass
class DistilledSet:
    """A labelled set distilled from a release: ``x`` (images, float32 in [0, 1]) or a DataFrame of table
    rows (label column included), ``y`` (class indices), the release's ``ledger``, and ``info`` (how it was
    made: release checksum, method, dataset, records per class, iterations, losses)."""

    x: np.ndarray | pd.DataFrame
    y: np.ndarray
    ledger: Ledger
    info: dict = field(default_factory=dict)

    @property
    def is_table(self) -> bool:
        return isinstance(self.x, pd.DataFrame)

    def meta(self) -> dict:
        return {"format": FORMAT, "library_version": __version__, "ledger": self.ledger.to_list(), **self.info}

    def save(self, path, *, force: bool = False) -> Path:
        """Write the set: ``.npz`` (images) or ``.csv``/``.parquet`` plus ``<stem>.ledger.json`` (tables). An
        existing file is refused unless ``force``; nothing half-written is left behind."""
        path = Path(path)
        allowed = (".csv", ".parquet") if self.is_table else (".npz",)
        if path.suffix not in allowed:
            raise InvalidParameterError(f"a distilled {'table' if self.is_table else 'image'} set is written as "
                                        f"{' or '.join(allowed)}; got {path.name!r}.")
        ledger_path = path.with_name(path.stem + LEDGER_SUFFIX)
        for p in (path, ledger_path) if self.is_table else (path,):
            if p.exists() and not force:
                raise InvalidParameterError(f"{p} exists; give a new file name, or force=True (--force) to overwrite it.")
        text = json.dumps(self.meta(), indent=1)
        if not self.is_table:
            with atomic_write(path) as tmp, open(tmp, "wb") as fh:
                np.savez_compressed(fh, x=self.x.astype(np.float32), y=self.y.astype(np.int64),
                                    **{META_KEY: np.array(text)})
            return path
        with atomic_write(ledger_path) as tmp_ledger, atomic_write(path) as tmp:
            self.x.to_csv(tmp, index=False) if path.suffix == ".csv" else self.x.to_parquet(tmp, index=False)
            tmp_ledger.write_text(text)
        return path

    @classmethod
    def load(cls, path) -> "DistilledSet":
        """An image set written by :meth:`save` (``.npz``; ``y`` required, its ledger from the ``mmdsynth`` entry)."""
        path = Path(path)
        if path.suffix != ".npz" or not path.exists():
            raise ArtifactError(f"no distilled image set at {path}: expected an .npz written by `mmdsynth distill`.")
        with np.load(path, allow_pickle=False) as z:
            key = META_KEY if META_KEY in z else OLD_NAME      # sets written by 0.1 keep their JSON under its old name
            if key not in z or "x" not in z or "y" not in z:
                raise ArtifactError(f"{path} holds {sorted(z.files)}, not a distilled set (x, y and {META_KEY!r}); "
                                    f"write one with `mmdsynth distill`.")
            x, y, meta = z["x"], z["y"], json.loads(str(z[key]))
        if current_tag(meta.get("format"), path) != FORMAT:
            raise ArtifactError(f"{path} is not an mmdsynth distilled set (format={meta.get('format')!r}).")
        info = {k: v for k, v in meta.items() if k not in ("format", "library_version", "ledger")}
        return cls(x, y, Ledger.from_list(meta["ledger"]), info)


def release_digest(release: Release) -> str:
    """sha256 over the release's tensors (names, dtypes, shapes, bytes): what a distilled set names its release by."""
    h = hashlib.sha256()
    for name in sorted(release.tensors):
        t = release.tensors[name].detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def _check_release(release: Release) -> int:
    """The release's number of classes, if it can be distilled into a labelled set."""
    if "embedding" not in release.tensors:
        raise InvalidParameterError(
            "this release holds no mean embedding (a DP-KIP run is already a learned set: use `mmdsynth sample`); "
            "distill from a DP-NTK, DP-MERF, DP-HP or DP-MEPF release.")
    n_classes = release.dataset.get("n_classes")
    target = release.tensors["embedding"]
    if not n_classes or int(n_classes) < 2 or target.ndim != 2 or target.shape[1] != int(n_classes):
        raise InvalidParameterError(
            "this release is unconditional (one embedding for all records, no per-class means), so a labelled set "
            "cannot be distilled from it: fit with conditional=True (the default) and n_classes given.")
    return int(n_classes)


def smooth_images(u: torch.Tensor) -> torch.Tensor:
    """(n, c, h, w) blurred by [1, 2, 1] / 4 along each axis, channel by channel, edges replicated (a fixed public
    map: distillation's image parameterisation when ``smooth=True``)."""
    c = u.shape[1]
    k = torch.tensor([0.25, 0.5, 0.25], dtype=u.dtype, device=u.device)
    u = F.conv2d(F.pad(u, (0, 0, 1, 1), mode="replicate"), k.view(1, 1, 3, 1).expand(c, 1, 3, 1), groups=c)
    return F.conv2d(F.pad(u, (1, 1, 0, 0), mode="replicate"), k.view(1, 1, 1, 3).expand(c, 1, 1, 3), groups=c)


def smooth_default(shape) -> bool:
    """``smooth="auto"``: blur the learned images where they are in colour (a record shape of three channels; public).
    Measured with 32 random ConvNets, 10 images per class (``benchmarks/RESULTS.md``, "Distillation"): CIFAR-10 gains
    on both protocols and both budgets (dc 39.6 +- 0.5 against 36.0 at eps 1, 46.1 +- 0.3 against 39.7 at eps 10);
    MNIST and Fashion-MNIST lose on the dc protocol (92.0 against 93.6, 77.6 against 78.2 at eps 1)."""
    return len(shape) == 3 and int(shape[0]) == 3


def distill_release(release: Release, per_class: int, *, iterations: int = ITERATIONS, lr: float = LR,
                    seed: int = 0, blocks_per_step: int | str | None = "auto", device: str | None = None,
                    progress: bool = False, smooth: bool | str = "auto") -> DistilledSet:
    """Learn ``per_class`` records per class matching ``release``'s class-conditional mean embedding
    (post-processing: no private data, no budget; see the module docstring). Adam at ``lr`` on the records'
    unconstrained parameters for ``iterations`` steps, the learning rate x0.1 for the last quarter; ``seed``
    draws the starting points (public). ``blocks_per_step``: each step matches only that many of the feature
    map's independent blocks (its ``n_blocks``: dp-randconv's networks), drawn afresh from ``seed`` (public) and
    scaled to an unbiased estimate of the whole loss: DM's stochastic steps, ``n_blocks / blocks_per_step`` times
    cheaper. ``"auto"`` (the default): the map's ``default_blocks_per_step`` (2 of dp-randconv's networks, the
    measured recipe; every block for other maps). None (or at least ``n_blocks``) matches all blocks every step. ``smooth`` (images only): each image
    is its parameters blurred by the fixed [1, 2, 1] / 4 kernel along each axis before the sigmoid
    (:func:`smooth_images`), so Adam's steps, which move every pixel by about the learning rate whatever its
    gradient, cannot leave pixel-level noise (CIFAR-10 at eps 1: dc protocol 39.6 over 3 seeds, against 36.0
    without it; ``benchmarks/RESULTS.md``). ``"auto"`` (the default): on for colour images (:func:`smooth_default`:
    three channels, from the release's public record shape), off otherwise, where it lowered the score on MNIST and
    Fashion-MNIST. Returns a :class:`DistilledSet` carrying the release's ledger."""
    n_classes = _check_release(release)
    per_class = int(check_positive(per_class, "per_class (images per class)", integer=True))
    iterations = int(check_positive(iterations, "iterations", integer=True))
    check_positive(lr, "lr")
    auto = blocks_per_step == "auto"
    if blocks_per_step is not None and not auto:
        blocks_per_step = int(check_positive(blocks_per_step, "blocks_per_step", integer=True))
    encoder = encoder_of(release)
    shape = tuple(int(s) for s in release.dataset["record_shape"])
    if smooth == "auto":
        smooth = encoder is None and smooth_default(shape)
    elif isinstance(smooth, (bool, np.bool_)):
        smooth = bool(smooth)
    else:
        raise InvalidParameterError(f"smooth must be True, False or 'auto' (on for colour images); got {smooth!r}.")
    if smooth and (encoder is not None or len(shape) != 3):
        raise InvalidParameterError(f"smooth blurs images (channels, height, width); this release's records have "
                                    f"shape {list(shape)}: use smooth=False.")
    dev = default_device(device)
    fmap = build_feature_map(release.feature_spec).to(dev)
    n_blocks = int(fmap.n_blocks)
    if auto:
        blocks_per_step = fmap.default_blocks_per_step
    stochastic = blocks_per_step is not None and blocks_per_step < n_blocks
    target = release.tensors["embedding"].to(device=dev, dtype=torch.float32)
    proportions = release.tensors.get("class_proportions")
    if proportions is not None:                   # as the generators use them: floored, renormalised
        proportions = proportions.double().clamp(min=1e-3)
        proportions = proportions / proportions.sum()
    labels = torch.arange(n_classes).repeat_interleave(per_class)
    weights = batch_weights(labels, n_classes, len(labels), dev, proportions=proportions)
    rng = torch.Generator().manual_seed(int(seed))
    block_rng = torch.Generator().manual_seed(int(seed) + 1)
    params = torch.randn((len(labels),) + shape, generator=rng).to(dev).requires_grad_(True)
    heads = ((lambda u: table_heads(u, encoder.n_numeric, encoder.category_sizes)) if encoder is not None
             else (lambda u: torch.sigmoid(smooth_images(u))) if smooth else torch.sigmoid)
    opt = torch.optim.Adam([params], lr=lr)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [max(1, math.ceil(0.75 * iterations))], gamma=0.1)
    losses = []

    def whole_loss() -> float:                    # a stochastic step sees a subset: both ends report the whole loss
        with torch.no_grad():
            return fmap.mmd_loss(target, heads(params), weights).item()

    start = whole_loss() if stochastic else None
    for it in tqdm(range(iterations), disable=not progress, desc="distill", unit="step"):
        fmap.at_iteration(it, iterations)
        opt.zero_grad(set_to_none=True)
        if stochastic:
            blocks = torch.randperm(n_blocks, generator=block_rng)[:blocks_per_step].tolist()
            loss = fmap.block_loss(target, heads(params), weights, blocks)
        else:
            loss = fmap.mmd_loss(target, heads(params), weights)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    if stochastic:
        losses[0], losses[-1] = start, whole_loss()
    with torch.no_grad():
        x = heads(params).cpu()
    info = {"release_sha256": release_digest(release), "method": release.dataset.get("method"),
            "dataset": release.dataset.get("name", ""), "per_class": per_class, "n_classes": n_classes,
            "record_shape": list(shape), "iterations": iterations, "lr": lr, "seed": int(seed),
            "blocks_per_step": blocks_per_step if stochastic else None, "smooth": bool(smooth),
            "loss_start": losses[0], "loss_final": losses[-1]}
    if encoder is not None:
        rows = encoder.decode(x.double().numpy(), labels.numpy(), rng=np.random.default_rng(seed), categorical="argmax")
        return DistilledSet(rows, labels.numpy(), release.ledger, info)
    return DistilledSet(x.numpy().astype(np.float32), labels.numpy(), release.ledger, info)
