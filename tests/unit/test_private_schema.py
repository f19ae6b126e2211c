"""Private schema inference: bounds and categories the user leaves out cost budget and are ledgered."""
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import norm

from mmdsynth import DPMERF, epsilon_for_sigma
from mmdsynth.cli import main
from mmdsynth.data.private_schema import (OTHER, SchemaInference, bin_edges, complete_schema, conform,
                                         release_schema_statistics)
from mmdsynth.errors import InvalidParameterError, SchemaError
from mmdsynth.privacy import BudgetFile
from mmdsynth.privacy.calibration import PrivacyPlan

from support import TINY, partial_schema, table_with_rare_value, toy_table


def test_missing_bounds_or_categories_without_a_share_are_refused_before_reading():
    class Unreadable(pd.DataFrame):
        def __getitem__(self, key):  # the schema check comes first: no column is read
            raise AssertionError("private data was read")

    with pytest.raises(SchemaError, match=r"bounds of numeric column\(s\) \['score'\] and categories of "
                                          r"categorical column\(s\) \['colour'\].*schema_share=0.1"):
        DPMERF(epsilon=1, **TINY).fit(Unreadable(toy_table(50)), label="y", schema=partial_schema())
    with pytest.raises(InvalidParameterError, match="schema_share=0.95, numeric_share=0.1 add up to 1 or more"):
        DPMERF(epsilon=1, schema_share=0.95, **TINY).fit(toy_table(50), label="y", schema=partial_schema())


def test_inference_joins_the_plan_and_is_ledgered(tmp_path):
    budget = BudgetFile.open(tmp_path / "budget.json", "toy", 1.0, 1e-5)
    m = DPMERF(epsilon=1.0, schema_share=0.2, numeric_encoding="minmax", **TINY).fit(
        table_with_rare_value(), label="y", schema=partial_schema(), budget=budget)
    schema_entry, props, emb = m.release_.ledger.entries
    assert "schema inference" in schema_entry.description and "'score'" in schema_entry.description
    assert schema_entry.budget_id == props.budget_id == emb.budget_id
    assert m.release_.ledger.total() == (1.0, 1e-5)
    assert schema_entry.sensitivity == pytest.approx(math.sqrt(2 * 2))  # two inferred columns
    # shares 0.2 / 0.1 / 0.7 of one release's privacy: the Gaussian plan meets epsilon at
    # delta minus the thresholds' part (half of delta, as categories are inferred)
    base = schema_entry.noise_multiplier * math.sqrt(0.2)
    assert props.noise_multiplier == pytest.approx(base / math.sqrt(0.1), rel=1e-6)
    assert emb.noise_multiplier == pytest.approx(base / math.sqrt(0.7), rel=1e-6)
    plan = PrivacyPlan((schema_entry.noise_multiplier / base, props.noise_multiplier / base,
                        emb.noise_multiplier / base))
    assert epsilon_for_sigma(base, 0.5e-5, plan) <= 1.0 + 1e-9
    assert epsilon_for_sigma(base * 0.98, 0.5e-5, plan) > 1.0  # and not much more noise than needed
    # the budget file was charged once, for the whole plan
    spent = BudgetFile.open(tmp_path / "budget.json").spent
    assert spent[0] == pytest.approx(1.0) and len(BudgetFile.open(tmp_path / "budget.json").charges) == 1
    # what was inferred: the rare value is not a category; the catch-all is; bounds cover the data
    schema = m.encoder_.schema
    assert schema.notes["dp_inferred_columns"] == ["colour", "score"]
    colour = schema.column("colour").categories
    assert colour[-1] == OTHER and "violet" not in colour and set(colour) <= {"red", "green", "blue", OTHER}
    lo, hi = schema.column("score").bounds
    assert -1.19 <= lo <= -0.5 and 0.5 <= hi <= 1.19   # the geometric bins around +-1
    assert schema.column("age").bounds == (17.0, 90.0)  # declared columns are untouched
    synth = m.sample(300, seed=0)
    assert set(synth["colour"]) <= set(colour) and synth["score"].between(lo, hi).all()


def _engine(sigma):
    from mmdsynth.privacy.engine import PrivacyEngine

    return PrivacyEngine.with_sigma(sigma, noise_seed=0, multipliers={"schema": 1.0})


