"""Training a generator against a release (post-processing: no private data).

The loss is the squared distance between the noisy target embedding and the
mean embedding of a fresh batch of generated samples,
``|| mu_P - (1/B) sum_i phi(g(z_i, y_i)) w(y_i)^T ||_F^2`` with w the one-hot
label (class-conditional) or 1 (unconditional); Adam with a step-wise learning
rate decay (StepLR). ``loss="mavg"`` is DP-MEPF's moving-average variant: a
learned running estimate m of ``mu_P - mu_Q`` (Adam at ``mavg_lr``, beta1 0.5, on
the squared error to the current difference) replaces the difference in the
gradient, so the generator descends ``-<m, mu_Q>``; the reported loss stays
``||mu_P - mu_Q||^2``.

Checkpoint selection (any method): a :class:`Selection` scores the generator every
``every`` iterations against a released proxy (DP early stopping) and keeps the
best-scoring weights. Training state, with the selection, is checkpointed as
safetensors + JSON (no pickles), so a run can be resumed exactly, any number of
times, without touching private data or spending privacy budget.
"""
from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ._io import load_checkpoint, optimizer_tensors, restore_optimizer, save_checkpoint
from .early_stopping import proxy_distance
from .errors import InvalidParameterError, TrainingInterrupted, unknown_name  # noqa: F401 (re-exported)
from .features.base import FeatureMap
from .runtime import default_device, native_bfloat16, progress_rate, subnormals_flushed  # noqa: F401  (re-exported)
from .validation import check_positive

logger = logging.getLogger(__name__)

CKPT_TENSORS = "checkpoint.safetensors"
CKPT_META = "checkpoint.json"
LOSSES = ("direct", "mavg")
#: the arithmetic of the training step (never of a release): "float32", "bfloat16" autocast of the generator and
#: the feature map's products (float32 accumulation inside each product, float32 weights, loss and optimiser), or
#: "auto": bfloat16 where the device computes it in hardware (:func:`~mmdsynth.runtime.native_bfloat16`), else float32
PRECISIONS = ("float32", "bfloat16", "auto")


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
    loss: str = "direct"        # "direct": ||mu_P - mu_Q||^2; "mavg": DP-MEPF's moving-average variant
    mavg_lr: float = 1e-3       # learning rate of the moving average (Adam, beta1 0.5)
    beta1: float = 0.9          # the generator's Adam beta1 (the DP-MEPF authors: 0.5)
    blocks_per_step: int | None = None   # match this many of the map's blocks a step (DM's stochastic steps); None: all
    precision: str = "float32"  # the step's arithmetic (PRECISIONS); training only, the release is never touched

    def validate(self) -> "TrainConfig":
        check_positive(self.iterations, "iterations", integer=True)
        check_positive(self.batch_size, "batch_size", integer=True)
        check_positive(self.lr, "lr")
        check_positive(self.lr_decay, "lr_decay")
        check_positive(self.lr_step, "lr_step", integer=True)
        check_positive(self.checkpoint_every, "checkpoint_every", integer=True)
        check_positive(self.mavg_lr, "mavg_lr")
        if not 0 <= self.beta1 < 1:
            raise InvalidParameterError(f"beta1 (the generator's Adam beta1) must lie in [0, 1); got {self.beta1!r}.")
        if self.loss not in LOSSES:
            raise unknown_name("generator loss", str(self.loss), LOSSES)
        if self.precision not in PRECISIONS:
            raise unknown_name("training precision", str(self.precision), PRECISIONS)
        if self.blocks_per_step is not None:
            check_positive(self.blocks_per_step, "blocks_per_step", integer=True)
            if self.loss != "direct":
                raise InvalidParameterError("blocks_per_step matches a subset of the blocks with the direct loss; "
                                            "the moving average (loss='mavg') needs every block: leave it out.")
        return self


