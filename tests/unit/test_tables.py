"""Tables: encoding, mixed-head generator, private class proportions, DataFrame fit/sample, CLI."""
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

import mmdsynth
from mmdsynth import DPMERF, DPNTK, Schema, calibrate_sigma, mean_embedding
from mmdsynth.cli import main
from mmdsynth.data.encoding import TableEncoder
from mmdsynth.errors import InvalidParameterError, SchemaError
from mmdsynth.features import MixedRFF

from conftest import require_data
from support import SCHEMA, TINY, toy_table


def test_encode_decode_round_trip_keeps_values_order_and_schema_dtypes():
    df = toy_table(50)[["score", "y", "colour", "age", "smoker"]]  # any column order
    enc = TableEncoder.for_frame(Schema.from_dict(SCHEMA), df)
    X, y = enc.encode(df)
    assert X.shape == (50, 2 + 3 + 2) and X.min() >= 0 and X.max() <= 1
    assert np.allclose(X[:, 2:5].sum(1), 1) and np.allclose(X[:, 5:].sum(1), 1)
    back = TableEncoder.from_dict(json.loads(json.dumps(enc.to_dict(), sort_keys=True))).decode(
        X, y, categorical="argmax")
    assert list(back.columns) == list(df.columns) and (back.dtypes == df.dtypes).all()  # toy dtypes = schema's
    pd.testing.assert_frame_equal(back.drop(columns="score"), df.drop(columns="score"))
    assert np.allclose(back["score"], df["score"], atol=1e-6)


def test_missing_bounds_are_refused_not_read_from_data():
    bad = json.loads(json.dumps(SCHEMA))
    del bad["columns"][0]["bounds"]
    with pytest.raises(SchemaError, match=r"leaves out bounds of numeric column\(s\) \['age'\].*never reads them "
                                          r"from the private data silently.*schema_share=0.1\)"):
        TableEncoder(Schema.from_dict(bad))


def test_mixed_rff_norm_bound_and_neighbouring_sensitivity():
    enc = TableEncoder(Schema.from_dict(SCHEMA))
    fm = MixedRFF(2, 2, 5, n_features=64, length_scale=0.5, seed=0)
    X, y = enc.encode(toy_table(60))
    X = torch.tensor(X)
    assert torch.allclose(fm(X.double()).norm(dim=1), torch.ones(60, dtype=torch.float64), atol=1e-12)
    soft = torch.rand(20, 7)  # anything, even non-encoded rows: the bound still holds
    assert (fm(soft.double()).norm(dim=1) <= 1 + 1e-12).all()
    mu = mean_embedding(fm, X, torch.tensor(y), 2)
    X2, y2 = X.clone(), torch.tensor(y).clone()
    X2[3] = torch.tensor([1.0, 0.0, 0, 0, 1, 1, 0]) if X[3, 4] == 0 else torch.tensor([0.0, 1.0, 1, 0, 0, 0, 1])
    y2[3] = 1 - y2[3]
    assert 1 / 60 < (mu - mean_embedding(fm, X2, y2, 2)).norm() <= 2 / 60 + 1e-12


@pytest.mark.parametrize("sizes, n_numeric, pairs, cross, inputs", [
    ([3, 66, 11, 2, 2, 1, 2], 34, True, True, "numeric"), ([4, 5], 3, False, True, "all"), ([4, 5, 2], 0, True, False, "numeric"),
    ([3], 5, False, False, "numeric"), ([], 4, False, False, "numeric")])
