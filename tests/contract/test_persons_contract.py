"""A person as the privacy unit (issue 48): replacing one person with all their rows (thousands of rows, or one)
moves every release of every method that can protect a person by at most the sensitivity its ledger entry
records, with m the number of persons; the rows of every other person are weighted exactly as before."""
import json
import re

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mmdsynth.data.numeric_sketch import SKETCH_PREFIX
from mmdsynth.data.schema import Schema
from mmdsynth.engines.persons import PersonTable, unit_text
from mmdsynth.methods.contract import METHODS

from support import SCHEMA, toy_table

pytest.importorskip("mbi")

#: every method that declares person_level, with settings small enough for a unit test. Numeric columns min-max
#: scaled by their declared bounds: with the quantile encoding the embedding is read through the CDFs released
#: just before it (adaptive composition), so a neighbour's embedding differs by more than its own release's
#: sensitivity; the sketch itself is compared in test_the_quantile_sketch_of_persons.
KERNEL = dict(iterations=5, batch_size=100, numeric_encoding="minmax")
PERSON_METHODS = {"dp-merf": dict(KERNEL, n_features=100), "dp-hp": KERNEL, "dp-ntk": KERNEL,
                  "mst": dict(iters=30), "aim": dict(iters=20, rounds=10),
                  "hybrid": dict(iters=30, n_features=50, pool=2, steps=10, numeric_share=None),
                  "dp-kip": dict(epochs=1, batch_size=100, images_per_class=2, numeric_encoding="quantile")}   # its DP-SGD step: test_kip.py
HEAVY = 2000
EXTREME = {"age": 90, "score": 1.0, "colour": "blue", "smoker": "yes", "y": "pos"}


def test_every_person_level_method_is_covered():
    able = {m for m, c in METHODS.items() if getattr(c, "person_level", False) and "table" in c.data_kinds}
    assert able == set(PERSON_METHODS)


def persons_table(seed=0):
    """300 persons: person p0 has HEAVY rows, p1..p299 one to nine rows each."""
    g = np.random.default_rng(seed)
    counts = np.concatenate([[HEAVY], g.integers(1, 10, 299)])
    df = toy_table(int(counts.sum()), seed)
    df["patient"] = np.repeat([f"p{i}" for i in range(300)], counts)
    return df


def neighbours(df):
    """(name, the neighbour): p0's HEAVY rows replaced by one extreme row of a new person; the last person's
    rows replaced by HEAVY extreme rows of a new person. Both keep 300 persons."""
    few = df[df.patient != "p0"]
    one = pd.concat([few, pd.DataFrame([{**EXTREME, "patient": "q"}])], ignore_index=True)
    last = df.patient.iloc[-1]
    many = pd.concat([df[df.patient != last], pd.DataFrame([{**EXTREME, "patient": "q"}] * HEAVY)],
                     ignore_index=True)
    return [("heavy person -> one extreme row", one), ("light person -> 2000 extreme rows", many)]


SCHEMA_P = Schema.from_dict(SCHEMA).with_privacy_unit("patient")


def pieces(release) -> dict:
    """{ledger description: (released values as one vector, its entry)} for the releases that do not depend on a
    private selection (the 2-way marginals of MST's tree and AIM's rounds are picked privately, so a neighbour may
    measure other cliques: their bound is tests/contract/test_marginals.py's)."""
    t, out = release.tensors, {}
    for e in release.ledger.entries:
        d = e.description
        if d.startswith("rows per person"):
            v = t["rows_per_person"]
        elif d.startswith("class proportions"):
            v = t["class_proportions"]
        elif d.startswith("numeric-column distributions"):
            v = np.concatenate([np.asarray(t[k]).ravel() for k in sorted(t) if k.startswith(SKETCH_PREFIX)])
        elif "mean embedding" in d and "embedding" in t:          # (dp-kip keeps its start's release inside)
            rows = re.search(r"rows (\d+):(\d+) of 'embedding'", d)
            v = t["embedding"] if rows is None else t["embedding"][int(rows[1]):int(rows[2])]
        elif d.startswith("1-way marginals"):
            ms = release.feature_spec["measurements"]
            v = np.concatenate([np.asarray(t[m["tensor"]]).ravel() for m in ms if len(m["clique"]) == 1])
        else:
            continue
        out[d] = (np.asarray(v, dtype=np.float64).ravel(), e)
    return out


