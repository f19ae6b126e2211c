"""The audit of the private selection (`mmdsynth audit --mechanism selection`, issue 47): the whole Select stage of
the marginal methods as the zCDP filter runs it. It stays within the claim on the real selection and catches the same
selection with its sensitivity or its epsilon0 off by 10x; its ideal epsilon and its power are exact computations."""
import json
import math

import numpy as np
import pytest

from mmdsynth import cli
from mmdsynth.audit import SELECT_FRACTION, _decide, _fresh_filter, _SelectionTarget, audit, flag_probability
from mmdsynth.privacy import marginals, mechanisms, zcdp
from mmdsynth.privacy.engine import ZCDPEngine


def _sigmoid(x):
    return 1 / (1 + math.exp(-x))


@pytest.fixture(scope="module")
def honest():
    return audit(1.0, 1e-5, mechanism="selection", trials=400)


def test_selection_audit_stays_within_the_claim(honest):
    r = honest
    assert r.passed and 0 <= r.epsilon_lower <= 1.0 and "consistent with the claim" in r.format()
    assert r.canary_gap == pytest.approx(1.0) and r.sensitivity == marginals.L1_SENSITIVITY
    assert r.noise_source.startswith("secure") and r.neighbouring == "replace_one"
    # the description states both guarantees: the filter's claim and the single selection's pure epsilon0
    eps0 = zcdp.exponential_epsilon(zcdp.rho_for_epsilon(1.0, 1e-5))
    assert f"epsilon0 = sqrt(8 rho) = {eps0:.3f}, which alone is {eps0:.3f}-DP (pure)" in r.description
    assert "the claim (1, 1e-05) is the filter's total" in r.description
    assert r.optimal_epsilon < eps0 < 1.0
    assert r.sigma == pytest.approx(2 / eps0)                 # the ledger's noise multiplier of the selection
    # the draws follow the logistic law of the score gap: P_D'(a) = 1/2 (level), P_D(a) = 1 / (1 + e^eps0)
    n = r.trials - int(r.trials * SELECT_FRACTION)
    if r.direction == "above" and 0 <= r.threshold < 1:       # the test: "D'" when (a,) is selected
        assert abs(r.tpr - 0.5) < 4 * math.sqrt(0.25 / n)
        p = _sigmoid(-eps0)
        assert abs(r.fpr - p) < 4 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("claim", [4.0])
def test_selection_audit_at_a_larger_claim(claim):
    r = audit(claim, 1e-5, mechanism="selection", trials=300)
    assert r.passed and r.epsilon_lower <= claim
    assert r.optimal_epsilon < math.sqrt(8 * zcdp.rho_for_epsilon(claim, 1e-5)) < claim


def test_selection_canary_moves_each_score_by_the_sensitivity_in_opposite_directions():
    t = _SelectionTarget(1.0, 1e-5, 10, 0)
    assert t.prepare() == pytest.approx(1.0)
    (s0, s1), s = t.scores, t.sensitivity
    assert s == 2.0 and list(s0) == [4.0, 0.0] and list(s1) == [2.0, 2.0]       # (b,) ahead by 4 on D, level on D'
    assert (s1 - s0).tolist() == [-s, s]


def test_selection_optimal_matches_a_direct_computation(honest):
    rho = zcdp.rho_for_epsilon(1.0, 1e-5)
    eps0 = math.sqrt(8 * rho)
    assert eps0 == pytest.approx(zcdp.exponential_epsilon(rho))
    # two candidates: P(a) is the logistic function of eps0 x (score gap) / (2 sensitivity)
    p_d, p_d2 = _sigmoid(eps0 * (0 - 4) / 4), _sigmoid(eps0 * (2 - 2) / 4)
    direct = max(abs(math.log(p_d / p_d2)), abs(math.log((1 - p_d) / (1 - p_d2))))
    assert honest.optimal_epsilon == pytest.approx(direct, rel=1e-12)
    assert direct == pytest.approx(math.log((1 + math.exp(eps0)) / 2), rel=1e-12)


