"""Record isolation (issue 45; DESIGN.md, "Record isolation"): one record never changes how another is read.

Every sensitivity proof assumes that a record's features depend on that record alone, so every raw value
must be parsed by a pure function of (the public schema, that one value). These tests replace ONE row of a
generated table by an arbitrary valid row and read both neighbours through every input path of a fit: a
DataFrame of each dtype pandas gives a column, CSV and Parquet files (``read_table``), CSV and Parquet
shards read in small batches (``ShardedTable``), SQLite, DuckDB and PostgreSQL (``read_sql``). Of each
neighbour they compute what a fit computes from the rows (``fit(df)`` itself is the DataFrame path): the
private schema-inference counts (``SchemaCounts``) when the schema leaves bounds or categories out, then
the encoded features (``TableEncoder.encode``, what the engine sums). Every OTHER row's encoded features
must be bit-identical, the counts may differ by the one row's contribution only, and the two neighbours
either both read or both raise the same typed error, whose message quotes no value of the table.

The intended parsing pinned here: text dates are ISO 8601 read element by element (offsets converted to
UTC per value, naive taken as UTC) unless the schema declares a ``format``; anything else is refused with
a DataValidationError naming the column and a count; numbers as categories are converted per value
(``1``, ``1.0``, ``"1"`` -> ``"1"``).

A CSV is written cell by cell (two neighbouring files differ in one line); Parquet files and database tables
are what pandas, pyarrow and the database store from the DataFrame, so one row may change a column's stored
type there too, as it does for a user's own export.

Tiers (derandomized): 25 generated pairs per path and 8 per DataFrame dtype in the default tier (about 40 s
with the explicit regressions of items 1 and 2); 300 per path and 150 per dtype with ``-m slow`` (about 4 min).
"""
import csv
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from functools import reduce

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, reject, settings, strategies as st

from mmdsynth import Schema
from mmdsynth.data import ShardedTable, read_sql, read_table
from mmdsynth.data.encoding import TableEncoder
from mmdsynth.data.private_schema import OTHER, SchemaInference
from mmdsynth.statistics.rows import checked_batch, checked_rows
from mmdsynth.statistics.tables import SchemaCounts
from mmdsynth.engines import add_partials
from mmdsynth.errors import DataValidationError, SchemaError

from support import throwaway_postgres, store_sql

sa = pytest.importorskip("sqlalchemy")
pytest.importorskip("pyarrow")

PATHS = ["dataframe", "csv", "parquet", "csv-shards", "parquet-shards", "sqlite", "duckdb", "postgresql"]
#: paths whose columns may mix Python types (nothing typed stores them); Parquet and databases need one type
MIXED = {"dataframe", "csv", "csv-shards"}
FAST, SLOW = 25, 300            # generated neighbour pairs per path and tier
FAST_DTYPE, SLOW_DTYPE = 8, 150  # per DataFrame dtype
SHARD_ROWS = 2                  # batch rows of the shard paths: every table crosses a batch boundary

# -- generated columns ------------------------------------------------------------------------------------
# A column is a declaration and its valid values in "families" (the Python types a value can come as); the
# table's rows come in one family, the replacement row in any family its dtype can hold (so it may change
# the column's pandas dtype, as a missing value turns int64 into float64).


@dataclass
class Col:
    spec: dict              # the declaration (without its name)
    families: dict          # family -> strategy of valid, present values
    bad: list               # invalid values (never in the replaced row): both neighbours must refuse alike
    inferred: dict          # what private inference released for left-out bounds / categories ({}: declared)


DAY = datetime(2019, 6, 1), datetime(2021, 6, 1)
DATE_BOUNDS = ["2019-01-01", "2021-12-31"]
OFFSETS = [timezone.utc, timezone(timedelta(hours=1)), timezone(timedelta(hours=2)),
           timezone(-timedelta(hours=5, minutes=30))]
