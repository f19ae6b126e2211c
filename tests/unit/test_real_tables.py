"""Issue 32, the parts built so far: a rare class cannot wreck training, DP-HP gets table defaults,
the evaluator runs what is installed in float64, and schema inference says when its noise swamps a
small table."""
import json
import warnings

import numpy as np
import pytest
import torch

from mmdsynth import DPHP, DPMERF, Schema
from mmdsynth.cli import main
from mmdsynth.data.encoding import TableEncoder
from mmdsynth.evaluation import tabular
from mmdsynth.training import batch_weights, embedding_loss

from support import FIVE_SCHEMA, SCHEMA, five_class_table, toy_table


def test_batch_weights_give_each_column_p_c_times_the_class_mean():
    labels = torch.tensor([0, 0, 0, 1, 2, 2])
    p = torch.tensor([0.5, 0.2, 0.3], dtype=torch.float64)
    w = batch_weights(labels, 3, 6, "cpu", torch.float64, p)
    assert torch.allclose(w.sum(0), p)                                   # column c sums to p_c
    assert torch.allclose(w[:3, 0], torch.full((3,), 0.5 / 3, dtype=torch.float64))   # p_c / n_c each
    assert torch.equal(batch_weights(labels, 3, 6, "cpu", torch.float64), torch.eye(3)[labels].double() / 6)


class _Identity:
    """A feature map that returns its input (the loss's algebra, without a network)."""

    def mmd_loss(self, target, x, weights):
        return ((target - x.T @ weights) ** 2).sum()


def test_a_class_within_the_noise_cannot_dominate_the_loss():
    """The released target of a one-row class is noise; its proportion is floored at 1e-3. The old
    weighting divided the target by it (x 1e3, loss x 1e6); now its term is weighted by p_c^2."""
    g = torch.Generator().manual_seed(0)
    d = 8
    means = torch.rand(d, 5, generator=g, dtype=torch.float64)
    p = torch.tensor([0.25, 0.25, 0.25, 0.25 - 1e-3, 1e-3], dtype=torch.float64)
    target = means * p
    target[:, 4] = torch.randn(d, generator=g, dtype=torch.float64) * 0.02    # the noise of a one-row class
    labels = torch.multinomial(p, 1000, replacement=True, generator=g)
    x = means[:, labels].T
    with_rare = float(embedding_loss(_Identity(), target, x, labels, 5, p))
    target4, p4 = target[:, :4], p[:4] / p[:4].sum()
    keep = labels < 4
    without = float(embedding_loss(_Identity(), target4 * (p4 / p[:4])[None, :], x[keep], labels[keep], 4, p4))
    old = float(((target / p - x.T @ (torch.eye(5)[labels].double() / 1000 / p[labels, None])) ** 2).sum())
    assert with_rare < without + 1e-3 and old > 100 * with_rare


def test_a_class_within_the_noise_is_named_with_its_numbers(caplog):
    m = DPMERF(1.0, n_features=50, iterations=2, batch_size=50, noise_seed=0).fit(
        five_class_table(600, 0), label="y", schema=FIVE_SCHEMA)
    names = [c["class"] for c in m.noisy_classes()]
    assert "rare" in names and "a" not in names
    assert any("class 'rare': released count" in r.getMessage() and "within the noise" in r.getMessage()
               for r in caplog.records)


def test_dphp_fits_user_tables_with_table_defaults(tmp_path):
    toy_table(300).to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    assert main(["fit", "--method", "dp-hp", "--csv", str(tmp_path / "t.csv"), "--schema", str(tmp_path / "s.json"),
                 "--label", "y", "--iterations", "3", "--out", str(tmp_path / "m"), "-q"]) == 0
    settings = json.loads((tmp_path / "m" / "model.json").read_text())["settings"]       # as the fit used them
    assert settings["length_scale"] == 0.3 and settings["sum_weight"] == 1.0 and settings["epsilon"] == 1.0
    assert DPHP.defaults_for("image")["length_scale"] == 0.0707            # the authors' MNIST setting


