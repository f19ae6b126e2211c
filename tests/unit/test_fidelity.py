"""Fidelity metrics (issue 14): exact values on constructed tables."""
import numpy as np
import pandas as pd
import pytest

from mmdsynth.data import Schema
from mmdsynth.evaluation.fidelity import association_matrix, numeric_marginal, table_fidelity

SCHEMA = Schema.from_dict({"columns": [{"name": "x", "type": "numeric", "bounds": [-1e6, 1e6]},
                                       {"name": "c", "type": "categorical", "categories": ["a", "b", "z"]}],
                           "label": "y", "label_categories": ["0", "1"]})


def table(n=2000, seed=0, zeros=0.5, dependent=True):
    g = np.random.default_rng(seed)
    y = g.integers(0, 2, n)
    x = np.where(g.random(n) < zeros, 0.0, np.exp(g.normal(5, 1, n)))
    c = np.where(y == 1, "a", "b") if dependent else g.choice(["a", "b"], n)
    return pd.DataFrame({"x": x, "c": c, "y": y.astype(str)})


def test_identical_tables_score_zero_and_the_layout_is_complete():
    t = table()
    f = table_fidelity(t, t, SCHEMA)
    assert f["mean_numeric_tv"] == 0 and f["mean_categorical_tv"] == 0 and f["pairwise"]["mean_abs_error"] == 0
    assert f["mean_numeric_wasserstein"] == 0 and set(f["marginals"]) == {"x", "c", "y"}
    assert f["pairwise"]["columns"] == ["x", "c", "y"] and np.shape(f["pairwise"]["real"]) == (3, 3)


def test_categorical_tv_is_exact():
    real, synth = table(), table()
    synth["c"] = "z"                                       # all mass on a category the real table never has
    assert table_fidelity(real, synth, SCHEMA)["marginals"]["c"]["tv"] == pytest.approx(1.0)
    synth["c"] = np.where(np.arange(len(synth)) < len(synth) // 2, "a", "b")
    tv = table_fidelity(real, synth, SCHEMA)["marginals"]["c"]["tv"]
    assert tv == pytest.approx(abs((real["c"] == "a").mean() - 0.5), abs=1e-3)


def test_numeric_tv_uses_the_real_deciles_and_sees_a_lost_point_mass():
    real = table()["x"].to_numpy()
    shifted = np.where(real == 0, 1e-3, real)              # the point mass at 0 moved just above it
    m = numeric_marginal(real, shifted)
    assert m["tv"] == pytest.approx((real == 0).mean(), abs=1e-9)      # the whole mass changed bin
    spread = np.random.default_rng(1).uniform(0, 1e6, len(real))       # anywhere in wide bounds
    assert numeric_marginal(real, spread)["tv"] > 0.8 and numeric_marginal(real, spread)["wasserstein"] > 10
    below = -np.abs(real) - 1000                           # all below the real range: end bin, W1 sees it
    assert numeric_marginal(real, below)["wasserstein"] > 1


def test_dependence_is_one_for_a_copy_and_near_zero_for_independent_columns():
    dep = association_matrix(table(dependent=True), ["x"], ["x", "c", "y"])
    ind = association_matrix(table(dependent=False), ["x"], ["x", "c", "y"])
    assert dep[1, 2] == pytest.approx(1.0) and ind[1, 2] < 0.06          # Cramer's V
    assert ind[0, 1] < 0.06 and ind[0, 2] < 0.06                           # correlation ratios
    f = table_fidelity(table(dependent=True), table(dependent=False, seed=1), SCHEMA)
    assert f["pairwise"]["max_abs_error"] > 0.9
    by_kind = f["pairwise"]["mean_abs_error_by_kind"]
    assert set(by_kind) == {"categorical-categorical", "categorical-numeric"}    # x-c, x-y mixed; c-y categorical
    assert by_kind["categorical-categorical"] > 0.9 and by_kind["categorical-numeric"] < 0.1


def test_missing_values_are_scored_as_rates_and_left_out_of_numeric_statistics():
    schema = Schema.from_dict({"columns": [{"name": "x", "type": "numeric", "bounds": [-1e6, 1e6], "nullable": True},
                                           {"name": "c", "type": "categorical", "categories": ["a", "b", "z"],
                                            "nullable": True}],
                               "label": "y", "label_categories": ["0", "1"]})
    real = table()
    synth = real.copy()
    synth.loc[:199, "x"] = np.nan                            # 10 % missing where the real table has none
    synth.loc[:99, "c"] = None
    f = table_fidelity(real, synth, schema)
    assert f["marginals"]["x"]["missing_rate"] == {"real": 0.0, "synthetic": 0.1}
    assert f["marginals"]["c"]["missing_rate"]["synthetic"] == pytest.approx(0.05)
    assert f["max_missing_rate_gap"] == pytest.approx(0.1)
    assert f["marginals"]["c"]["tv"] == pytest.approx(0.05)   # "missing" is one more category
    assert np.isfinite(f["pairwise"]["mean_abs_error"])