ISO_STYLES = [lambda t: t.date().isoformat(), lambda t: t.isoformat(), lambda t: t.isoformat(" ", "seconds"),
              lambda t: t.isoformat(timespec="minutes"), lambda t: t.isoformat(timespec="seconds") + "Z",
              lambda t: t.isoformat() + "+01:00", lambda t: t.isoformat() + "+02:00",
              lambda t: t.isoformat(timespec="seconds") + "-05:30"]


def seconds(text) -> float:
    t = pd.Timestamp(text)
    t = t.tz_convert("UTC").tz_localize(None) if t.tzinfo is not None else t
    return (t - pd.Timestamp(0)) / pd.Timedelta(seconds=1)


def numeric(integer: bool):
    x = st.integers(-1000, 1000) if integer else st.floats(-1000, 1000)
    families = {"int": x, "float": x.map(float), "text": x.map(str)} if integer else {"float": x, "text": x.map(str)}

    @st.composite
    def build(draw):
        nullable, declared = draw(st.booleans()), draw(st.booleans())
        spec = {"type": "numeric", "integer": integer, "nullable": nullable}
        spec.update({"bounds": [-1000, 1000]} if declared else {})
        bad = ["12.5 kg"] + [54321.25] * declared + [None] * (not nullable)
        return Col(spec, families, bad, {} if declared else {"bounds": (-500.0, 500.0)})
    return build()


def categorical(pool, label=False):
    c = st.sampled_from(pool)
    families = ({"text": c} if isinstance(pool[0], str) else
                {"int": c, "float": c.map(float), "text": c.map(str)} if isinstance(pool[0], int) else
                {"float": c, "text": c.map(str)})

    @st.composite
    def build(draw):
        nullable, declared = (False, True) if label else (draw(st.booleans()), draw(st.booleans()))
        spec = {"type": "categorical", "nullable": nullable, **({"categories": list(pool)} if declared else {})}
        bad = ["undeclared-17", 987.5] * declared + [None] * (not nullable)
        return Col(spec, families, bad, {} if declared else {"categories": [str(pool[0]), str(pool[2]), OTHER]})
    return build()


@st.composite
def boolean(draw):
    nullable = draw(st.booleans())
    families = {"bool": st.booleans(), "int": st.sampled_from([0, 1]),
                "text": st.sampled_from(["true", "false", "True", "FALSE", "1", "0"])}
    return Col({"type": "boolean", "nullable": nullable}, families, ["maybe", 7] + [None] * (not nullable), {})


def dates(fmt):
    t = st.datetimes(*DAY)
    families = ({"text": t.map(lambda v: v.strftime(fmt))} if fmt else
                {"timestamp": t.map(pd.Timestamp),
                 "aware": st.builds(lambda v, tz: pd.Timestamp(v.replace(tzinfo=tz)), t, st.sampled_from(OFFSETS)),
                 "text": st.builds(lambda v, style: style(v), t, st.sampled_from(ISO_STYLES))})

    @st.composite
    def build(draw):
        nullable, declared = draw(st.booleans()), draw(st.booleans())
        spec = {"type": "datetime", "resolution": "s", "nullable": nullable,
                **({"bounds": DATE_BOUNDS} if declared else {}), **({"format": fmt} if fmt else {})}
        late = datetime(2030, 6, 15)
        bad = (["2020-13-45"] + ["13/02/2020"] * (not fmt) + [late.strftime(fmt) if fmt else late.isoformat()]
               * declared + [None] * (not nullable))
        return Col(spec, families, bad, {} if declared else {"bounds": (seconds("2020-01-01"), seconds("2020-12-31"))})
    return build()


def ids(integer: bool):
    x = st.integers(1, 99999)
    families = ({"int": x, "float": x.map(float), "text": x.map(str)} if integer else
                {"text": x.map(lambda k: f"P{k:07d}")})
    spec = {"type": "id", "integer": True, "bounds": [1, 99999]} if integer else {"type": "id"}
    bad = [123456, "ID-x17", None] if integer else ["syn-000417", None]
    return st.just(Col(spec, families, bad, {}))