def test_the_evaluator_runs_what_is_installed_and_names_what_it_skipped(monkeypatch):
    def missing(seed):
        raise ImportError("the XGBoost classifier needs the 'eval' extra: pip install 'mmdsynth[eval]' (xgboost-cpu).")
    monkeypatch.setitem(tabular.TABLE_CLASSIFIERS, "xgboost", missing)
    df = toy_table(300)
    enc = TableEncoder(Schema.from_dict(SCHEMA), list(df.columns))
    monkeypatch.setattr(tabular, "TABLE_CLASSIFIERS", {k: tabular.TABLE_CLASSIFIERS[k] for k in
                                                       ("gaussian_nb", "logistic_regression", "xgboost")})
    s = tabular.table_classifier_scores(df, toy_table(200, seed=1), enc)
    assert set(s["classifiers"]) == {"gaussian_nb", "logistic_regression"}
    assert "pip install 'mmdsynth[eval]'" in s["skipped"]["xgboost"]


def test_the_evaluator_hands_the_classifiers_float64(monkeypatch):
    seen = []
    real = tabular.TABLE_CLASSIFIERS["gaussian_nb"]

    class Spy:
        def __init__(self, seed):
            self.clf = real(seed)

        def fit(self, X, y):
            seen.append(X.dtype)
            self.clf.fit(X, y)
            return self

        def predict_proba(self, X):
            seen.append(X.dtype)
            return self.clf.predict_proba(X)
    monkeypatch.setitem(tabular.TABLE_CLASSIFIERS, "gaussian_nb", Spy)
    df = toy_table(300)
    tabular.table_classifier_scores(df, toy_table(200, seed=1), TableEncoder(Schema.from_dict(SCHEMA), list(df.columns)),
                                    classifiers=["gaussian_nb"])
    assert seen and all(d == np.float64 for d in seen)


def test_schema_inference_warns_when_its_noise_swamps_a_small_table():
    from support import partial_schema

    with pytest.warns(UserWarning, match=r"schema inference on 200 records with noise std .* mostly be noise"):
        DPMERF(1.0, n_features=50, iterations=2, batch_size=50, schema_share=0.1).fit(
            toy_table(200), label="y", schema=partial_schema())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        DPMERF(10.0, n_features=50, iterations=2, batch_size=50, schema_share=0.3).fit(
            toy_table(20000), label="y", schema=partial_schema())


LEVELS = ["low", "mid", "high", "top"]
PAIR = {"type": "fixed_combinations", "columns": ["level", "code"], "values": [[v, i + 1] for i, v in enumerate(LEVELS)]}
PAIR_SCHEMA = {"label": "y", "label_categories": ["n", "p"], "columns": [
    {"name": "level", "type": "categorical", "categories": LEVELS},
    {"name": "code", "type": "numeric", "bounds": [1, 4], "integer": True},
    {"name": "x", "type": "numeric", "bounds": [0, 1]}]}


def _pair_table(n=2000):
    g = np.random.default_rng(0)
    lv = g.integers(0, 4, n)
    import pandas as pd
    return pd.DataFrame({"level": np.array(LEVELS)[lv], "code": lv + 1, "x": g.random(n),
                         "y": np.where(lv >= 2, "p", "n")})


def test_declared_fixed_combinations_hold_in_every_synthetic_row():
    """Measured: 0.475 of the rows keep the pair when it is not declared, 1.0 when it is (adult's
    education / education-num: 0.207 and 1.0, benchmarks/RESULTS.md)."""
    df = _pair_table()
    declared = Schema.from_dict({**PAIR_SCHEMA, "constraints": [PAIR]})
    m = DPMERF(1.0, n_features=200, iterations=100, batch_size=200, seed=0).fit(df, label="y", schema=declared)
    s = m.sample(1000, seed=0)
    assert declared.allowed_rows(s, declared.constraints[0]).all() and s["code"].dtype == np.int64
    plain = DPMERF(1.0, n_features=200, iterations=100, batch_size=200, seed=0).fit(df, label="y", schema=PAIR_SCHEMA)
    assert declared.allowed_rows(plain.sample(1000, seed=0), declared.constraints[0]).mean() < 0.9   # not by chance
    assert Schema.from_dict(declared.to_dict()).constraints == declared.constraints                # round trip