def batch_weights(labels: torch.Tensor | None, n_classes: int | None, b: int, device, dtype=torch.float32,
                  proportions: torch.Tensor | None = None) -> torch.Tensor:
    """(B, K) weights w_i of the generated embedding sum_i phi(x_i) w_i^T: 1/B (unconditional),
    the one-hot label / B, or with ``proportions`` (the released class proportions p) p_c / n_c for
    the n_c generated samples of class c in the batch, so that column c is p_c times the batch's
    class-c mean and matches the released class-c sum / m as it is.

    The loss is then sum_c ||mu_c - p_c mean_c||^2 = sum_c p_c^2 ||mu_c / p_c - mean_c||^2: every
    class's mean weighted by the inverse of its target's noise variance (the noise of mu_c / p_c
    grows as 1 / p_c). Dividing the noisy target by p_c instead (DP-MERF's weighting) multiplied a
    class whose noisy count is within the noise by up to 1e6 and let it dominate the loss (issue 32:
    5.2e4 against 82 without it)."""
    if labels is None:
        return torch.full((b, 1), 1.0 / b, device=device, dtype=dtype)
    labels = labels.to(device)
    one_hot = torch.nn.functional.one_hot(labels, n_classes).to(dtype)
    if proportions is None:
        return one_hot / b
    counts = one_hot.sum(0).clamp_min(1.0)
    return one_hot * (proportions.to(device=device, dtype=dtype) / counts)[None, :]


def embedding_loss(feature_map: FeatureMap, target: torch.Tensor, x: torch.Tensor,
                   labels: torch.Tensor | None, n_classes: int | None,
                   proportions: torch.Tensor | None = None) -> torch.Tensor:
    """||target - mu_Q||^2 for generated ``x``; ``target`` is (D, C), or (D, 1) unconditional
    (weights: :func:`batch_weights`)."""
    weights = batch_weights(labels, n_classes, x.shape[0], x.device, _weights_dtype(x), proportions)
    return feature_map.mmd_loss(target, x, weights)


def _weights_dtype(x: torch.Tensor) -> torch.dtype:
    """The weights' dtype for generated ``x``: x's, but never below float32 (1/B in bfloat16 would round)."""
    return torch.promote_types(x.dtype, torch.float32)


class MovingAverage:
    """DP-MEPF's moving-average loss: m tracks mu_P - mu_Q (Adam, beta1 0.5, on ||m - (mu_P - mu_Q)||^2
    averaged over entries); the generator's surrogate loss -<m, mu_Q> has gradient -m in mu_Q."""

    def __init__(self, target: torch.Tensor, lr: float):
        self.m = torch.zeros_like(target, requires_grad=True)
        self.optimizer = torch.optim.Adam([self.m], lr=lr, betas=(0.5, 0.999))

    def loss(self, mu_q: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, float]:
        """(surrogate loss for the generator, ||target - mu_Q||^2 for the log), from the generated embedding
        ``mu_q`` (differentiable in the generator)."""
        mu_q = mu_q.to(target.dtype)
        diff = target - mu_q.detach()
        self.optimizer.zero_grad(set_to_none=True)
        ((self.m - diff) ** 2).mean().backward()
        self.optimizer.step()
        return -(self.m.detach() * mu_q).sum(), float((diff ** 2).sum())