#: (the families a kind of column has, the strategy of its Col)
KINDS = [(("int", "float", "text"), numeric(True)), (("float", "text"), numeric(False)),
         (("int", "float", "text"), categorical([1, 2, 10])), (("float", "text"), categorical([0.5, 2.25, 7.75])),
         (("text",), categorical(["red", "green", "blue"])),
         (("text",), categorical(["Zürich", "São Paulo", "a, b"])),
         (("bool", "int", "text"), boolean()), (("timestamp", "aware", "text"), dates(None)),
         (("text",), dates("%d/%m/%Y")), (("text",), dates("%Y%m%d %H:%M")),
         (("int", "float", "text"), ids(True)), (("text",), ids(False))]
LABELS = [(("int", "float", "text"), categorical([0, 1, 2], label=True)),
          (("text",), categorical(["neg", "pos", "mid"], label=True))]

#: each dtype pandas can give a column: how a column gets it (pandas dtype, None = pandas infers it from the
#: values; the family of the rows, "*" any)
DTYPES = {
    "int64": [(None, "int")], "float64 (NaN)": [(None, "float"), ("float64", "float")], "Int64": [("Int64", "int")],
    "Float64": [("Float64", "float")], "bool": [(None, "bool")], "boolean": [("boolean", "bool")],
    "object": [("object", "*")], "str": [(None, "text"), ("str", "text")], "string": [("string", "text")],
    "datetime64": [(None, "timestamp"), ("datetime64[ns]", "timestamp")],
    "datetime64 tz": [(None, "aware"), ("datetime64[ns, UTC]", "aware")], "category": [("category", "*")],
}


def ways(dtype: str, families) -> list:
    return [(pandas, f) for pandas, fam in DTYPES[dtype] for f in (families if fam == "*" else [fam]) if f in families]


#: families a typed store (Parquet, a database) holds in one column
ONE_TYPE = {"int": ["int", "float"], "float": ["float", "int"], "timestamp": ["timestamp", "aware"],
            "aware": ["aware", "timestamp"]}


@st.composite
def column(draw, mixed: bool, dtype=None, kinds=KINDS):
    """(Col, pandas dtype, strategy of a row's value, strategy of the replacement's value)."""
    dtype = dtype or draw(st.sampled_from([d for d in DTYPES if any(ways(d, f) for f, _ in kinds)]))
    col = draw(st.one_of([kind for families, kind in kinds if ways(dtype, families)]))
    pandas, family = draw(st.sampled_from(ways(dtype, col.families)))
    others = ([family] if pandas not in (None, "object", "category") else list(col.families) if mixed else
              [f for f in ONE_TYPE.get(family, [family]) if f in col.families])
    return col, pandas, col.families[family], st.one_of(*(col.families[f] for f in others))


def cell(draw, values, nullable: bool, missing_one_in: int):
    if nullable and draw(st.integers(1, missing_one_in)) == missing_one_in:
        return draw(st.sampled_from([None, np.nan]))
    return draw(values)


