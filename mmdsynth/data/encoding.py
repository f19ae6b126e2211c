"""Encode a table for kernel features and decode generated rows back.

Layout: the numeric columns first, each mapped to [0, 1]: through its privately
released CDF when the release holds one (quantile encoding,
:mod:`mmdsynth.data.numeric_sketch`), else scaled with its *declared* bounds
(min-max); then one one-hot block per categorical column (schema order), a nullable one with one
more slot for "missing"; then a [present, missing] block per nullable numeric column (whose
missing values are encoded at the middle of [0, 1], a public placeholder the decoder discards).
Datetime columns are numeric columns in seconds; ID columns are never encoded (they are not
learned) and are generated fresh: unique, and never equal to a real ID. Nothing
is estimated from the data: bounds and categories come from the schema, so
encoding reads no statistic of the private table. Decoding clips numbers to
their bounds (rounding integer columns), draws each categorical value from the
generator's probabilities (or takes the most likely one), and restores the
column order and dtypes recorded at fit time.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from .numeric_sketch import QuantileMap
from .private_schema import require_complete
from .schema import Schema, enforce_constraints
from .user import check_listed
from ..statistics.values import category_text


#: where a missing numeric value sits in [0, 1] (public; the decoder discards it)
MISSING_PLACEHOLDER = 0.5
#: pandas 2's ``str`` turns missing values into the text "nan"; its nullable text columns stay object
_NULLABLE_TEXT = "str" if int(pd.__version__.split(".")[0]) >= 3 else "object"


def schema_dtype(kind: str, integer: bool = False, categories=None, nullable: bool = False,
                 datetime: str | None = None, fmt: str | None = None) -> str:
    """The pandas dtype of a generated column, from its declaration only: integer numeric
    columns int64 (Int64 when nullable), other numeric columns float64, datetime columns
    datetime64[ns] (text in their ``format`` when declared), categorical columns int64 / float64
    when every declared category is such a number, pandas' text type ``str`` when every one is
    text, else object (the declared values); ID columns int64 or text."""
    if datetime:
        return "str" if fmt and not nullable else _NULLABLE_TEXT if fmt else "datetime64[ns]"
    if kind == "id":
        return "int64" if integer else "str"
    if kind == "numeric":
        return ("Int64" if nullable else "int64") if integer else "float64"
    values = list(categories or [])
    if values and all(isinstance(v, bool) for v in values):
        return "boolean" if nullable else "bool"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "Int64" if nullable else "int64"
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "float64"
    if values and all(isinstance(v, str) for v in values):
        return _NULLABLE_TEXT if nullable else "str"
    return "object"


class TableEncoder:
    def __init__(self, schema: Schema, columns: list[str] | None = None, numeric_maps: dict | None = None, *,
                 check_ids: bool = True):
        require_complete(schema)
        #: check ID columns when rows are cleaned (real rows: in the declared range / without the prefix); the
        #: evaluation encoder (:meth:`minmax`) does not, as it also reads generated rows
        self.check_ids = check_ids
        self._learned = schema.without_ids()
        self.schema = schema
        self.numeric = [c for c in schema.columns if c.kind == "numeric"]
        self.categorical = [c for c in schema.columns if c.kind == "categorical"]
        #: numeric columns with a [present, missing] block after the categorical blocks
        self.missing_blocks = [c for c in self.numeric if c.nullable]
        self.ids = [c for c in schema.columns if c.kind == "id"]
        self.columns = list(columns or [])
        #: column -> released CDF knots {"x", "u"} (quantile encoding); other numeric columns: min-max
        self.numeric_maps = dict(numeric_maps or {})
        self._maps = {name: QuantileMap(k) for name, k in self.numeric_maps.items()}
        #: with a privacy unit: probabilities of 1, 2, ... rows per person (the released histogram,
        #: post-processed); generated rows are grouped into synthetic persons of these sizes
        self.rows_per_person = None

    @classmethod
    def for_frame(cls, schema: Schema, df: pd.DataFrame, numeric_maps: dict | None = None) -> "TableEncoder":
        """An encoder that restores ``df``'s column order (its column names; never its dtypes or
        any value)."""
        return cls(schema, [str(c) for c in df.columns], numeric_maps)

    @property
    def numeric_encoding(self) -> str:
        return "quantile" if self._maps else "minmax"

    def minmax(self) -> "TableEncoder":
        """The same schema and column order with every numeric column min-max scaled (the fixed
        feature encoding of the downstream classifiers, the same for every method and peer)."""
        out = TableEncoder(self.schema, self.columns, check_ids=False)
        out.rows_per_person = self.rows_per_person
        return out

    @property
    def check_signature(self) -> str:
        """What :meth:`clean` checks rows against (the schema, and whether ID columns are checked), as text: rows
        checked by one encoder are checked for another of the same signature
        (:class:`~mmdsynth.statistics.rows.Checked`)."""
        return self.signature_of(self.schema, self.check_ids)

    @staticmethod
    def signature_of(schema, check_ids: bool = True) -> str:
        """:attr:`check_signature` of an encoder of ``schema``: also of a schema still to be completed by inference
        (which no encoder reads), whose check a source may have run."""
        return json.dumps({"schema": schema.to_dict(), "check_ids": check_ids}, sort_keys=True, default=str)

    def clean(self, df: pd.DataFrame, *, with_label: bool = True) -> pd.DataFrame:
        """``df`` checked against the schema (after :func:`conform` for privately inferred columns); its ID
        columns (never encoded) are checked too unless ``check_ids`` is off (generated IDs lie outside the real
        ones' range), and are not returned then."""
        checked = self.schema if self.check_ids else self._learned
        # a schema with released bounds / categories reads every value by itself first, then clips / maps it
        return checked.validate(df, require_label=with_label and self.schema.label is not None)

    @property
    def dtypes(self) -> dict[str, str]:
        """Output dtype of every column, from the schema (see :func:`schema_dtype`)."""
        out = {c.name: schema_dtype(c.kind, c.integer, c.categories, c.nullable, c.datetime, c.format)
               for c in self.schema.columns}
        if self.schema.label:
            out[self.schema.label] = schema_dtype("categorical", categories=self.schema.label_categories)
        return out

    @property
    def n_numeric(self) -> int:
        return len(self.numeric)

    @property
    def category_sizes(self) -> list[int]:
        """The one-hot blocks: every categorical column's (one more slot, the last, for "missing" when it
        is nullable), then a [present, missing] block per nullable numeric column."""
        return [len(c.categories) + c.nullable for c in self.categorical] + [2] * len(self.missing_blocks)

    @property
    def dim(self) -> int:
        return self.n_numeric + sum(self.category_sizes)

    def encode(self, df: pd.DataFrame, *, with_label: bool = True, checked: bool = False):
        """(X float32 (n, dim), y int64 codes or None). Validates ``df`` against the schema;
        columns whose bounds or categories were inferred privately are first clipped / mapped
        to them (:func:`~mmdsynth.data.private_schema.conform`)."""
        clean = df if checked else self.clean(df, with_label=with_label)    # checked: rows :meth:`clean` returned
        parts = []
        for c in self.numeric:
            values = clean[c.name].to_numpy(dtype=np.float64)
            if c.name in self._maps:
                u = self._maps[c.name].encode(values)
            else:
                lo, hi = c.bounds
                u = (values - lo) / (hi - lo)
            parts.append(np.where(np.isnan(values), MISSING_PLACEHOLDER, u)[:, None])
        for c in self.categorical:
            lookup = {category_text(v): i for i, v in enumerate(c.categories)}
            codes = clean[c.name].map(lookup).fillna(len(c.categories)).to_numpy(dtype=np.int64)  # missing: last
            parts.append(np.eye(len(c.categories) + c.nullable)[codes])
        for c in self.missing_blocks:
            parts.append(np.eye(2)[clean[c.name].isna().to_numpy(dtype=np.int64)])
        X = np.concatenate(parts, 1).astype(np.float32) if parts else np.zeros((len(clean), 0), np.float32)
        y = self.schema.label_codes(clean) if with_label and self.schema.label else None
        return X, y

    def decode(self, X, y=None, *, rng: np.random.Generator | None = None, categorical: str = "sample") -> pd.DataFrame:
        """Rows in the original columns and dtypes; ``categorical`` is 'sample' or 'argmax'."""
        X = np.asarray(X, dtype=np.float64)
        rng = rng or np.random.default_rng()
        out = {}
        blocks = np.split(X[:, self.n_numeric:], np.cumsum(self.category_sizes)[:-1], axis=1) if self.category_sizes else []
        choose = lambda p: _choose(p, categorical, rng)      # noqa: E731
        for j, c in enumerate(self.numeric):
            lo, hi = c.bounds
            v = self._maps[c.name].decode(X[:, j]) if c.name in self._maps else lo + np.clip(X[:, j], 0.0, 1.0) * (hi - lo)
            out[c.name] = np.clip(np.round(v), lo, hi) if c.integer else v
        for c, p in zip(self.categorical, blocks):
            idx = choose(p)
            values = np.asarray(list(c.categories) + [None], dtype=object)[idx]
            out[c.name] = values
        for c, p in zip(self.missing_blocks, blocks[len(self.categorical):]):
            out[c.name] = np.where(choose(p) == 1, np.nan, out[c.name])
        for c in self.numeric:
            if c.datetime:
                out[c.name] = _dates(out[c.name], c)
        for c in self.ids:
            if c.name == self.schema.privacy_unit:
                out[c.name] = person_ids(c, len(X), self.rows_per_person, rng)
            else:
                out[c.name] = fresh_ids(c, len(X), rng)
        if y is not None and self.schema.label:
            out[self.schema.label] = np.asarray(self.schema.label_categories, dtype=object)[np.asarray(y)]
        df = pd.DataFrame(out)
        order = [c for c in self.columns if c in df.columns]
        df = df[order + [c for c in df.columns if c not in order]]
        if self.schema.constraints:         # declared fixed combinations hold in every row (post-processing)
            df = enforce_constraints(df, self.schema, rng if rng is not None else np.random.default_rng())
        return df.astype({c: t for c, t in self.dtypes.items() if c in df.columns})

    def to_dict(self) -> dict:
        # a list keeps the column order through JSON writers that sort keys
        # the numeric maps are not part of it: a release stores the noisy counts they come from
        return {"schema": self.schema.to_dict(), "columns": list(self.columns)}

    @classmethod
    def from_dict(cls, d: dict) -> "TableEncoder":
        """Releases written by mmdsynth 0.1 stored the private frame's dtypes as ``dtypes``:
        only their column order is used; the types come from the schema."""
        columns = d.get("columns") or [c for c, _ in d.get("dtypes") or []]
        return cls(Schema.from_dict(d["schema"]), columns)


def _choose(p: np.ndarray, how: str, rng: np.random.Generator) -> np.ndarray:
    """The slot of each row of a one-hot block of generator probabilities: drawn ('sample') or the most
    likely one ('argmax')."""
    p = np.clip(p, 0, None)
    if how == "argmax":
        return p.argmax(1)
    p = p / np.maximum(p.sum(1, keepdims=True), 1e-12)
    return (p.cumsum(1) < rng.random((len(p), 1))).sum(1).clip(0, p.shape[1] - 1)


def _dates(seconds: np.ndarray, col) -> pd.Series:
    """Generated seconds since 1970-01-01 as datetimes rounded to the column's resolution (text in its
    format when it declares one); missing values stay missing."""
    t = pd.Series(pd.to_datetime(np.round(np.asarray(seconds, dtype=np.float64) * 1e6), unit="us"))
    t = t.dt.round(col.datetime).clip(*(pd.Timestamp(0) + pd.Timedelta(seconds=b) for b in col.bounds))
    t = t.dt.floor(col.datetime).astype("datetime64[ns]")
    return t.dt.strftime(col.format).where(t.notna(), None) if col.format else t


def person_ids(col, n: int, rows_per_person, rng: np.random.Generator) -> np.ndarray:
    """The person column of ``n`` generated rows: synthetic persons with fresh IDs (:func:`fresh_ids`), each
    given a number of rows drawn from ``rows_per_person`` (probabilities of the public cells
    :data:`~mmdsynth.statistics.persons.ROWS_EDGES`, uniform inside a cell; None: one row each),
    the rows dealt to persons in a random order. The last person drawn may get fewer rows than drawn, so that
    the total is ``n``. Rows of one synthetic person are drawn independently of each other: the release holds no
    statistic of how a person's rows relate."""
    if rows_per_person is None:
        return fresh_ids(col, n, rng)
    from ..engines.persons import draw_rows
    from ..statistics.persons import ROWS_EDGES

    p = np.asarray(rows_per_person, dtype=np.float64)
    mean = float(((np.asarray(ROWS_EDGES[:-1]) + np.asarray(ROWS_EDGES[1:]) - 1) / 2 * p).sum())
    sizes = np.zeros(0, dtype=np.int64)
    while sizes.sum() < n:
        sizes = np.concatenate([sizes, draw_rows(rng.choice(len(p), size=int(n / mean) + 16, p=p), rng)])
    sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), n)) + 1]
    ids = fresh_ids(col, len(sizes), rng)
    return rng.permutation(np.repeat(ids, sizes)[:n])


def fresh_ids(col, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unique IDs that no real ID can equal, from public facts only: integers drawn above the declared
    range of the real ones, or the column's prefix and 32 random hex digits (real IDs are checked not to start
    with the prefix)."""
    while True:
        if col.integer:
            ids = int(col.bounds[1]) + 1 + rng.integers(0, 2 ** 53 - int(col.bounds[1]) - 1, n)
        else:
            ids = np.asarray([col.prefix + rng.bytes(16).hex() for _ in range(n)], dtype=object)
        if len(pd.unique(ids)) == n:
            return ids


def check_table_input(data, schema: Schema) -> None:
    """A table fit's input checked by its form before it is handed to the run: a DataFrame's columns matched to the
    schema by name (refused, naming them: nothing dropped silently). Its rows are checked by the run, once, after the
    plan is calibrated (:class:`~mmdsynth.privacy.engine.Open`'s ``check``)."""
    if isinstance(data, pd.DataFrame):
        check_listed(data, schema, "the DataFrame", False, "drop them first (df.drop(columns=[...]))")