@pytest.mark.parametrize("name", sorted(PERSON_METHODS))
def test_replacing_one_person_moves_every_release_within_its_sensitivity(name):
    df = persons_table()
    cls, params = METHODS[name], PERSON_METHODS[name]
    base = cls(epsilon=1.0, noise_seed=0, **params).fit(df, label="y", schema=SCHEMA_P).release_
    got = pieces(base)
    assert "rows per person: a histogram over 11 public cells of the 300 persons' row counts" in got
    assert len(got) >= 2, sorted(got)
    # the rows-per-person histogram's share of the plan, as docs/privacy.md states it: 5 % (of 1/sigma^2, or of rho
    # in a zCDP plan), the hybrid's 5 % of its kernel half
    weight = lambda e: e.rho if e.rho is not None else 1.0 / e.noise_multiplier ** 2       # noqa: E731
    rows = next(e for e in base.ledger.entries if e.description.startswith("rows per person"))
    share = weight(rows) / sum(weight(e) for e in base.ledger.entries if e.plan == rows.plan or e.rho is not None)
    if name != "dp-kip":
        assert share == pytest.approx(0.025 if name == "hybrid" else 0.05, rel=1e-9), share
    for e in base.ledger.entries:
        assert e.privacy_unit == unit_text("patient") == "one person (all rows with the same patient)"
        assert e.n_records == 300                       # m is the number of persons, not the 3,000+ rows
    for what, other in neighbours(df):
        within_sensitivity(what, base, cls(epsilon=1.0, noise_seed=0, **params).fit(other, label="y",
                                                                                     schema=SCHEMA_P).release_)


def within_sensitivity(what: str, base, release) -> None:
    """Every release of ``release`` (a neighbour's) moved from ``base``'s by at most its entry's sensitivity, and the
    plan the same (issue 80): method, settings, stages, sensitivities, noise scales, public facts."""
    got, theirs = pieces(base), pieces(release)
    assert theirs.keys() == got.keys()
    for d, (a, entry) in got.items():
        move = float(np.linalg.norm(a - theirs[d][0]))
        assert move <= entry.sensitivity * (1 + 1e-9) + 1e-12, (what, d, move, entry.sensitivity)
    assert plan_of(release) == plan_of(base), what


def plan_of(release) -> tuple:
    """What a release's plan is, apart from its noised values: the method and its settings, the public facts it
    saved (without the tensors' post-processing facts), and each non-selection ledger entry's stage (what, how,
    sensitivity, noise multiplier, m, unit, budget, what it assumed)."""
    facts = {k: v for k, v in release.dataset.items() if k not in ("table", "numeric_sketch", "rows_per_person")}
    entries = [(e.description, e.mechanism, e.sensitivity, e.noise_multiplier, e.n_records, e.privacy_unit,
                e.accountant, e.epsilon, e.delta, json.dumps(e.assumed, sort_keys=True, default=str))
               for e in release.ledger.entries if e.description in pieces(release)]
    return json.dumps(facts, sort_keys=True, default=str), entries


def test_the_same_neighbours_break_a_row_level_release():
    """The test has teeth: fitted with one row as the unit, the heavy person's replacement moves the 1-way
    marginals by about 2,000 times the row-level sensitivity."""
    df = persons_table()
    row_schema = Schema.from_dict({**SCHEMA, "columns": SCHEMA["columns"] + [{"name": "patient", "type": "id"}]})
    base = pieces(METHODS["mst"](epsilon=1.0, noise_seed=0, iters=30).fit(df, label="y", schema=row_schema).release_)
    _, one = neighbours(df)[0]
    other = pieces(METHODS["mst"](epsilon=1.0, noise_seed=0, iters=30).fit(one, label="y", schema=row_schema).release_)
    d = next(k for k in base if k.startswith("1-way"))
    move = float(np.linalg.norm(base[d][0] - other[d][0]))
    assert move > 500 * base[d][1].sensitivity