@dataclass
class Case:
    spec: dict      # the declared schema
    dtypes: dict    # column -> pandas dtype of the DataFrame (None: pandas infers it)
    a: dict         # column -> values
    b: dict         # the neighbour: row i replaced
    i: int
    inferred: dict = field(default_factory=dict)   # column -> the bounds / categories inference released

    def __repr__(self):
        return (f"Case(spec={self.spec!r},\n inferred={self.inferred!r},\n dtypes={self.dtypes!r},\n a={self.a!r},"
                f"\n b={self.b!r},\n i={self.i})")

    @property
    def n(self):
        return len(next(iter(self.a.values())))

    @property
    def declared(self):
        return Schema.from_dict(self.spec)

    @property
    def completed(self):
        """The schema after private inference: left-out bounds / categories filled in (fixed, public values)."""
        d = self.declared
        return replace(d, columns=[replace(c, **self.inferred.get(c.name, {})) for c in d.columns],
                       notes={"dp_inferred_columns": sorted(self.inferred)}) if self.inferred else d

    def private_texts(self, where) -> set:
        """The table's values as text that no message may quote (those in the public schema aside)."""
        public = (json.dumps([self.spec, self.inferred], ensure_ascii=False) + str(where)
                  + repr([c.categories for c in self.declared.columns]) + "TRUE FALSE true false")  # booleans' words
        values = [v for data in (self.a, self.b) for column in data.values() for v in column]
        texts = {text(v) for v in values} | {v.date().isoformat() for v in values if isinstance(v, pd.Timestamp)}
        return {t for t in texts if len(t) >= 4 and t not in public}


@st.composite
def neighbours(draw, mixed: bool, dtype=None):
    """A schema, a table of 3-8 rows and the table with row i replaced by another valid row; maybe one
    invalid cell in another row (in both)."""
    n = draw(st.integers(3, 8))
    i = draw(st.integers(0, n - 1))
    cols = {f"c{k}": draw(column(mixed, dtype if k == 0 else None)) for k in range(draw(st.integers(1, 4)))}
    if draw(st.booleans()):
        cols["y"] = draw(column(mixed, kinds=LABELS))
    spec = {"columns": [{"name": name, **c.spec} for name, (c, *_) in cols.items() if name != "y"]}
    if "y" in cols:
        spec.update(label="y", label_categories=cols["y"][0].spec["categories"])
    a, b = {}, {}
    for name, (c, _, row, new) in cols.items():
        nullable = c.spec.get("nullable", False)
        a[name] = [cell(draw, row, nullable, 5) for _ in range(n)]
        b[name] = a[name][:i] + [cell(draw, new, nullable, 2)] + a[name][i + 1:]
    bad = [name for name, (c, *_) in cols.items() if c.bad]
    if bad and draw(st.integers(1, 4)) == 4:
        name = draw(st.sampled_from(bad))
        j = draw(st.sampled_from([j for j in range(n) if j != i]))
        a[name][j] = b[name][j] = draw(st.sampled_from(cols[name][0].bad))
    return Case(spec, {name: pandas for name, (_, pandas, *_) in cols.items()}, a, b, i,
                {name: c.inferred for name, (c, *_) in cols.items() if c.inferred})


# -- the input paths --------------------------------------------------------------------------------------
def missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))


def text(v) -> str:
    """A value as a CSV cell: per value (a CSV holds text; 1.0 written as the number 1, missing as empty)."""
    if missing(v):
        return ""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def frame(case, data) -> pd.DataFrame:
    """The DataFrame a user hands to fit: each column of its dtype, or of the one pandas infers from its values."""
    return pd.DataFrame({name: pd.Series(values, dtype=case.dtypes[name]) for name, values in data.items()})


