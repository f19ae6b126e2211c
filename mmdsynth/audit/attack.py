"""The attack's statistics: Clopper-Pearson bounds on a test's rates, the epsilon they prove, the test chosen on a
tenth of the runs and evaluated on the rest, and the power of these trials (what leak they would catch). No
mechanism and no data here."""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta
from scipy.stats import binom, norm
from ..privacy import analytic

#: slack on the measured sensitivity (floating-point rounding of a clip or a norm bound)
GAP_TOLERANCE = 1e-6
MIN_TRIALS = 100
#: share of the trials that choose the test's threshold; the rest evaluate it once
SELECT_FRACTION = 0.1


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (lower, upper) on a binomial rate, each at level ``alpha``."""
    lo = 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k))
    return lo, hi


def epsilon_bounds(tp: int, fp: int, n: int, delta: float, alpha: float) -> tuple[float, float | None, float | None]:
    """(lower bound, interval upper end, point estimate) of epsilon from a test with ``tp`` of
    ``n`` positives and ``fp`` of ``n`` negatives rejected, at level ``alpha`` per rate."""
    tpr_lo, tpr_hi = clopper_pearson(tp, n, alpha)
    fpr_lo, fpr_hi = clopper_pearson(fp, n, alpha)
    lower = max(0.0, math.log((tpr_lo - delta) / fpr_hi)) if tpr_lo > delta else 0.0
    upper = math.log((tpr_hi - delta) / fpr_lo) if fpr_lo > 0 and tpr_hi > delta else None
    point = math.log((tp / n - delta) / (fp / n)) if fp and tp / n > delta else None
    return lower, upper, point


def _lower_bounds(tp: np.ndarray, fp: np.ndarray, n: int, delta: float, alpha: float) -> np.ndarray:
    """:func:`epsilon_bounds`' lower bound for arrays of counts at once (the same Clopper-Pearson ends)."""
    tp, fp = np.asarray(tp, dtype=np.int64), np.asarray(fp, dtype=np.int64)
    tpr_lo = np.where(tp == 0, 0.0, beta.ppf(alpha, np.maximum(tp, 1), n - tp + 1))
    fpr_hi = np.where(fp == n, 1.0, beta.ppf(1 - alpha, fp + 1, np.maximum(n - fp, 1)))
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = np.log((tpr_lo - delta) / fpr_hi)
    return np.where(tpr_lo > delta, np.maximum(lower, 0.0), 0.0)


