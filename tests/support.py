"""Tables shared by several test modules (no test module imports another: they import these)."""
import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from mmdsynth import Schema
from mmdsynth.privacy.mechanisms import NoiseSource
from mmdsynth.privacy.sampling import PoissonSampler


SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "bounds": [17, 90], "integer": True},
        {"name": "score", "type": "numeric", "bounds": [-1.0, 1.0]},
        {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"]},
        {"name": "smoker", "type": "categorical", "categories": ["no", "yes"]},
    ],
    "label": "y", "label_categories": ["neg", "pos"],
}


def toy_table(n=400, seed=0):
    """y depends on age and colour, so a model can learn something."""
    g = np.random.default_rng(seed)
    age = g.integers(17, 91, n)
    colour = g.choice(["red", "green", "blue"], n)
    pos = (age > 50) ^ (colour == "blue")
    return pd.DataFrame({"age": age, "score": g.uniform(-1, 1, n).round(3), "colour": colour,
                         "smoker": g.choice(["no", "yes"], n), "y": np.where(pos, "pos", "neg")})


TINY = dict(iterations=30, batch_size=100, noise_seed=0, n_features=200)


WIDE = {"columns": [{"name": "amount", "type": "numeric", "bounds": [-1e6, 2e6]},
                    {"name": "month", "type": "numeric", "bounds": [0, 100], "integer": True},
                    {"name": "rate", "type": "numeric", "bounds": [0, 1]}],
        "label": "y", "label_categories": ["a", "b"]}


def visits(n_persons=400, seed=0, mean_rows=4.0):
    """A table of visits: each person 1 + Poisson(mean_rows - 1) rows (public made-up numbers)."""
    g = np.random.default_rng(seed)
    counts = 1 + g.poisson(mean_rows - 1, n_persons)
    df = toy_table(int(counts.sum()), seed)
    df["patient"] = np.repeat([f"P{i:05d}" for i in range(n_persons)], counts)
    return df, counts


def visit_shards(tmp_path, df, k=3, seed=0):
    """``df``'s rows shuffled into ``k`` CSV shards: most persons' rows sit in several shards."""
    from mmdsynth.data import ShardedTable

    perm = np.random.default_rng(seed).permutation(len(df))
    for i, part in enumerate(np.array_split(perm, k)):
        df.iloc[part].to_csv(tmp_path / f"part{i}.csv", index=False)
    return lambda n, **kw: ShardedTable(tmp_path / "part*.csv", Schema.from_dict(SCHEMA).with_privacy_unit("patient"),
                                        n_records=n, **kw)


def heavy_table(n=2000, seed=0):
    """Half the amounts exactly 0, the rest log-normal (median ~3,000), months bunched at 12-24,
    rates mostly exactly 0 or 1: what wide public bounds make hard."""
    g = np.random.default_rng(seed)
    amount = np.where(g.random(n) < 0.5, 0.0, np.exp(g.normal(8, 1.5, n))).clip(0, 2e6)
    month = np.where(g.random(n) < 0.7, g.integers(12, 25, n), g.integers(1, 37, n))
    rate = np.where(g.random(n) < 0.6, 0.0, np.where(g.random(n) < 0.5, 1.0, g.random(n).round(2)))
    y = np.where((amount > 3000) ^ (month > 20), "a", "b")
    return pd.DataFrame({"amount": amount, "month": month, "rate": rate, "y": y})


def partial_schema():
    """SCHEMA without the bounds of 'score' and the categories of 'colour'."""
    d = json.loads(json.dumps(SCHEMA))
    del d["columns"][1]["bounds"]
    del d["columns"][2]["categories"]
    return Schema.from_dict(d)


def table_with_rare_value(n=3000, seed=0):
    df = toy_table(n, seed)
    df.loc[0, "colour"] = "violet"   # one record: must never be released as a category
    return df


def break_noise(monkeypatch, factor):
    """The deliberately broken mechanism: every noise std divided by ``factor``."""
    original = NoiseSource.add_noise
    monkeypatch.setattr(NoiseSource, "add_noise", lambda self, value, std: original(self, value, std / factor))


