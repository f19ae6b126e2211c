"""Sums of features over records: what every mean-embedding release adds up, wherever the rows live."""
from __future__ import annotations

import numpy as np
import torch

from ..engines import unweighted
from ..validation import check_features, check_labels
from .base import FeatureMap


class ClassSums:
    """The statistic a mean embedding sums, for :meth:`~mmdsynth.engines.Source.total`: of one batch of
    records, ``{"sums": sum_i phi(x_i) e_{y_i}^T as (C, D) float64, "counts": per-class record counts}``
    (unconditional, ``n_classes`` None: ``sums`` is (1, D), no counts). A batch is ``(X, y)`` arrays, or
    a DataFrame that ``encoder`` (a :class:`~mmdsynth.data.encoding.TableEncoder`) turns into them. The
    records are checked here (finite numbers, labels in 0..n_classes-1) wherever the batch is read:
    in process or on a worker (``validate=False``: not checked; every row is still bounded by the map's
    :meth:`~FeatureMap.bounded`, non-finite ones to zero)."""

    def __init__(self, feature_map: FeatureMap, n_classes: int | None, *, encoder=None,
                 batch_size: int | None = None, validate: bool = True):
        self.feature_map, self.n_classes, self.encoder, self.batch_size = feature_map, n_classes, encoder, batch_size
        self.validate = validate
        self.device = None

    def to(self, device) -> "ClassSums":
        """Compute on ``device`` (a worker's GPU); the sums come back on the CPU."""
        self.feature_map, self.device = self.feature_map.to(device), device
        return self

    def __call__(self, batch) -> dict:
        batch, weights = unweighted(batch)          # a person table: each row weighs 1 / its person's rows
        X, y = self.encoder.encode(batch) if self.encoder is not None else batch
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
