import math

import pytest

from mmdsynth.errors import InvalidParameterError, UnknownNameError
from mmdsynth.privacy import PrivacyPlan, calibrate_sigma, dpsgd_sigma, epsilon_for_sigma, gaussian_sigma, plan_sigma
from mmdsynth.privacy import analytic


@pytest.mark.parametrize("eps,expected", [(1.0, 3.7306), (10.0, 0.4999)])
def test_known_single_release_values(eps, expected):
    assert gaussian_sigma(eps, 1e-5) == pytest.approx(expected, abs=1e-3)


def test_two_equal_releases_known_value():
    assert plan_sigma(1.0, 1e-5, (1, 1)) == pytest.approx(5.276, abs=1e-3)


@pytest.mark.parametrize("eps", [0.2, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-6])
def test_pld_matches_independent_balle_wang_closed_form(eps, delta):
    pld = gaussian_sigma(eps, delta)
    closed = analytic.sigma_for(eps, delta)
    # the closed form is exact; PLD is pessimistic: never below it, and close
    assert closed <= pld + 1e-9
    assert pld == pytest.approx(closed, rel=1e-4)
    # and the closed form itself satisfies its defining equation
    assert analytic.delta_for(eps, closed) == pytest.approx(delta, rel=1e-6)


def test_closed_form_against_textbook_numbers():
    # Balle & Wang: the classical bound overshoots; at eps=1, delta=1e-5 classical is 4.84
    from mmdsynth.privacy import classical_sigma

    assert classical_sigma(1.0, 1e-5) == pytest.approx(4.8448, abs=1e-3)
    assert analytic.sigma_for(1.0, 1e-5) < classical_sigma(1.0, 1e-5)


@pytest.mark.parametrize("plan", [PrivacyPlan((1.0,)), PrivacyPlan((1.0, 1.0, 10.0)),
                                  PrivacyPlan((), sample_rate=0.01, steps=500, neighbouring="add_remove")])
def test_rdp_is_never_tighter_than_pld(plan):
    assert calibrate_sigma(1.0, 1e-5, plan, "rdp") >= calibrate_sigma(1.0, 1e-5, plan, "pld")
    s = calibrate_sigma(1.0, 1e-5, plan, "pld")
    assert epsilon_for_sigma(s, 1e-5, plan, "rdp") >= epsilon_for_sigma(s, 1e-5, plan, "pld") - 1e-9


def test_composition_rule_one_over_sigma_squared():
    # k releases with multipliers s_i == one release with 1/s^2 = sum 1/s_i^2
    base = plan_sigma(1.0, 1e-5, (1, 1, 10))
    eff = 1 / math.sqrt(2 / base**2 + 1 / (10 * base) ** 2)
    assert eff == pytest.approx(gaussian_sigma(1.0, 1e-5), rel=2e-4)
    assert plan_sigma(1.0, 1e-5, (1, 1, 10), "exact") == pytest.approx(base, rel=1e-4)


@pytest.mark.parametrize("accountant", ["pld", "rdp", "exact"])
def test_epsilon_from_sigma_inverts_calibration(accountant):
    plan = PrivacyPlan((1.0, 2.0))
    s = calibrate_sigma(2.0, 1e-5, plan, accountant)
    eps = epsilon_for_sigma(s, 1e-5, plan, accountant)
    assert eps <= 2.0 + 1e-9
    assert eps == pytest.approx(2.0, abs=2e-3)
    assert epsilon_for_sigma(s * 1.1, 1e-5, plan, accountant) < eps


def test_dpsgd_calibration_round_trip_and_monotone():
    s = dpsgd_sigma(1.0, 1e-5, sample_rate=0.01, steps=1000)
    plan = PrivacyPlan((), sample_rate=0.01, steps=1000)
    assert epsilon_for_sigma(s, 1e-5, plan) == pytest.approx(1.0, abs=5e-3)
    assert epsilon_for_sigma(s, 1e-5, plan) <= 1.0
    # more steps need more noise; replace-one (the default, like every release) needs more than add/remove
    assert dpsgd_sigma(1.0, 1e-5, 0.01, 4000) > s
    assert plan.neighbouring == "replace_one"
    assert dpsgd_sigma(1.0, 1e-5, 0.01, 1000, neighbouring="add_remove") < s


@pytest.mark.parametrize("plan, eps", [
    (PrivacyPlan((), sample_rate=0.125, steps=256), 1.0), (PrivacyPlan((), sample_rate=0.125, steps=256), 10.0),
    (PrivacyPlan((2.0,), sample_rate=0.3, steps=3, neighbouring="add_remove"), 3.0),
    (PrivacyPlan((), sample_rate=1.0, steps=10), 1.0)])
def test_a_subsampled_plan_gets_the_least_noise_that_holds(plan, eps):
    """The subsampled search (a coarse PLD, then the fine one from its answer) returns a sigma that spends at most
    epsilon and is the smallest that does to 1e-5: a search that stopped at any valid sigma (its upper end, the
    coarse answer) would add noise for nothing."""
    s = calibrate_sigma(eps, 1e-5, plan)
    assert epsilon_for_sigma(s, 1e-5, plan, epsilon_hint=eps) <= eps
    assert epsilon_for_sigma(s * (1 - 1e-5), 1e-5, plan, epsilon_hint=eps) > eps


def test_subsampling_amplifies():
    # one step at q=0.01 costs far less than an unsampled release at the same sigma
    plan = PrivacyPlan((), sample_rate=0.01, steps=1)
    assert epsilon_for_sigma(1.0, 1e-5, plan) < epsilon_for_sigma(1.0, 1e-5, PrivacyPlan((1.0,)))


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "1", None, True])
def test_bad_epsilon_is_typed_and_named(bad):
    with pytest.raises(InvalidParameterError, match=r"epsilon must be a finite number > 0"):
        gaussian_sigma(bad, 1e-5)