def test_mixed_rff_sparse_split_is_the_bounded_dense_map(sizes, n_numeric, pairs, cross, inputs):
    """The hybrid builds its pool's features with ``sparse_split``: the same entries as ``bounded(phi(x))`` (numbers on
    and between the histogram's grid points, missing categories, a non-finite row zeroed), and a row with two
    non-zeros in one block (not an encoded record) is refused."""
    g = np.random.default_rng(0)
    n = 400
    num = g.random((n, n_numeric))
    num[:40], num[40:50], num[50:60] = 0.0, 1.0, 0.2                  # on the 6-bin grid: one hat, value 1
    cat = np.zeros((n, sum(sizes)))
    for start, k in zip(np.cumsum([0] + sizes[:-1]), sizes):
        present = g.random(n) > 0.1
        cat[np.nonzero(present)[0], start + g.integers(0, k, n)[present]] = 1.0
    x = np.hstack([num, cat])
    if n_numeric:
        x[7, 0] = np.nan
    fm = MixedRFF(n_numeric, len(sizes), sum(sizes), 200, seed=1, rff_inputs=inputs,
                  category_sizes=sizes if pairs else None, cross_sizes=sizes if cross else None,
                  cross_bins=6 if cross else 0)
    want = fm.bounded(fm(torch.from_numpy(x))).numpy()
    gauss, rest = fm.sparse_split(x)
    got = np.hstack([gauss, rest.toarray()])
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-12
    assert ((got != 0) == (want != 0)).all() and rest.nnz == (want[:, gauss.shape[1]:] != 0).sum()
    if n_numeric:
        assert not got[7].any()
    if len(sizes) > 1 and (pairs or cross):
        x[3, n_numeric:n_numeric + 2] = 1.0
        with pytest.raises(InvalidParameterError, match="one non-zero"):
            fm.sparse_split(x)


def test_a_records_released_features_are_a_function_of_that_record_alone():
    """The release's sums read each record's features through ``released_split``: bit for bit the same whatever rows
    share its batch and however many (a float32 product of another shape rounds them apart by up to 1e-5, and a
    batch's size follows private facts: a person's rows, a stream's shards), and the same entries as
    ``sparse_split`` to float32 precision."""
    g = np.random.default_rng(3)
    fm = MixedRFF(20, 2, 5, 1000, seed=2, category_sizes=[2, 3], cross_sizes=[2, 3], cross_bins=4)
    x = np.hstack([g.random((300, 20)), np.eye(2)[g.integers(0, 2, 300)], np.eye(3)[g.integers(0, 3, 300)]])
    x = x.astype(np.float32)
    gauss, rest = fm.released_split(x)
    for k in (0, 17, 299):
        alone, alone_rest = fm.released_split(x[k:k + 1])
        assert np.array_equal(alone[0], gauss[k]) and (alone_rest[0] != rest[k]).nnz == 0
        other = np.concatenate([x[100:140][::-1], x[k:k + 1]])          # other rows, another batch size
        assert np.array_equal(fm.released_split(other)[0][-1], gauss[k])
    plain, _ = fm.sparse_split(x)
    assert np.abs(plain - gauss).max() < 1e-5
    with pytest.raises(ValueError, match="at most 4096 rows"):
        fm.released_split(np.zeros((4097, 25), dtype=np.float32))


@pytest.mark.parametrize("sizes, n_numeric, pairs, cross", [
    ([3, 1, 5, 2, 7], 3, True, True), ([2] * 12 + [1], 6, True, True), ([4, 6], 0, True, False),
    ([3, 4], 2, False, True), ([5], 3, False, True), ([2, 3], 2, False, False)])
