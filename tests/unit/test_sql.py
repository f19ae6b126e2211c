"""Tables in databases (issue 32): read the private table with a query, write synthetic rows to a
table, through SQLite and a real PostgreSQL server that these tests start (Debian's package, which
.ci/run installs)."""
import json

import pandas as pd
import pytest

import mmdsynth
from mmdsynth import DPMERF, Schema
from mmdsynth.cli import main
from mmdsynth.data import read_sql, write_sql
from mmdsynth.errors import ArtifactError, DataValidationError, InvalidParameterError, SchemaError

from support import MIXED_SCHEMA, SCHEMA, mixed_table, throwaway_postgres, toy_table, store_sql

sa = pytest.importorskip("sqlalchemy")


@pytest.fixture(scope="module")
def postgres_url():
    """A throwaway PostgreSQL cluster for this module (:func:`support.throwaway_postgres`)."""
    yield from throwaway_postgres()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'private.db'}"
    return request.getfixturevalue("postgres_url")


def test_read_a_query_validated_against_the_schema(db):
    df = toy_table(300)
    store_sql(db, "patients", df)
    got = read_sql(db, "SELECT age, score, colour, smoker, y FROM patients WHERE age >= 17", SCHEMA_OBJ(), label="y")
    assert len(got) == 300 and list(got.columns) == list(df.columns)
    assert set(got["colour"]) <= {"red", "green", "blue"} and got["age"].between(17, 90).all()
    with pytest.raises(SchemaError, match=r"\['extra'\].*drop_unlisted=True"):
        read_sql(db, "SELECT *, 1 AS extra FROM patients", SCHEMA_OBJ())
    with pytest.raises(DataValidationError, match="the query failed"):
        read_sql(db, "SELECT * FROM no_such_table", SCHEMA_OBJ())
    store_sql(db, "holes", df.assign(colour=[None] + list(df["colour"][1:])))
    with pytest.raises((DataValidationError, SchemaError), match="colour"):
        read_sql(db, "SELECT * FROM holes", SCHEMA_OBJ())


def SCHEMA_OBJ():
    return Schema.from_dict(SCHEMA)


def test_fit_from_a_database_and_write_samples_back_in_one_transaction(db, tmp_path, capsys):
    store_sql(db, "patients", toy_table(400))
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    out = tmp_path / "m"
    assert main(["fit", "--method", "dp-merf", "--db", db, "--query", "SELECT * FROM patients", "--schema",
                 str(tmp_path / "s.json"), "--label", "y", "--iterations", "5", "--n-features", "50",
                 "--out", str(out), "-q"]) == 0
    assert mmdsynth.load(out).release_.dataset["name"] == "user:sql"
    assert main(["sample", str(out), "--n", "120", "--db", db, "--table", "synthetic"]) == 0
    assert "wrote 120 rows" in capsys.readouterr().out
    engine = sa.create_engine(db)
    with engine.connect() as conn:
        back = pd.read_sql(sa.text("SELECT * FROM synthetic"), conn)
    engine.dispose()
    assert len(back) == 120 and set(back["y"]) <= {"neg", "pos"}
    assert main(["sample", str(out), "--n", "10", "--db", db, "--table", "synthetic"]) == 2       # exists: refused
    assert "already exists" in capsys.readouterr().err
    assert main(["sample", str(out), "--n", "10", "--db", db, "--table", "synthetic", "--replace"]) == 0


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'out.db'}"
    df = toy_table(50)
    real = pd.DataFrame.to_sql

    def half_then_fail(self, name, con, **kw):
        real(self.iloc[:10], name, con, **kw)                     # ten rows in ...
        raise sa.exc.OperationalError("INSERT", {}, Exception("disk full"))
    monkeypatch.setattr(pd.DataFrame, "to_sql", half_then_fail)
    with pytest.raises(ArtifactError, match="nothing was written"):
        write_sql(df, url, "synthetic")
    monkeypatch.setattr(pd.DataFrame, "to_sql", real)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert not sa.inspect(conn).has_table("synthetic")       # ... rolled back
    engine.dispose()


