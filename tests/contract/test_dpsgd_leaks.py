"""Issue 30: the DP-SGD leaks the audit found, each pinned by a test that fails on the old code.

1. the Poisson sample was derived from the public ``seed`` (recomputable by anyone);
2. the factored clipping added a record unclipped when its norm formula cancelled;
3. DP-SGD spoke of other neighbours (add/remove) than every other release (replace-one);
4. the audit passed a map over its declared bound and could not see 1 and 2;
5. a model could be silently re-labelled by replacing its release;
6. the ledger did not say what the DP-MEPF encoder check establishes or that a DP-KIP checkpoint
   holds private state.

The old behaviours live on as test doubles (``tests/doubles``) so the checks are shown to catch them.
"""
import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

import mmdsynth
from mmdsynth import DPKIP, cli
from mmdsynth.audit import audit
from mmdsynth.errors import ArtifactError
from mmdsynth.features.base import FeatureMap
from mmdsynth.kip.kernels import FCReLUKernel
from mmdsynth.kip.krr import centred_one_hot
from mmdsynth.statistics import gradients
from mmdsynth.statistics.gradients import factored_clipped_sum
from mmdsynth.methods.kip import to_kernel_space
from mmdsynth.privacy import engine as engine_module
from mmdsynth.privacy.ledger import Ledger
from mmdsynth.privacy.sampling import PoissonSampler
from mmdsynth.release import Release

from support import PublicSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "doubles"))
import leaky_per_record  # noqa: E402  (the old factored clipping, a test double)

TINY = dict(n_classes=10, images_per_class=1, epochs=1, batch_size=100, lr=1e-2, clip=1e-2, reg=1e-6, seed=0,
            start="noise")


_REAL_SAMPLE = PoissonSampler.sample


def _samples(monkeypatch, **params):
    """The index sets a tiny DP-KIP fit on 300 digits reads, step by step."""
    seen = []
    real = _REAL_SAMPLE

    def logged(self, n, q):
        idx = real(self, n, q)
        seen.append(tuple(idx.tolist()))
        return idx
    monkeypatch.setattr(PoissonSampler, "sample", logged)
    digits = mmdsynth.load_dataset("digits")
    DPKIP(1.0, 1e-5, **{**TINY, **params}).fit(digits.x_train[:300].numpy(), digits.y_train[:300].numpy())
    return seen


# -- 1. the sample is secret -------------------------------------------------------------------------
def test_the_sample_is_fresh_every_run_whatever_seed_and_noise_seed(monkeypatch):
    a = _samples(monkeypatch, seed=0, noise_seed=3)
    b = _samples(monkeypatch, seed=0, noise_seed=3)
    assert len(a) == len(b) == 3 and a != b          # same public seed, same test noise: a new sample


def test_a_reproducible_sample_needs_the_testing_only_sampler_seed(monkeypatch):
    assert _samples(monkeypatch, sampler_seed=5) == _samples(monkeypatch, sampler_seed=5)
    digits = mmdsynth.load_dataset("digits")
    X, y = digits.x_train[:300].numpy(), digits.y_train[:300].numpy()
    secure = DPKIP(1.0, 1e-5, **TINY).fit(X, y).release_.ledger.entries[0]
    fixed = DPKIP(1.0, 1e-5, **TINY, sampler_seed=5).fit(X, y).release_.ledger.entries[0]
    assert secure.sampler.startswith("secure (OS CSPRNG")
    assert fixed.sampler.startswith("fixed-seed:5") and "voids the guarantee" in fixed.sampler
    assert "records per step: secure" in DPKIP(1.0, 1e-5, **TINY).fit(X, y).release_.ledger.format()


def test_the_secure_sampler_draws_from_the_os_csprng(monkeypatch):
    calls = []
    real = __import__("os").urandom
    monkeypatch.setattr("mmdsynth.privacy.sampling.os.urandom", lambda n: calls.append(n) or real(n))
    idx = PoissonSampler().sample(1000, 0.5)
    assert calls == [8000] and 350 < len(idx) < 650 and torch.all(idx[1:] > idx[:-1])
    assert PoissonSampler().get_state() is None                       # nothing to save, nothing to leak


def test_the_cli_never_fixes_the_sample(tmp_path, capsys):
    assert cli.main(["fit", "--method", "dp-kip", "--dataset", "digits", "--epsilon", "1", "--images-per-class", "1",
                     "--epochs", "1",
                     "--batch-size", "100", "--clip", "1e-2", "--seed", "0", "--out", str(tmp_path / "m"), "-q"]) == 0
    params = json.loads((tmp_path / "m" / "model.json").read_text())["params"]
    assert params["sampler_seed"] is None and params["noise_seed"] is None
    assert mmdsynth.load(tmp_path / "m").release_.ledger.entries[-1].sampler.startswith("secure")
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "--method", "dp-kip", "--dataset", "digits", "--sampler-seed", "1", "--out", str(tmp_path)])
    assert exc.value.code == 2


