"""DP-HP: Hermite polynomial features (norm bound, truncation bound, sensitivity), the plan of the
sum and product releases, and tiny fits on digits and on a table."""
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from mmdsynth import DPHP, HermiteFeatures, Schema, build_feature_map, load, mean_embedding, release_mean_embedding
from mmdsynth.errors import InvalidParameterError
from mmdsynth.features.hermite import hermite_functions, mehler_rho, truncation_bound
from mmdsynth.privacy import PrivacyPlan, calibrate_sigma, epsilon_for_sigma

from conftest import assert_learns_digits_and_noise_shows


def gaussian(x, y, s):
    return torch.exp(-(x - y) ** 2 / (2 * s * s))


@pytest.mark.parametrize("order", [0, 1, 5, 100, 600])
@pytest.mark.parametrize("length_scale", [1e-4, 0.0707, 1.0, 1e4])
def test_feature_norms_stay_within_one_for_extreme_inputs(order, length_scale):
    x = torch.tensor([0.0, 1e-300, 0.5, 1.0, -3.0, 30.0, 1e3, 1e6, 1e39, -1e39, 1e300, float("inf"), -float("inf")],
                     dtype=torch.float64)
    h = hermite_functions(x, order, mehler_rho(length_scale))
    assert h.shape == (len(x), order + 1)
    assert torch.isfinite(h).all()
    assert float((h ** 2).sum(-1).max()) <= 1 + 1e-12


def test_truncated_expansion_approaches_the_gaussian_kernel_within_the_derived_bound():
    x = torch.linspace(-1.5, 1.5, 13, dtype=torch.float64)
    y = torch.linspace(1.0, -0.5, 13, dtype=torch.float64)
    for s in (0.3, 0.7, 2.0):
        errors = []
        for order in (2, 5, 10, 20, 40, 80, 200):
            approx = (hermite_functions(x, order, mehler_rho(s)) * hermite_functions(y, order, mehler_rho(s))).sum(-1)
            err = (approx - gaussian(x, y, s)).abs()
            assert (err <= truncation_bound(x, y, order, s) + 1e-12).all(), (s, order)
            errors.append(float(err.max()))
        assert errors[-1] < 1e-6 and errors[-1] < errors[0] / 100, (s, errors)
        assert float(truncation_bound(x, y, 400, s).max()) < 1e-12          # the bound itself goes to 0


def test_sum_and_product_kernels_are_the_declared_kernels():
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(3, 5, generator=g, dtype=torch.float64), torch.rand(3, 5, generator=g, dtype=torch.float64)
    fmap = HermiteFeatures(5, order=60, length_scale=[0.5, 0.6, 0.7, 0.8, 0.9], n_product=3, product_dims=2,
                           product_order=60, seed=3)
    pa, pb = fmap(a), fmap(b)
    s = torch.tensor(fmap.length_scale, dtype=torch.float64)
    w = fmap.sum_width
    k_sum = (pa[:, :w] * pb[:, :w]).sum(1)
    assert torch.allclose(k_sum, gaussian(a, b, s).mean(1), atol=1e-9)            # (1/D) sum_d k_d
    for j, subset in enumerate(fmap.subsets):
        block = slice(w + j * fmap.product_width, w + (j + 1) * fmap.product_width)
        k_prod = (pa[:, block] * pb[:, block]).sum(1)
        assert torch.allclose(k_prod, gaussian(a[:, subset], b[:, subset], s[subset]).prod(1), atol=1e-9)
    assert len({tuple(sorted(t.tolist())) for t in fmap.subsets}) > 1      # the seed draws different subsets


