"""A person as the privacy unit (issue 48): the declaration, refusals before anything is read or charged,
synthetic persons in the generated rows, the command line."""
import json

import numpy as np
import pandas as pd
import pytest

import mmdsynth
from mmdsynth.data.schema import Schema
from mmdsynth.engines.persons import PersonTable, person_source
from mmdsynth.errors import DataValidationError, InvalidParameterError, SchemaError
from mmdsynth.methods import DPKIP, DPMERF, MST
from mmdsynth.privacy.budget import BudgetFile

from support import SCHEMA, run_cli, visit_shards, visits


def test_the_declaration():
    s = Schema.from_dict(SCHEMA).with_privacy_unit("patient")
    assert s.column("patient").kind == "id" and s.privacy_unit == "patient"
    assert Schema.from_dict(s.to_dict()).privacy_unit == "patient"          # the JSON keeps it
    assert s.without_ids().privacy_unit is None                             # the learned columns: no person
    with pytest.raises(SchemaError, match="not a column of the schema.*\"type\": \"id\""):
        Schema.from_dict({**SCHEMA, "privacy_unit": "patient"})
    with pytest.raises(SchemaError, match="must be an id column.*declared categorical"):
        Schema.from_dict({**SCHEMA, "privacy_unit": "colour"})
    with pytest.raises(SchemaError, match="label"):
        Schema.from_dict(SCHEMA).with_privacy_unit("y")


def test_a_person_table_counts_persons_and_weighs_each_one_as_one_row():
    df, counts = visits(50)
    t = PersonTable(df, "patient")
    assert t.n_records == 50 and t.describe()["privacy_unit"] == "one person (all rows with the same patient)"
    np.testing.assert_allclose(np.sort(1 / t.data.weights[np.r_[0, np.cumsum(counts)[:-1]]]), np.sort(counts))
    with pytest.raises(InvalidParameterError, match="missing values"):
        PersonTable(df.assign(patient=df.patient.where(df.index != 3, None)), "patient")


def test_dp_kip_samples_persons(tmp_path):
    """DP-SGD with a person as the unit: N and the sampling rate count persons, the schedule's steps too, every
    entry names the person, and the support set decodes to rows of synthetic persons."""
    df, _ = visits(300)
    schema = Schema.from_dict(SCHEMA).with_privacy_unit("patient")
    m = DPKIP(epsilon=1.0, epochs=2, batch_size=50, images_per_class=3).fit(df, label="y", schema=schema)
    entries = m.release_.ledger.entries
    assert all(e.n_records == 300 and e.privacy_unit == "one person (all rows with the same patient)"
               for e in entries)
    sgd = entries[-1]
    assert sgd.plan["sample_rate"] == pytest.approx(50 / 300) and sgd.plan["steps"] == 12   # 2 epochs of persons
    assert "samples persons" in sgd.assumed["persons"]
    rows = m.sample()
    assert len(rows) == 6 and rows["patient"].str.startswith("syn-").all()


def test_each_step_reads_whole_persons_at_one_in_all(monkeypatch):
    """The wiring of DP-KIP's steps: every step's rows carry weights 1 / (their person's rows), whole persons
    only (a weight 1 / c on a multiple of c rows), adding up to the number of persons sampled."""
    from mmdsynth.statistics import gradients

    df, _ = visits(200)
    seen, original = [], gradients.person_rows

    def spy(persons, chosen):
        rows, weights = original(persons, chosen)
        seen.append(weights)
        return rows, weights

    monkeypatch.setattr(gradients, "person_rows", spy)
    DPKIP(epsilon=1.0, epochs=1, batch_size=40, images_per_class=2).fit(
        df, label="y", schema=Schema.from_dict(SCHEMA).with_privacy_unit("patient"))
    assert len(seen) == 5 and all(w is not None for w in seen)
    for w in seen:
        w = w.numpy()
        assert float(w.sum()) == pytest.approx(round(float(w.sum())), abs=1e-9) and 10 <= round(w.sum()) <= 80
        for c, n in zip(*np.unique(np.rint(1 / w).astype(int), return_counts=True)):
            assert n % c == 0                          # whole persons
        assert np.allclose(1 / w, np.rint(1 / w))