def test_the_old_public_sampler_is_the_same_every_run(monkeypatch):
    """What made the leak: with the double in place two runs read identical batches."""
    monkeypatch.setattr(engine_module, "PoissonSampler", PublicSampler)
    assert _samples(monkeypatch) == _samples(monkeypatch)


# -- 2. clipping holds on ill-conditioned support sets ----------------------------------------------
def _worst_contribution(clipped_sum, reg: float, spread: float, clip: float) -> float:
    """Largest |sum(batch + record) - sum(batch)| / clip over records equal to a start point, all
    labels, with a support set of one digit repeated (plus ``spread`` noise)."""
    digits = mmdsynth.load_dataset("digits")
    x = to_kernel_space(digits.x_train[:40]).double()
    g = torch.Generator().manual_seed(0)
    xs = x[:1].repeat(20, 1) + spread * torch.randn(20, 64, generator=g, dtype=torch.float64)
    ys = centred_one_hot(torch.arange(20) // 2, 10).double()
    xb, yb = x[1:30], centred_one_hot(digits.y_train[1:30], 10).double()
    k = FCReLUKernel(1)
    base = clipped_sum(k, xs, ys, xb, yb, reg, clip)
    worst = 0.0
    for cand in (x[0], xs[3]):
        for label in range(10):
            yt = centred_one_hot(torch.tensor([label]), 10).double()
            more = clipped_sum(k, xs, ys, torch.cat([xb, cand[None]]), torch.cat([yb, yt]), reg, clip)
            worst = max(worst, float((more - base).norm()) / clip)
    return worst


@pytest.mark.parametrize("reg,spread", [(1e-6, 0.0), (1e-7, 0.0), (1e-8, 0.0), (1e-7, 1e-6), (1e-8, 1e-3)])
def test_every_record_moves_the_clipped_sum_by_at_most_C_on_coinciding_support_points(reg, spread):
    assert _worst_contribution(factored_clipped_sum, reg, spread, 1e-6) <= 1 + 1e-9


def test_the_old_factored_clipping_fails_the_same_check():
    assert _worst_contribution(leaky_per_record.factored_clipped_sum, 1e-7, 0.0, 1e-6) > 100


def test_benign_support_sets_keep_the_fast_closed_form(monkeypatch):

    monkeypatch.setattr(gradients, "explicit_clipped_sum", lambda *a: pytest.fail("explicit path on a benign set"))
    g = torch.Generator().manual_seed(1)
    xs, xb = torch.randn(20, 64, generator=g, dtype=torch.float64), torch.randn(200, 64, generator=g, dtype=torch.float64)
    ys = centred_one_hot(torch.arange(20) // 2, 10).double()
    yb = centred_one_hot(torch.randint(0, 10, (200,), generator=g), 10).double()
    factored_clipped_sum(FCReLUKernel(1), xs, ys, xb, yb, 1e-6, 1e-3)


# -- 3. one neighbouring relation ------------------------------------------------------------------
def test_dpsgd_is_replace_one_by_default_and_add_remove_by_name():
    digits = mmdsynth.load_dataset("digits")
    X, y = digits.x_train[:300].numpy(), digits.y_train[:300].numpy()
    e = DPKIP(1.0, 1e-5, **TINY).fit(X, y).release_.ledger.entries[0]
    paper = DPKIP(1.0, 1e-5, **TINY, neighbouring="add_remove").fit(X, y).release_.ledger.entries[0]
    assert e.neighbouring == e.plan["neighbouring"] == "replace_one"
    assert paper.neighbouring == paper.plan["neighbouring"] == "add_remove"
    assert e.noise_multiplier > paper.noise_multiplier            # replace-one needs more noise
    with pytest.raises(mmdsynth.errors.InvalidParameterError, match="neighbouring must be"):
        DPKIP(1.0, 1e-5, **TINY, neighbouring="swap").fit(X, y)


def test_budget_cli_defaults_to_replace_one(capsys):
    assert cli.main(["budget", "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "0.01", "--steps", "100",
                     "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    cli.main(["budget", "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "0.01", "--steps", "100",
              "--neighbouring", "add_remove", "--json"])
    assert default["sigma"] > json.loads(capsys.readouterr().out)["sigma"]


def test_add_remove_entries_say_zero_out_with_m_public_and_print_the_replace_one_epsilon(tmp_path, capsys):
    """Issue 45, item 6: DP-KIP under add_remove and dp-randconv's sampled release divide by the public m, so literal
    add/remove neighbours (which change m) cannot hold; the entry says zero-out with m public and prints the
    replace-one epsilon of the same sigma (the library's accountant, same plan, replace-one relation), and
    `mmdsynth inspect` shows both. Known value: q 0.5, 32 steps, add/remove epsilon 1 -> replace-one 2.116."""
    from mmdsynth.embedding import release_sampled_embedding
    from mmdsynth.features import RandomConvFeatures
    from mmdsynth.privacy.calibration import PrivacyPlan, epsilon_for_sigma

    digits = mmdsynth.load_dataset("digits")
    X, y = digits.x_train[:300].numpy(), digits.y_train[:300].numpy()
    (e,) = DPKIP(1.0, 1e-5, **TINY, neighbouring="add_remove").fit(X, y).release_.ledger.entries
    plan = PrivacyPlan((), e.plan["sample_rate"], e.plan["steps"], "replace_one")
    assert e.replace_one_epsilon == pytest.approx(epsilon_for_sigma(e.noise_multiplier, 1e-5, plan), rel=1e-9)
    assert e.replace_one_epsilon > 1.0
    text = Ledger((e,)).format()
    assert "neighbouring=add_remove, which holds as zero-out neighbours with m public" in text
    assert "adding or removing a record, which changes m, is NOT covered" in text
    assert f"replace-one neighbours, the same sigma: epsilon={e.replace_one_epsilon:.3f} at delta=1e-05" in text
    assert "one record zeroed out" in e.assumed["sensitivity"] and "added or removed" not in e.assumed["sensitivity"]
    replace = DPKIP(1.0, 1e-5, **TINY).fit(X, y).release_.ledger.entries[0]      # the default: nothing to add
    assert replace.replace_one_epsilon is None and "zero-out" not in Ledger((replace,)).format()

    rng = torch.Generator().manual_seed(0)
    images, labels = torch.rand(40, 1, 8, 8, generator=rng).numpy(), (torch.arange(40) % 2).numpy()
    rel = release_sampled_embedding(RandomConvFeatures((1, 8, 8), n_networks=32, width=2), images, labels,
                                    epsilon=1.0, delta=1e-5, n_classes=2, sample_rate=0.5, neighbouring="add_remove")
    (s,) = rel.ledger.entries
    assert s.noise_multiplier == pytest.approx(10.7138, abs=1e-3) and s.replace_one_epsilon == pytest.approx(2.116, abs=1e-3)
    rel.save(tmp_path / "r")
    capsys.readouterr()
    assert cli.main(["inspect", str(tmp_path / "r")]) == 0
    out = " ".join(capsys.readouterr().out.split())            # the summary's lines are wrapped between words
    assert "zero-out neighbours with m public, NOT for adding or removing a record" in out
    assert "replace-one neighbours, the same noise: epsilon=2.116 at delta=1e-05" in out
    assert cli.main(["inspect", str(tmp_path / "r"), "--ledger"]) == 0
    assert "replace-one neighbours, the same sigma: epsilon=2.116" in capsys.readouterr().out
    old = dataclasses.replace(s, replace_one_epsilon=None)          # an entry saved before it was recorded
    assert "epsilon=2.116" in Ledger((old,)).format()


def test_replace_one_epsilon_matches_dp_accounting_directly():
    """The replace-one epsilon of a known (q, T, sigma), here the CIFAR-10 "37.8 at eps 1" release's (q 0.5, 32
    networks, sigma 10.7138 calibrated add/remove at eps 1), against dp_accounting called directly: its PLD
    accountant under REPLACE_ONE, and RDP bounds (replace-one is at most add/remove at half the noise, a
    replacement being a removal and an addition, and at least add/remove at the same noise)."""
    import dp_accounting
    from dp_accounting import pld, rdp

    from mmdsynth.privacy.calibration import PrivacyPlan, dpsgd_sigma, replace_one_epsilon

    q, steps, delta = 0.5, 32, 1e-5
    sigma = dpsgd_sigma(1.0, delta, q, steps, neighbouring="add_remove")
    assert sigma == pytest.approx(10.7138, abs=1e-3)                      # RESULTS.md records sigma 10.71

    def event(s):
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), steps)
    acc = pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4)
    direct = acc.compose(event(sigma)).get_epsilon(delta)
    ours = replace_one_epsilon(sigma, delta, PrivacyPlan((), q, steps, "add_remove"))
    assert ours == pytest.approx(direct, rel=1e-6) and ours == pytest.approx(2.116, abs=1e-3)
    upper = rdp.RdpAccountant().compose(event(sigma / 2)).get_epsilon(delta)
    lower = pld.PLDAccountant(value_discretization_interval=1e-4).compose(event(sigma)).get_epsilon(delta)
    assert lower == pytest.approx(1.0, abs=1e-3) and lower < ours < upper