def test_differentiable_path_equals_the_release_path_and_spec_rebuilds_the_map():
    fmap = HermiteFeatures(8, order=12, length_scale=0.3, n_product=2, product_dims=3, product_order=4, seed=1)
    x = torch.rand(6, 8)
    xg = x.clone().requires_grad_()
    phi = fmap(xg)                                   # float32 on the generator's side
    assert phi.dtype == torch.float32 and torch.allclose(phi.double(), fmap(x), atol=1e-6)
    phi64 = fmap(x.double().requires_grad_())
    assert torch.allclose(phi64, fmap(x), atol=1e-14)
    phi.sum().backward()
    assert torch.isfinite(xg.grad).all() and xg.grad.abs().sum() > 0
    again = build_feature_map(fmap.spec())
    assert torch.equal(again(x), fmap(x)) and torch.equal(again.subsets, fmap.subsets)


@pytest.mark.parametrize("value", [1e39, -1e39, float("nan"), float("inf"), 0.0, 1e6, 0.5])
def test_each_released_block_moves_by_at_most_its_sensitivity_on_worst_case_neighbours(value):
    """Replace one record by an extreme one (and swap its label): every block's mean embedding moves
    by at most 2/m, the whole by 2 sqrt(1 + k)/m, and nothing becomes non-finite."""
    fmap = HermiteFeatures(6, order=40, length_scale=0.2, n_product=3, product_dims=2, product_order=8)
    g = np.random.default_rng(0)
    X, y = g.random((30, 6)), np.arange(30) % 3
    base = mean_embedding(fmap, torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y), 3)
    X2, y2 = X.copy(), y.copy()
    X2[0], y2[0] = value, (y[0] + 1) % 3
    X2[1, :3] = 0.0                          # a record at phi_0's maximum in half its dimensions
    X2[1, 3:] = value
    mu = mean_embedding(fmap, torch.as_tensor(X2, dtype=torch.float32), torch.as_tensor(y2), 3)
    assert torch.isfinite(mu).all()
    start = 0
    for _, width, bound in fmap.parts():
        moved = float((mu[start:start + width] - base[start:start + width]).norm())
        assert moved <= 2 * 2 * bound / 30 * (1 + 1e-9)       # two records replaced: twice the sensitivity
        start += width
    X3 = X.copy()
    X3[0] = value
    mu3 = mean_embedding(fmap, torch.as_tensor(X3, dtype=torch.float32), torch.as_tensor(y), 3)
    assert float((mu3 - base).norm()) <= 2 * fmap.norm_bound / 30 * (1 + 1e-9)


def test_plan_with_product_releases_calibrates_to_the_exact_composed_sigma():
    k, share = 4, 0.8
    fmap = HermiteFeatures(6, order=40, length_scale=0.3, n_product=k, product_dims=2, product_order=9,
                           sum_share=share)
    X, y = np.random.default_rng(0).random((50, 6)), np.arange(50) % 2
    rel = release_mean_embedding(fmap, X, y, epsilon=1.0, delta=1e-5, n_classes=2, seed=0)
    entries = rel.ledger.entries
    assert len(entries) == 1 + k and len({e.budget_id for e in entries}) == 1
    sigmas = [e.noise_multiplier for e in entries]
    inv = [1 / s ** 2 for s in sigmas]
    assert inv[0] / sum(inv) == pytest.approx(share) and all(v == pytest.approx(inv[1]) for v in inv[1:])
    plan = PrivacyPlan(tuple(s / sigmas[0] for s in sigmas))
    assert sigmas[0] == pytest.approx(calibrate_sigma(1.0, 1e-5, plan))
    assert epsilon_for_sigma(sigmas[0], 1e-5, plan) == pytest.approx(1.0, rel=1e-3)
    assert rel.tensors["embedding"].shape == (fmap.out_dim, 2)
    assert all(e.sensitivity == pytest.approx(2 / 50) for e in entries)
    # the noise really is there, at sigma x sensitivity per block
    exact = mean_embedding(fmap, torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y), 2)
    resid = rel.tensors["embedding"] - exact
    assert float(resid[:fmap.sum_width].std()) == pytest.approx(sigmas[0] * 2 / 50, rel=0.15)     # 492 entries
    assert float(resid[fmap.sum_width:].std()) == pytest.approx(sigmas[1] * 2 / 50, rel=0.12)     # 800 entries