def test_every_other_persons_weights_are_bit_identical():
    df = persons_table()
    base = PersonTable(df, "patient")
    for _, other in neighbours(df):
        nb = PersonTable(other, "patient")
        assert nb.n_records == base.n_records == 300
        keep_a = ~df.patient.isin(["p0", df.patient.iloc[-1]]).to_numpy()
        keep_b = ~other.patient.isin(["q", "p0", df.patient.iloc[-1]]).to_numpy()
        wa, wb = base.data.weights[keep_a], nb.data.weights[keep_b]
        assert np.array_equal(wa, wb)
    # each person's rows weigh 1 in all
    sums = pd.Series(base.data.weights).groupby(df.patient.to_numpy()).sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0, rtol=1e-12)


def test_the_quantile_sketch_of_persons_moves_within_its_sensitivity():
    """DP-MERF's default (quantile) plan: the numeric sketch, the rows per person and the class proportions, the
    releases made before the encoder depends on a release."""
    df = persons_table()
    fit = lambda data: METHODS["dp-merf"](epsilon=1.0, noise_seed=0, iterations=5, n_features=100).fit(  # noqa: E731
        data, label="y", schema=SCHEMA_P).release_
    got = {d: v for d, v in pieces(fit(df)).items() if "mean embedding" not in d}
    assert any(d.startswith("numeric-column") for d in got) and len(got) == 3
    for what, other in neighbours(df):
        theirs = pieces(fit(other))
        for d, (a, entry) in got.items():
            move = float(np.linalg.norm(a - theirs[d][0]))
            assert 0 < move <= entry.sensitivity * (1 + 1e-9) + 1e-12, (what, d, move, entry.sensitivity)


@pytest.mark.parametrize("name", ["dp-merf", "mst"])
def test_replacing_one_person_spread_over_shards_moves_every_release_within_its_sensitivity(name, tmp_path):
    """The same neighbours, the rows shuffled into 4 shards (the heavy person's 2,000 rows in all of them): the
    counting pass over every shard gives each row its person's weight, so the bound holds as in memory."""
    from mmdsynth.data import ShardedTable

    def sharded(data, folder):
        folder.mkdir()
        perm = np.random.default_rng(1).permutation(len(data))
        for i, part in enumerate(np.array_split(perm, 4)):
            data.iloc[part].to_csv(folder / f"part{i}.csv", index=False)
        return ShardedTable(folder / "part*.csv", SCHEMA_P, n_records=300)

    df = persons_table()
    cls, params = METHODS[name], PERSON_METHODS[name]
    got = pieces(cls(epsilon=1.0, noise_seed=0, **params).fit(sharded(df, tmp_path / "a"), label="y").release_)
    assert any(d.startswith("rows per person") for d in got)
    for k, (what, other) in enumerate(neighbours(df)):
        theirs = pieces(cls(epsilon=1.0, noise_seed=0, **params).fit(sharded(other, tmp_path / f"b{k}"),
                                                                      label="y").release_)
        for d, (a, entry) in got.items():
            move = float(np.linalg.norm(a - theirs[d][0]))
            assert move <= entry.sensitivity * (1 + 1e-9) + 1e-12, (what, d, move, entry.sensitivity)