class Selection:
    """Checkpoint selection by a released proxy (DP early stopping): every ``every`` iterations and
    at the end, the generator is scored by :func:`~mmdsynth.early_stopping.proxy_distance` on
    ``n_samples`` samples; the lowest score's weights are kept (``best_state``). Post-processing."""

    def __init__(self, proxy_map: FeatureMap, proxy: torch.Tensor, every: int = 1000, n_samples: int = 2000,
                 seed: int = 0):
        self.proxy_map, self.proxy = proxy_map, proxy
        self.every = int(check_positive(every, "select_every", integer=True))
        self.n_samples = int(check_positive(n_samples, "select_samples", integer=True))
        self.seed = seed
        self.scores: list[list[float]] = []         # [iteration, score]
        self.best_state: dict | None = None
        self.best_iteration: int | None = None

    def score(self, generator, iteration: int) -> float:
        rng = torch.Generator().manual_seed(self.seed)      # the same codes for every checkpoint
        value = proxy_distance(self.proxy_map, self.proxy, generator, self.n_samples, rng)
        self.scores.append([iteration, value])
        if self.best_iteration is None or value < min(s for i, s in self.scores[:-1]):
            self.best_iteration = iteration
            self.best_state = {k: v.detach().cpu().clone() for k, v in generator.state_dict().items()}
        return value

    def to_dict(self) -> dict:
        return {"every": self.every, "n_samples": self.n_samples, "scores": self.scores,
                "best_iteration": self.best_iteration}

    def restore(self, meta: dict, tensors: dict) -> None:
        self.scores = [list(s) for s in meta.get("scores", [])]
        self.best_iteration = meta.get("best_iteration")
        best = {k[len("best."):]: v for k, v in tensors.items() if k.startswith("best.")}
        self.best_state = best or None


class _State:
    """Generator, optimiser, scheduler, sampling RNG, moving average and selection: everything a
    resume needs."""

    def __init__(self, generator: torch.nn.Module, config: TrainConfig, target: torch.Tensor,
                 selection: Selection | None = None):
        self.generator = generator
        self.optimizer = torch.optim.Adam(generator.parameters(), lr=config.lr, betas=(config.beta1, 0.999))
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=config.lr_step,
                                                         gamma=config.lr_decay)
        self.rng = torch.Generator().manual_seed(config.seed)
        self.mavg = MovingAverage(target, config.mavg_lr) if config.loss == "mavg" else None
        self.selection = selection
        self.iteration = 0
        self.losses: list[float] = []

    def save(self, directory: Path, config: TrainConfig) -> None:
        tensors = {f"generator.{k}": v.detach().cpu().contiguous() for k, v in self.generator.state_dict().items()}
        tensors["rng"] = self.rng.get_state()
        spec = self.generator.spec() if hasattr(self.generator, "spec") else None
        meta = {"iteration": self.iteration, "losses": self.losses, "config": asdict(config), "generator_spec": spec,
                "scheduler": self.scheduler.state_dict()}
        if self.mavg is not None:
            tensors["mavg.m"] = self.mavg.m.detach().cpu().contiguous()
            opt_tensors, meta["mavg_param_groups"] = optimizer_tensors(self.mavg.optimizer, "mavg_opt.")
            tensors.update(opt_tensors)
        if self.selection is not None:
            meta["selection"] = self.selection.to_dict()
            tensors.update({f"best.{k}": v.contiguous() for k, v in (self.selection.best_state or {}).items()})
        save_checkpoint(directory / CKPT_TENSORS, directory / CKPT_META, tensors, meta, self.optimizer,
                        prefix="optimizer.")

    def load(self, directory: Path) -> None:
        tensors, meta = load_checkpoint(directory / CKPT_TENSORS, directory / CKPT_META, "training")
        gen_state = {k[len("generator."):]: v for k, v in tensors.items() if k.startswith("generator.")}
        self.generator.load_state_dict(gen_state)
        restore_optimizer(self.optimizer, tensors, meta, prefix="optimizer.")
        self.scheduler.load_state_dict(meta["scheduler"])
        self.rng.set_state(tensors["rng"])
        self.iteration, self.losses = int(meta["iteration"]), list(meta["losses"])
        if self.mavg is not None and "mavg.m" in tensors:
            with torch.no_grad():
                self.mavg.m.copy_(tensors["mavg.m"].to(self.mavg.m.device))
            restore_optimizer(self.mavg.optimizer, tensors, {"param_groups": meta["mavg_param_groups"]},
                              prefix="mavg_opt.")
        if self.selection is not None:
            self.selection.restore(meta.get("selection", {}), tensors)


