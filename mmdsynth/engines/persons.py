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
person, needed to generate persons, is a release of its own (:class:`RowsPerPerson`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InvalidParameterError
from . import InMemory, Weighted, unweighted

#: the privacy unit's wording in ledgers, reports and ``inspect``
UNIT_TEXT = "one person (all rows with the same {column})"

#: rows per person are released as a histogram over these public cells: [1], [2], [3], [4], [5, 6], [7, 9],
#: ..., [50, 99], [100, 100] (100 or more counts as 100): few cells, so the noise fills few empty ones
ROWS_EDGES = (1, 2, 3, 4, 5, 7, 10, 15, 25, 50, 100, 101)
ROWS_CAP = ROWS_EDGES[-2]


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
    """An in-memory table whose privacy unit is a person: one shard, one :class:`~mmdsynth.engines.Weighted`
    batch (the rows, their weights), ``n_records`` = the number of persons (public). ``ids``: the person column
    as the schema reads it (:meth:`~mmdsynth.data.schema.Schema.person_ids`, what :func:`person_source` passes);
    left out, the column's values as they are (callers whose IDs are already plain text)."""

    def __init__(self, frame: pd.DataFrame, column: str, ids: pd.Series | None = None):
        if column not in frame.columns:
            raise InvalidParameterError(f"the privacy unit's column {column!r} is not in the data; its columns are "
                                        f"{[str(c) for c in frame.columns]}.")
        codes, m = person_codes(frame[column] if ids is None else ids)
        self.column = column
        super().__init__(Weighted(frame, person_weights(codes, m)), m)

    @property
    def frame(self) -> pd.DataFrame:
        return self.data.frame

    def with_frame(self, frame: pd.DataFrame) -> "PersonTable":
        """The same persons over ``frame`` (the rows checked, or conformed to a completed schema: same order)."""
        if len(frame) != len(self.data.frame):
            raise InvalidParameterError("with_frame needs the same rows in the same order.")
        out = PersonTable.__new__(PersonTable)
        out.column = self.column
        InMemory.__init__(out, Weighted(frame, self.data.weights), self.n_records)
        return out

    def describe(self) -> dict:
        return {**super().describe(), "privacy_unit": unit_text(self.column)}


def rows_cell(rows: np.ndarray) -> np.ndarray:
    """The public cell (0 .. len(ROWS_EDGES) - 2) of each row count."""
    return np.searchsorted(ROWS_EDGES, np.minimum(rows, ROWS_CAP), side="right") - 1


def draw_rows(cells: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A row count for each cell index, uniform among the cell's whole numbers (post-processing)."""
    lo, hi = np.asarray(ROWS_EDGES[:-1])[cells], np.asarray(ROWS_EDGES[1:])[cells]
    return lo + (rng.random(len(cells)) * (hi - lo)).astype(np.int64)


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


def person_source(data, schema):
    """The Source a fit reads: a :class:`PersonTable` when ``schema`` declares a privacy unit (in-memory tables
    only for now), else ``data`` as it is (:func:`~mmdsynth.engines.as_source`)."""
    from . import Source, as_source

    column = getattr(schema, "privacy_unit", None)
    if column is None:
        return as_source(data)
    if isinstance(data, PersonTable):
        return data
    if isinstance(data, Source) or not isinstance(data, pd.DataFrame):
        raise InvalidParameterError(
            f"privacy_unit={column!r}: a person's rows are reduced to one bounded contribution before any sum, which "
            f"needs all of a person's rows together; this release reads in-memory tables only. Load the table into "
            f"a DataFrame (or drop the privacy unit to protect one row).")
    if column not in data.columns:
        raise InvalidParameterError(f"the privacy unit's column {column!r} is not in the data; its columns are "
                                    f"{[str(c) for c in data.columns]}.")
    return PersonTable(data, column, schema.person_ids(data))     # each ID read by itself, as the schema reads it