@pytest.mark.own_statistic
def test_a_shard_that_changes_during_the_fit_is_refused(tmp_path):
    """The counting pass fixes each person's weight; a later pass that finds other rows (a new person, or a
    person's rows added while another's are removed, the same row count) refuses instead of using stale weights."""
    from mmdsynth.engines.persons import PersonShards

    df, _ = visits(60)
    shards = visit_shards(tmp_path, df)
    stat = lambda batch: {"w": float(batch.weights.sum())}         # noqa: E731
    for change in ("new person", "same row count"):
        visit_shards(tmp_path, df)                      # the shards as they were
        src = PersonShards(shards(60), "patient", Schema.from_dict(SCHEMA).with_privacy_unit("patient").person_ids)
        assert src.total(stat)["w"] == pytest.approx(60)
        part = pd.read_csv(tmp_path / "part1.csv")
        if change == "new person":
            part = pd.concat([part, part.iloc[:1].assign(patient="P99999")], ignore_index=True)
        else:
            gone = part.patient.iloc[0]
            k = int((part.patient == gone).sum())
            part = pd.concat([part[part.patient != gone], part[part.patient == part.patient.iloc[-1]].iloc[:1]
                              .loc[lambda d: d.index.repeat(k)]], ignore_index=True)
            assert len(part) == len(pd.read_csv(tmp_path / "part1.csv"))
        part.to_csv(tmp_path / "part1.csv", index=False)
        with pytest.raises(DataValidationError, match=r"part1.csv changed since its persons' rows were counted"):
            src.total(stat)


def test_integer_person_ids_must_be_read_exactly():
    with pytest.raises(SchemaError, match=r"beyond \+-2\^52 cannot be read exactly"):
        Schema.from_dict({**SCHEMA, "columns": SCHEMA["columns"] + [
            {"name": "patient", "type": "id", "integer": True, "bounds": [0, 2 ** 62]}]})


def test_a_method_that_cannot_protect_a_person_refuses_before_the_charge(tmp_path):
    class RowsOnly(DPMERF):                     # not registered: a method without person_level
        person_level = False

    df, _ = visits(100)
    schema = Schema.from_dict(SCHEMA).with_privacy_unit("patient")
    budget = BudgetFile.open(tmp_path / "b.json", "toy", 5.0, 1e-5)
    with pytest.raises(InvalidParameterError, match=r"dp-merf cannot protect a person \(privacy_unit='patient'\)\. "
                                                    r"Methods that can: aim, dp-hp, dp-kip, dp-merf, dp-ntk, hybrid"):
        RowsOnly(epsilon=1.0, iterations=2).fit(df, label="y", schema=schema, budget=budget)
    assert BudgetFile.open(tmp_path / "b.json").spent == (0.0, 0.0)


SHARD_METHODS = [(DPMERF, dict(iterations=3, n_features=100)), (MST, dict(iters=20))]


@pytest.mark.parametrize("cls,kw", SHARD_METHODS)
def test_persons_across_shards_release_exactly_what_memory_releases(cls, kw, tmp_path):
    """A person's rows spread over shards are counted over all shards before any weight is set: the streamed fit
    releases what the in-memory fit releases (same noise seed), tensor by tensor, and its ledger says so."""
    df, counts = visits(200)
    shards = visit_shards(tmp_path, df)
    where = pd.concat([pd.read_csv(tmp_path / f"part{i}.csv").assign(shard=i) for i in range(3)])
    assert (where.groupby("patient").shard.nunique() > 1).sum() > 100   # most persons have rows in several shards
    mem = cls(epsilon=1.0, noise_seed=0, **kw).fit(df, label="y", schema=Schema.from_dict(SCHEMA).with_privacy_unit(
        "patient")).release_
    got = cls(epsilon=1.0, noise_seed=0, **kw).fit(shards(200), label="y").release_
    assert sorted(got.tensors) == sorted(mem.tensors) and "rows_per_person" in got.tensors
    for k in mem.tensors:
        np.testing.assert_allclose(got.tensors[k].double().numpy(), mem.tensors[k].double().numpy(), atol=1e-9,
                                   err_msg=k)
    e = got.ledger.entries[0]
    assert e.n_records == 200 and e.privacy_unit == "one person (all rows with the same patient)"
    assert "exact" in e.computation["persons across shards"] and e.computation["shards"] == 3


@pytest.mark.parametrize("cls,kw", SHARD_METHODS)
def test_a_wrong_person_count_is_refused_before_the_charge(cls, kw, tmp_path):
    """With a privacy unit, n_records counts persons: the counting pass checks it and nothing is charged."""
    df, _ = visits(100)
    shards = visit_shards(tmp_path, df)
    budget = BudgetFile.open(tmp_path / "b.json", "toy", 5.0, 1e-5)
    for n in (len(df), 99):                             # the row count, or one person too few
        with pytest.raises(DataValidationError, match=r"the shards hold 100 persons \(distinct values of 'patient'\)"
                                                      r" but n_records=\d+ was declared; with a privacy unit "
                                                      r"n_records counts persons"):
            cls(epsilon=1.0, **kw).fit(shards(n), label="y", budget=budget)
    assert BudgetFile.open(tmp_path / "b.json").spent == (0.0, 0.0)
    with pytest.raises(InvalidParameterError, match="applies to tables"):
        person_source(np.zeros((3, 2)), Schema.from_dict(SCHEMA).with_privacy_unit("patient"))


@pytest.mark.parametrize("cls,kw", [(DPMERF, dict(iterations=20, n_features=100, batch_size=200)),
                                    (MST, dict(iters=50))])