def test_bad_urls_and_names_are_refused_without_showing_the_password():
    with pytest.raises(InvalidParameterError, match="cannot connect with database URL") as info:
        read_sql("nosuchdb+driver://me:s3cret@host/db", "SELECT 1", SCHEMA_OBJ())
    assert "s3cret" not in str(info.value)
    with pytest.raises(InvalidParameterError, match="table name"):
        write_sql(toy_table(5), "sqlite://", "bad name; drop")
    with pytest.raises(InvalidParameterError, match="query is empty"):
        read_sql("sqlite://", "  ", SCHEMA_OBJ())


def test_the_cli_names_what_a_database_fit_needs(tmp_path, capsys):
    assert main(["fit", "--method", "dp-merf", "--db", "sqlite://", "--out", str(tmp_path / "m")]) == 2
    assert "--db URL, --query SQL and --schema FILE.json (its label declared there or by --label COLUMN)" in capsys.readouterr().err


def test_the_model_api_reads_a_database_too(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    store_sql(url, "patients", toy_table(300))
    df = read_sql(url, "SELECT * FROM patients", SCHEMA_OBJ(), label="y")
    m = DPMERF(1.0, n_features=50, iterations=3, batch_size=50).fit(df, label="y", schema=SCHEMA_OBJ())
    assert len(m.sample(20)) == 20


def test_nullable_date_and_id_columns_from_a_database_fit_and_sample_with_their_types(db, tmp_path):
    """Issue 32's done-when: NULLs, a DATE and an ID column read from the database (PostgreSQL and
    SQLite), fitted and sampled: missing rates within 0.03 of the real ones, dates in bounds, fresh IDs."""
    df = mixed_table(3000)
    store_sql(db, "visits", df.assign(visit=df["visit"].dt.date))         # a SQL DATE column
    schema = Schema.from_dict(MIXED_SCHEMA)
    got = read_sql(db, "SELECT * FROM visits", schema, label="y")
    assert got["income"].isna().sum() == df["income"].isna().sum() and got["colour"].isna().sum() == df["colour"].isna().sum()
    m = DPMERF(**{**DPMERF.defaults_for("table"), "iterations": 300, "n_features": 300, "noise_seed": 5}).fit(
        got, label="y", schema=schema)
    s = m.sample(3000, seed=1)
    for col in ("income", "colour"):
        assert abs(s[col].isna().mean() - df[col].isna().mean()) <= 0.03, col
    assert s["visit"].between(pd.Timestamp("2020-01-01"), pd.Timestamp("2022-12-31")).all()
    assert s["pid"].is_unique and s["pid"].min() > 99999
    assert write_sql(s, db, "synthetic_visits") == 3000
    engine = sa.create_engine(db)
    with engine.connect() as conn:
        back = pd.read_sql(sa.text("SELECT * FROM synthetic_visits"), conn)
    engine.dispose()
    assert back["income"].isna().sum() == s["income"].isna().sum() and back["pid"].is_unique


def test_duckdb_reads_parquet_files_and_takes_samples(tmp_path):
    """DuckDB through SQLAlchemy (duckdb-engine): the private table is a Parquet file queried in place, and
    synthetic rows go into a DuckDB database file, all or nothing."""
    pytest.importorskip("duckdb_engine")
    df = mixed_table(1500)
    df.to_parquet(tmp_path / "visits.parquet")
    url = f"duckdb:///{tmp_path / 'local.duckdb'}"
    got = read_sql(url, f"SELECT * FROM read_parquet('{tmp_path / 'visits.parquet'}') WHERE age >= 18",
                   Schema.from_dict(MIXED_SCHEMA), label="y")
    assert len(got) == 1500 and got["income"].isna().sum() == df["income"].isna().sum()
    m = DPMERF(**{**DPMERF.defaults_for("table"), "iterations": 20, "n_features": 50}).fit(
        got, label="y", schema=MIXED_SCHEMA)
    s = m.sample(300, seed=0)
    assert write_sql(s, url, "synthetic") == 300
    with pytest.raises(ArtifactError, match="already exists"):
        write_sql(s, url, "synthetic")
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        back = pd.read_sql(sa.text("SELECT count(*) AS n, count(income) AS present FROM synthetic"), conn)
    engine.dispose()
    assert int(back["n"][0]) == 300 and int(back["present"][0]) == int(s["income"].notna().sum())