def test_mixed_rff_weighted_sum_is_phi_transposed_times_the_weights(sizes, n_numeric, pairs, cross):
    """The generator's side of DP-MERF's loss (products never materialised, each row's scale in closed form) has the
    value and the gradient of ``phi(x).T @ W``: on encoded records, on soft rows (the generator's softmax outputs),
    on rows above the parts' floors (the scale then depends on the row) and on a zero one-hot part (gradient finite).
    The pairs keep the layout the release sums them in: pair (i, j) in order, a * size_j + b within it."""
    from mmdsynth.features.base import FeatureMap
    g = torch.Generator().manual_seed(0)
    fm = MixedRFF(n_numeric, len(sizes), sum(sizes), 40, seed=1, category_sizes=sizes if pairs else None,
                  cross_sizes=sizes if cross else None, cross_bins=5 if cross else 0)
    x = torch.tensor(fm.records(60, np.random.default_rng(2)))
    x[:10, n_numeric:] = torch.rand(10, sum(sizes), generator=g, dtype=torch.float64)        # soft rows
    x[10:15] += 3 * torch.rand(5, x.shape[1], generator=g, dtype=torch.float64)             # long rows
    x[15, n_numeric:] = 0.0
    x.requires_grad_(True)
    W = torch.rand(60, 3, generator=g, dtype=torch.float64)
    probe = torch.randn(fm.out_dim, 3, generator=g, dtype=torch.float64)
    got, want = fm.weighted_sum(x, W), FeatureMap.weighted_sum(fm, x, W)
    (g_got,), (g_want,) = (torch.autograd.grad((v * probe).sum(), x) for v in (got, want))
    assert got.shape == (fm.out_dim, 3) and (got - want).abs().max() < 1e-12
    assert torch.isfinite(g_got).all() and (g_got - g_want).abs().max() < 1e-12
    if pairs:                                        # the per-pair outer products, in the release's order
        cat = x.detach()[:, n_numeric:]
        blocks = torch.split(cat, sizes, dim=1)
        loop = torch.cat([(a[:, :, None] * b[:, None, :]).reshape(60, -1)
                          for i, a in enumerate(blocks) for b in blocks[i + 1:]], 1)
        assert torch.equal(fm._pairs(cat), loop)


def test_mixed_rff_class_sums_sparse_route_sums_what_the_generic_route_sums():
    """The release's sums (what DP-MERF's and the hybrid's embeddings noise) through the sparse route equal the
    generic route's: by class, unconditional, weighted (a person's rows), with a non-finite record (zero) and an
    extreme one; rows that are not encoded records take the generic route."""
    from mmdsynth.features.base import FeatureMap
    g = np.random.default_rng(1)
    sizes, n_numeric, n = [3, 4, 2], 3, 9000                     # more than one batch of the sparse route
    fm = MixedRFF(n_numeric, 3, 9, 64, seed=2, category_sizes=sizes, cross_sizes=sizes, cross_bins=4)
    num = g.random((n, n_numeric))
    num[5] = [1e30, -1e30, 0.0]
    cat = np.zeros((n, 9))
    for start, k in zip((0, 3, 7), sizes):
        cat[np.arange(n), start + g.integers(0, k, n)] = 1.0
    X = torch.tensor(np.hstack([num, cat]), dtype=torch.float32)
    X[11, 0] = float("nan")
    y, w = torch.tensor(g.integers(0, 3, n)), torch.tensor(g.random(n))
    for args in ((y, 3), (None, None)):
        for weights in (None, w):
            want = FeatureMap.class_sums(fm, X, *args, weights=weights)
            got = fm.class_sums(X, *args, weights=weights)
            assert got.dtype == torch.float64 and torch.allclose(got, want, rtol=1e-5, atol=1e-4)
    for i, j in ((5, 0), (11, 1), (0, 1)):                     # worst-case neighbours: one record replaced
        other, labels = X.clone(), y.clone()
        other[i], labels[i] = X[j], 2 - y[j]
        assert float((fm.class_sums(other, labels, 3) - fm.class_sums(X, y, 3)).norm()) <= 2 * fm.norm_bound + 1e-9
    soft = X.clone()
    soft[20, n_numeric:n_numeric + 3] = 0.5                      # not a one-hot: the generic route, exactly
    assert torch.equal(fm.class_sums(soft, y, 3), FeatureMap.class_sums(fm, soft, y, 3))