def test_one_heavy_person_proposes_at_most_one_category_per_column(monkeypatch):
    """Issue 80, leak 3: under a person unit, inferred categories counted each person's K distinct values at 1/K
    each, so a person with K rows proposed K candidate values, each clearing the keep-threshold with about the delta
    meant for one record (a value of theirs published with probability 7.6e-3 at K = 2,000, 1,524x the claimed
    5e-6). Each person now adds one value per column at weight 1: replacing a light person by one holding 2,000
    distinct values adds at most one candidate, whatever the path (in memory, or shards the person spans)."""
    from mmdsynth.data import ShardedTable
    from mmdsynth.privacy.engine import PrivacyEngine

    candidates = []
    original = PrivacyEngine.gaussian

    def spy(self, name, values, *args, **kwargs):
        if name == "schema":
            candidates.append({k: len(v) for k, v in values.items()})
        return original(self, name, values, *args, **kwargs)

    monkeypatch.setattr(PrivacyEngine, "gaussian", spy)
    spec = {**SCHEMA, "columns": [dict(c) for c in SCHEMA["columns"]]}
    del spec["columns"][2]["categories"]                       # colour: inferred, with budget
    schema = Schema.from_dict(spec).with_privacy_unit("patient")
    df = persons_table()
    last = df.patient.iloc[-1]
    secret = pd.DataFrame([{**EXTREME, "colour": f"secret-{k:05d}", "patient": "q"} for k in range(HEAVY)])
    other = pd.concat([df[df.patient != last], secret], ignore_index=True)
    fit = dict(epsilon=1.0, noise_seed=0, iterations=1, n_features=50, schema_share=0.2, numeric_encoding="minmax")
    for data in (df, other):
        METHODS["dp-merf"](**fit).fit(data, label="y", schema=schema)
    folder = Path(tempfile.mkdtemp())
    for k, data in enumerate((df, other)):                  # 4 shards, every person's rows spread over them
        (folder / str(k)).mkdir()
        for i, part in enumerate(np.array_split(np.random.default_rng(1).permutation(len(data)), 4)):
            data.iloc[part].to_csv(folder / str(k) / f"part{i}.csv", index=False)
        METHODS["dp-merf"](**fit).fit(ShardedTable(folder / str(k) / "part*.csv", schema, n_records=300), label="y")
    memory, shards = candidates[:2], candidates[2:]
    assert memory == shards, (memory, shards)
    assert memory[0]["colour"] == 3 and memory[1]["colour"] <= memory[0]["colour"] + 1, memory