class PublicSampler(PoissonSampler):
    """TEST DOUBLE of the old behaviour: the sample follows from a public seed (every run the same)."""

    def __init__(self, seed=None):
        super().__init__(seed=0)


def preset_rows(df):
    return df.astype(str).agg("|".join, axis=1).value_counts()


EXPECTED_ROWS = {
    "digits": ((1437, 1, 8, 8), (360, 1, 8, 8)),
    "mnist": ((60000, 1, 28, 28), (10000, 1, 28, 28)),
    "fashion-mnist": ((60000, 1, 28, 28), (10000, 1, 28, 28)),
    "cifar10": ((50000, 3, 32, 32), (10000, 3, 32, 32)),
    "adult": ((32561, 15), (16281, 15)),
    "census": ((99762, 41), None),
    "cervical": ((858, 36), None),
    "epileptic": ((11500, 179), None),
    "intrusion": ((494021, 42), None),
}


#: DP-KIP from the paper's N(0, I) start (tests of the DP-SGD steps; the private starts have their own tests)
KIP_TINY = dict(n_classes=10, images_per_class=2, epochs=2, batch_size=100, lr=1e-2, clip=1e-2, reg=1e-6, seed=0,
                start="noise")


def interrupt_on_call(monkeypatch, module, name: str, n: int):
    """Make the ``n``-th call of ``module.name`` raise KeyboardInterrupt (Ctrl-C at that point);
    returns the real function, to put back with monkeypatch.setattr."""
    real = getattr(module, name)
    calls = {"n": 0}

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(module, name, interrupted)
    return real


FIVE_CLASSES = ["a", "b", "c", "d", "rare"]
FIVE_SCHEMA = {"label": "y", "label_categories": FIVE_CLASSES, "columns": [
    {"name": "x1", "type": "numeric", "bounds": [0, 1]}, {"name": "x2", "type": "numeric", "bounds": [0, 1]},
    {"name": "k", "type": "categorical", "categories": ["u", "v", "w"]}]}


def five_class_table(n, seed, rare=True):
    """Four learnable classes and, with ``rare``, a fifth held by one row (row 0)."""
    g = np.random.default_rng(seed)
    y = g.integers(0, 4, n)
    x1 = np.clip(0.2 * y + g.normal(0.1, 0.08, n), 0, 1)
    x2 = np.clip(g.random(n) * 0.5 + 0.1 * (y % 2), 0, 1)
    k = np.array(["u", "v", "w"])[(y + g.integers(0, 2, n)) % 3]
    df = pd.DataFrame({"x1": x1, "x2": x2, "k": k, "y": np.array(FIVE_CLASSES)[y]})
    if rare:
        df.loc[0, "y"] = "rare"
    return df