def test_class_proportions_release_shares_one_calibrated_plan():
    df = toy_table(400)
    m = DPMERF(epsilon=1.0, proportions_share=0.2, **TINY).fit(df, label="y", schema=SCHEMA)
    sketch, props, emb = m.release_.ledger.entries
    assert sketch.budget_id == props.budget_id == emb.budget_id and m.release_.ledger.total() == (1.0, 1e-5)
    assert "numeric-column distributions" in sketch.description and sketch.sensitivity == pytest.approx(2.0)
    assert props.sensitivity == pytest.approx(math.sqrt(2) / 400) and emb.sensitivity == pytest.approx(2 / 400)
    sigma = calibrate_sigma(1.0, 1e-5)  # one release at (1, 1e-5): the plan composes exactly to it
    assert sum(1 / e.noise_multiplier ** 2 for e in (sketch, props, emb)) == pytest.approx(1 / sigma ** 2, rel=1e-3)
    assert props.noise_multiplier == pytest.approx(sigma / math.sqrt(0.2), rel=1e-3)
    assert sketch.noise_multiplier == pytest.approx(sigma / math.sqrt(0.1), rel=1e-3)
    p = m.release_.tensors["class_proportions"]
    true = (df["y"] == "pos").mean()
    assert p.shape == (2,) and abs(float(p[1]) - true) < 0.1 and float(p[1]) != true  # noisy, but close
    minmax = DPMERF(epsilon=1.0, proportions_share=0.2, numeric_encoding="minmax", **TINY).fit(
        df, label="y", schema=SCHEMA)
    assert [e.description.split(" ")[0] for e in minmax.release_.ledger.entries] == ["class", "class-conditional"]


def test_public_parts_do_not_depend_on_the_private_rows():
    """Same schema and size, different rows: feature map, facts and noise scales are identical."""
    a = DPNTK(epsilon=1, arch="fc_1l", ntk_width=16, iterations=2, batch_size=50, noise_seed=0)
    b = DPNTK(epsilon=1, arch="fc_1l", ntk_width=16, iterations=2, batch_size=50, noise_seed=0)
    a.fit(toy_table(300, seed=1), label="y", schema=SCHEMA)
    b.fit(toy_table(300, seed=2), label="y", schema=SCHEMA)
    assert a.release_.feature_spec == b.release_.feature_spec
    assert a.release_.dataset == b.release_.dataset
    assert [e.noise_std for e in a.release_.ledger.entries] == [e.noise_std for e in b.release_.ledger.entries]
    assert a.generator_.spec() == b.generator_.spec()


def test_sampling_returns_valid_categories_and_bounded_numbers(tmp_path):
    m = DPNTK(epsilon=2, arch="cnn_2l", widths=(4, 8), **{k: v for k, v in TINY.items() if k != "n_features"})
    m.fit(toy_table(), label="y", schema=SCHEMA, out=tmp_path / "m")
    s = mmdsynth.load(tmp_path / "m").sample(500, seed=0)
    assert list(s.columns) == ["age", "score", "colour", "smoker", "y"] and len(s) == 500
    assert s["age"].between(17, 90).all() and (s["age"] == s["age"].round()).all()
    assert s["score"].between(-1, 1).all()
    assert set(s["colour"]) <= {"red", "green", "blue"} and set(s["smoker"]) <= {"no", "yes"}
    assert set(s["y"]) == {"neg", "pos"}
    Schema.from_dict(SCHEMA).validate(s)  # the schema's own validation accepts every row


def test_table_errors_name_the_problem():
    df = toy_table(50)
    with pytest.raises(InvalidParameterError, match="needs its schema"):
        DPMERF(epsilon=1).fit(df, label="y")
    with pytest.raises(InvalidParameterError, match="must agree"):
        DPMERF(epsilon=1).fit(df, label="colour", schema=SCHEMA)
    with pytest.raises(InvalidParameterError, match="class-conditionally"):
        DPMERF(epsilon=1, conditional=False).fit(df, label="y", schema=SCHEMA)