def test_bad_parameters_are_refused_with_their_name():
    with pytest.raises(InvalidParameterError, match="length_scale"):
        HermiteFeatures(3, length_scale=[0.1, 0.2])
    with pytest.raises(InvalidParameterError, match="product_dims"):
        HermiteFeatures(3, n_product=1, product_dims=4)
    with pytest.raises(InvalidParameterError, match="sum_share"):
        HermiteFeatures(3, n_product=1, sum_share=1.0)
    with pytest.raises(InvalidParameterError, match="expects 3"):
        HermiteFeatures(3)(torch.rand(2, 4))


def test_tiny_dphp_on_digits_beats_chance_and_noise_shows(digits, tmp_path):
    """eps 10 learns the classes; at eps 0.01 the release is mostly noise and accuracy must fall
    clearly below (silently disabled noise would not)."""
    model = assert_learns_digits_and_noise_shows(
        lambda eps: DPHP(eps, 1e-5, n_classes=10, order=20, length_scale=0.3, n_product=2, product_order=5,
                         sum_weight=5.0, iterations=150, batch_size=200, lr_step=100, noise_seed=1), digits)
    assert len(model.release_.ledger.entries) == 3
    model.save(tmp_path / "m")
    again = load(tmp_path / "m")
    assert isinstance(again, DPHP) and again.n_product == 2
    assert np.array_equal(again.sample(20, seed=1)[0], model.sample(20, seed=1)[0])