def store(path, case, data, where):
    """Put the table where ``path`` reads it from: the DataFrame, a CSV written cell by cell, or what pandas,
    pyarrow or the database store from the DataFrame (their column types, as a user's own export). Returns
    what :func:`read` reads. A table that cannot be stored there is no input of that path."""
    names, n = list(data), case.n
    try:
        df = frame(case, data)
        if path == "dataframe":
            return df
        parts = [range(n)] if path in ("csv", "parquet") else [range(n // 2), range(n // 2, n)]
        if path in ("csv", "csv-shards"):
            files = [where / f"part-{k}.csv" for k in range(len(parts))]
            for file, rows in zip(files, parts):
                with open(file, "w", newline="", encoding="utf-8") as fh:
                    csv.writer(fh).writerows([names] + [[text(data[c][r]) for c in names] for r in rows])
            return files
        if path in ("parquet", "parquet-shards"):
            files = [where / f"part-{k}.parquet" for k in range(len(parts))]
            for file, rows in zip(files, parts):
                df.iloc[list(rows)].to_parquet(file, index=False)
            return files
        ordered = df.assign(_row=range(n))
        query = f"SELECT {', '.join(names)} FROM {{}} ORDER BY _row"
        if path == "duckdb":
            ordered.to_parquet(where / "private.parquet", index=False)
            return "duckdb:///:memory:", query.format(f"read_parquet('{where / 'private.parquet'}')")
        url = f"sqlite:///{where / 'private.db'}" if path == "sqlite" else where
        store_sql(url, "private", ordered)
        return url, query.format("private")
    except Exception:
        reject()


def read(path, case, stored) -> list[pd.DataFrame]:
    """The batches of rows a fit reads from ``stored``, each checked once against the declared schema as its source
    checks them (a DataFrame as :meth:`~mmdsynth.engines.InMemory.validated` does, the others as they are read)."""
    if path == "dataframe":
        return [case.declared.validate(stored)]
    if path in ("csv", "parquet"):
        return [read_table(stored[0], case.declared)]
    if path.endswith("shards"):
        table = ShardedTable(stored, case.declared, n_records=case.n, batch_rows=SHARD_ROWS)
        return [batch for s in range(table.n_shards) for batch, _ in table.batches(s)]
    return [read_sql(*stored, case.declared)]


@dataclass
class Seen:
    """What a fit computes from the rows: schema-inference counts, inferred category texts, features, labels."""
    counts: dict
    texts: dict
    X: np.ndarray
    y: np.ndarray | None


def fit_view(case, batches) -> Seen:
    """What a fit computes from the source's checked batches: schema inference's counts of them as they are, then
    the encoder's features of them as the statistics read them (:func:`~mmdsynth.statistics.rows.checked_rows`: as
    they are under the declared schema's check, checked again against a schema completed by inference)."""
    counts, texts, inference = {}, {}, SchemaInference.of(case.declared)
    if inference:
        counts = reduce(add_partials, [SchemaCounts(inference)(b) for b in batches])
        texts = {name: [None if missing(v) else v for b in batches for v in b[name]] for name in inference.categorical}
    encoder, label = TableEncoder(case.completed), case.declared.label is not None
    signature = TableEncoder.signature_of(case.declared)
    encoded = [encoder.encode(checked_rows(checked_batch(b, signature), encoder)[0], with_label=label, checked=True)
               for b in batches]
    return Seen(counts, texts, np.concatenate([X for X, _ in encoded]),
                np.concatenate([y for _, y in encoded]) if label else None)


def outcome(path, case, data, where):
    """What a fit sees of ``data`` read through ``path``: a :class:`Seen`, or the error it raises."""
    stored = store(path, case, data, where)
    try:
        return fit_view(case, read(path, case, stored))
    except Exception as exc:        # noqa: BLE001 - compared below: type, message, no values quoted
        return exc


def shown(result) -> str:
    return "read" if isinstance(result, Seen) else f"{type(result).__name__}: {result}"


def assert_isolated(case, a, b, where):
    """Replacing row i changes nothing of the other rows: both neighbours read, or both raise the same typed
    error quoting no value; every other row's features, labels and inferred category texts are bit-identical;
    each inferred column's counts differ by at most the one row (-1 in one cell, +1 in another)."""
    if not (isinstance(a, Seen) and isinstance(b, Seen)):
        assert shown(a) == shown(b), f"one record changed how the table is read:\n  {shown(a)}\n  {shown(b)}"
        assert isinstance(a, (DataValidationError, SchemaError)), f"an input error that is not typed: {shown(a)}"
        quoted = sorted(t for t in case.private_texts(where) if t in str(a))
        assert not quoted, f"the message quotes private values {quoted}: {a}"
        return
    keep = np.arange(case.n) != case.i
    np.testing.assert_array_equal(a.X[keep], b.X[keep], err_msg="another row's encoded features changed")
    assert a.X[keep].tobytes() == b.X[keep].tobytes(), "another row's encoded features changed (bits)"
    if a.y is not None:
        np.testing.assert_array_equal(a.y[keep], b.y[keep], err_msg="another row's label code changed")
    for name, texts in a.texts.items():
        others = lambda t: [v for r, v in enumerate(t) if r != case.i]    # noqa: E731
        assert others(texts) == others(b.texts[name]), f"column {name!r}: other rows' category texts changed"
    for name, counts in a.counts.items():
        if isinstance(counts, dict):
            moved = sum(abs(counts.get(k, 0) - b.counts[name].get(k, 0)) for k in set(counts) | set(b.counts[name]))
        else:
            moved = float(np.abs(counts - b.counts[name]).sum())
        assert moved <= 2, f"column {name!r}: one record moved the schema-inference counts by {moved}"


# -- fixtures ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def postgres_url():
    """A throwaway PostgreSQL cluster for this module (:func:`support.throwaway_postgres`)."""
    yield from throwaway_postgres()


@pytest.fixture
def where(request, tmp_path_factory):
    """Where the test's path stores its tables (one place for both neighbours: messages name it alike)."""
    path = request.node.callspec.params.get("path", "dataframe")
    if path == "postgresql":
        pytest.importorskip("psycopg")
        return request.getfixturevalue("postgres_url")
    if path == "duckdb":
        pytest.importorskip("duckdb_engine")
    return tmp_path_factory.mktemp(path)


# -- generated neighbours ---------------------------------------------------------------------------------
def check(path, where, examples, dtype=None):
    @settings(max_examples=examples, derandomize=True, database=None, deadline=None, print_blob=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
    @given(neighbours(path in MIXED, dtype))
    def replace_one_row(case):
        assert_isolated(case, outcome(path, case, case.a, where), outcome(path, case, case.b, where), where)
    replace_one_row()


@pytest.mark.parametrize("path", PATHS)
def test_one_record_never_changes_how_another_is_read(path, where):
    check(path, where, FAST)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_dtype_of_a_dataframe_column(dtype, where):
    check("dataframe", where, FAST_DTYPE, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_one_record_never_changes_how_another_is_read_hundreds(path, where):
    check(path, where, SLOW)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_dtype_of_a_dataframe_column_hundreds(dtype, where):
    check("dataframe", where, SLOW_DTYPE, dtype)


# -- the regressions of issue 45, items 1 and 2 -----------------------------------------------------------
def pair(columns: list, a: dict, i: int, new: dict, inferred=None, **schema) -> Case:
    """A hand-written case: row ``i`` of table ``a`` replaced by ``new`` (column -> value); the DataFrame's
    dtypes are the ones pandas infers."""
    b = {name: values[:i] + [new.get(name, values[i])] + values[i + 1:] for name, values in a.items()}
    return Case({"columns": columns, **schema}, dict.fromkeys(a), a, b, i, inferred or {})


def both(path, case, where):
    a, b = outcome(path, case, case.a, where), outcome(path, case, case.b, where)
    assert_isolated(case, a, b, where)
    return a, b


VISIT = {"name": "visit", "type": "datetime", "bounds": DATE_BOUNDS, "resolution": "D"}
#: day-first dates whose days are all <= 12: month-first reads them too, as other dates
DAY_FIRST = ["05/03/2020", "12/01/2020", "07/11/2020", "10/10/2020", "02/08/2020"]


def assert_dates(X, texts, keep):
    """The encoded dates are the texts' instants in UTC (naive: UTC), scaled to the declared bounds."""
    lo, hi = (seconds(b) for b in DATE_BOUNDS)
    want = [(seconds(t) - lo) / (hi - lo) for t in texts]
    np.testing.assert_allclose(X[keep, 0], np.asarray(want)[keep], rtol=0, atol=1e-6)


@pytest.mark.parametrize("path", PATHS)
def test_day_first_dates_without_a_format_are_refused_alike(path, where):
    """Issue 45, item 1: row 0 "01/02/2020" made pandas read every date month-first, "13/02/2020" day-first
    (re-dating the other rows). Without a declared format such text is not ISO 8601: both neighbours are
    refused alike, naming the column and a count, never a value."""
    case = pair([VISIT], {"visit": ["01/02/2020"] + DAY_FIRST}, 0, {"visit": "13/02/2020"})
    a, _ = both(path, case, where)
    assert isinstance(a, DataValidationError) and "visit" in str(a), shown(a)
    if path == "dataframe":
        assert " 6 " in f" {a} ", f"the refusal counts the 6 values that are not ISO dates: {a}"


@pytest.mark.parametrize("path", PATHS)
def test_day_first_dates_in_a_declared_format_are_read_per_value(path, where):
    case = pair([{**VISIT, "format": "%d/%m/%Y"}], {"visit": ["01/02/2020"] + DAY_FIRST}, 0, {"visit": "13/02/2020"})
    a, b = both(path, case, where)
    iso = [datetime.strptime(t, "%d/%m/%Y").date().isoformat() for t in case.b["visit"]]
    assert_dates(b.X, iso, slice(None))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("i", [0, 2])
def test_an_iso_date_with_a_time_part_changes_no_other_date(path, i, where):
    """Issue 45, item 1: one row with a time part turned the release into a refusal (one format for the column)."""
    dates_ = ["2020-01-02", "2020-03-05", "2020-07-11", "2020-10-10"]
    case = pair([VISIT], {"visit": dates_}, i, {"visit": dates_[i] + "T10:30:00"})
    a, b = both(path, case, where)
    assert isinstance(a, Seen) and isinstance(b, Seen), f"ISO 8601 dates are read: {shown(a)} / {shown(b)}"
    assert_dates(b.X, case.b["visit"], slice(None))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("other", ["+02:00", "Z"])
def test_one_offset_among_others_changes_no_other_date(path, other, where):
    """Issue 45, item 1: one row at +02:00 among +01:00 rows turned the release into a refusal; each value
    is converted to UTC on its own."""
    dates_ = [f"2020-0{m}-0{m}T12:00:00+01:00" for m in range(1, 6)]
    case = pair([VISIT], {"visit": dates_}, 1, {"visit": "2020-02-02T12:00:00" + other})
    a, b = both(path, case, where)
    assert isinstance(a, Seen) and isinstance(b, Seen), f"ISO 8601 dates are read: {shown(a)} / {shown(b)}"
    assert_dates(b.X, case.b["visit"], slice(None))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "inferred"])
def test_numbers_as_categories_stay_their_text_when_one_value_is_missing(path, declared, where):
    """Issue 45, item 2: an int64 column of category codes becomes float64 once one value is missing, and
    ``astype(str)`` turned every other row's "1" into "1.0" (declared categories: refused; inferred: released
    as "1.0"). Each number is its category's text, whatever the column's dtype."""
    codes = [1, 2, 10, 2, 1]
    col = {"name": "code", "type": "categorical", "nullable": True, **({"categories": [1, 2, 10]} if declared else {})}
    inferred = None if declared else {"code": {"categories": ["1", "10", "2", OTHER]}}
    case = pair([col], {"code": codes}, 2, {"code": None}, inferred)
    a, b = both(path, case, where)
    assert isinstance(a, Seen) and isinstance(b, Seen), f"{shown(a)} / {shown(b)}"
    cats = ["1", "2", "10"] if declared else ["1", "10", "2", OTHER]
    keep = np.arange(5) != 2
    np.testing.assert_array_equal(b.X[keep].argmax(1), [cats.index(str(c)) for c in np.asarray(codes)[keep]])
    if not declared:
        assert [b.texts["code"][k] for k in (0, 1, 3, 4)] == ["1", "2", "2", "1"]
        assert (a.counts["code"], b.counts["code"]) == ({"1": 2, "2": 2, "10": 1}, {"1": 2, "2": 2})


@pytest.mark.parametrize("path", PATHS)
def test_number_labels_stay_their_class_when_one_is_written_as_a_float(path, where):
    """Issue 45, item 2, for the label: one 1.0 among int labels makes the column float64; every other row
    keeps its class."""
    case = pair([{"name": "x", "type": "numeric", "bounds": [0, 1]}],
                {"x": [0.1, 0.5, 0.9, 0.3], "y": [0, 1, 1, 0]}, 2, {"y": 1.0}, label="y", label_categories=[0, 1])
    a, b = both(path, case, where)
    assert isinstance(a, Seen) and isinstance(b, Seen), f"{shown(a)} / {shown(b)}"
    np.testing.assert_array_equal(b.y, [0, 1, 1, 0])


@pytest.mark.parametrize("boolean", [False, True])
def test_text_columns_read_once_per_distinct_text_read_each_value_alike(boolean):
    """A column of texts is read once per distinct text and spread back (the fast path); the result is, value by
    value, what reading that value alone gives, also where the column holds one non-text value (the general path)
    and where equal texts come as str and numpy str."""
    from mmdsynth.statistics.values import boolean_text, category_indices, category_text, category_texts

    read = boolean_text if boolean else category_text
    texts = ["true", " False ", "1", "0", "yes", "no", "a b", "1.0", "x"] if boolean else \
        ["a", " b", "1", "1.0", "001", "Private", "private", "é", ""]
    rng = np.random.default_rng(0)
    for values in ([texts[i] for i in rng.integers(0, len(texts), 500)],
                   [texts[i] for i in rng.integers(0, len(texts), 500)] + [1],
                   [np.str_(t) if k % 2 else t for k, t in enumerate(texts * 3)]):
        expected = []
        for v in values:
            try:
                expected.append(read(v))
            except Exception as exc:          # a value that cannot be read: the column read must refuse too
                expected = type(exc)
                break
        s = pd.Series(values, dtype=object)
        if isinstance(expected, type):
            with pytest.raises(expected):
                category_texts(s, boolean=boolean)
        else:
            assert category_texts(s, boolean=boolean).tolist() == expected
            if not boolean:             # a value's index among categories given as texts (clique counts' codes)
                lookup = {t: i for i, t in enumerate(sorted(set(expected))[:4])}
                assert category_indices(s, lookup, 9).tolist() == [lookup.get(t, 9) for t in expected]


# -- issue 80, leak 1: missing-value markers per value, never by the column's dtype ------------------------
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["numeric", "categorical"])
def test_a_marker_of_another_type_changes_no_other_rows_reading(path, kind, where):
    """Markers ["?", "-1"]: pandas gives an int64 column when every cell is a number, and the int -1 never
    equalled the text "-1"; one record holding "?" turned the column into text, and then every -1 read as missing
    (numeric: D refused for -1 out of bounds, D' released; categorical: the same). A cell is missing iff its own
    canonical text is a marker: -1, -1.0 and "-1" alike, whatever the column's dtype."""
    col = ({"name": "age", "type": "numeric", "bounds": [0, 120], "nullable": True} if kind == "numeric" else
           {"name": "age", "type": "categorical", "categories": [30, 45, 60], "nullable": True})
    ages = [30, -1, 45, -1, 60, 30]
    case = pair([col], {"age": ages}, 0, {"age": "?"}, missing_values=["?", "-1"])
    if path not in MIXED:           # a typed store holds one type a column: the neighbour's export is text
        case.b["age"] = ["?"] + [str(v) for v in ages[1:]]
    a, b = both(path, case, where)
    assert isinstance(a, Seen) and isinstance(b, Seen), f"{shown(a)} / {shown(b)}"