# -- issue 32: nullable, datetime and id columns -------------------------------------------------
MIXED_SCHEMA = {"label": "y", "label_categories": ["lo", "hi"], "columns": [
    {"name": "pid", "type": "id", "integer": True, "bounds": [1, 99999]},
    {"name": "age", "type": "numeric", "bounds": [18, 90], "integer": True},
    {"name": "income", "type": "numeric", "bounds": [0, 200000], "nullable": True},
    {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"], "nullable": True},
    {"name": "visit", "type": "datetime", "bounds": ["2020-01-01", "2022-12-31"], "resolution": "D"},
]}


def mixed_table(n=2000, seed=0):
    """IDs, ages, an income missing at random in 20 % of rows, a colour missing in about half the rows
    over 60 (never below), a visit date, and a label that follows age."""
    g = np.random.default_rng(seed)
    age = g.integers(18, 91, n)
    income = np.where(g.random(n) < 0.2, np.nan, (age * 1000 + g.normal(0, 5000, n)).clip(0, 200000))
    colour = g.choice(["red", "green", "blue"], n).astype(object)
    colour[(age > 60) & (g.random(n) < 0.5)] = None
    visit = pd.Timestamp("2020-01-01") + pd.to_timedelta(g.integers(0, 1096, n), unit="D")
    y = np.where(age + g.normal(0, 10, n) > 50, "hi", "lo")
    return pd.DataFrame({"pid": g.permutation(np.arange(1, 100000))[:n], "age": age, "income": income,
                         "colour": colour, "visit": visit, "y": y})


def _pg_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def throwaway_postgres():
    """A throwaway PostgreSQL cluster on a Unix socket (as the postgres user when the tests run as root), for a
    module's fixture: ``yield from throwaway_postgres()`` yields its SQLAlchemy URL, and the cluster is stopped and
    deleted after. Skips when PostgreSQL is not installed (Debian's package; .ci/run installs it)."""
    import pytest            # here: benchmarks/column_types.py imports this module without pytest

    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it)")
    root = Path(tempfile.mkdtemp(prefix="mmdsynth-pg-", dir="/tmp"))      # the postgres user must reach it
    run_as = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    subprocess.run(run_as + [initdb, "-D", str(data), "-A", "trust", "-U", "mmdsynth"], check=True, capture_output=True)
    subprocess.run(run_as + [pg_ctl, "-D", str(data), "-w", "-l", str(root / "log"), "-o",
                             f"-p {port} -k {root} -c listen_addresses='' -c fsync=off", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://mmdsynth@/postgres?host={root}&port={port}"
    finally:
        engine = _SQL_ENGINES.pop(f"postgresql+psycopg://mmdsynth@/postgres?host={root}&port={port}", None)
        if engine is not None:
            engine.dispose()
        subprocess.run(run_as + [pg_ctl, "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


_SQL_ENGINES: dict = {}


def store_sql(url, table: str, df: pd.DataFrame) -> None:
    """``df`` stored as ``table`` in the database at ``url`` (replacing it: dropped, then created by pandas with the
    column types it infers), in one transaction. One engine per URL, kept (the record-isolation tests store hundreds
    of tables: a new engine and pandas' reflection of the old table cost 55 ms a store); :func:`throwaway_postgres`
    disposes its server's."""
    import sqlalchemy as sa

    engine = _SQL_ENGINES.get(url) or _SQL_ENGINES.setdefault(url, sa.create_engine(url))
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
        df.to_sql(table, conn, index=False)


def run_cli(capsys, *args):
    """``mmdsynth ARGS`` in this process, as the console script runs it: (exit status, stdout, stderr). The CLI's
    own parsing, checks, choices and printing, without a second start-up of torch and JAX (about 5 s a run); a test
    that needs a fresh process (a string hash, a kill) starts one itself."""
    from mmdsynth.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# -- issue 84: the relational datasets' schemas ------------------------------------------------------------
ID = {"type": "id", "integer": True, "bounds": [1, 99999]}
LAB = {"type": "numeric", "nullable": True}
# written from relational/README.md's codebook (public ranges, wide on purpose), never from the data
PBCSEQ = {"privacy_unit": "patients", "tables": {
    "patients": {"primary_key": "patient_id", "columns": [
        {"name": "patient_id", **ID}, {"name": "futime", "type": "numeric", "bounds": [0, 6000]},
        {"name": "status", "type": "categorical", "categories": ["0", "1", "2"]},
        # "two codes": R's codebook says 1 and 2, this export may start at 0; the declared set holds both readings
        {"name": "trt", "type": "categorical", "categories": ["0", "1", "2"]},
        {"name": "age", "type": "numeric", "bounds": [18, 90]},
        {"name": "sex", "type": "categorical", "categories": ["m", "f"]}]},
    "visits": {"primary_key": "visit_id", "foreign_keys": {"patient_id": "patients"}, "columns": [
        {"name": "visit_id", **ID}, {"name": "patient_id", **ID},
        {"name": "day", "type": "numeric", "bounds": [0, 6000]},
        *({"name": c, "type": "categorical", "categories": ["0", "1"], "nullable": True}
          for c in ("ascites", "hepato", "spiders")),
        {"name": "edema", "type": "categorical", "categories": ["0", "0.5", "1"], "nullable": True},
        {"name": "bili", **LAB, "bounds": [0, 50]}, {"name": "chol", **LAB, "bounds": [0, 2000]},
        {"name": "albumin", **LAB, "bounds": [0, 10]}, {"name": "alk.phos", **LAB, "bounds": [0, 15000]},
        {"name": "ast", **LAB, "bounds": [0, 1500]}, {"name": "platelet", **LAB, "bounds": [0, 1000]},
        {"name": "protime", **LAB, "bounds": [5, 40]},
        {"name": "stage", "type": "categorical", "categories": ["1", "2", "3", "4"], "nullable": True}]}}}
MATHACH = {"privacy_unit": "schools", "tables": {
    "schools": {"primary_key": "school_id", "columns": [
        {"name": "school_id", **ID}, {"name": "Size", "type": "numeric", "bounds": [0, 3000]},
        {"name": "Sector", "type": "categorical", "categories": ["Public", "Catholic"]},
        {"name": "PRACAD", "type": "numeric", "bounds": [0, 1]}, {"name": "DISCLIM", "type": "numeric", "bounds": [-3, 3]},
        {"name": "HIMINTY", "type": "categorical", "categories": ["0", "1"]},
        {"name": "MEANSES", "type": "numeric", "bounds": [-2, 2]}]},
    "students": {"primary_key": "student_id", "foreign_keys": {"school_id": "schools"}, "columns": [
        {"name": "student_id", **ID}, {"name": "school_id", **ID},
        {"name": "Minority", "type": "categorical", "categories": ["Yes", "No"]},
        {"name": "Sex", "type": "categorical", "categories": ["Male", "Female"]},
        {"name": "SES", "type": "numeric", "bounds": [-4, 3]}, {"name": "MathAch", "type": "numeric", "bounds": [-5, 30]}]}}}
# nycflights13 (relational/README.md; R's nycflights13 documentation): a plane with all its flights is the unit. The
# carriers are the public airlines table's 16 codes; planes' manufacturer and model, and flights' destinations, are
# left out (no public list of their values); flights whose tailnum is missing or not in planes are dropped by the
# benchmark before the fit (their plane is unknown)
NYCFLIGHTS = {"privacy_unit": "planes", "tables": {
    "planes": {"primary_key": "tailnum", "columns": [
        {"name": "tailnum", "type": "id"}, {"name": "year", "type": "numeric", "bounds": [1950, 2013], "integer": True,
                                            "nullable": True},
        {"name": "type", "type": "categorical", "categories": ["Fixed wing multi engine", "Fixed wing single engine",
                                                               "Rotorcraft"]},
        {"name": "engines", "type": "numeric", "bounds": [1, 4], "integer": True},
        {"name": "seats", "type": "numeric", "bounds": [1, 500], "integer": True},
        {"name": "engine", "type": "categorical", "categories": ["Turbo-fan", "Turbo-jet", "Turbo-prop",
                                                                 "Reciprocating", "Turbo-shaft", "4 Cycle"]}]},
    "flights": {"foreign_keys": {"tailnum": "planes"}, "columns": [
        {"name": "tailnum", "type": "id"}, {"name": "month", "type": "numeric", "bounds": [1, 12], "integer": True},
        {"name": "dep_delay", "type": "numeric", "bounds": [-60, 1440], "nullable": True},
        {"name": "arr_delay", "type": "numeric", "bounds": [-120, 1440], "nullable": True},
        {"name": "carrier", "type": "categorical", "categories": ["9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA",
                                                                  "MQ", "OO", "UA", "US", "VX", "WN", "YV"]},
        {"name": "origin", "type": "categorical", "categories": ["EWR", "JFK", "LGA"]},
        {"name": "air_time", "type": "numeric", "bounds": [0, 720], "nullable": True},
        {"name": "distance", "type": "numeric", "bounds": [0, 5000]},
        {"name": "hour", "type": "numeric", "bounds": [0, 24], "integer": True}]}}}
