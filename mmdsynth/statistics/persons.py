"""The statistics of a person as the privacy unit: each person's row count (the counting pass that sets the rows'
weights; nothing of it is released) and the rows-per-person histogram (a release)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InvalidParameterError
from .rows import unweighted

#: rows per person are released as a histogram over these public cells: [1], [2], [3], [4], [5, 6], [7, 9],
#: ..., [50, 99], [100, 100] (100 or more counts as 100): few cells, so the noise fills few empty ones
ROWS_EDGES = (1, 2, 3, 4, 5, 7, 10, 15, 25, 50, 100, 101)

ROWS_CAP = ROWS_EDGES[-2]


def rows_cell(rows: np.ndarray) -> np.ndarray:
    """The public cell (0 .. len(ROWS_EDGES) - 2) of each row count."""
    return np.searchsorted(ROWS_EDGES, np.minimum(rows, ROWS_CAP), side="right") - 1


class RowsPerPerson:
    """The statistic of the rows-per-person release: a histogram of each person's row count over the public cells
    :data:`ROWS_EDGES`. Each person adds one one-hot (weight w on each of their n rows, n w = 1, into the same
    cell), so the histogram has sensitivity sqrt(2) under replacing one person, 1 under removing one."""

    def __call__(self, batch) -> dict:
        frame, w = unweighted(batch)
        if w is None:
            raise InvalidParameterError("rows per person need a person table (a declared privacy unit).")
        rows = np.rint(1.0 / w).astype(np.int64)              # each row's person's row count
        return {"rows_per_person": np.bincount(rows_cell(rows), weights=w, minlength=len(ROWS_EDGES) - 1)}


class PersonRowCounts:
    """The first pass over sharded persons: each person's row count in one batch, as a dict {person ID: rows}
    (summed across shards key by key: :func:`~mmdsynth.engines.add_partials`). ``ids``: the schema's reading of
    the person column (:meth:`~mmdsynth.data.schema.Schema.person_ids`). Nothing of it is released: it only sets
    each row's weight in the next pass."""

    def __init__(self, ids):
        self.ids = ids

    def __call__(self, batch) -> dict:
        ids = self.ids(unweighted(batch)[0])
        if ids.isna().any():
            raise InvalidParameterError("the person column has missing values: every row must name its person.")
        return {"persons": ids.value_counts(sort=False).to_dict(), **ids_digest(ids)}


def ids_digest(ids: pd.Series) -> dict:
    """A multiset digest of a batch's person IDs (sums of each ID's 64-bit hash, split in two exact halves): a
    shard's digests add up over its batches, and equal digests mean (up to a hash collision) the same IDs with
    the same row counts. :class:`PersonShards` compares every pass's digest of a shard with the counting pass's."""
    h = pd.util.hash_pandas_object(ids.reset_index(drop=True), index=False).to_numpy(np.uint64)
    return {"ids_hi": int((h >> np.uint64(32)).sum(dtype=np.uint64)),
            "ids_lo": int((h & np.uint64(0xFFFFFFFF)).sum(dtype=np.uint64))}
