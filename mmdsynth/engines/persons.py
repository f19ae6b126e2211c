"""A person, not a row, as the privacy unit (user-level privacy): the table's rows grouped by a declared person
column, each person's contribution bounded before any sum.

Every release of this library sums a bounded vector per record (a feature row of norm <= B, a one-hot cell, a
value's count). With a privacy unit declared (``Schema.privacy_unit``, CLI ``--privacy-unit COLUMN``), a record
is a person: all rows with the same value in that column. Each row is weighted by 1 / (its person's row count),
so a person's contribution is the *mean* of their rows' vectors: its norm is <= B by convexity, and the sum over
persons changes by at most what one row's change moved before (2B for the embedding, sqrt(2) for a one-hot), now
divided by the public number of persons m. Replacing or removing one person with all their rows (one row or
thousands) moves every release by at most its recorded sensitivity. The weights of every other person stay the
same: a row's weight is a function of its own person's rows only.

The number of persons is public (the m of the sensitivity, like the row count of a row-level fit); the number of
rows per person is not: nothing released depends on it beyond the bounded sums, and the distribution of rows per
person, needed to generate persons, is a release of its own (:class:`~mmdsynth.statistics.persons.RowsPerPerson`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import DataValidationError, InvalidParameterError
from ..statistics.persons import ROWS_EDGES, PersonRowCounts, ids_digest
from ..statistics.rows import Weighted
from . import InMemory, Source, summed

#: the privacy unit's wording in ledgers, reports and ``inspect``
UNIT_TEXT = "one person (all rows with the same {column})"


def unit_text(column: str) -> str:
    return UNIT_TEXT.format(column=column)


def person_codes(ids: pd.Series) -> tuple[np.ndarray, int]:
    """(each row's person index 0..m-1, the number of persons m), from the declared person column's checked
    values (:meth:`~mmdsynth.data.schema.Schema.validate` reads each ID by itself). Rows are the same person
    exactly when their IDs are equal."""
    codes, uniques = pd.factorize(ids, use_na_sentinel=True)
    if (codes < 0).any():
        raise InvalidParameterError("the person column has missing values: every row must name its person.")
    return codes.astype(np.int64), len(uniques)


def person_weights(codes: np.ndarray, m: int) -> np.ndarray:
    """1 / (the row's person's row count), per row: each person's rows weigh 1 in all (a function of that
    person's rows alone)."""
    counts = np.bincount(codes, minlength=m).astype(np.float64)
    return 1.0 / counts[codes]


class PersonTable(InMemory):
    """An in-memory table whose privacy unit is a person: one shard, one :class:`~mmdsynth.statistics.rows.Weighted`
    batch (the rows, their weights), ``n_records`` = the number of persons (public). ``ids``: the person column
    as the schema reads it (:meth:`~mmdsynth.data.schema.Schema.person_ids`, what :func:`person_source` passes);
    left out, the column's values as they are (callers whose IDs are already plain text)."""

    persons = True

    def __init__(self, frame: pd.DataFrame, column: str, ids: pd.Series | None = None, checked: str | None = None):
        if column not in frame.columns:
            raise InvalidParameterError(f"the privacy unit's column {column!r} is not in the data; its columns are "
                                        f"{[str(c) for c in frame.columns]}.")
        codes, m = person_codes(frame[column] if ids is None else ids)
        self.column, self.codes = column, codes          # codes: each row's person 0..m-1 (DP-SGD samples persons)
        super().__init__(Weighted(frame, person_weights(codes, m)), m, checked)

    @property
    def frame(self) -> pd.DataFrame:
        return self.data.frame

    def with_frame(self, frame: pd.DataFrame) -> "PersonTable":
        """The same persons over ``frame`` (the rows checked, or conformed to a completed schema: same order)."""
        if len(frame) != len(self.data.frame):
            raise InvalidParameterError("with_frame needs the same rows in the same order.")
        out = PersonTable.__new__(PersonTable)
        out.column, out.codes = self.column, self.codes
        InMemory.__init__(out, Weighted(frame, self.data.weights), self.n_records)   # unchecked: a new frame
        return out

    def checked_with(self, encoder) -> "PersonTable":
        """The same persons over their rows checked by ``encoder`` (same rows, same order), marked checked."""
        out = self.with_frame(encoder.clean(self.frame))
        out.checked = encoder.check_signature
        return out

    def validated(self, schema) -> "PersonTable":
        return self.with_frame(schema.validate(self.frame))

    def describe(self) -> dict:
        return {**super().describe(), "privacy_unit": unit_text(self.column)}


def draw_rows(cells: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A row count for each cell index, uniform among the cell's whole numbers (post-processing)."""
    lo, hi = np.asarray(ROWS_EDGES[:-1])[cells], np.asarray(ROWS_EDGES[1:])[cells]
    return lo + (rng.random(len(cells)) * (hi - lo)).astype(np.int64)


class PersonShards(Source):
    """Shards of a table whose privacy unit is a person, on any engine (streamed or Ray). A person's rows may sit
    in any shards: the reduction is **exact across shards**, not keyed by shard. The first sum asked (after the
    plan is calibrated: nothing is read before) runs a counting pass, :class:`PersonRowCounts`, over every shard
    and adds the per-shard counts into each person's total; every pass then weights each row by 1 / (its person's
    total rows), so each person's rows weigh 1 in all, wherever they are, and every release sees what
    :class:`PersonTable` gives for the same rows in memory. ``n_records`` (declared, public) counts persons; the
    counting pass checks it. Every later pass checks that each shard still holds the same IDs with the same row
    counts (:func:`ids_digest`), so a shard that changes during a fit is refused, never read with stale weights.
    The driver holds each shard's counts per person until they are added (at most one entry per row), and the
    counting pass copies a shard's counts once per batch read (time about batches x persons of the shard)."""

    persons = True

    def __init__(self, shards: Source, column: str, ids):
        self.shards, self.column, self.ids = shards, column, ids
        self.n_records, self.engine = shards.n_records, shards.engine
        self._rows = None                           # each person's total row count (private; never released)
        self._digests = {}                          # each shard's (ID digest, rows) in the counting pass

    @property
    def n_shards(self) -> int:
        return self.shards.n_shards

    def shard_name(self, i: int) -> str:
        return self.shards.shard_name(i)

    def __getstate__(self):                          # the engine stays on the driver
        return {**self.__dict__, "engine": None}

    def total(self, statistic) -> dict:
        if self._rows is None:
            self._rows = self._count()
        return super().total(statistic)

    def _count(self) -> pd.Series:
        parts = self.engine.partials(self.shards, PersonRowCounts(self.ids))
        self._digests = {i: (part["ids_hi"], part["ids_lo"], rows) for i, (part, rows) in parts.items()}
        total, _ = summed(parts, self.n_shards, self.engine.name)
        rows = pd.Series(total["persons"], dtype=np.float64)
        if len(rows) != self.n_records:
            raise DataValidationError(
                f"the shards hold {len(rows)} persons (distinct values of {self.column!r}) but n_records="
                f"{self.n_records} was declared; with a privacy unit n_records counts persons, and the sensitivity "
                f"2/m rests on it. Declare the number of persons (nothing was released).")
        return rows

    def batches(self, i: int):
        if self._rows is None:
            raise RuntimeError("PersonShards.batches before the counting pass: call total().")
        hi = lo = rows = 0
        for frame, _ in self.shards.batches(i):
            ids = self.ids(frame)
            counts = ids.map(self._rows).to_numpy(np.float64)
            digest = ids_digest(ids)
            hi, lo, rows = hi + digest["ids_hi"], lo + digest["ids_lo"], rows + len(ids)
            if np.isnan(counts).any():
                raise self._changed(i)
            w = 1.0 / counts
            yield Weighted(frame, w), float(w.sum())
        if (hi, lo, rows) != self._digests[i]:        # rows added, removed or moved since the counting pass
            raise self._changed(i)

    def _changed(self, i: int) -> DataValidationError:
        return DataValidationError(
            f"shard {self.shard_name(i)} changed since its persons' rows were counted (every pass must read the "
            f"rows the counting pass read, or a person's weight would be stale); nothing was released. Fit on "
            f"shards that do not change during the fit (e.g. a snapshot of an append-only log).")

    def describe(self) -> dict:
        return {**self.shards.describe(), "m": int(self.n_records), "privacy_unit": unit_text(self.column),
                "persons across shards": "exact (a counting pass adds each person's rows over all shards)"}


def person_source(data, schema, checked: str | None = None):
    """The Source a fit reads: a :class:`PersonTable` (a DataFrame) or :class:`PersonShards` (table shards) when
    ``schema`` declares a privacy unit, else ``data`` as it is (:func:`~mmdsynth.engines.as_source`). ``checked``: the
    signature of the check a DataFrame already passed (``TableEncoder.check_signature``), so that its statistics
    read it without checking it again."""
    from . import as_source

    column = getattr(schema, "privacy_unit", None)
    if column is None:
        return as_source(data, checked=checked)
    if isinstance(data, (PersonTable, PersonShards)):
        return data
    if isinstance(data, Source):
        if column not in getattr(data, "columns", ()):
            raise InvalidParameterError(f"privacy_unit={column!r}: the shards' schema has no such column; a person "
                                        f"table's shards hold the person column in every row.")
        return PersonShards(data, column, schema.person_ids)
    if not isinstance(data, pd.DataFrame):
        raise InvalidParameterError(f"privacy_unit={column!r} applies to tables (a DataFrame or table shards).")
    if column not in data.columns:
        raise InvalidParameterError(f"the privacy unit's column {column!r} is not in the data; its columns are "
                                    f"{[str(c) for c in data.columns]}.")
    return PersonTable(data, column, schema.person_ids(data), checked)   # each ID read by itself, as the schema reads it