def test_generated_rows_belong_to_synthetic_persons(cls, kw, tmp_path):
    """At a large epsilon the synthetic persons have about as many rows as the real ones (the released histogram
    of rows per person, nearly noiseless); no synthetic ID equals a real one; save/load keeps it."""
    df, counts = visits(2000, mean_rows=4.0)
    schema = Schema.from_dict(SCHEMA).with_privacy_unit("patient")
    m = cls(epsilon=1000.0, noise_seed=0, **kw).fit(df, label="y", schema=schema, out=tmp_path / "run")
    rows = m.sample(8000, seed=1)
    per = rows["patient"].value_counts()
    assert per.sum() == 8000 and not set(rows["patient"]) & set(df["patient"])
    assert rows["patient"].str.startswith("syn-").all()
    assert abs(per.mean() - counts.mean()) < 0.15 * counts.mean(), (per.mean(), counts.mean())
    assert abs((per == 1).mean() - (counts == 1).mean()) < 0.05
    again = mmdsynth.load(tmp_path / "run").sample(8000, seed=1)
    assert again["patient"].value_counts().mean() == pytest.approx(per.mean())


def test_cli_fit_with_a_privacy_unit(tmp_path, capsys):
    df, _ = visits(300)
    df.to_csv(tmp_path / "visits.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    code, _, err = run_cli(capsys, "fit", "--method", "dp-merf", "--csv", tmp_path / "visits.csv", "--schema",
                           tmp_path / "s.json", "--label", "y", "--privacy-unit", "patient", "--epsilon", "1",
                           "--iterations", "20", "--out", tmp_path / "run", "--quiet", "--budget", tmp_path / "b.json")
    assert code == 0, err[-1500:]
    # a new budget file given no --delta holds the fit's own, settled in its run from the public count (300 persons)
    budget = json.loads((tmp_path / "b.json").read_text())
    assert budget["delta"] == 1e-5 and budget["epsilon"] == 1.0 and budget["charges"][0]["delta"] == 1e-5
    _, out, _ = run_cli(capsys, "inspect", tmp_path / "run")
    text = " ".join(out.split())
    assert "(300 persons, 2 classes)" in text and "one record = one person (all rows with the same patient)" in text
    assert "rows per person" in text
    shards = visit_shards(tmp_path, df)(300)             # the same rows in 3 shards: persons counted across them
    code, _, err = run_cli(capsys, "fit", "--method", "mst", "--shards", tmp_path / "part*.csv", "--n-records", "300",
                           "--schema", tmp_path / "s.json", "--label", "y", "--privacy-unit", "patient",
                           "--epsilon", "1", "--iters", "20", "--out", tmp_path / "run2", "--quiet")
    assert code == 0 and shards.n_shards == 3, err[-1500:]
    _, out, _ = run_cli(capsys, "inspect", tmp_path / "run2")
    assert "(300 persons, 2 classes)" in " ".join(out.split()), out
    code, _, err = run_cli(capsys, "fit", "--method", "dp-merf", "--dataset", "adult", "--privacy-unit", "x",
                           "--out", tmp_path / "r2")
    assert code != 0 and "--privacy-unit names a column of your table" in err
    assert not (tmp_path / "r2").exists()
    code, _, err = run_cli(capsys, "fit", "--csv", tmp_path / "visits.csv", "--schema", tmp_path / "s.json",
                           "--privacy-unit", "patient", "--marginal-share", "0.3", "--budget", tmp_path / "b2.json",
                           "--out", tmp_path / "r3")           # 300 persons: dp-merf, which takes no --marginal-share
    assert code == 2 and "--marginal-share" in err, err[-800:]
    assert not (tmp_path / "b2.json").exists() and not (tmp_path / "r3" / "release").exists()
    code, _, err = run_cli(capsys, "fit", "--csv", tmp_path / "visits.csv", "--schema", tmp_path / "s.json",
                           "--privacy-unit", "patient", "--epsilon", "1", "--budget-epsilon", "0.5", "--budget",
                           tmp_path / "b3.json", "--out", tmp_path / "r4")     # over the new file's own total
    assert code != 0 and "would exceed the budget" in err, err[-800:]
    assert not (tmp_path / "b3.json").exists() and not (tmp_path / "r4" / "release").exists()


def test_a_person_is_read_by_their_checked_id():
    """A person's rows are grouped by the ID as the schema reads it, value by value: in an object column 1 and "1"
    are one text ID, so one person (grouping the raw values would split them into two persons, each weighing 1)."""
    df, _ = visits(3)
    df["patient"] = pd.Series([1, "1"] + ["2"] * (len(df) - 2), dtype=object)
    schema = Schema.from_dict(SCHEMA).with_privacy_unit("patient")
    t = person_source(df, schema)
    assert t.n_records == 2
    np.testing.assert_allclose(t.data.weights[:2], 1 / 2)