def test_tiny_dphp_on_a_table_releases_proportions_and_blocks_in_one_plan():
    g = np.random.default_rng(0)
    n = 400
    colour = g.choice(["red", "green", "blue"], n)
    y = (colour == "red") | (g.random(n) < 0.1)
    df = pd.DataFrame({"age": g.integers(18, 90, n), "colour": colour, "y": np.where(y, "yes", "no")})
    schema = Schema.from_dict({"columns": [
        {"name": "age", "type": "numeric", "bounds": [0, 100], "integer": True},
        {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"]}],
        "label": "y", "label_categories": ["no", "yes"]})
    model = DPHP(1.0, 1e-5, order=10, length_scale=0.5, n_product=2, product_dims=2, product_order=4,
                 iterations=60, batch_size=100, noise_seed=0).fit(df, label="y", schema=schema)
    names = [e.description for e in model.release_.ledger.entries]
    assert len(names) == 5 and "numeric-column distributions" in names[0] and "class proportions" in names[1]
    out = model.sample(300, seed=0)
    assert list(out.columns) == ["age", "colour", "y"] and out["age"].between(0, 100).all()
    assert set(out["colour"]) <= {"red", "green", "blue"}


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_structured_class_sums_equal_the_generic_bounded_route(dims):
    """The product blocks' factored sums (never materialised per record) equal the generic route that
    bounds every materialised row, adversarial records included."""
    from mmdsynth.features.base import FeatureMap

    fmap = HermiteFeatures(7, order=9, length_scale=0.3, n_product=3, product_dims=dims, product_order=4)
    X = torch.rand(150, 7, dtype=torch.float64)
    X[0], X[1], X[2, 3], X[3] = float("nan"), 1e39, float("inf"), 0.0
    y = torch.arange(150) % 3
    for labels, classes in ((y, 3), (None, None)):
        fast = fmap.class_sums(X, labels, classes, batch_size=64)
        generic = FeatureMap.class_sums(fmap, X, labels, classes, batch_size=64)
        assert torch.allclose(fast, generic, atol=1e-12)


def test_cli_fit_inspect_sample_and_flag_checks(tmp_path, capsys):
    from mmdsynth.cli import main

    out = tmp_path / "cli"
    assert main(["fit", "--method", "dp-hp", "--dataset", "digits", "--epsilon", "1", "--iterations", "6",
                 "--batch-size", "50", "--hp-order", "8", "--length-scale", "0.3", "--product-releases", "2",
                 "--product-order", "3", "--sum-weight", "5", "--out", str(out), "-q"]) == 0
    assert "fitted dp-hp on digits: epsilon=1" in capsys.readouterr().out
    assert main(["inspect", str(out), "--ledger"]) == 0
    text = capsys.readouterr().out
    assert text.count("under hermite features") == 3 and "block hermite_product_1" in text
    assert main(["sample", str(out), "--n", "10", "--out", str(tmp_path / "s.npz")]) == 0
    params = json.loads((out / "model.json").read_text())["params"]
    assert params["order"] == 8 and params["n_product"] == 2 and params["length_scale"] == 0.3
    assert main(["fit", "--method", "dp-merf", "--dataset", "digits", "--epsilon", "1", "--hp-order", "5",
                 "--out", str(tmp_path / "x")]) == 2
    assert "dp-hp options" in capsys.readouterr().err


def test_private_schema_inference_joins_the_hermite_blocks_plan():
    """With bounds/categories left to private inference, the plan is calibrated before the encoder (and
    so the map) exists: the method's block multipliers stand in, and every release shares one budget."""
    from support import partial_schema, table_with_rare_value

    model = DPHP(1.0, 1e-5, order=6, length_scale=0.5, n_product=2, product_dims=2, product_order=3, sum_share=0.8,
                 schema_share=0.1, iterations=3, batch_size=50, noise_seed=0)
    model.fit(table_with_rare_value(600), label="y", schema=partial_schema())
    entries = model.release_.ledger.entries
    assert len(entries) == 1 + 1 + 1 + 3 and len({e.budget_id for e in entries}) == 1   # schema, sketch, props
    blocks = [e for e in entries if "hermite features" in e.description]
    assert len(blocks) == 3
    ratio = blocks[1].noise_multiplier / blocks[0].noise_multiplier
    assert ratio == pytest.approx(math.sqrt(2 * 0.8 / 0.2))
    assert model.release_.ledger.total()[0] == pytest.approx(1.0)


@pytest.mark.parametrize("dataset", ["adult", "mnist"])
def test_cli_fit_uses_the_whole_dp_hp_preset(monkeypatch, tmp_path, dataset):
    """Every preset setting (tables; images: the authors' length scale, gamma and MNIST's FC generator)
    reaches the model, none silently replaced by a class default."""
    import mmdsynth.cli.fit as cli
    from mmdsynth.cli import build_parser
    from mmdsynth.methods.presets import image_preset, method_preset

    args = build_parser().parse_args(["fit", "--method", "dp-hp", "--dataset", dataset, "--epsilon", "1",
                                      "--out", str(tmp_path)])
    preset = method_preset("dp-hp", dataset) if dataset == "adult" else image_preset("dp-hp", dataset)
    assert dataset == "adult" or preset["generator"] == "fc"
    captured = {}

    class Stop(Exception):
        pass

    def fake_fit_inputs(a):                  # a table's model is made in its run, from the run's facts: a toy table
        from support import SCHEMA, toy_table
        if dataset != "adult":
            return ((None,), {"dataset": dataset}, preset, {}, "image")
        return ((toy_table(20),), {"dataset": "adult", "schema": Schema.from_dict(SCHEMA), "label": "y"}, preset,
                {}, "table")

    def fake_init(self, **kwargs):
        captured.update(kwargs)
        raise Stop

    monkeypatch.setattr(cli, "_fit_inputs", fake_fit_inputs)
    monkeypatch.setattr(DPHP, "__init__", lambda self, *a, **k: fake_init(self, **k))
    with pytest.raises(Stop):
        cli.cmd_fit(args)
    assert {k: captured[k] for k in preset} == preset