def _best_test(neg: np.ndarray, pos: np.ndarray, delta: float, alpha: float) -> tuple[float, str]:
    """Threshold and direction that maximise the lower bound on these (selection) scores (the first of equals,
    thresholds in increasing order, "above" before "below" at each)."""
    grid = np.quantile(np.concatenate([neg, pos]), np.linspace(0.001, 0.999, 399))
    neg_s, pos_s, n = np.sort(neg), np.sort(pos), len(neg)
    above_pos = n - np.searchsorted(pos_s, grid, side="right")
    above_neg = n - np.searchsorted(neg_s, grid, side="right")
    tp = np.stack([above_pos, n - above_neg], 1).ravel()          # (threshold, direction) in the order tried
    fp = np.stack([above_neg, n - above_pos], 1).ravel()
    # the bound first; where no threshold proves anything yet, the widest gap between the rates
    score = _lower_bounds(tp, fp, n, delta, alpha) + 1e-6 * (tp - fp) / n
    i = int(np.argmax(score))
    return float(grid[i // 2]), ("above", "below")[i % 2]


# -- what is audited ---------------------------------------------------------------------------


def flag_probability(p_tp: float, p_fp: float, n: int, claim: float, delta: float, alpha: float) -> float:
    """The exact probability that a fixed test with true-positive rate ``p_tp`` and false-positive rate ``p_fp``,
    counted over ``n`` runs on each dataset (binomial counts), proves epsilon > ``claim``
    (:func:`epsilon_bounds`' lower bound, each rate at level ``alpha``): the sum over the false positives fp of
    P(fp) P(tp >= the fewest true positives that prove it at fp)."""

    fp = np.arange(int(binom.ppf(1e-12, n, p_fp)), int(binom.isf(1e-12, n, p_fp)) + 1)
    fpr_hi = np.where(fp >= n, 1.0, beta.ppf(1 - alpha, fp + 1, np.maximum(n - fp, 1)))
    need = math.exp(claim) * fpr_hi + delta           # the lower bound exceeds the claim iff TPR_lo exceeds this
    lo, hi = np.zeros(len(fp), dtype=np.int64), np.full(len(fp), n + 1, dtype=np.int64)   # hi: fewest tp (n+1: none)
    while (open_ := hi - lo > 1).any():
        mid = (lo + hi) // 2
        ok = beta.ppf(alpha, np.clip(mid, 1, n), n - np.clip(mid, 1, n) + 1) > need
        hi, lo = np.where(open_ & ok, mid, hi), np.where(open_ & ~ok, mid, lo)
    return float((binom.pmf(fp, n, p_fp) * binom.sf(hi - 1, n, p_tp)).sum())


def _decide(target, neg_all: np.ndarray, pos_all: np.ndarray, delta: float, alpha: float) -> dict:
    """The attack on the runs of D (``neg_all``) and D' (``pos_all``): the test's statistic, threshold and
    direction chosen on the first ``SELECT_FRACTION`` of the runs, evaluated once on the rest, and the epsilon
    bounds it proves."""
    k = max(1, int(len(neg_all) * SELECT_FRACTION))
    if hasattr(target, "statistic"):         # a target's own test, fitted on the selection runs only
        score = target.statistic(neg_all[:k], pos_all[:k])
        scores = {False: score(neg_all), True: score(pos_all)}
    else:
        # weights of the observed coordinates (steps), learned on the selection runs only
        weights = np.ones(neg_all.shape[1])
        if neg_all.shape[1] > 1:
            learned = np.clip(pos_all[:k].mean(0) - neg_all[:k].mean(0), 0, None)
            weights = learned if learned.sum() > 0 else weights
        scores = {False: neg_all @ weights, True: pos_all @ weights}
    t, direction = _best_test(scores[False][:k], scores[True][:k], delta, alpha)
    return {**threshold_test(scores[False][k:], scores[True][k:], t, delta, alpha, direction), "direction": direction}


def threshold_test(neg: np.ndarray, pos: np.ndarray, threshold: float, delta: float, alpha: float,
                   direction: str = "above") -> dict:
    """A fixed test on the scores of the runs on D (``neg``) and on D' (``pos``), as many of each: it flags "D'"
    when the score is above ``threshold`` (``direction="below"``: the roles swapped, "D" when the score is at or
    below it), and the epsilon bounds its counts prove (:func:`epsilon_bounds`, each rate at level ``alpha``).
    The threshold and direction must not be chosen on these runs."""
    neg, pos = np.asarray(neg), np.asarray(pos)
    if direction == "above":
        tp, fp = int((pos > threshold).sum()), int((neg > threshold).sum())
    else:
        tp, fp = int((neg <= threshold).sum()), int((pos <= threshold).sum())
    n = len(neg)
    lower, upper, point = epsilon_bounds(tp, fp, n, delta, alpha)
    return {"lower": lower, "upper": upper, "point": point, "tp": tp, "fp": fp, "n": n, "threshold": threshold}


def smallest_provable_shift(claim: float, delta: float, n: int, alpha: float, *, thresholds=None,
                            steps: int = 30) -> float:
    """The smallest shift ``mu`` of a unit-variance Gaussian score (runs on D' ~ N(mu, 1), on D ~ N(0, 1)) at
    which a test flagging "D'" above a threshold, with the expected counts over ``n`` runs of each, proves
    epsilon > ``claim`` (:func:`epsilon_bounds`; bisection over (0, 40] in ``steps`` halvings; inf: no shift up
    to 40 could). ``thresholds(mu)``: the thresholds the test may use (default: 400 from -4 to mu + 4, i.e. the
    best one; a fixed test, e.g. the midpoint ``lambda mu: [mu / 2]``, gives its own power)."""

    if thresholds is None:
        thresholds = lambda mu: np.linspace(-4, mu + 4, 400)  # noqa: E731

    def caught(mu: float) -> bool:                # every threshold's bound at once (as epsilon_bounds gives each)
        t = np.asarray(thresholds(mu), dtype=np.float64)
        tp, fp = np.round(n * norm.sf(t - mu)), np.round(n * norm.sf(t))
        return bool((_lower_bounds(tp, fp, n, delta, alpha) > claim).any())

    lo, hi = 0.0, 40.0
    if not caught(hi):
        return math.inf
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if caught(mid) else (mid, hi)
    return hi


def detectable_epsilon(claim: float, delta: float, n: int, alpha: float) -> float:
    """The smallest true epsilon of a Gaussian-shaped leak (mu-GDP, ideal likelihood-ratio test) whose
    expected rates over ``n`` held-out runs give a lower bound above ``claim``: how strong a leak
    had to be for this audit to catch it (inf if no leak could be proven with ``n`` runs)."""

    mu = smallest_provable_shift(claim, delta, n, alpha)
    return math.inf if math.isinf(mu) else float(analytic.epsilon_for(1.0 / mu, delta))


class Target:
    """An audit target: one of the engine's stage kinds (``stage``: the frozen stage value it runs, e.g.
    :class:`~mmdsynth.privacy.engine.Sums`) run through the code a fit uses, on a public D and its
    neighbour D' (the canary), under the name ``mechanism`` (``mmdsynth audit --mechanism``). ``prepare()`` measures
    the canary's effect in units of the declared sensitivity; ``observe(neighbour)`` is one run's attack statistic."""

    mechanism = ""
    stage: type | None = None
    #: runs on each dataset when ``trials`` is not given, records of D when ``n_records`` is not, and the neighbouring
    #: relations the target audits (the first: what its mechanism is accounted under by default)
    default_trials = 20000
    default_records = 10
    neighbourings: tuple = ("replace_one",)

    @classmethod
    def for_audit(cls, epsilon: float, delta: float, n_records: int, seed: int, **options) -> "Target":
        """The target for an audit's arguments (``options``: those of :func:`~mmdsynth.audit.audit` a target may
        read: ``feature_map``, ``n_classes``, ``neighbouring``, ``duplicate_start``)."""
        return cls(epsilon, delta, n_records, seed)

