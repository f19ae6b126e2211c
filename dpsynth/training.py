"""Training a generator against a release (post-processing: no private data).

The loss is the squared distance between the noisy target embedding and the
mean embedding of a fresh batch of generated samples,
``|| mu_P - (1/B) sum_i phi(g(z_i, y_i)) w(y_i)^T ||_F^2`` with w the one-hot
label (class-conditional) or 1 (unconditional); Adam with a step-wise learning
rate decay (StepLR). Training state is checkpointed as safetensors + JSON
(no pickles), so a run can be resumed exactly, any number of times, without
touching private data or spending privacy budget.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm

from ._io import restore_optimizer, save_checkpoint
from .errors import ArtifactError
from .features.base import FeatureMap
from .validation import check_positive

logger = logging.getLogger(__name__)

CKPT_TENSORS = "checkpoint.safetensors"
CKPT_META = "checkpoint.json"


@dataclass
class TrainConfig:
    iterations: int = 2000
    batch_size: int = 5000
    lr: float = 0.01
    lr_decay: float = 0.9       # StepLR gamma
    lr_step: int = 1500         # StepLR step size, in iterations (the DP-NTK authors' code: 1,500)
    checkpoint_every: int = 200
    seed: int = 0               # generator codes and labels (not privacy noise)
    progress: bool = False

    def validate(self) -> "TrainConfig":
        check_positive(self.iterations, "iterations", integer=True)
        check_positive(self.batch_size, "batch_size", integer=True)
        check_positive(self.lr, "lr")
        check_positive(self.lr_decay, "lr_decay")
        check_positive(self.lr_step, "lr_step", integer=True)
        check_positive(self.checkpoint_every, "checkpoint_every", integer=True)
        return self


def default_device(device: str | None = None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def embedding_loss(feature_map: FeatureMap, target: torch.Tensor, x: torch.Tensor,
                   labels: torch.Tensor | None, n_classes: int | None,
                   proportions: torch.Tensor | None = None) -> torch.Tensor:
    """||target - mu_Q||^2 for generated ``x``; ``target`` is (D, C), or (D, 1) unconditional.

    With ``proportions`` (the labels' sampling distribution), generated sample i is
    weighted 1 / (B p_{y_i}) so that column c estimates the class-c mean embedding
    (DP-MERF's imbalanced-data weighting); the target must then hold class means too.
    """
    b = x.shape[0]
    if labels is None:
        weights = torch.full((b, 1), 1.0 / b, device=x.device)
    else:
        labels = labels.to(x.device)
        weights = torch.nn.functional.one_hot(labels, n_classes).to(x.dtype) / b
        if proportions is not None:
            weights = weights / proportions.to(device=x.device, dtype=x.dtype)[labels, None]
    return feature_map.mmd_loss(target, x, weights)


class _State:
    """Generator, optimiser, scheduler and sampling RNG: everything a resume needs."""

    def __init__(self, generator: torch.nn.Module, config: TrainConfig):
        self.generator = generator
        self.optimizer = torch.optim.Adam(generator.parameters(), lr=config.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=config.lr_step,
                                                         gamma=config.lr_decay)
        self.rng = torch.Generator().manual_seed(config.seed)
        self.iteration = 0
        self.losses: list[float] = []

    def save(self, directory: Path, config: TrainConfig) -> None:
        tensors = {f"generator.{k}": v.detach().cpu().contiguous() for k, v in self.generator.state_dict().items()}
        tensors["rng"] = self.rng.get_state()
        spec = self.generator.spec() if hasattr(self.generator, "spec") else None
        meta = {"iteration": self.iteration, "losses": self.losses, "config": asdict(config), "generator_spec": spec,
                "scheduler": self.scheduler.state_dict()}
        save_checkpoint(directory / CKPT_TENSORS, directory / CKPT_META, tensors, meta, self.optimizer,
                        prefix="optimizer.")

    def load(self, directory: Path) -> None:
        try:
            meta = json.loads((directory / CKPT_META).read_text())
            tensors = load_file(str(directory / CKPT_TENSORS))
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"cannot read the training checkpoint in {directory}: {exc}. "
                                f"Delete {CKPT_META} to restart training from the saved release.") from exc
        gen_state = {k[len("generator."):]: v for k, v in tensors.items() if k.startswith("generator.")}
        self.generator.load_state_dict(gen_state)
        restore_optimizer(self.optimizer, tensors, meta, prefix="optimizer.")
        self.scheduler.load_state_dict(meta["scheduler"])
        self.rng.set_state(tensors["rng"])
        self.iteration, self.losses = int(meta["iteration"]), list(meta["losses"])


def has_checkpoint(directory) -> bool:
    return directory is not None and (Path(directory) / CKPT_META).exists()


def checkpoint_generator_spec(directory) -> dict | None:
    """The spec of the generator a checkpoint holds (None: written before specs were saved, or
    unreadable; loading the checkpoint itself reports the latter)."""
    try:
        return json.loads((Path(directory) / CKPT_META).read_text()).get("generator_spec")
    except (OSError, ValueError):
        return None


def train_generator(generator: torch.nn.Module, feature_map: FeatureMap, target: torch.Tensor,
                    config: TrainConfig, *, conditional: bool = True, label_proportions: torch.Tensor | None = None,
                    checkpoint_dir=None, resume: bool = False, device: str | None = None) -> list[float]:
    """Fit ``generator`` so its samples' mean embedding matches ``target`` (a release).

    ``label_proportions``: draw generated labels from these (noisy, released) class
    proportions and match per-class means: ``target[:, c] / p_c`` against the weighted
    generated embedding (see :func:`embedding_loss`). Default: uniform labels, matching
    ``target`` as is (the papers' image setting).

    With ``checkpoint_dir``, state is saved every ``checkpoint_every`` iterations and at
    the end; ``resume=True`` continues from the last checkpoint there. Returns the loss
    of every iteration (including those before a resume).
    """
    config.validate()
    dev = default_device(device)
    generator.to(dev).train()
    feature_map.to(dev)
    n_classes = getattr(generator, "n_classes", None)
    tgt = target.to(device=dev, dtype=torch.float32)
    tgt = tgt if tgt.dim() == 2 else tgt[:, None]
    props = None
    if label_proportions is not None and conditional:
        props = label_proportions.to(torch.float64)
        props = (props / props.sum()).to(device=dev, dtype=torch.float32)
        tgt = tgt / props[None, :]  # class sums / m  ->  class means
    state = _State(generator, config)
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if ckpt is not None:
        ckpt.mkdir(parents=True, exist_ok=True)
        if resume and has_checkpoint(ckpt):
            state.load(ckpt)
            logger.info("resumed from iteration %d (%s)", state.iteration, ckpt)
    bar = tqdm(total=config.iterations, initial=state.iteration, disable=not config.progress,
               desc="training generator", unit="it")
    while state.iteration < config.iterations:
        labels = generator.draw_labels(config.batch_size, state.rng, label_proportions)
        x = generator.generate(labels, state.rng)
        loss = embedding_loss(feature_map, tgt, x, labels if conditional else None, n_classes, props)
        state.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        state.optimizer.step()
        state.scheduler.step()
        state.iteration += 1
        state.losses.append(float(loss.detach()))
        bar.update(1)
        bar.set_postfix(loss=f"{state.losses[-1]:.4g}")
        if ckpt is not None and (state.iteration % config.checkpoint_every == 0
                                 or state.iteration == config.iterations):
            state.save(ckpt, config)
    bar.close()
    generator.eval()
    return state.losses