@pytest.mark.parametrize("bad", [0, 1, -1e-5, 1.5, float("nan")])
def test_bad_delta_is_typed_and_named(bad):
    with pytest.raises(InvalidParameterError, match=r"delta must be a number in the open interval \(0, 1\)"):
        gaussian_sigma(1.0, bad)


def test_unknown_accountant_lists_choices():
    with pytest.raises(UnknownNameError, match="unknown accountant 'moments'; choose one of: exact, pld, rdp"):
        gaussian_sigma(1.0, 1e-5, accountant="moments")


def test_exact_accountant_refuses_subsampled_plans():
    with pytest.raises(InvalidParameterError, match="closed form only for plans of plain Gaussian"):
        dpsgd_sigma(1.0, 1e-5, 0.01, 10, accountant="exact")


def test_plan_validation():
    with pytest.raises(InvalidParameterError, match="sample_rate must be a number in \\(0, 1\\]"):
        PrivacyPlan((), sample_rate=1.5, steps=3)
    with pytest.raises(InvalidParameterError, match="without sample_rate"):
        PrivacyPlan((1.0,), steps=3)
    with pytest.raises(InvalidParameterError, match="multipliers\\[i\\] must be a finite number > 0"):
        PrivacyPlan((1.0, 0.0))


def test_large_epsilon_is_calibrated_within_bounded_cost_or_refused():
    """Issue 46: `budget --epsilon 1000` took 364 s (the PLD grew like 1 / sigma^2 at a fixed discretisation) and
    1e9 crashed in brentq. The discretisation now follows epsilon (same relative precision), so the PLD holds
    about as many points at epsilon 1000 as at 1; above MAX_EPSILON a clear refusal."""
    import dp_accounting
    from mmdsynth.privacy import analytic
    from mmdsynth.privacy.calibration import MAX_EPSILON, PrivacyPlan, _accountant, pld_interval

    def pld_points(eps):
        acc = _accountant("pld", PrivacyPlan((1.0,)), eps)
        acc.compose(dp_accounting.GaussianDpEvent(analytic.sigma_for(eps, 1e-5)))
        return acc._pld._pmf_remove.size          # noqa: SLF001 - the cost of every accountant call

    assert pld_interval(0.5) == pld_interval(1.0) == 1e-4       # epsilon <= 1: the numbers of before, unchanged
    assert pld_points(1000.0) < 3 * pld_points(1.0)
    for eps in (10.0, 1000.0):
        sigma = gaussian_sigma(eps, 1e-5)
        assert epsilon_for_sigma(sigma, 1e-5) <= eps                     # verified, as at any epsilon
        assert sigma == pytest.approx(analytic.sigma_for(eps, 1e-5), rel=1e-3)
    with pytest.raises(InvalidParameterError, match=r"epsilon=1e\+09 is above 1000: .* protects nothing"):
        gaussian_sigma(1e9, 1e-5)
    assert MAX_EPSILON == 1000.0


@pytest.mark.own_statistic
def test_a_step_runs_only_at_the_declared_clip():
    """Subsampled steps are a declared stage value (issue 82): the ledger records the declared clip as the steps'
    sensitivity, so a step at another clip is refused before its statistic reads a record."""
    import torch

    from mmdsynth.privacy.calibration import compose_plan
    from mmdsynth.privacy.engine import Step, SubsampledSteps, open_engine

    def run(engine, stage):                       # one stage, run by the engine as a fit's planner runs it
        def planner():
            return (yield stage)
        return engine.run(torch.zeros(100, 1), planner())

    engine = open_engine(1.0, 1e-5, PrivacyPlan((), 0.1, 10), noise_seed=0, sampler_seed=0)
    read = []
    with pytest.raises(InvalidParameterError, match="before its steps were declared"):
        run(engine, Step(100, lambda chosen: read.append(chosen), 0.5))
    assert not read
    entry = run(engine, SubsampledSteps(clip=0.5, description="steps", n_records=100))
    assert entry.sensitivity == 0.5 and entry.mechanism == "dp-sgd"

    def statistic(chosen):
        read.append(chosen)
        return torch.zeros(3, dtype=torch.float64)

    with pytest.raises(InvalidParameterError, match="declared steps' clip is 0.5"):
        run(engine, Step(100, statistic, 1.0))
    assert not read
    assert run(engine, Step(100, statistic, 0.5)).shape == (3,) and len(read) == 1
    with pytest.raises(InvalidParameterError, match="sample_rate and steps"):
        plan, multipliers = compose_plan({"x": 1.0})
        run(open_engine(1.0, 1e-5, plan, multipliers=multipliers), SubsampledSteps(clip=1.0, description="x"))


def test_the_engine_runs_only_its_stage_kinds():
    """Issue 82: a planner's stages are the kinds of the engine's registry; anything else (a release's declaration
    without the statistic it releases, a plain value) is refused before anything is read or recorded."""
    import torch

    from mmdsynth.privacy.engine import STAGES, GaussianRelease, open_engine

    engine = open_engine(1.0, 1e-5, PrivacyPlan((1.0,)), multipliers={"x": 1.0})
    for stage in (GaussianRelease("x", 1.0, "a declaration, not a stage"), 3.0):
        def planner(stage=stage):
            yield stage
        with pytest.raises(InvalidParameterError, match="is not a stage the engine runs"):
            engine.run(torch.zeros(3, 1), planner())
    assert not engine.entries and GaussianRelease not in STAGES