def step_dtype(precision: str, device) -> str:
    """The arithmetic ``precision`` means on ``device``: "auto" is "bfloat16" where the device computes bfloat16 in
    hardware (:func:`~mmdsynth.runtime.native_bfloat16`) and "float32" elsewhere; the others are themselves."""
    if precision == "auto":
        return "bfloat16" if native_bfloat16(device) else "float32"
    return precision


def step_precision(config: TrainConfig, device: torch.device):
    """The context the step's forward pass runs in: bfloat16 autocast on ``device``'s type when ``precision`` means
    bfloat16 there (:func:`step_dtype`; torch refuses a device type it cannot autocast), else nothing. Only the
    generator's and the feature map's products change precision; the loss is formed in float32 (the target is
    float32) and the backward pass and Adam run on float32 parameters."""
    if step_dtype(config.precision, device) == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def has_checkpoint(directory) -> bool:
    return directory is not None and (Path(directory) / CKPT_META).exists()


def checkpoint_generator_spec(directory) -> dict | None:
    """The spec of the generator a checkpoint holds (None: written before specs were saved, or
    unreadable; loading the checkpoint itself reports the latter)."""
    try:
        return json.loads((Path(directory) / CKPT_META).read_text()).get("generator_spec")
    except (OSError, ValueError):
        return None


