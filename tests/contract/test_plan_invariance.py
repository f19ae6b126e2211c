"""Every decision from public facts (issue 80): for worst-case neighbours, the plan a fit makes (the method, its
settings) is identical, through every input path and under both units.

A plan may depend on the schema, the public count of records (the rows under a row unit; the **persons** under a
person unit, never their rows), epsilon, delta and the user's options, nothing else. Each case below reads two
neighbouring tables through one input path (a DataFrame of each dtype pandas gives, CSV and Parquet files, CSV and
Parquet shards, SQLite, DuckDB), lets the table default choose (``mmdsynth.fit`` and ``mmdsynth fit`` without a
method), and records what it chose: the method and every parameter of the model it builds. The fits stop there (the
methods' ``fit`` is replaced by a recorder), so the whole matrix takes seconds. The stages, sensitivities and noise
scales of every method under a person unit are compared on fitted releases in
``tests/contract/test_persons_contract.py``; how every value is read, in ``test_record_isolation.py``.

Neighbours:
- row unit: one record changed, and one record holding a missing-value marker of another type (``"?"`` in a column of
  numbers turns pandas' int64 column into text);
- person unit (1,000 persons): one person with 60 rows (3,057 rows in all: the row count crosses the hybrid's 3,000)
  against that person with 1 row, and with 2,000 rows of new values.
"""
import json

import numpy as np
import pandas as pd
import pytest

import mmdsynth
from mmdsynth.cli import main
from mmdsynth.methods.contract import METHODS

from support import SCHEMA, toy_table, store_sql

sa = pytest.importorskip("sqlalchemy")
pytest.importorskip("pyarrow")

PATHS = ["dataframe", "dataframe-object", "csv", "parquet", "csv-shards", "parquet-shards", "sqlite", "duckdb"]
PERSONS, HEAVY_ROWS = 1000, 60


class Planned(Exception):
    """Raised by the recorder in place of a fit: the plan was made, nothing is read."""


@pytest.fixture
def plans(monkeypatch):
    """Every method's ``fit``, and the planner ``mmdsynth.fit`` runs for a table (``table_planner``), records (method,
    parameters) and stops."""
    seen = []

    def record(self, *args, **kwargs):
        seen.append((self.method, json.dumps(self.get_params(), sort_keys=True, default=str)))
        raise Planned()

    for cls in set(METHODS.values()):
        monkeypatch.setattr(cls, "fit", record)
        if hasattr(cls, "table_planner"):
            monkeypatch.setattr(cls, "table_planner", record)
    return seen


def schema(unit: bool) -> dict:
    d = json.loads(json.dumps(SCHEMA))
    d["columns"][0]["nullable"] = True              # age: missing values marked "?" or "-9"
    d["missing_values"] = ["?", "-9"]
    if unit:
        d["columns"].append({"name": "pid", "type": "id"})
        d["privacy_unit"] = "pid"
    return d


def base_table(unit: bool) -> pd.DataFrame:
    """Without a unit: 3,000 rows (the hybrid's line), 25 of them aged -9 (a marker). With one: 1,000 persons,
    person p0 with HEAVY_ROWS rows (3,057 rows in all), the others 3 rows."""
    if not unit:
        df = toy_table(3000, 0)
        df.loc[1:25, "age"] = -9
        return df
    counts = np.asarray([HEAVY_ROWS] + [3] * (PERSONS - 1))   # 3,057 rows: p0 lifts them over 3,000 (1 row: 2,998)
    df = toy_table(int(counts.sum()), 0)
    df["pid"] = np.repeat([f"p{i}" for i in range(PERSONS)], counts)
    return df


def neighbours(unit: bool) -> list[tuple[str, pd.DataFrame]]:
    df = base_table(unit)
    if not unit:
        other = df.astype({"age": object})
        other.loc[0, "age"] = "?"                   # one marker of another type: the column becomes text
        changed = df.copy()
        changed.loc[0, ["age", "colour", "y"]] = [90, "blue", "pos"]
        return [("table", df), ("one record changed", changed), ("one record's age '?'", other)]
    rest = df[df.pid != "p0"]
    one = pd.concat([df[df.pid == "p0"].iloc[:1], rest], ignore_index=True)
    new = toy_table(2000, 7).assign(pid="p0", colour="blue", smoker="yes")
    many = pd.concat([new, rest], ignore_index=True)
    return [("p0 with 60 rows", df), ("p0 with 1 row", one), ("p0 with 2,000 new rows", many)]


