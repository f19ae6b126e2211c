"""The statistics of a mean embedding: sums of features over records (every mean-embedding release adds them up,
wherever the rows live), and one feature block's sums over the records a subsampled step draws."""
from __future__ import annotations

import numpy as np
import torch

from ..errors import InvalidParameterError
from ..validation import check_features, check_labels
from .bounds import bounded_rows, padded
from .rows import checked_rows, kept, unweighted


class ClassSums:
    """The statistic a mean embedding sums, for :meth:`~mmdsynth.engines.Source.total`: of one batch of
    records, ``{"sums": sum_i phi(x_i) e_{y_i}^T as (C, D) float64, "counts": per-class record counts}``
    (unconditional, ``n_classes`` None: ``sums`` is (1, D), no counts). A batch is ``(X, y)`` arrays, or
    a DataFrame that ``encoder`` (a :class:`~mmdsynth.data.encoding.TableEncoder`) turns into them. The
    records are checked here (finite numbers, labels in 0..n_classes-1) wherever the batch is read:
    in process or on a worker (``validate=False``: not checked; every row is still bounded by the map's
    :meth:`~mmdsynth.features.base.FeatureMap.bounded`, non-finite ones to zero)."""

    def __init__(self, feature_map, n_classes: int | None, *, encoder=None,
                 batch_size: int | None = None, validate: bool = True):
        self.feature_map, self.n_classes, self.encoder, self.batch_size = feature_map, n_classes, encoder, batch_size
        self.validate = validate
        self.device = None

    def to(self, device) -> "ClassSums":
        """Compute on ``device`` (a worker's GPU); the sums come back on the CPU."""
        self.feature_map, self.device = self.feature_map.to(device), device
        return self

    def __call__(self, batch) -> dict:
        if self.encoder is not None:                # a person table: each row weighs 1 / its person's rows
            frame, weights = checked_rows(batch, self.encoder)
            X, y = self.encoder.encode(frame, checked=True)
        else:
            (X, y), weights = unweighted(batch)
        Xa = check_features(X) if self.validate else np.asarray(X.detach().cpu() if hasattr(X, "detach") else X)
        y_t = None
        if self.n_classes is not None:
            ya = check_labels(y, Xa.shape[0], n_classes=self.n_classes)  # which classes are present: never checked
            y_t = torch.as_tensor(ya)
        X_t = torch.as_tensor(Xa, dtype=torch.float32)
        w_t = None if weights is None else torch.as_tensor(np.asarray(weights, dtype=np.float64))
        if self.device is not None:
            X_t, y_t = X_t.to(self.device), (y_t.to(self.device) if y_t is not None else None)
            w_t = w_t.to(self.device) if w_t is not None else None
        out = {"sums": self.feature_map.class_sums(X_t, y_t, self.n_classes, self.batch_size, weights=w_t).cpu()}
        if y_t is not None:
            out["counts"] = torch.bincount(y_t.cpu(), weights=None if w_t is None else w_t.cpu(),
                                           minlength=self.n_classes).to(torch.float64)
        return out


def sampled_block_sums(feature_map, block: int, X: torch.Tensor, y: torch.Tensor, n_cols: int,
                       scale: float, chunk: int) -> torch.Tensor:
    """(C, width) float64: sum over the records given of ``scale`` * block ``block``'s features, each record's
    row bounded to norm 1 (:func:`bounded_rows`: a larger or non-finite row cannot add more), in its class row."""
    width = feature_map.out_dim // feature_map.n_blocks
    acc = torch.zeros((n_cols, width), dtype=torch.float64)
    with torch.no_grad():
        for start in range(0, X.shape[0], chunk):
            xb = X[start:start + chunk]             # one batch shape whatever the subsample's size
            rows = bounded_rows(scale * feature_map.block_features(padded(xb, chunk), block)[:len(xb)].double(), 1.0)
            acc.index_add_(0, y[start:start + chunk], rows.cpu())
    return acc


class SampledBlockSums:
    """The statistic of one subsampled step of a sampled embedding, for
    :meth:`~mmdsynth.privacy.engine.PrivacyEngine.step`: bound to the run's records (:meth:`on`: the in-memory
    arrays, checked once per run, finite features and labels in 0..n_cols-1), then given the records the engine drew
    (indices into them), :func:`sampled_block_sums` of block ``block`` over them."""

    def __init__(self, feature_map, block: int, n_cols: int, scale: float, chunk: int, records=None):
        self.feature_map, self.block, self.records = feature_map, block, records
        self.n_cols, self.scale, self.chunk = n_cols, scale, chunk

    def on(self, source) -> "SampledBlockSums":
        """The statistic over ``source``'s records (:func:`checked_records`)."""
        return SampledBlockSums(self.feature_map, self.block, self.n_cols, self.scale, self.chunk,
                                checked_records(source, self.n_cols))

    def __call__(self, chosen: torch.Tensor) -> torch.Tensor:
        X, y = self.records
        return sampled_block_sums(self.feature_map, self.block, X[chosen], y[chosen], self.n_cols, self.scale,
                                  self.chunk)


def checked_records(source, n_cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(X float32, y int64) of an in-memory source of arrays, checked once per source (:func:`~.rows.kept`): finite
    features, as many as its public count, labels in 0..n_cols-1 (none given: every record in column 0)."""
    m = int(source.n_records)

    def read(batch):
        (X, y), _ = unweighted(batch)
        Xt = torch.as_tensor(check_features(X), dtype=torch.float32)
        if Xt.shape[0] != m:
            raise InvalidParameterError(f"X has {Xt.shape[0]} records but len(X) said {m}.")
        yt = torch.as_tensor(check_labels(y, m, n_classes=n_cols)) if y is not None else \
            torch.zeros(m, dtype=torch.int64)
        return Xt, yt
    return kept(source, ("sampled", n_cols), read)