def checkpoint_iteration(directory) -> int | None:
    """The iteration a checkpoint was saved at (None: no readable checkpoint)."""
    try:
        return int(json.loads((Path(directory) / CKPT_META).read_text())["iteration"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def train_generator(generator: torch.nn.Module, feature_map: FeatureMap, target: torch.Tensor,
                    config: TrainConfig, *, conditional: bool = True, label_proportions: torch.Tensor | None = None,
                    checkpoint_dir=None, resume: bool = False, device: str | None = None,
                    selection: Selection | None = None) -> list[float]:
    """Fit ``generator`` so its samples' mean embedding matches ``target`` (a release).

    ``label_proportions``: draw generated labels from these (noisy, released) class
    proportions and match the released class sums with p_c times each class's generated mean
    (:func:`batch_weights`: inverse-variance weighting of the classes). Default: uniform labels,
    matching ``target`` as is (the papers' image setting).

    ``selection``: score checkpoints against a released proxy; afterwards
    ``selection.best_state`` holds the best weights (the generator keeps the final ones).

    With ``checkpoint_dir``, state is saved every ``checkpoint_every`` iterations and at
    the end; ``resume=True`` continues from the last checkpoint there. Returns the loss
    of every iteration (including those before a resume).
    """
    config.validate()
    dev = default_device(device)
    generator.to(dev).train()
    feature_map.to(dev)
    if selection is not None:
        selection.proxy_map.to(dev)
    n_classes = getattr(generator, "n_classes", None)
    tgt = target.to(device=dev, dtype=torch.float32)
    tgt = tgt if tgt.dim() == 2 else tgt[:, None]
    props = None
    if label_proportions is not None and conditional:
        props = label_proportions.to(torch.float64)
        props = (props / props.sum()).to(device=dev, dtype=torch.float32)
    n_blocks = int(feature_map.n_blocks)
    stochastic = config.blocks_per_step is not None and config.blocks_per_step < n_blocks
    state = _State(generator, config, tgt, selection)
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if ckpt is not None:
        ckpt.mkdir(parents=True, exist_ok=True)
        if resume and has_checkpoint(ckpt):
            state.load(ckpt)
            logger.info("resumed from iteration %d (%s)", state.iteration, ckpt)
    bar = tqdm(total=config.iterations, initial=state.iteration, disable=not config.progress,
               desc="training generator", unit="it", **progress_rate())
    flush = FLUSH_DENORMALS and not subnormals_flushed() and torch.set_flush_denormal(True)
    precision = step_precision(config, torch.device(dev))
    try:
        while state.iteration < config.iterations:
            labels = generator.draw_labels(config.batch_size, state.rng, label_proportions)
            feature_map.at_iteration(state.iteration, config.iterations)
            with precision:
                x = generator.generate(labels, state.rng)
                if state.mavg is None and not stochastic:
                    loss = embedding_loss(feature_map, tgt, x, labels if conditional else None, n_classes, props)
                else:
                    weights = batch_weights(labels if conditional else None, n_classes, x.shape[0], dev,
                                            _weights_dtype(x), props)
                    if stochastic:         # a public random subset of the blocks, scaled to the whole loss
                        blocks = torch.randperm(n_blocks, generator=state.rng)[:config.blocks_per_step].tolist()
                        loss = feature_map.block_loss(tgt, x, weights, blocks)
                    else:
                        mu_q = feature_map.weighted_sum(x, weights)
            if state.mavg is not None:     # never with stochastic blocks (TrainConfig.validate)
                loss, value = state.mavg.loss(mu_q, tgt)
            else:
                value = loss.detach()
            state.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            state.optimizer.step()
            state.scheduler.step()
            state.iteration += 1
            state.losses.append(float(value))
            bar.update(1)
            bar.set_postfix(loss=f"{state.losses[-1]:.4g}", refresh=False)
            last = state.iteration == config.iterations
            if selection is not None and (state.iteration % selection.every == 0 or last):
                selection.score(generator, state.iteration)
            if ckpt is not None and (state.iteration % config.checkpoint_every == 0 or last):
                state.save(ckpt, config)
    except KeyboardInterrupt:
        bar.close()
        if ckpt is not None:
            state.save(ckpt, config)
        raise TrainingInterrupted(state.iteration, ckpt) from None
    finally:
        if flush:
            torch.set_flush_denormal(False)
    bar.close()
    generator.eval()
    return state.losses


#: Training reads only a release (post-processing), and :func:`train_generator` runs with subnormal floats flushed to
#: zero (``torch.set_flush_denormal``; a mode that was off comes back after). As a generator trains, some of its
#: activations and their e-NTK gradients fall below float32's normal range, and on some x86 CPUs each operation on a
#: subnormal takes a slow path: full MNIST DP-NTK went from 0.5 to 1.2 s an iteration after its first few dozen
#: (2 threads; benchmarks/log/2026-11-27.md#subnormals). The mode is per thread: the calling thread flushes, while
#: the intra-op worker threads keep the mode they were created in. ``mmdsynth`` commands therefore flush in the whole
#: process from the start (:func:`mmdsynth.runtime.flush_subnormals`), and a Python user may call it first thing.
#: Values below 1.2e-38 become 0: nothing the loss can see.
FLUSH_DENORMALS = True

#: the loss has converged when its mean moved by less than this over the last tenth of training
CONVERGED_CHANGE = 0.05


def loss_trend(losses: list[float]) -> dict:
    """Relative change of the loss over the last 10 % of iterations: mean of the last 5 % against
    the mean of the 5 % ending at 90 %; ``converged`` when it moved by less than ``CONVERGED_CHANGE``."""
    n = len(losses)
    w = max(1, n // 20)
    if n < 4 * w or n < 20:
        return {"relative_change": None, "converged": None, "window": w}
    end = n - 2 * w                       # the window ending at 90 %
    before = sum(losses[end - w:end]) / w
    after = sum(losses[-w:]) / w
    change = (after - before) / abs(before) if before else 0.0
    return {"relative_change": change, "converged": abs(change) < CONVERGED_CHANGE, "window": w}


def describe_trend(trend: dict) -> str:
    if trend.get("converged") is None:
        return "too few iterations to judge convergence"
    pct = 100 * trend["relative_change"]
    if trend["converged"]:
        return f"the loss changed by {pct:+.1f} % over the last 10 % of iterations: converged"
    return (f"the loss changed by {pct:+.1f} % over the last 10 % of iterations: not converged, more "
            f"iterations may help")