def stored(path: str, df: pd.DataFrame, where):
    """Put ``df`` where ``path`` reads it from; returns what the entry points take."""
    if path == "dataframe":
        return df
    if path == "dataframe-object":                  # what pd.read_csv of a file with "?" cells gives: text
        return pd.read_csv(_csv(df, where / "t.csv"), dtype=object, keep_default_na=False)
    if path == "csv":
        return _csv(df, where / "t.csv")
    # typed stores hold one type a column: a column of numbers and "?" is exported as text, as a user's would be
    df = df.astype({c: str for c in df.columns if df[c].dtype == object and df[c].map(type).nunique() > 1})
    if path == "parquet":
        df.to_parquet(where / "t.parquet", index=False)
        return where / "t.parquet"
    if path.endswith("shards"):
        parts = np.array_split(np.random.default_rng(1).permutation(len(df)), 3)
        for i, part in enumerate(parts):
            if path == "csv-shards":
                _csv(df.iloc[part], where / f"part{i}.csv")
            else:
                df.iloc[part].to_parquet(where / f"part{i}.parquet", index=False)
        return sorted(where.glob("part*"))
    url = f"sqlite:///{where / 't.db'}" if path == "sqlite" else "duckdb:///" + str(where / "t.duckdb")
    if path == "duckdb":
        pytest.importorskip("duckdb_engine")
    store_sql(url, "private", df)
    return url


def _csv(df, path):
    df.to_csv(path, index=False)
    return path


def python_plan(path, df, where, unit, plans):
    """What ``mmdsynth.fit`` without a method plans for the table read through ``path``."""
    from mmdsynth.data import ShardedTable, read_sql, read_table

    s = mmdsynth.Schema.from_dict(schema(unit))
    data = stored(path, df, where)
    if path in ("csv", "parquet"):
        data = read_table(data, s, label="y")
    elif path.endswith("shards"):
        data = ShardedTable(data, s, n_records=PERSONS if unit else len(df))
    elif path in ("sqlite", "duckdb"):
        data = read_sql(data, "SELECT * FROM private", s, label="y")
    with pytest.raises(Planned):
        mmdsynth.fit(data, label="y", schema=s, epsilon=1.0)
    return plans.pop()


def cli_plan(path, df, where, unit, plans, capsys):
    """What ``mmdsynth fit`` without --method plans (and prints) for the table read through ``path``."""
    (where / "schema.json").write_text(json.dumps(schema(unit)))
    data = stored(path, df, where)
    flags = ["--schema", str(where / "schema.json"), "--label", "y", "--epsilon", "1", "--out", str(where / "run")]
    if path == "csv":
        flags += ["--csv", str(data)]
    elif path.endswith("shards"):
        flags += ["--shards", str(where / "part*.csv"), "--n-records", str(PERSONS if unit else len(df))]
    else:
        flags += ["--db", data, "--query", "SELECT * FROM private"]
    capsys.readouterr()
    with pytest.raises(Planned):
        main(["fit", *flags])
    printed = capsys.readouterr().out
    return plans.pop(), [line for line in printed.splitlines() if line.startswith("method:")]


@pytest.mark.parametrize("unit", [False, True], ids=["row unit", "person unit"])
@pytest.mark.parametrize("path", PATHS)
def test_the_table_default_plans_from_public_facts_only(path, unit, plans, tmp_path):
    got = {}
    for k, (what, df) in enumerate(neighbours(unit)):
        where = tmp_path / str(k)
        where.mkdir()
        got[what] = python_plan(path, df, where, unit, plans)
    first = next(iter(got.values()))
    assert all(v == first for v in got.values()), f"one record or person changed the plan: {got}"
    # under a person unit the count is the persons': 1,000, fewer than the hybrid's 3,000
    assert first[0] == ("dp-merf" if unit else "hybrid"), first


@pytest.mark.parametrize("unit", [False, True], ids=["row unit", "person unit"])
@pytest.mark.parametrize("path", ["csv", "csv-shards", "sqlite"])
def test_the_command_line_plans_and_prints_from_public_facts_only(path, unit, plans, tmp_path, capsys):
    got = {}
    for k, (what, df) in enumerate(neighbours(unit)):
        where = tmp_path / str(k)
        where.mkdir()
        got[what] = cli_plan(path, df, where, unit, plans, capsys)
    first = next(iter(got.values()))
    assert all(v == first for v in got.values()), f"one record or person changed the plan or its line: {got}"
    assert first[1] == [f"method: dp-merf (the table default for 1,000 persons, fewer than 3,000 and records x epsilon "
                        f"under 3,000: one kernel release "
                        f"keeps the whole budget; 500 generator iterations under 3,000 records, where more fit the "
                        f"noise; --method chooses another)"] if unit else \
        first[1][0].startswith("method: hybrid (the table default for 3,000 rows: "), first[1]
