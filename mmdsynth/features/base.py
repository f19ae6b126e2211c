"""The feature-map interface and registry.

A feature map turns a batch of records ``(n, ...)`` into features ``(n, D)``.
It declares ``norm_bound``: a proven upper bound on ``||phi(x)||_2`` for every
possible input, from which the sensitivity of a mean embedding follows. Its
``spec()`` is JSON and rebuilds an identical map with :func:`build_feature_map`.
"""
from __future__ import annotations

import inspect
from abc import ABC, abstractmethod

import numpy as np

import torch

from ..errors import ArtifactError, unknown_name
from ..statistics.bounds import bounded_rows, padded

FEATURE_MAPS: dict[str, type] = {}


def uniform_records(n: int, rng: np.random.Generator, low: float = 0.0, high: float = 1.0, *, dim: int) -> np.ndarray:
    """``n`` plain vectors of ``dim`` values uniform on [low, high], drawn from ``rng``: public test records
    (:meth:`FeatureMap.records`' default, and the audit's DP-SGD records)."""
    return rng.uniform(low, high, (int(n), int(dim)))


def register(cls):
    FEATURE_MAPS[cls.name] = cls
    return cls


class FeatureMap(ABC):
    name: str = ""
    norm_bound: float = 1.0

    @property
    @abstractmethod
    def out_dim(self) -> int: ...

    @abstractmethod
    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def spec(self) -> dict: ...

    def records(self, n: int, rng: np.random.Generator, low: float = 0.0, high: float = 1.0) -> np.ndarray:
        """``n`` inputs of the kind this map reads, their values uniform on [low, high] (``low == high``: that value
        everywhere), drawn from ``rng``: public test records (the audit's dataset and canaries). Default: vectors of
        ``input_dim`` (2 for a map without one)."""
        return uniform_records(n, rng, low, high, dim=int(getattr(self, "input_dim", 2)))

    def parts(self) -> list[tuple[str, int, float]]:
        """The blocks of phi(x) released as separate Gaussian releases: (name, width, norm bound).
        One block by default; DP-MEPF's two moments are two blocks of one map, each of norm <= 1,
        computed in one pass and each released with sensitivity 2 * bound / m."""
        return [("embedding", self.out_dim, self.norm_bound)]

    def noise_multipliers(self) -> dict[str, float]:
        """Each block's noise multiplier relative to the plan's base sigma (all 1 by default;
        DP-HP gives its sum-kernel block a larger share of the privacy than each product block)."""
        return {name: 1.0 for name, _, _ in self.parts()}

    def bounded(self, phi: torch.Tensor) -> torch.Tensor:
        """Each record's row made safe block by block (:func:`bounded_rows` on every part)."""
        parts = self.parts()
        if len(parts) == 1:
            return bounded_rows(phi, parts[0][2])
        out, start, n = torch.empty_like(phi), 0, phi.shape[0]
        runs = []                                   # consecutive blocks of one width and bound: one call
        for _, width, bound in parts:
            if runs and runs[-1][1:] == (width, bound):
                runs[-1][0] += 1
            else:
                runs.append([1, width, bound])
        for count, width, bound in runs:
            cols = slice(start, start + count * width)
            out[:, cols] = bounded_rows(phi[:, cols].reshape(n, count, width), bound).reshape(n, -1)
            start += count * width
        return out

    def at_iteration(self, iteration: int, total: int) -> None:
        """Called by the training loop before each generator step. Maps whose loss changes during
        training (DP-HP matches product release j in the j-th part of it) override this."""

    def to(self, device) -> "FeatureMap":
        """Move the map's tensors to ``device`` (for training on a GPU); returns self."""
        return self

    #: working memory a batch of records may take while computing features (bytes)
    BATCH_BYTES = 96 * 2**20

    def row_floats(self) -> int:
        """Floats of working memory per record (materialised features, twice)."""
        return 2 * self.out_dim

    def batch_rows(self) -> int:
        """Records per batch when streaming a dataset through the map (memory-bounded)."""
        return int(max(64, min(8192, self.BATCH_BYTES // (4 * self.row_floats()))))

    def chunk_rows(self) -> int:
        """Records a release route computes at once (:meth:`class_sums` without ``batch_size``)."""
        return self.batch_rows()

    def release_rows(self, n_records: int) -> int:
        """The chunk a release over ``n_records`` (public) records computes at once: :meth:`chunk_rows`, or the power
        of two at least ``n_records`` where that is smaller (every chunk is padded to this shape,
        :meth:`released_rows`: 50 records are not padded to 8,192). A function of public facts."""
        return int(min(self.chunk_rows(), 1 << max(0, int(n_records) - 1).bit_length()))

    def weighted_sum(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sum_i phi(x_i) weights_i^T as a (D, K) matrix. Feature maps with structure
        (e-NTK of fc_1l) override this to avoid materialising phi."""
        return self(x).to(weights.dtype).T @ weights

    def class_sums(self, X: torch.Tensor, y: torch.Tensor | None = None, n_classes: int | None = None,
                   batch_size: int | None = None, weights: torch.Tensor | None = None) -> torch.Tensor:
        """sum_i w_i phi(x_i) e_{y_i}^T as a (C, D) float64 matrix (``weights`` w_i in [0, 1], e.g. 1 / a person's
        rows; none: 1), (1, D) if ``y`` is None: what a mean embedding sums, accumulated in float64. Streams over
        ``X`` in batches of ``batch_size`` records (default :meth:`chunk_rows`), each padded to that shape
        (:meth:`released_rows`). Every record's row goes through :func:`bounded_rows` first (block by block,
        :meth:`bounded`), so no record adds more than each block's bound (or anything non-finite) whatever its
        values. Structured maps override this with a faster route that keeps the same guarantee."""
        batch_size = batch_size or self.chunk_rows()
        acc = torch.zeros((n_classes if y is not None else 1, self.out_dim), dtype=torch.float64)
        with torch.no_grad():
            for start, phi in self.released_rows(X, batch_size):
                if weights is not None:
                    phi = phi * weights[start:start + batch_size].to(phi.device, torch.float64)[:, None]
                acc = acc.to(phi.device)
                if y is None:
                    acc[0] += phi.sum(0)
                else:
                    acc.index_add_(0, y[start:start + batch_size].to(phi.device), phi)
        return acc.cpu()

    def released_rows(self, X: torch.Tensor, batch_size: int):
        """(start, rows): the records of ``X`` ``batch_size`` at a time from ``start``, each record's features bounded
        (:meth:`bounded`, float64), every chunk computed as a batch of exactly ``batch_size`` records (the last one
        padded with zero records, cut off again). A float32 network or product rounds a record's features by the
        shape of its batch (measured: random Fourier features 1.7e-7 and the e-NTK 3e-8 apart between a record alone
        and in a batch of 300), and how many records a chunk holds can follow private facts (a person's rows, a
        stream's shards, a subsample): with one shape, a record's features are a function of that record alone, bit
        for bit."""
        for start in range(0, X.shape[0], batch_size):
            chunk = X[start:start + batch_size]
            yield start, self.bounded(self(padded(chunk, batch_size))[:chunk.shape[0]].double())

    def mmd_loss(self, target: torch.Tensor, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """||target - sum_i phi(x_i) weights_i^T||_F^2, the generator's training loss
        (``target`` is (D, K)). Structured maps override this with a cheaper equivalent."""
        return ((target - self.weighted_sum(x, weights).to(target.dtype)) ** 2).sum()

    #: independent column blocks of phi whose loss terms :meth:`block_loss` can compute alone (1: none)
    n_blocks: int = 1
    #: how many blocks a distillation step matches when the caller does not say (None: all of them)
    default_blocks_per_step: int | None = None

    def block_loss(self, target: torch.Tensor, x: torch.Tensor, weights: torch.Tensor, blocks) -> torch.Tensor:
        """The part of :meth:`mmd_loss` that falls on the column ``blocks`` (indices below :attr:`n_blocks`), computed
        without the others: a step on a random subset, scaled by ``n_blocks / len(blocks)``, is an unbiased
        estimate of a step on the whole loss (DM's one-network-per-step). Maps of one block return the whole loss."""
        return self.mmd_loss(target, x, weights)

    def block_features(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """Block ``k``'s columns of phi(x) alone (rows ``k * out_dim / n_blocks`` onwards of the embedding), each
        record's of norm <= ``norm_bound / sqrt(n_blocks)``: what a subsampled release
        (:func:`~mmdsynth.embedding.release_sampled_embedding`) sums for one step. Maps of one block: phi(x)."""
        if self.n_blocks != 1:
            raise NotImplementedError(f"{type(self).__name__} has {self.n_blocks} blocks but no block_features")
        return self(x)


def build_feature_map(spec: dict) -> FeatureMap:
    """The feature map a release's ``spec`` describes (its ``name`` and constructor arguments); a spec with arguments
    this version's map does not take (written by another version) is refused naming them."""
    spec = dict(spec)
    kind = spec.pop("name", None)
    if kind not in FEATURE_MAPS:
        raise unknown_name("feature map", str(kind), FEATURE_MAPS)
    known = inspect.signature(FEATURE_MAPS[kind]).parameters
    unknown = sorted(set(spec) - set(known))
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in known.values()):
        raise ArtifactError(f"the release's {kind!r} feature map has settings {unknown} that this version of mmdsynth "
                            f"does not know (the release was written by another version): load it with that version, "
                            f"or make the release again.")
    return FEATURE_MAPS[kind](**spec)