# -- 4. the audit has teeth ---------------------------------------------------------------------------
class _OverNorm(FeatureMap):
    """A plug-in whose features have norm 1.6 while it declares 1, and does not bound them."""

    norm_bound = 1.0
    out_dim = 2
    input_dim = 2

    def __call__(self, x):
        x = torch.clamp(torch.nan_to_num(x.double()), -10, 10)
        return 1.6 * torch.nn.functional.normalize(torch.cos(x * 3.0 + torch.tensor([0.0, 1.0])), dim=1)

    def spec(self):
        return {"name": "over-norm", "input_dim": 2}

    def bounded(self, phi):
        return phi


def test_release_audit_fails_a_map_over_its_declared_bound():
    r = audit(1.0, 1e-5, feature_map=_OverNorm(), trials=300)
    assert r.canary_gap > 1.5 and not r.sensitivity_ok and not r.passed
    assert "SENSITIVITY EXCEEDED" in r.format()


def test_fit_audit_passes_the_fixed_code():
    r = audit(1.0, 1e-5, mechanism="dpsgd-fit", trials=100, duplicate_start=True)
    assert r.sensitivity_ok and r.canary_gap == pytest.approx(1.0, abs=1e-6) and r.passed
    assert r.optimal_epsilon == pytest.approx(1.0, abs=1e-3)
    assert "records per step: secure" in r.noise_source and r.neighbouring == "replace_one"
    # its steps read a secret Poisson sample: no Gaussian-shaped power promise it has not been shown to keep
    assert r.detectable_epsilon == float("inf") and "power: not stated: every step reads a secret Poisson" in r.format()