@pytest.mark.parametrize("fault", ["sensitivity passed to the mechanism / 10", "epsilon0 of rho x 10"])
def test_selection_audit_catches_a_broken_selection(monkeypatch, fault):
    """The engine's selection with its noise 10x too small (the sensitivity the exponential mechanism is given, or the
    rho -> epsilon0 conversion): epsilon0 4.94 for a claimed 1, caught with 300 runs (flagged with probability
    > 0.999 by the exact computation; the audit's power at 300 runs is epsilon0 2.30)."""
    if fault.startswith("sensitivity"):
        original = mechanisms.exponential_mechanism
        monkeypatch.setattr(mechanisms, "exponential_mechanism",
                            lambda scores, sensitivity, epsilon0, noise: original(scores, sensitivity / 10, epsilon0,
                                                                                  noise))
    else:
        original = zcdp.exponential_epsilon
        monkeypatch.setattr(zcdp, "exponential_epsilon", lambda rho: 10 * original(rho))
    r = audit(1.0, 1e-5, mechanism="selection", trials=300)
    assert r.sensitivity_ok and r.canary_gap == pytest.approx(1.0)      # the declared sensitivity is right ...
    assert r.epsilon_lower > 1.0 and not r.passed                       # ... the noise is not
    assert "ABOVE THE CLAIM" in r.format()
    assert r.detectable_epsilon < 10 * math.sqrt(8 * zcdp.rho_for_epsilon(1.0, 1e-5))


def test_selection_audit_catches_an_understated_score_sensitivity(monkeypatch):
    monkeypatch.setattr(marginals, "L1_SENSITIVITY", 0.2)
    r = audit(1.0, 1e-5, mechanism="selection", trials=100)
    assert r.canary_gap == pytest.approx(10.0) and not r.sensitivity_ok and not r.passed
    assert "SENSITIVITY EXCEEDED" in r.format()


def test_selection_power_is_exact_and_matches_simulated_audits():
    """power(): the smallest epsilon0 the audit flags with probability >= 0.9 (exact binomial); the audit's own
    decision (_decide: test chosen on a tenth of the runs, evaluated on the rest) on simulated draws agrees."""
    t = _SelectionTarget(1.0, 1e-5, 10, 0)
    t.prepare()
    trials, alpha = 300, 0.025
    eps0, note, divisor = t.power(1.0, 1e-5, trials, alpha)
    assert 1.0 < eps0 < 3.0 and divisor == pytest.approx(eps0 / t.epsilon0)
    assert f"epsilon0 >= {eps0:.3f}" in note and "exact binomial" in note
    n = trials - int(trials * SELECT_FRACTION)
    assert flag_probability(0.5, _sigmoid(-eps0), n, 1.0, 1e-5, alpha) == pytest.approx(0.9, abs=1e-6)
    rng = np.random.default_rng(0)
    for e, lo, hi in ((eps0 * 0.8, 0.0, 0.4), (eps0, 0.82, 0.97), (eps0 * 1.2, 0.97, 1.0)):
        hits = 0
        for _ in range(300):
            neg = (rng.random((trials, 1)) < _sigmoid(-e)).astype(float)
            pos = (rng.random((trials, 1)) < 0.5).astype(float)
            hits += _decide(t, neg, pos, 1e-5, alpha)["lower"] > 1.0
        assert lo <= hits / 300 <= hi, (e, hits)
    # more runs catch a smaller epsilon0; too few runs for a large claim say so
    assert t.power(1.0, 1e-5, 5000, alpha)[0] < eps0
    assert math.isinf(t.power(4.0, 1e-5, 300, alpha)[0])


def test_fresh_filter_is_a_constructed_filter_with_its_calibration_reused():
    template = ZCDPEngine(1.0, 1e-5)
    fresh, built = _fresh_filter(template), ZCDPEngine(1.0, 1e-5)
    assert vars(fresh).keys() == vars(built).keys()
    for k in vars(built):
        if k in ("noise", "budget_id", "plan"):
            continue
        assert getattr(fresh, k) == getattr(built, k), k
    assert fresh.plan.to_dict() == built.plan.to_dict() and fresh.noise.policy == built.noise.policy
    assert fresh.noise is not template.noise and fresh.budget_id != template.budget_id
    fresh.open("test").exponential("x", [0.0, 1.0], 2.0, rho=fresh.rho, description="d", assumed={}, n_records=2)
    assert fresh.spent == pytest.approx(fresh.rho) and len(fresh.entries) == 1
    assert template.spent == 0.0 and template.entries == [] and not template.charged      # nothing shared


