"""DP-KIP: closed-form kernels, KRR, the DP-SGD step (data-touching function #2), fit/resume."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import mmdsynth
from mmdsynth import DPKIP, epsilon_for_sigma
from mmdsynth._io import sealed
from mmdsynth.cli import main
from mmdsynth.errors import ArtifactError
from mmdsynth.kip.kernels import FCReLUKernel
from mmdsynth.kip.krr import centred_one_hot, krr_loss, krr_weights
from mmdsynth.privacy.dpsgd import private_gradient
from mmdsynth.statistics.gradients import (_support_terms, clipped_gradients, clipped_sum, factored_clipped_sum,
                                          gradient_matrices, per_record_factors)
from mmdsynth.methods import kip as kip_module
from mmdsynth.privacy import PrivacyPlan
from mmdsynth.privacy import engine as engine_module
from mmdsynth.privacy.engine import PrivacyEngine
from mmdsynth.privacy.sampling import PoissonSampler

from conftest import Guarded
from support import KIP_TINY, SCHEMA, interrupt_on_call, toy_table

FIXTURE = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "ntk_reference.npz"


# -- kernels -----------------------------------------------------------------------------------
@pytest.mark.skipif(not FIXTURE.exists(), reason="../shared/fixtures not present")
@pytest.mark.parametrize("depth,keys", [(1, ("ntk", "nngp")), (2, ("ntk2", "nngp2"))])
def test_closed_form_matches_neural_tangents(depth, keys):
    ref = np.load(FIXTURE)
    x1, x2 = torch.tensor(ref["x1"]), torch.tensor(ref["x2"])
    ntk, nngp = FCReLUKernel(depth).both(x1, x2)
    np.testing.assert_allclose(ntk.numpy(), ref[keys[0]], rtol=1e-6)
    np.testing.assert_allclose(nngp.numpy(), ref[keys[1]], rtol=1e-6)
    ntk32 = FCReLUKernel(depth)(x1.float(), x2.float())            # float32: same to single precision
    np.testing.assert_allclose(ntk32.numpy(), ref[keys[0]], rtol=1e-5)


def test_kernel_is_symmetric_psd_and_exact_on_the_diagonal():
    x = torch.randn(30, 20, dtype=torch.float64)
    for kind in ("ntk", "nngp"):
        k = FCReLUKernel(2)(x, kind=kind)
        assert torch.allclose(k, k.T)
        assert torch.linalg.eigvalsh(k).min() > -1e-10 * k.diagonal().max()
        # the diagonal of the symmetric call equals the closed form at t = 0 (no clamp bias)
        kx = torch.stack([FCReLUKernel(2)(x[i:i + 1], kind=kind)[0, 0] for i in range(3)])
        assert torch.allclose(k.diagonal()[:3], kx, rtol=1e-14)


def test_closed_form_matches_empirical_ntk_of_a_wide_network():
    """Monte Carlo: the e-NTK of one wide random network in the NTK parameterisation is a mean of
    w i.i.d. per-unit terms, so it lies within 5 standard errors (sd of the terms / sqrt(w)) of
    the closed form with probability > 1 - 1e-6 per entry (CLT)."""
    g = torch.Generator().manual_seed(0)
    w, d, ws, bs = 200_000, 16, math.sqrt(2), 0.1
    x = torch.randn(4, d, generator=g, dtype=torch.float64)
    W1 = torch.randn(w, d, generator=g, dtype=torch.float64)
    b1 = torch.randn(w, generator=g, dtype=torch.float64)
    v = torch.randn(w, generator=g, dtype=torch.float64)                         # output unit 0's weights
    h = ws * x @ W1.T / math.sqrt(d) + bs * b1                                     # (4, w) pre-activations
    r, dr = torch.relu(h), (h > 0).double()
    s0 = ws ** 2 * x @ x.T / d + bs ** 2
    for i in range(4):
        for j in range(4):
            nngp_terms = ws ** 2 * r[i] * r[j] + bs ** 2
            ntk_terms = nngp_terms + ws ** 2 * v ** 2 * dr[i] * dr[j] * s0[i, j]
            ntk, nngp = FCReLUKernel(1).both(x[i:i + 1], x[j:j + 1])
            for terms, exact in ((ntk_terms, ntk), (nngp_terms, nngp)):
                assert abs(float(terms.mean() - exact)) <= 5 * float(terms.std()) / math.sqrt(w)


# -- KRR ------------------------------------------------------------------------------------------
def test_krr_solves_the_scaled_ridge_system_and_interpolates():
    k = FCReLUKernel()
    xs = torch.randn(8, 5, dtype=torch.float64)
    ys = centred_one_hot(torch.arange(8) % 2, 2, torch.float64)
    kss = k(xs)
    alpha = krr_weights(kss, ys, 0.1)
    assert torch.allclose((kss + 0.1 * torch.trace(kss) / 8 * torch.eye(8, dtype=torch.float64)) @ alpha, ys)
    assert ys.sum(1).abs().max() < 1e-12                                      # centred labels
    assert float(krr_loss(k, xs, ys, xs, ys, 1e-9)) < 1e-8                    # tiny lambda: interpolates


# -- the DP-SGD step ---------------------------------------------------------------------------------
def _problem(B=12, m=6, d=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, xb = torch.randn(m, d, generator=g), torch.randn(B, d, generator=g)
    ys = centred_one_hot(torch.arange(m) % 3, 3)
    yb = centred_one_hot(torch.randint(0, 3, (B,), generator=g), 3)
    return FCReLUKernel(), xs, ys, xb, yb


def test_per_record_gradients_match_autograd_and_are_clipped():
    k, xs, ys, xb, yb = _problem()
    g = clipped_gradients(k, xs, ys, xb, yb, 1e-3, clip=1e9)
    for i in (0, 5):
        x = xs.clone().requires_grad_(True)
        krr_loss(k, x, ys, xb[i:i + 1], yb[i:i + 1], 1e-3).backward()
        # float32 through two routes: an entry far below the gradient's scale carries that scale's rounding
        # (on one CPU an entry of 1.2e-6 differed by 3e-10 where the largest was 4e-3)
        assert torch.allclose(g[i], x.grad, rtol=1e-4, atol=1e-5 * float(x.grad.abs().max()))
    clip = 0.3 * float(g.reshape(12, -1).norm(dim=1).median())
    norms = clipped_gradients(k, xs, ys, xb, yb, 1e-3, clip).reshape(12, -1).norm(dim=1)
    assert float(norms.max()) <= clip * (1 + 1e-6) and (norms > 0.99 * clip).sum() >= 6


@pytest.mark.parametrize("depth", [1, 2])
def test_factored_per_record_gradients_equal_the_torch_func_reference(depth):
    """The closed form R X + v x_t^T of every record's gradient, its norm (computed without
    forming it) and the clipped sum all equal vmap(grad) in float64."""
    k, xs, ys, xb, yb = _problem(B=9, m=7, d=11, seed=depth)
    k = FCReLUKernel(depth, 1.3, 0.2)
    xs, ys, xb, yb = xs.double(), ys.double(), xb.double(), yb.double()
    ref = clipped_gradients(k, xs, ys, xb, yb, 1e-2, clip=1e9)
    s = _support_terms(k, xs, ys, 1e-2)
    b, c, u, v = per_record_factors(k, s, xb, yb)
    mine = gradient_matrices(s, b, c, u) @ xs + v[:, :, None] * xb[:, None, :]
    assert torch.allclose(mine, ref, rtol=1e-10, atol=1e-14)
    for clip in (1e-9, 0.5 * float(ref.reshape(9, -1).norm(dim=1).median()), 1e9):
        want = clipped_gradients(k, xs, ys, xb, yb, 1e-2, clip).sum(0)
        got = factored_clipped_sum(k, xs, ys, xb, yb, 1e-2, clip)
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-14 * clip)
    assert torch.equal(clipped_sum(k, xs, ys, xb, yb, 1e-2, 0.1), factored_clipped_sum(k, xs, ys, xb, yb, 1e-2, 0.1))


@pytest.mark.parametrize("factored", [True, False])
@pytest.mark.parametrize("adversary", ["huge", "big", "zeros", "far", "other_label"])
def test_adding_one_worst_case_record_moves_the_clipped_sum_by_at_most_C(adversary, factored):
    k, xs, ys, xb, yb = _problem()
    clip = 1e-3
    x_new = {"huge": torch.full((1, 10), float("inf")), "big": torch.full((1, 10), 3e38), "zeros": torch.zeros(1, 10), "far": 1e6 * torch.ones(1, 10),
             "other_label": xs[:1]}[adversary]
    y_new = centred_one_hot(torch.tensor([1 if adversary == "other_label" else 0]), 3)
    base = clipped_sum(k, xs, ys, xb, yb, 1e-3, clip, factored=factored)
    more = clipped_sum(k, xs, ys, torch.cat([xb, x_new]), torch.cat([yb, y_new]), 1e-3, clip, factored=factored)
    assert torch.isfinite(more).all()
    assert float((more - base).norm()) <= clip * (1 + 1e-5)


@pytest.mark.parametrize("factored", [True, False, "explicit"])
def test_weighted_clipped_sum_is_each_clipped_gradient_times_its_weight(factored, monkeypatch):
    """A person's rows enter the step at 1 / their count: the weighted sum equals the reference's clipped
    per-record gradients times the weights, both paths; all-ones weights change nothing."""
    if factored == "explicit":                  # every record through the closed form's explicit fallback
        monkeypatch.setattr("mmdsynth.statistics.gradients.TRUST", float("inf"))
        factored = True
    k, xs, ys, xb, yb = _problem(B=9, m=7, d=11, seed=3)
    xs, ys, xb, yb = xs.double(), ys.double(), xb.double(), yb.double()
    w = torch.tensor([1.0, 0.5, 0.5, 1 / 3, 1 / 3, 1 / 3, 0.25, 0.25, 1.0], dtype=torch.float64)
    clip = 0.5 * float(clipped_gradients(k, xs, ys, xb, yb, 1e-2, 1e9).reshape(9, -1).norm(dim=1).median())
    want = (clipped_gradients(k, xs, ys, xb, yb, 1e-2, clip) * w[:, None, None]).sum(0)
    got = clipped_sum(k, xs, ys, xb, yb, 1e-2, clip, factored=factored, weights=w)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-14)
    assert torch.allclose(clipped_sum(k, xs, ys, xb, yb, 1e-2, clip, factored=factored, weights=torch.ones(9)),
                          clipped_sum(k, xs, ys, xb, yb, 1e-2, clip, factored=factored), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("factored", [True, False])
def test_one_person_with_many_worst_case_rows_moves_the_step_by_at_most_C(factored):
    """With a person as the unit a step reads every row of each sampled person at 1 / their rows: adding a
    person with 500 extreme rows (or one) moves the clipped sum by at most C, where unweighted rows move it by
    far more."""
    from mmdsynth.engines.persons import PersonTable
    from mmdsynth.statistics.gradients import person_rows

    k, xs, ys, xb, yb = _problem()
    clip = 1e-3
    frame = pd.DataFrame({"p": ["a", "b", "b", "c", "c", "c"] * 2})
    base_rows, w = person_rows(PersonTable(frame, "p"), torch.arange(3))
    assert torch.equal(base_rows, torch.arange(12)) and float(w.sum()) == pytest.approx(3.0)
    base = clipped_sum(k, xs, ys, xb, yb, 1e-3, clip, factored=factored, weights=w)
    for rows in (1, 500):
        x_new, y_new = 1e6 * torch.ones(rows, 10) * torch.linspace(1, 2, rows)[:, None], \
            centred_one_hot(torch.zeros(rows, dtype=torch.long), 3)
        bigger = PersonTable(pd.concat([frame, pd.DataFrame({"p": ["q"] * rows})], ignore_index=True), "p")
        idx, w2 = person_rows(bigger, torch.arange(4))
        assert np.array_equal(w2[:12].numpy(), w.numpy())        # the others' weights: bit-identical
        more = clipped_sum(k, xs, ys, torch.cat([xb, x_new])[idx], torch.cat([yb, y_new])[idx], 1e-3, clip,
                           factored=factored, weights=w2)
        assert float((more - base).norm()) <= clip * (1 + 1e-5)
        if rows == 500:
            unweighted = clipped_sum(k, xs, ys, torch.cat([xb, x_new]), torch.cat([yb, y_new]), 1e-3, clip,
                                     factored=factored) - clipped_sum(k, xs, ys, xb, yb, 1e-3, clip, factored=factored)
            assert float(unweighted.norm()) > 100 * clip


def test_noise_std_is_sigma_C_over_the_expected_batch():
    k, xs, ys, xb, yb = _problem(m=300, d=100)
    g = private_gradient(k, xs, ys, xb[:0], yb[:0], reg=1e-3, clip=0.5, expected_batch=4.0,
                         engine=PrivacyEngine.with_sigma(2.0, noise_seed=3, multipliers={"step": 1.0}))
    assert float(g.std()) == pytest.approx(2.0 * 0.5 / 4.0, rel=0.02)


@pytest.mark.parametrize("seed", [None, 0])
def test_sampler_is_poisson(seed):
    sampler = PoissonSampler(seed)
    sizes = np.array([len(sampler.sample(10_000, 0.05)) for _ in range(400)])
    assert len(set(sizes)) > 20                                            # sizes vary
    assert abs(sizes.mean() - 500) < 4 * math.sqrt(10_000 * 0.05 * 0.95 / 400)
    assert sizes.var() == pytest.approx(10_000 * 0.05 * 0.95, rel=0.25)


# -- fit: calibration first, accounting, resume ---------------------------------------------------------


def test_calibrates_before_reading_and_spends_at_most_epsilon(digits, monkeypatch):
    flag = {"calibrated": False}
    real = engine_module.calibrate_sigma

    def calibrate(*a, **k):
        flag["calibrated"] = True
        return real(*a, **k)
    monkeypatch.setattr(engine_module, "calibrate_sigma", calibrate)
    m = DPKIP(1.0, 1e-5, **KIP_TINY).fit(Guarded(digits.x_train.numpy(), flag), digits.y_train.numpy())
    e = m.release_.ledger.entries[0]
    plan = PrivacyPlan((), e.plan["sample_rate"], e.plan["steps"], "replace_one")
    assert plan.steps == math.ceil(2 * 1437 / 100) and e.neighbouring == "replace_one" and e.sensitivity == 1e-2
    assert e.plan["neighbouring"] == "replace_one" and e.sampler.startswith("secure")
    assert epsilon_for_sigma(e.noise_multiplier, 1e-5, plan) <= 1.0


def test_interrupt_and_resume_spends_nothing_extra_and_reuses_no_noise(digits, tmp_path, monkeypatch):
    kw = dict(KIP_TINY, noise_seed=7, sampler_seed=11)       # both testing only: a reproducible run
    X, y = digits.x_train.numpy(), digits.y_train.numpy()
    whole = DPKIP(1.0, 1e-5, **kw).fit(X, y, out=tmp_path / "a")
    budget = mmdsynth.BudgetFile.open(tmp_path / "b.json", "digits", 1.0, 1e-5)
    real = interrupt_on_call(monkeypatch, kip_module, "gradient_stages", 11)
    with pytest.raises(KeyboardInterrupt):
        DPKIP(1.0, 1e-5, **kw).fit(X, y, out=tmp_path / "c", budget=budget)
    assert json.loads((tmp_path / "c" / "kip_checkpoint.json").read_text())["step"] == 10
    with pytest.raises(ArtifactError, match="resume=True"):
        DPKIP(1.0, 1e-5, **kw).fit(X, y, out=tmp_path / "c")
    monkeypatch.setattr(kip_module, "gradient_stages", real)
    resumed = DPKIP(1.0, 1e-5, **dict(kw, epochs=5)).fit(X, y, out=tmp_path / "c", budget=budget, resume=True)
    # the same 29 steps, the same noise and sample sequences (checkpointed test generators): bit-identical
    assert torch.equal(resumed.support()[0], whole.support()[0])
    assert resumed.settings_.epochs == 2 and resumed.epochs == 5 and budget.spent == (1.0, 1e-5) and len(budget.charges) == 1
    assert not list((tmp_path / "c").glob("kip_checkpoint*"))        # sampler state deleted


def test_save_load_sample_and_cli(digits, tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["fit", "--method", "dp-kip", "--dataset", "digits", "--epsilon", "1", "--images-per-class", "2",
                 "--epochs", "1", "--batch-size", "100", "--clip", "1e-2", "--out", str(out), "-q"]) == 0
    model = mmdsynth.load(out)
    x, y = model.sample()
    assert x.shape == (20, 1, 8, 8) and sorted(np.bincount(y)) == [2] * 10
    assert main(["evaluate", str(out), "--cnn", "--cnn-seeds", "1", "--device", "cpu", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 <= res["krr_acc"] <= 1 and res["method"] == "dp-kip" and (out / "samples.png").exists()
    assert 0 <= res["cnn_acc"] <= 1 and res["cnn_protocol"]["n_train"] == 20 and res["cnn_protocol"]["epochs"] == 300


def test_tables_fit_and_sample_a_dataframe():
    df = toy_table(300)
    m = DPKIP(1.0, 1e-5, images_per_class=3, epochs=2, batch_size=50, clip=1e-2, seed=0)
    m.fit(df, label="y", schema=mmdsynth.Schema.from_dict(SCHEMA))
    out = m.sample()
    assert list(out.columns) == list(df.columns) and len(out) == 6
    assert out["age"].between(17, 90).all() and set(out["colour"]) <= {"red", "green", "blue"}


def test_public_start_is_used_and_checked(digits):
    x0 = np.stack([digits.x_train[digits.y_train == c][0].numpy() for c in range(10) for _ in range(2)])
    m = DPKIP(1.0, 1e-5, **{**KIP_TINY, "epochs": 1}).fit(digits.x_train, digits.y_train.numpy(), public_init=x0)
    assert "a public set given by the user" in m.release_.ledger.entries[0].description
    m0 = DPKIP(1.0, 1e-5, **{**KIP_TINY, "epochs": 1}).fit(digits.x_train, digits.y_train.numpy())
    assert "N(0, I) noise" in m0.release_.ledger.entries[0].description
    # one epoch of small Adam steps from real digits stays near them; from noise it does not
    assert np.abs(m.sample()[0] - x0).mean() < 0.5 * np.abs(m0.sample()[0] - x0).mean()
    with pytest.raises(mmdsynth.errors.InvalidParameterError, match="public_init must hold"):
        DPKIP(1.0, 1e-5, **KIP_TINY).fit(digits.x_train, digits.y_train.numpy(), public_init=x0[:5])


def test_cli_public_init_file(digits, tmp_path, capsys):
    x0 = np.stack([digits.x_train[digits.y_train == c][0].numpy() for c in range(10) for _ in range(2)])
    np.savez(tmp_path / "start.npz", x=x0)
    args = ["fit", "--method", "dp-kip", "--dataset", "digits", "--epsilon", "1", "--images-per-class", "2",
            "--epochs", "1", "--batch-size", "100", "--clip", "1e-2", "-q", "--device", "cpu"]
    assert main(args + ["--public-init", str(tmp_path / "start.npz"), "--out", str(tmp_path / "m")]) == 0
    assert "public set given by the user" in mmdsynth.load(tmp_path / "m").release_.ledger.entries[0].description
    (tmp_path / "bad.npz").write_bytes(b"not numpy")
    assert main(args + ["--public-init", str(tmp_path / "bad.npz"), "--out", str(tmp_path / "m2")]) == 2
    assert "--public-init" in capsys.readouterr().err and not (tmp_path / "m2").exists()


def test_tables_share_the_other_methods_preparation_in_one_plan(tmp_path, monkeypatch):
    """DP-KIP tables get private schema inference and the quantile encoding: their releases and the
    DP-SGD steps are one plan (one budget id), calibrated together within epsilon; an interrupted run
    resumes with the same encoder and releases nothing twice."""
    from support import partial_schema, table_with_rare_value

    df = table_with_rare_value(400)
    kw = dict(images_per_class=3, epochs=2, batch_size=50, clip=1e-2, seed=0, schema_share=0.2,
              numeric_encoding="quantile", noise_seed=1, sampler_seed=2, start="noise")
    whole = DPKIP(1.0, 1e-5, **kw).fit(df, label="y", schema=partial_schema())
    entries = whole.release_.ledger.entries
    assert [e.mechanism for e in entries] == ["gaussian", "gaussian", "dp-sgd"]
    assert entries[0].description.startswith("schema inference") and "quantile" in entries[1].description
    assert len({e.budget_id for e in entries}) == 1 and whole.release_.ledger.total() == (1.0, 1e-5)
    plan = PrivacyPlan(tuple(entries[-1].plan["multipliers"]), entries[-1].plan["sample_rate"],
                       entries[-1].plan["steps"], "replace_one")
    assert epsilon_for_sigma(entries[-1].noise_multiplier, 1e-5 - 0, plan) <= 1.0 + 1e-9
    enc = whole.encoder_
    assert enc.numeric_encoding == "quantile" and "violet" not in enc.schema.column("colour").categories
    out = whole.sample()
    assert list(out.columns) == list(df.columns) and len(out) == 6
    # interrupt after 3 steps and resume: the same support set, nothing released twice
    real = interrupt_on_call(monkeypatch, kip_module, "gradient_stages", 4)
    with pytest.raises(KeyboardInterrupt):
        DPKIP(1.0, 1e-5, **kw).fit(df, label="y", schema=partial_schema(), out=tmp_path / "k")
    monkeypatch.setattr(kip_module, "gradient_stages", real)
    released = {"n": 0}
    real_stats = kip_module.table_stages
    monkeypatch.setattr(kip_module, "table_stages", lambda *a, **k: released.update(n=1) or real_stats(*a, **k))
    resumed = DPKIP(1.0, 1e-5, **kw).fit(df, label="y", schema=partial_schema(), out=tmp_path / "k", resume=True)
    assert released["n"] == 0 and torch.equal(resumed.support()[0], whole.support()[0])
    assert [e.description for e in resumed.release_.ledger.entries] == [e.description for e in entries]


# -- a private start: a release of a share of the plan, distilled -----------------------------------
@pytest.mark.parametrize("start", ["pixels", "random-conv"])
def test_private_start_is_one_release_in_the_same_plan(digits, tmp_path, start):
    """start='pixels'/'random-conv': the class-conditional mean embedding is released with start_share of the
    plan (at 1/sqrt(share) times the steps' noise multiplier), before the DP-SGD steps, in one plan calibrated
    within epsilon and charged once, under DP-KIP's name; the DP-SGD entry stays last."""
    budget = mmdsynth.BudgetFile.open(tmp_path / "b.json", "digits", 1.0, 1e-5)
    m = DPKIP(1.0, 1e-5, **dict(KIP_TINY, start=start, start_share=0.2)).fit(
        digits.x_train.numpy(), digits.y_train.numpy(), budget=budget, dataset="digits")
    entries = m.release_.ledger.entries
    assert [e.mechanism for e in entries] == ["gaussian", "dp-sgd"]
    assert f"under {start} features" in entries[0].description and entries[0].sensitivity == 2 / 1437
    assert f"distilled from the class-conditional mean embedding under {start} features" in entries[1].description
    assert entries[0].noise_multiplier == pytest.approx(entries[1].noise_multiplier / math.sqrt(0.2), rel=1e-12)
    assert len({e.budget_id for e in entries}) == 1 and m.release_.ledger.total() == (1.0, 1e-5)
    plan = PrivacyPlan(tuple(entries[-1].plan["multipliers"]), entries[-1].plan["sample_rate"],
                       entries[-1].plan["steps"], "replace_one")
    assert plan.multipliers == pytest.approx((1 / math.sqrt(0.2),))
    assert epsilon_for_sigma(entries[-1].noise_multiplier, 1e-5, plan) <= 1.0 + 1e-9
    assert budget.spent == (1.0, 1e-5) and len(budget.charges) == 1
    assert "DP-KIP support set" in json.dumps(json.loads((tmp_path / "b.json").read_text()))
    x, y = m.sample()
    assert x.shape == (20, 1, 8, 8) and sorted(np.bincount(y)) == [2] * 10


def test_pixels_start_begins_at_the_class_means(digits):
    """Without noise (epsilon = inf) and with DP-SGD steps too small to move it, the support set is where the start
    put it: every point is nearer its own class's mean digit than any other class's (from N(0, I) noise it is not)."""
    X, y = digits.x_train.numpy().reshape(1437, -1), digits.y_train.numpy()
    means = np.stack([X[y == c].mean(0) for c in range(10)])
    kw = dict(KIP_TINY, epochs=1, lr=1e-9)

    def nearest(model):
        x, labels = model.sample()
        d = ((x.reshape(len(x), 1, -1) - means[None]) ** 2).sum(-1)
        return (d.argmin(1) == labels).mean()
    assert nearest(DPKIP(math.inf, 1e-5, **{**kw, "start": "pixels"}).fit(X, y)) == 1.0
    assert nearest(DPKIP(math.inf, 1e-5, **{**kw, "start": "noise"}).fit(X, y)) < 0.5


def test_private_start_resumes_without_releasing_again(digits, tmp_path, monkeypatch):
    kw = dict(KIP_TINY, start="pixels", noise_seed=7, sampler_seed=11)     # testing only: a reproducible run
    X, y = digits.x_train.numpy(), digits.y_train.numpy()
    whole = DPKIP(1.0, 1e-5, **kw).fit(X, y, out=tmp_path / "a")
    real = interrupt_on_call(monkeypatch, kip_module, "gradient_stages", 5)
    with pytest.raises(KeyboardInterrupt):
        DPKIP(1.0, 1e-5, **kw).fit(X, y, out=tmp_path / "c")
    monkeypatch.setattr(kip_module, "gradient_stages", real)
    released = {"n": 0}
    real_start = kip_module.embedding_stages
    monkeypatch.setattr(kip_module, "embedding_stages",
                        lambda *a, **k: released.update(n=released["n"] + 1) or real_start(*a, **k))
    resumed = DPKIP(1.0, 1e-5, **kw).fit(X, y, out=tmp_path / "c", resume=True)
    assert released["n"] == 0 and torch.equal(resumed.support()[0], whole.support()[0])
    assert [e.description for e in resumed.release_.ledger.entries] == \
        [e.description for e in whole.release_.ledger.entries]


def test_private_start_on_a_table_and_bad_starts(digits, tmp_path):
    df = toy_table(300)
    m = DPKIP(1.0, 1e-5, images_per_class=3, epochs=1, batch_size=50, clip=1e-2, seed=0, start="pixels")
    out = m.fit(df, label="y", schema=mmdsynth.Schema.from_dict(SCHEMA)).sample()
    assert len(out) == 6 and out["age"].between(17, 90).all()
    assert [e.mechanism for e in m.release_.ledger.entries] == ["gaussian", "dp-sgd"]
    X, y = digits.x_train.numpy(), digits.y_train.numpy()
    bad = mmdsynth.errors.InvalidParameterError
    budget = mmdsynth.BudgetFile.open(tmp_path / "b.json", "toy", 1.0, 1e-5)
    with pytest.raises(bad, match="random-conv.*takes images.*table rows"):     # refused before anything is charged
        DPKIP(1.0, 1e-5, images_per_class=3, epochs=1, batch_size=50, start="random-conv").fit(
            df, label="y", schema=mmdsynth.Schema.from_dict(SCHEMA), budget=budget)
    assert budget.spent == (0.0, 0.0) and not budget.charges
    with pytest.raises(bad, match=r"random-conv.*takes images.*of shape \[64\]"):
        DPKIP(1.0, 1e-5, **dict(KIP_TINY, start="random-conv")).fit(X.reshape(len(X), -1), y, budget=budget)
    assert not budget.charges
    with pytest.raises(bad, match="both give the starting support set"):
        DPKIP(1.0, 1e-5, **dict(KIP_TINY, start="pixels")).fit(X, y, public_init=X[:20])
    with pytest.raises(bad, match="start_share must be a number in"):
        DPKIP(1.0, 1e-5, **dict(KIP_TINY, start="pixels", start_share=1.5)).fit(X, y)


def test_quantile_table_with_the_default_private_start_releases_and_is_charged_once(tmp_path):
    """Issue 45, item 5: the start's release carries the numeric sketch's tensors, so its table encoder is rebuilt
    (it was a KeyError after the charge: (1, 1e-5) spent and nothing released)."""
    budget = mmdsynth.BudgetFile.open(tmp_path / "b.json", "toy", 1.0, 1e-5)
    m = DPKIP(1.0, 1e-5, images_per_class=3, epochs=1, batch_size=50, clip=1e-2, seed=0, numeric_encoding="quantile")
    out = m.fit(toy_table(300), label="y", schema=mmdsynth.Schema.from_dict(SCHEMA), budget=budget,
                dataset="toy").sample()
    assert len(out) == 6 and out["age"].between(17, 90).all() and out["score"].between(-1, 1).all()
    assert m.encoder_.numeric_encoding == "quantile"
    entries = m.release_.ledger.entries
    assert [e.mechanism for e in entries] == ["gaussian", "gaussian", "dp-sgd"]      # sketch, start, steps
    assert len({e.budget_id for e in entries}) == 1
    again = mmdsynth.BudgetFile.open(tmp_path / "b.json")
    assert again.spent == (1.0, 1e-5) and len(again.charges) == 1


@pytest.mark.parametrize("where", ["rebuild-encoder", "distill", "encode-start", "labels"])
def test_a_failure_between_the_plan_and_the_charge_leaves_the_budget_unspent(digits, tmp_path, monkeypatch, where):
    """Every check that can fail runs before the charge (issue 45, item 5): a fault injected into the start's
    post-processing (rebuilding a table's encoder from the start's release, distillation, encoding the distilled
    rows) or records outside the input domain (a label >= n_classes) refuse the fit with nothing charged."""
    budget = mmdsynth.BudgetFile.open(tmp_path / "b.json", "toy", 1.0, 1e-5)

    def broken(*a, **k):
        raise RuntimeError("injected")
    kw = dict(images_per_class=3, epochs=1, batch_size=50, clip=1e-2, seed=0, start="pixels")
    if where == "labels":
        X, y = digits.x_train.numpy(), digits.y_train.numpy().copy()
        y[0] = 10
        with pytest.raises(mmdsynth.errors.DataValidationError, match=r"labels must lie in 0\.\.9"):
            DPKIP(1.0, 1e-5, **dict(kw, n_classes=10)).fit(X, y, budget=budget)
    else:
        from mmdsynth.data.encoding import TableEncoder
        from mmdsynth.methods import tables as tables_module
        if where == "rebuild-encoder":
            monkeypatch.setattr(tables_module, "encoder_from", broken)
        elif where == "distill":
            monkeypatch.setattr(kip_module, "distill_release", broken)
        else:     # encoding the distilled start (its 2 classes x 3 rows), not the private records
            real = TableEncoder.encode

            def encode(self, df, *a, **k):
                if len(df) == 6:
                    raise RuntimeError("injected")
                return real(self, df, *a, **k)
            monkeypatch.setattr(TableEncoder, "encode", encode)
        with pytest.raises(RuntimeError, match="injected"):
            DPKIP(1.0, 1e-5, **dict(kw, numeric_encoding="quantile")).fit(
                toy_table(300), label="y", schema=mmdsynth.Schema.from_dict(SCHEMA), budget=budget)
    again = mmdsynth.BudgetFile.open(tmp_path / "b.json")
    assert again.spent == (0.0, 0.0) and not again.charges


def test_the_default_start_is_private_pixels_unless_a_public_set_is_given(digits):
    X, y = digits.x_train.numpy(), digits.y_train.numpy()
    kw = {k: v for k, v in KIP_TINY.items() if k != "start"}
    m = DPKIP(1.0, 1e-5, **{**kw, "epochs": 1}).fit(X, y)
    assert m.settings_.start == "pixels" and m.start is None and [e.mechanism for e in m.release_.ledger.entries] == ["gaussian", "dp-sgd"]
    x0 = np.stack([X[y == c][0] for c in range(10) for _ in range(2)])
    p = DPKIP(1.0, 1e-5, **{**kw, "epochs": 1}).fit(X, y, public_init=x0)
    assert p.settings_.start == "noise" and [e.mechanism for e in p.release_.ledger.entries] == ["dp-sgd"]
    assert "a public set given by the user" in p.release_.ledger.entries[0].description


def test_a_checkpoint_written_before_the_private_starts_resumes_from_noise(digits, tmp_path, monkeypatch):
    """A checkpoint without a "start" parameter (written before it existed) resumes the noise start's plan."""
    kw = dict(KIP_TINY, noise_seed=7, sampler_seed=11)
    X, y = digits.x_train.numpy(), digits.y_train.numpy()
    real = interrupt_on_call(monkeypatch, kip_module, "gradient_stages", 3)
    with pytest.raises(KeyboardInterrupt):
        DPKIP(1.0, 1e-5, **kw).fit(X, y, out=tmp_path / "c")
    monkeypatch.setattr(kip_module, "gradient_stages", real)
    meta_path = tmp_path / "c" / "kip_checkpoint.json"
    meta = json.loads(meta_path.read_text())
    del meta["params"]["start"], meta["params"]["start_share"]
    meta_path.write_text(json.dumps(sealed(meta)))                     # as an older version wrote it, sealed
    resumed = DPKIP(1.0, 1e-5, **{k: v for k, v in kw.items() if k != "start"}).fit(X, y, out=tmp_path / "c",
                                                                                  resume=True)
    assert resumed.settings_.start == "noise" and [e.mechanism for e in resumed.release_.ledger.entries] == ["dp-sgd"]