def test_fit_audit_catches_the_old_clipping(monkeypatch):
    monkeypatch.setattr(gradients, "factored_clipped_sum", leaky_per_record.factored_clipped_sum)
    r = audit(1.0, 1e-5, mechanism="dpsgd-fit", trials=100, duplicate_start=True)
    assert r.canary_gap > 5 and not r.passed and "SENSITIVITY EXCEEDED" in r.format()
    assert r.optimal_epsilon > 100                  # the ideal attack on a canary at 17 x the clip: about 600


# -- 5. a model pins its release -------------------------------------------------------------------------
def test_a_model_refuses_a_replaced_release(tmp_path, capsys):
    out = tmp_path / "m"
    assert cli.main(["fit", "--method", "dp-merf", "--dataset", "digits", "--epsilon", "10", "--iterations", "3",
                     "--out", str(out), "-q"]) == 0
    pin = json.loads((out / "model.json").read_text())["release"]
    assert set(pin) == {"release.json", "release.safetensors"}
    mmdsynth.load(out)                                                     # intact: loads
    other = tmp_path / "d"
    assert cli.main(["demo", "--out", str(other)]) == 0
    Release.load(other / "release").save(out / "release")                # the old `mmdsynth demo` did this
    with pytest.raises(ArtifactError, match="not the one the model .* was trained on"):
        mmdsynth.load(out)
    capsys.readouterr()
    assert cli.main(["evaluate", str(out), "--n", "200"]) != 0
    assert cli.main(["inspect", str(out)]) != 0
    assert "not the one the model" in capsys.readouterr().err


def test_demo_refuses_a_folder_holding_a_model_or_release(tmp_path, capsys):
    out = tmp_path / "m"
    assert cli.main(["fit", "--method", "dp-merf", "--dataset", "digits", "--epsilon", "10", "--iterations", "3",
                     "--out", str(out), "-q"]) == 0
    before = (out / "release" / "release.json").read_bytes()
    assert cli.main(["demo", "--out", str(out)]) != 0
    assert "already holds a release or a fitted model" in capsys.readouterr().err
    assert (out / "release" / "release.json").read_bytes() == before


# -- 6. the ledger says what the checks establish ------------------------------------------------------
def test_kip_ledger_says_the_checkpoint_holds_private_state():
    digits = mmdsynth.load_dataset("digits")
    e = DPKIP(1.0, 1e-5, **TINY).fit(digits.x_train[:300].numpy(), digits.y_train[:300].numpy()).release_.ledger
    assert any("checkpoint" in n and "private state" in n for n in e.entries[0].notes)
    assert "note: an interrupted run's checkpoint" in e.format()