def test_cli_audits_the_selection(monkeypatch, capsys, honest):
    assert cli.main(["audit", "--mechanism", "selection", "--trials", "150", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mechanism"] == "selection" and out["passed"] and out["trials"] == 150
    assert "epsilon0" in out["power_note"] and "private selection" in out["description"]
    seen = {}
    monkeypatch.setattr("mmdsynth.audit.audit", lambda *a, **k: seen.update(k) or honest)
    assert cli.main(["audit", "--mechanism", "selection"]) == 0
    assert "consistent with the claim" in capsys.readouterr().out
    assert seen["mechanism"] == "selection" and seen["trials"] is None       # audit() picks the selection's 2,000


def test_selection_runs_2000_trials_unless_told(monkeypatch):
    monkeypatch.setattr(_SelectionTarget, "observe", lambda self, neighbour: (np.array([float(neighbour)]), "stub"))
    assert audit(1.0, 1e-5, mechanism="selection").trials == 2000


# -- the tree selection by dependence (the hybrid's default tree) -------------------------------------------------
def test_tree_selection_audit_stays_within_the_claim():
    """`--mechanism tree-selection`: the SelectTree stage scored by dependence, two rounds of rho / 2, the canary
    swapping the scores of the pairs (a, c) and (a, b), (3.6, 0) <-> (0, 3.6), at the declared sensitivity 6 + 4/10."""
    from mmdsynth.audit import _TreeSelectionTarget

    r = audit(1.0, 1e-5, mechanism="tree-selection", trials=400)
    assert r.passed and 0 <= r.epsilon_lower <= 1.0 and r.sensitivity_ok
    assert r.sensitivity == pytest.approx(6.4) and r.canary_gap == pytest.approx(3.6 / 6.4)
    eps0 = math.sqrt(8 * zcdp.rho_for_epsilon(1.0, 1e-5) / 2)
    assert f"epsilon0 = sqrt(8 rho / 2) = {eps0:.3f}" in r.description and "(3.6, 0) on D" in r.description
    # two candidates: the first pick's log-odds are eps0 x gap / (2 x 6.4), -+ eps0 x 3.6 / 12.8 on D and D', and
    # each outcome's log-probability ratio is half the log-odds' move
    assert r.optimal_epsilon == pytest.approx(eps0 * 3.6 / 12.8, rel=1e-9)
    t = _TreeSelectionTarget(1.0, 1e-5, 10, 0)
    t.prepare()
    np.testing.assert_allclose(t.scores, [[3.6, 0.0], [0.0, 3.6]], atol=1e-12)


def test_tree_selection_audit_catches_an_understated_dependence_sensitivity(monkeypatch):
    monkeypatch.setattr(marginals, "dependence_sensitivity", lambda m: 1.0)
    r = audit(1.0, 1e-5, mechanism="tree-selection", trials=100)
    assert r.canary_gap == pytest.approx(3.6) and not r.sensitivity_ok and not r.passed
    assert "SENSITIVITY EXCEEDED" in r.format()


def test_tree_selection_audit_catches_too_little_noise(monkeypatch):
    """The round's epsilon0 30x too large (10.5 for a claimed 1; this canary's epsilon then 2.95): caught with 400
    runs (the audit's own power at 400 runs: epsilon0 4.9, in its power note)."""
    original = zcdp.exponential_epsilon
    monkeypatch.setattr(zcdp, "exponential_epsilon", lambda rho: 30 * original(rho))
    r = audit(1.0, 1e-5, mechanism="tree-selection", trials=400)
    assert r.sensitivity_ok and r.epsilon_lower > 1.0 and not r.passed
    assert "ABOVE THE CLAIM" in r.format()