def test_schema_statistics_have_the_declared_sensitivity():
    """Replacing one record moves the (noise-free) counts by at most sqrt(2 c) in L2."""
    todo = SchemaInference(("score",), ("colour",))
    a = table_with_rare_value(200)
    b = a.copy()
    b.loc[5, ["score", "colour"]] = [1e6, "ultraviolet"]   # an extreme, unseen replacement
    tiny = 1e-12   # (near) noise-free, to read the counts
    sa = release_schema_statistics(a, todo, _engine(tiny))
    sb = release_schema_statistics(b, todo, _engine(tiny))
    diff_num = (sa["score"]["counts"] - sb["score"]["counts"]).round()
    ca = dict(zip(sa["colour"]["values"], sa["colour"]["counts"].round().tolist()))
    cb = dict(zip(sb["colour"]["values"], sb["colour"]["counts"].round().tolist()))
    diff_cat = [ca.get(k, 0) - cb.get(k, 0) for k in set(ca) | set(cb)]
    l2 = math.sqrt(float((diff_num ** 2).sum()) + sum(d * d for d in diff_cat))
    assert l2 == pytest.approx(2.0) and l2 <= todo.sensitivity + 1e-9
    assert float(sa["score"]["counts"].sum()) == pytest.approx(200)
    assert len(sa["score"]["edges"]) == len(bin_edges()) == 403


def test_category_threshold_spends_exactly_its_delta():
    todo = SchemaInference((), ("a", "b", "c"))
    std, delta = 40.0, 1e-5
    tau = todo.category_threshold(std, delta)
    assert 3 * norm.sf((tau - 1) / std) == pytest.approx(todo.threshold_delta(delta), rel=1e-9)
    assert todo.threshold_delta(delta) == pytest.approx(delta / 2)
    assert SchemaInference(("x",), ()).threshold_delta(delta) == 0.0


def test_complete_schema_and_conform_are_post_processing():
    schema = partial_schema()
    edges = bin_edges()
    counts = torch.zeros(len(edges) - 1, dtype=torch.float64)
    i_lo, i_hi = np.searchsorted(edges, [-0.6, 0.3], side="right") - 1
    counts[i_lo], counts[i_hi] = 500.0, 900.0
    stats = {"score": {"edges": edges, "counts": counts},
             "colour": {"values": ["red", "blue", "teal"], "counts": torch.tensor([400.0, 90.0, 20.0],
                                                                                 dtype=torch.float64)}}
    done = complete_schema(schema, stats, noise_std=10.0, category_threshold=50.0)
    assert done.column("score").bounds == (edges[i_lo], edges[i_hi + 1])
    assert done.column("colour").categories == ["blue", "red", OTHER]
    df = conform(toy_table(100), done)
    assert set(df["colour"]) <= {"blue", "red", OTHER} and (df["colour"] == OTHER).any()
    assert df["score"].between(*done.column("score").bounds).all()
    # no bin clears the threshold: the fullest bin bounds the column
    quiet = complete_schema(schema, {"score": {"edges": edges, "counts": counts / 100}}, 10.0, None)
    assert quiet.column("score").bounds == (edges[i_hi], edges[i_hi + 1])


def test_cli_infer_schema_fit_sample_evaluate(tmp_path, capsys):
    table_with_rare_value(1500).to_csv(tmp_path / "train.csv", index=False)
    toy_table(300, seed=1).to_csv(tmp_path / "test.csv", index=False)
    (tmp_path / "schema.json").write_text(json.dumps(partial_schema().to_dict()))
    args = ["fit", "--method", "dp-merf", "--csv", str(tmp_path / "train.csv"), "--schema",
            str(tmp_path / "schema.json"), "--label", "y", "--epsilon", "5", "--iterations", "150",
            "--batch-size", "200", "--n-features", "300", "-q"]
    assert main(args + ["--out", str(tmp_path / "refused")]) == 2
    assert "--infer-schema 0.1" in capsys.readouterr().err
    assert not (tmp_path / "refused" / "release").exists()
    assert main(args + ["--infer-schema", "0.1", "--out", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "m"), "--ledger"]) == 0
    assert "schema inference" in capsys.readouterr().out
    assert main(["sample", str(tmp_path / "m"), "--n", "50", "--out", str(tmp_path / "s.csv")]) == 0
    s = pd.read_csv(tmp_path / "s.csv")
    assert set(s["colour"]) <= {"red", "green", "blue", OTHER}
    capsys.readouterr()
    # the real test rows are clipped / mapped to the inferred schema before scoring
    assert main(["evaluate", str(tmp_path / "m"), "--test", str(tmp_path / "test.csv"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0.55 < result["mean"]["roc_auc"] < 1.0