def test_cli_fit_sample_evaluate_user_csv(tmp_path, capsys):
    toy_table(400, seed=0).to_csv(tmp_path / "train.csv", index=False)
    toy_table(300, seed=1).to_csv(tmp_path / "test.csv", index=False)
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    code = main(["fit", "--method", "dp-merf", "--csv", str(tmp_path / "train.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--label", "y", "--epsilon", "5", "--iterations", "200",
                 "--batch-size", "200", "--n-features", "300", "--noise-seed", "0", "-q", "--out", str(tmp_path / "m")])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["sample", str(tmp_path / "m"), "--n", "20", "--out", str(tmp_path / "s.csv")]) == 0
    assert list(pd.read_csv(tmp_path / "s.csv").columns) == ["age", "score", "colour", "smoker", "y"]
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "m"), "--test", str(tmp_path / "test.csv")]) == 0
    text = capsys.readouterr().out                         # for people: a summary, the numbers in evaluation.json
    result = json.loads((tmp_path / "m" / "evaluation.json").read_text())
    assert result["binary"] and len(result["classifiers"]) == 12
    assert len(text.splitlines()) <= 20 and "mean" in text and f"{result['mean']['roc_auc']:.3f}" in text
    assert "pairwise dependence error" in text and "evaluation.json" in text
    assert main(["evaluate", str(tmp_path / "m"), "--test", str(tmp_path / "test.csv"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == result
    assert 0.55 < result["mean"]["roc_auc"] < 1.0  # learned the age/colour signal (chance 0.5)
    code = main(["evaluate", str(tmp_path / "m")])
    assert code == 2 and "--test" in capsys.readouterr().err


def test_all_categorical_tables_release_dependence_between_columns(caplog):
    """Issue 14: DP-MERF on an all-categorical table used to release per-class frequencies only
    (n_features 0); by default it now adds every two columns' pairwise marginals, and says so."""
    cat_schema = {"columns": [c for c in SCHEMA["columns"] if c["type"] == "categorical"],
                  "label": "y", "label_categories": ["neg", "pos"]}
    df = toy_table(300)[["colour", "smoker", "y"]]
    m = DPMERF(epsilon=1, **TINY).fit(df, label="y", schema=cat_schema)
    spec = m.release_.feature_spec
    assert spec["category_sizes"] == [3, 2] and "pairwise marginals" in spec["captures"]
    assert m.release_.tensors["embedding"].shape == (3 + 2 + 3 * 2, 2)
    paper = DPMERF(epsilon=1, categorical_pairs=False, **TINY).fit(df, label="y", schema=cat_schema)
    assert paper.release_.feature_spec["n_features"] == 0
    assert "no dependence between categorical columns" in paper.release_.feature_spec["captures"]
    mixed = DPMERF(epsilon=1, **TINY).fit(toy_table(300), label="y", schema=SCHEMA).release_.feature_spec
    assert mixed["rff_inputs"] == "numeric" and mixed["category_sizes"] == [3, 2]
    import mmdsynth.methods.kernel as kernel
    with caplog.at_level("WARNING"):
        try:
            kernel.MAX_AUTO_PAIR_FEATURES, old = 5, kernel.MAX_AUTO_PAIR_FEATURES
            big = DPMERF(epsilon=1, **TINY).fit(df, label="y", schema=cat_schema).release_.feature_spec
        finally:
            kernel.MAX_AUTO_PAIR_FEATURES = old
    assert big["category_sizes"] is None and "categorical_pairs=True forces them" in caplog.text
    fm = MixedRFF(0, 2, 5, n_features=64, category_sizes=[3, 2])
    assert (fm(torch.rand(50, 5).double() * 3).norm(dim=1) <= 1 + 1e-12).all()    # any input: the bound holds
    assert torch.allclose(fm(torch.tensor([[1.0, 0, 0, 1, 0]]).double()).norm(), torch.tensor(1.0).double())
    all_rows = MixedRFF(0, 2, 5, n_features=64, rff_inputs="all")
    assert (all_rows(torch.rand(50, 5).double()).norm(dim=1) <= 1 + 1e-12).all()


def test_reference_view_measures_the_reference_codes_scoring_beside_ours():
    """benchmarks/_reference_view.py: Gaussian NB selected on the test split recovers what a
    zero-variance synthetic feature breaks at the default var_smoothing, and binary scores come
    from hard labels (so they differ from the probability-based ones)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from _reference_view import GNB_VAR_SMOOTHING, gnb_test_selected, hard_label_scores

    rng = np.random.default_rng(0)
    # real: 30 % of class 0 sits at 0.3 in feature 1; the synthetic class 0 is exactly 0 there
    # (variance 0) while class 1 is spread: at the default var_smoothing those real rows go to class 1
    yt = np.repeat([0, 1], 500)
    Xt = np.c_[np.where(yt == 0, 0.2, 0.8) + 0.1 * rng.standard_normal(1000),
               np.where((yt == 0) & (rng.random(1000) < 0.3), 0.3, 0.0) + (yt == 1) * rng.random(1000)]
    ys = np.repeat([0, 1], 500)
    Xs = np.c_[np.where(ys == 0, 0.2, 0.8) + 0.1 * rng.standard_normal(1000), (ys == 1) * rng.random(1000)]
    view = gnb_test_selected(Xs, ys, Xt, yt)
    assert set(view["per_var_smoothing"]) == {str(v) for v in GNB_VAR_SMOOTHING}
    default = view["per_var_smoothing"][str(1e-9)]
    assert default < 0.9 and view["best"] > 0.95 and view["best_var_smoothing"] > 1e-9

    hard = hard_label_scores(Xs, ys, Xt, yt, seed=0)
    assert len(hard["classifiers"]) == 12
    # hard labels give ROC = (TPR + TNR) / 2 exactly
    lr = hard["classifiers"]["logistic_regression"]
    assert 0.5 <= lr["roc_auc"] <= 1.0 and 0.0 < lr["pr_auc"] <= 1.0


def test_preset_undersampling_can_be_replaced_and_bad_rates_are_refused():
    from mmdsynth.data import load_preset
    require_data("epileptic")
    base = load_preset("epileptic", seed=0)
    under = load_preset("epileptic", seed=0, undersample={"0": 0.3})
    pos = lambda d: float(np.mean(pd.concat([d.train, d.test])["y"] == "1"))  # noqa: E731
    assert abs(pos(base) - 0.2) < 0.01                    # 2,300 seizures in 11,500 rows
    assert abs(pos(under) - 2300 / (2300 + 0.3 * 9200)) < 0.01
    assert under.preset.undersample == {"0": 0.3} and "replaced" in under.preset.description
    assert abs(len(under.test) / (len(under.train) + len(under.test)) - 0.3) < 0.01   # the split follows it
    with pytest.raises(InvalidParameterError, match="not a class of epileptic"):
        load_preset("epileptic", undersample={"seizure": 0.3})
    with pytest.raises(InvalidParameterError, match=r"\(0, 1\]"):
        load_preset("epileptic", undersample={"0": 0.0})


def test_numeric_categorical_histograms_see_dependence_the_first_order_parts_miss():
    """Issue 32: two tables with the same per-column marginals, one where a colour goes with high ages and
    one where it does not, have the same first-order embedding; the numeric x categorical block tells them
    apart, keeps ||phi|| <= 1 for any input and is differentiable for the generator."""
    g = np.random.default_rng(0)
    age = g.random(4000)
    high = (age > 0.5).astype(int)
    coupled = np.column_stack([age, np.eye(2)[high]])
    independent = np.column_stack([age, np.eye(2)[g.permutation(high)]])
    y = torch.zeros(4000, dtype=torch.long)
    plain = MixedRFF(1, 1, 2, n_features=64, seed=0)
    cross = MixedRFF(1, 1, 2, n_features=64, seed=0, cross_sizes=[2], cross_bins=8)
    gap = lambda fm: float((mean_embedding(fm, torch.tensor(coupled), y, 1)          # noqa: E731
                            - mean_embedding(fm, torch.tensor(independent), y, 1)).norm())
    assert gap(plain) < 1e-12 and gap(cross) > 0.1
    assert (cross(torch.rand(50, 3).double() * 5 - 2).norm(dim=1) <= 1 + 1e-12).all()
    assert cross.out_dim == 64 + 2 + 1 * 8 * 2 and "joint histograms (8 bins)" in cross.captures
    x = torch.rand(10, 3, dtype=torch.float64, requires_grad=True)
    cross(x).sum().backward()
    assert x.grad[:, 0].abs().sum() > 0                       # gradient reaches the numeric column
    rebuilt = mmdsynth.features.build_feature_map(cross.spec())
    assert torch.equal(rebuilt(torch.tensor(coupled[:5])), cross(torch.tensor(coupled[:5])))