def test_fixed_combinations_are_checked_when_declared_and_on_the_data():
    from mmdsynth.errors import DataValidationError, SchemaError

    with pytest.raises(SchemaError, match="'ultra' is not a category of 'level'"):
        Schema.from_dict({**PAIR_SCHEMA, "constraints": [{**PAIR, "values": [["ultra", 1]]}]})
    with pytest.raises(SchemaError, match="two or more declared feature columns"):
        Schema.from_dict({**PAIR_SCHEMA, "constraints": [{**PAIR, "columns": ["level", "nope"]}]})
    with pytest.raises(SchemaError, match="fixed_combinations"):
        Schema.from_dict({**PAIR_SCHEMA, "constraints": [{"type": "unique", "columns": ["x"]}]})
    df = _pair_table(50)
    df.loc[3, "code"] = 4                                     # 'low' with code 4: not a declared combination
    with pytest.raises(DataValidationError, match="1 row.s. break the declared fixed combinations"):
        Schema.from_dict({**PAIR_SCHEMA, "constraints": [PAIR]}).validate(df)


BOOL_SCHEMA = {"label": "y", "label_categories": ["n", "p"], "columns": [
    {"name": "smoker", "type": "boolean"}, {"name": "x", "type": "numeric", "bounds": [0, 1]}]}


def _bool_table(n=1000):
    import pandas as pd
    g = np.random.default_rng(0)
    sm = g.random(n) < 0.3
    return pd.DataFrame({"smoker": sm, "x": g.random(n), "y": np.where(sm, "p", "n")})


def test_boolean_columns_are_declared_checked_and_generated_as_bool(tmp_path):
    from mmdsynth.errors import DataValidationError, SchemaError
    from mmdsynth.evaluation.fidelity import table_fidelity

    schema = Schema.from_dict(BOOL_SCHEMA)
    assert schema.to_dict()["columns"][0] == {"name": "smoker", "type": "boolean"}
    df = _bool_table()
    spelled = df.assign(smoker=np.where(df["smoker"], "true", "FALSE"))
    assert sorted(schema.validate(spelled)["smoker"].unique()) == ["False", "True"]
    with pytest.raises(DataValidationError, match=r"boolean column 'smoker' has 1 value\(s\) \(1 distinct\) that are not booleans") as err:
        schema.validate(df.assign(smoker=["maybe"] + list(df["smoker"][1:])))
    assert "maybe" not in str(err.value)
    with pytest.raises(SchemaError, match=r"boolean column .smoker. takes no \[.categories.\]"):
        Schema.from_dict({**BOOL_SCHEMA, "columns": [{"name": "smoker", "type": "boolean", "categories": ["a"]}]})
    m = DPMERF(**{**DPMERF.defaults_for("table"), "iterations": 50}).fit(df, label="y", schema=BOOL_SCHEMA)
    s = m.sample(500, seed=0)
    assert s["smoker"].dtype == bool and 0.05 < s["smoker"].mean() < 0.6      # real share 0.3
    fid = table_fidelity(df, s, schema)
    assert 0 <= fid["marginals"]["smoker"]["tv"] < 0.3
    # through the CLI, from a CSV of True / False strings
    df.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(BOOL_SCHEMA))
    assert main(["fit", "--method", "dp-ntk", "--csv", str(tmp_path / "t.csv"), "--schema", str(tmp_path / "s.json"),
                 "--label", "y", "--iterations", "5", "--out", str(tmp_path / "m"), "-q"]) == 0
    assert main(["sample", str(tmp_path / "m"), "--n", "50", "--out", str(tmp_path / "s.csv")]) == 0