# -- a database: one root with all its children is one person of the flattened table (issue 84) -----------------------
DB_SCHEMA = {"privacy_unit": "patients", "tables": {
    "patients": {"primary_key": "patient_id", "label": "y", "label_categories": ["neg", "pos"], "columns": [
        {"name": "patient_id", "type": "id", "integer": True, "bounds": [0, 9999]},
        {"name": "age", "type": "numeric", "bounds": [17, 90], "integer": True},
        {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"]}]},
    "visits": {"primary_key": "visit_id", "foreign_keys": {"patient_id": "patients"}, "columns": [
        {"name": "visit_id", "type": "id"}, {"name": "patient_id", "type": "id", "integer": True, "bounds": [0, 9999]},
        {"name": "score", "type": "numeric", "bounds": [-1.0, 1.0]},
        {"name": "smoker", "type": "categorical", "categories": ["no", "yes"]}]}}}


def patients_and_visits(counts, seed=0):
    """Patients 0..len(counts)-1 with counts[i] visits each (none for some)."""
    t = toy_table(len(counts) + int(np.sum(counts)), seed)
    patients = t.iloc[:len(counts)][["age", "colour", "y"]].assign(patient_id=np.arange(len(counts)))
    visits = t.iloc[len(counts):][["score", "smoker"]].assign(
        patient_id=np.repeat(np.arange(len(counts)), counts), visit_id=[f"v{i}" for i in range(int(np.sum(counts)))])
    return {"patients": patients.reset_index(drop=True), "visits": visits.reset_index(drop=True)}


def replace_patient(tables, p: int, n_visits: int):
    """The neighbour: patient ``p`` with all their visits replaced by an extreme patient with ``n_visits`` extreme
    visits (new visit IDs); every other row as it was."""
    patients = tables["patients"].copy()
    patients.loc[patients.patient_id == p, ["age", "colour", "y"]] = [90, "blue", "pos"]
    visits = tables["visits"][tables["visits"].patient_id != p]
    new = pd.DataFrame({"score": [1.0] * n_visits, "smoker": ["yes"] * n_visits, "patient_id": [p] * n_visits,
                        "visit_id": [f"w{i}" for i in range(n_visits)]})
    return {"patients": patients, "visits": pd.concat([visits, new], ignore_index=True)}


@pytest.mark.parametrize("name, layout", [("dp-merf", "cascade"), ("mst", "cascade"), ("hybrid", "cascade"),
                                          ("dp-merf", "independent")])
def test_replacing_one_root_with_all_its_descendants_moves_every_release_within_its_sensitivity(name, layout):
    """300 patients, patient 0 with HEAVY visits, some with none. Neighbours replace one patient with all their visits:
    the heavy one by an extreme patient with one visit, the last by an extreme patient with HEAVY visits, and one with
    visits by one with none. Every table's releases move within their sensitivities (the cascade: the visits' table,
    its roots' columns and counts joined; the tables apart: the patients' table, one record a root, with its count of
    visits, and the visits alone); m is the 300 patients in every entry (a patient without visits is one person
    too)."""
    from mmdsynth.methods.database import fit_tables

    g = np.random.default_rng(1)
    counts = np.concatenate([[HEAVY], g.integers(0, 6, 299)])
    params = PERSON_METHODS[name]
    fit = lambda tables: fit_tables(tables, DB_SCHEMA, epsilon=1.0, method=name, noise_seed=0,  # noqa: E731
                                    layout=layout, **params).releases_
    tables = patients_and_visits(counts)
    base = fit(tables)
    assert sorted(base) == (["visits"] if layout == "cascade" else ["patients", "visits"])
    got = pieces(base["visits"])
    assert any(d.startswith("rows per person") for d in got) and len(got) >= 2, sorted(got)
    assert all(e.n_records == 300 for r in base.values() for e in r.ledger.entries)
    with_visits = int(np.flatnonzero(counts[1:] > 0)[0]) + 1
    for what, p, n in [("heavy patient -> one extreme visit", 0, 1), ("last patient -> HEAVY extreme visits", 299, HEAVY),
                       ("a patient with visits -> one without", with_visits, 0)]:
        other = fit(replace_patient(tables, p, n))
        for table in base:
            within_sensitivity(f"{what} ({table})", base[table], other[table])


DB_CHAIN = {**DB_SCHEMA, "tables": {**DB_SCHEMA["tables"], "labs": {
    "foreign_keys": {"visit_id": "visits"}, "columns": [
        {"name": "visit_id", "type": "id"}, {"name": "value", "type": "numeric", "bounds": [0.0, 1.0]}]}}}


@pytest.mark.parametrize("stream", [False, True])
def test_a_root_replaced_with_thousands_of_rows_down_a_chain_moves_every_table_within_its_sensitivity(stream):
    """patients -> visits -> labs: patient 0 with HEAVY visits of two labs each (6,000 rows under one root) replaced by
    an extreme patient with one visit of one extreme lab, and a patient with visits by one with none: the visits' and
    the labs' releases each move within their sensitivities, m the 300 patients in every entry. Streamed (the labs
    read in batches of 997 rows and fitted from shards), the heavy patient's rows lie in several shards."""
    from mmdsynth.methods.database import fit_tables

    g = np.random.default_rng(2)
    counts = np.concatenate([[HEAVY], g.integers(0, 4, 299)])
    base_tables = patients_and_visits(counts)

    def with_labs(tables):
        v = tables["visits"]
        labs = pd.DataFrame({"visit_id": np.repeat(v.visit_id.to_numpy(), 2), "value": np.tile([0.2, 0.6], len(v))})
        labs.loc[labs.visit_id.str.startswith("w"), "value"] = 1.0            # the replacement's labs: extreme
        return {**tables, "labs": labs}

    fit = lambda tables: fit_tables(with_labs(tables), DB_CHAIN, epsilon=1.0, method="dp-merf",  # noqa: E731
                                    noise_seed=0, stream=stream, batch_rows=997, **PERSON_METHODS["dp-merf"]).releases_
    base = fit(base_tables)
    assert sorted(base) == ["labs", "visits"]
    assert all(e.n_records == 300 for r in base.values() for e in r.ledger.entries)
    with_visits = int(np.flatnonzero(counts[1:] > 0)[0]) + 1
    for what, p, n in [("heavy patient -> one extreme visit", 0, 1), ("a patient with visits -> one without",
                                                                       with_visits, 0)]:
        other = fit(replace_patient(base_tables, p, n))
        for table in base:
            within_sensitivity(f"{what} ({table})", base[table], other[table])
