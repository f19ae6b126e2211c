"""Empirical privacy audit: a distinguishing attack on neighbouring datasets and the epsilon
lower bound it proves.

A differentially private mechanism M makes every test that tries to tell ``M(D)`` from
``M(D')`` (neighbours) weak: for any rejection region, ``TPR <= exp(epsilon) FPR + delta``.
So a test that reaches true-positive rate TPR at false-positive rate FPR proves
``epsilon >= ln((TPR - delta) / FPR)``. The audit measures that bound on the real mechanism:

1. a small public dataset D and its neighbour D' that differs in one **canary** record, chosen
   to move the released statistic as far as possible (a search over candidate records: the
   worst case the sensitivity proof must cover);
2. ``trials`` runs of the mechanism on D and as many on D', each with fresh noise, through the
   same function a fit uses (:func:`~dpsynth.embedding.release_mean_embedding`, or DP-KIP's
   :func:`~dpsynth.kip.dpsgd.private_gradient`), calibrated once to the claimed
   (epsilon, delta);
3. the likelihood-ratio test of the attacker who knows D and D' (for Gaussian noise: project the
   output on the difference of the two noise-free statistics), its threshold and direction
   chosen on the first tenth of the trials (``SELECT_FRACTION``) and evaluated once on the rest;
4. Clopper-Pearson bounds on the held-out TPR (lower) and FPR (upper), each at (1 - confidence)/2,
   turn the test into ``epsilon_lower``: with probability >= ``confidence`` the mechanism's true
   epsilon is at least that. Its interval is ``[epsilon_lower, epsilon_upper]`` (the upper end
   uses the other sides of the two intervals); ``epsilon_point`` uses the observed rates.

A correct mechanism gives ``epsilon_lower <= claimed epsilon`` (up to the 1 - confidence chance
of a miss); a broken one (noise too small, sensitivity under-stated) shows up as
``epsilon_lower > epsilon``. How close an honest audit can get depends on the trials: the
attack of this design reaches ``optimal_epsilon`` (the epsilon the canary costs under the
calibrated noise) only with infinitely many. The audit itself reads no private data: D is drawn
from a public seed.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy.stats import beta

from .errors import InvalidParameterError
from .features.base import FeatureMap, build_feature_map
from .validation import check_delta, check_epsilon, check_positive

logger = logging.getLogger(__name__)

MECHANISMS = ("release", "dpsgd-step")
MIN_TRIALS = 100
#: share of the trials that choose the test's threshold; the rest evaluate it once
SELECT_FRACTION = 0.1


@dataclass(frozen=True)
class AuditResult:
    mechanism: str
    epsilon: float                  # the claim
    delta: float
    trials: int                     # runs on each of D and D'
    confidence: float
    epsilon_lower: float            # the proven lower bound (0 when the test shows nothing)
    epsilon_upper: float | None     # the interval's upper end (None: unbounded by these trials)
    epsilon_point: float | None     # ln((TPR - delta) / FPR) at the observed rates
    optimal_epsilon: float          # what an ideal attack on this canary would reach
    tpr: float
    fpr: float
    threshold: float
    direction: str                  # "above": outputs above the threshold are called D'
    sigma: float                    # noise multiplier of the audited mechanism
    sensitivity: float              # the sensitivity it was calibrated for
    canary_gap: float               # ||stat(D') - stat(D)|| / sensitivity (<= 1 if the proof holds)
    noise_source: str
    neighbouring: str
    description: str
    seconds: float

    @property
    def passed(self) -> bool:
        """True when the lower bound does not exceed the claim."""
        return self.epsilon_lower <= self.epsilon

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}

    def format(self) -> str:
        upper = f"{self.epsilon_upper:.3f}" if self.epsilon_upper is not None else "inf"
        verdict = ("consistent with the claim" if self.passed else
                   "ABOVE THE CLAIM: the mechanism leaks more than it says")
        return (f"audit of {self.description}\n"
                f"  claimed epsilon {self.epsilon:g} (delta {self.delta:g}); {self.trials:,} runs on D and on D' "
                f"({self.neighbouring}, canary at {self.canary_gap:.3f} x the sensitivity)\n"
                f"  empirical epsilon lower bound {self.epsilon_lower:.3f} ({self.confidence:.0%} confidence; "
                f"this attack's epsilon lies in [{self.epsilon_lower:.3f}, {upper}])\n"
                f"  attack: TPR {self.tpr:.4f} at FPR {self.fpr:.4f} (held-out runs); with the calibrated noise an "
                f"ideal attack on this canary reaches {self.optimal_epsilon:.3f}\n"
                f"  {verdict}")


# -- statistics of the attack ----------------------------------------------------------------
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


def _best_test(neg: np.ndarray, pos: np.ndarray, delta: float, alpha: float) -> tuple[float, str]:
    """Threshold and direction that maximise the lower bound on these (selection) scores."""
    best = (-1.0, 0.0, "above")
    grid = np.quantile(np.concatenate([neg, pos]), np.linspace(0.001, 0.999, 399))
    neg_s, pos_s, n = np.sort(neg), np.sort(pos), len(neg)
    for t in grid:
        above_pos = n - np.searchsorted(pos_s, t, side="right")
        above_neg = n - np.searchsorted(neg_s, t, side="right")
        for direction, tp, fp in (("above", above_pos, above_neg), ("below", n - above_neg, n - above_pos)):
            # the bound first; where no threshold proves anything yet, the widest gap between the rates
            lower = epsilon_bounds(int(tp), int(fp), n, delta, alpha)[0] + 1e-6 * (int(tp) - int(fp)) / n
            if lower > best[0]:
                best = (lower, float(t), direction)
    return best[1], best[2]


# -- what is audited ---------------------------------------------------------------------------
def default_audit_map() -> FeatureMap:
    """Two random Fourier features of 2-d records: one cos/sin pair, so a canary can reach the
    full sensitivity (its features the negative of the record it replaces)."""
    from .features.rff import RandomFourierFeatures

    return RandomFourierFeatures(2, 2, seed=0)


def _candidates(dim: int, rng: np.random.Generator) -> np.ndarray:
    """Candidate canaries: random records on a wide box, zeros, huge values and the box corners."""
    box = rng.uniform(-10, 10, (4000, dim))
    extremes = np.array([np.zeros(dim), np.full(dim, 1e6), np.full(dim, -1e6), np.full(dim, 1e39)])
    return np.concatenate([box, extremes])


class _ReleaseTarget:
    """The mean-embedding release (data-touching function 1), class-conditional, replace-one."""

    neighbouring = "replace_one"

    def __init__(self, epsilon, delta, feature_map: FeatureMap, n_records: int, n_classes: int, seed: int):
        from .embedding import mean_embedding, release_plan
        from .privacy.calibration import calibrate_sigma

        self.fmap, self.n_classes = feature_map, n_classes
        self.epsilon, self.delta = epsilon, delta
        rng = np.random.default_rng(seed)
        dim = int(getattr(feature_map, "input_dim", 2))
        self.X = rng.random((n_records, dim))
        self.y = np.arange(n_records) % n_classes
        self.plan, self.multipliers = release_plan(feature_map)
        if len(self.multipliers) != 1:
            raise InvalidParameterError(f"the audit attacks one Gaussian release; {feature_map.spec()['name']} "
                                        f"makes {len(self.multipliers)}: audit a one-block map.")
        self.sigma = calibrate_sigma(epsilon, delta, self.plan)
        self.sensitivity = 2.0 * feature_map.norm_bound / n_records
        self.output_sensitivity = self.sensitivity          # the release is the statistic itself
        base = mean_embedding(feature_map, torch.as_tensor(self.X, dtype=torch.float32),
                              torch.as_tensor(self.y), n_classes)
        # the canary replaces record 0 (label y0) by (x', label): the class-conditional embedding
        # moves by (phi(x') e_label - phi(x0) e_y0) / m; pick the candidate and label moving it most
        cands = _candidates(dim, rng)
        with torch.no_grad():
            phis = feature_map.bounded(feature_map(torch.as_tensor(cands, dtype=torch.float32)).double())
            phi0 = feature_map.bounded(feature_map(torch.as_tensor(self.X[:1], dtype=torch.float32)).double())
        same = (phis - phi0).norm(dim=1)
        other = (phis.norm(dim=1) ** 2 + phi0.norm() ** 2).sqrt()
        gaps = torch.stack([same if label == self.y[0] else other for label in range(n_classes)])
        label, i = divmod(int(gaps.argmax()), len(cands))
        self.X2, self.y2 = self.X.copy(), self.y.copy()
        self.X2[0], self.y2[0] = cands[i], label
        self.stats = (base.flatten(), mean_embedding(feature_map, torch.as_tensor(self.X2, dtype=torch.float32),
                                                    torch.as_tensor(self.y2), n_classes).flatten())
        self.description = (f"the mean-embedding release (release_mean_embedding) under "
                            f"{feature_map.spec()['name']} features, {n_records} records, {n_classes} classes")

    def run(self, neighbour: bool) -> tuple[torch.Tensor, str]:
        from .embedding import release_mean_embedding

        X, y = (self.X2, self.y2) if neighbour else (self.X, self.y)
        rel = release_mean_embedding(self.fmap, X, y, epsilon=self.epsilon, delta=self.delta,
                                     n_classes=self.n_classes, plan=self.plan, multipliers=self.multipliers,
                                     noise_multiplier=self.sigma)
        entry = rel.ledger.entries[0]
        return rel.tensors["embedding"].flatten(), entry.noise_source


class _DPSGDTarget:
    """One DP-SGD step of DP-KIP (data-touching function 2) on the full batch, add/remove:
    D' is D plus the canary."""

    neighbouring = "add_remove"

    def __init__(self, epsilon, delta, n_records: int, seed: int, clip: float = 1e-3):
        from .kip.dpsgd import clipped_sum
        from .kip.kernels import FCReLUKernel
        from .privacy.calibration import PrivacyPlan, calibrate_sigma

        self.epsilon, self.delta, self.clip = epsilon, delta, clip
        rng = np.random.default_rng(seed)
        g = torch.Generator().manual_seed(seed)
        self.kernel = FCReLUKernel(1)
        self.x_s = torch.rand(4, 3, generator=g, dtype=torch.float64)
        self.y_s = torch.nn.functional.one_hot(torch.arange(4) % 2, 2).double()
        self.X = torch.as_tensor(rng.random((n_records, 3)))
        self.y = torch.nn.functional.one_hot(torch.arange(n_records) % 2, 2).double()
        self.sigma = calibrate_sigma(epsilon, delta, PrivacyPlan((1.0,), neighbouring="add_remove"))
        self.sensitivity = clip
        base = clipped_sum(self.kernel, self.x_s, self.y_s, self.X, self.y, 1e-6, clip)
        cands = torch.as_tensor(_candidates(3, rng)[:1000])
        best = (-1.0, None)
        for label in range(2):
            yc = torch.nn.functional.one_hot(torch.tensor([label]), 2).double()
            for row in cands[::10]:
                s = clipped_sum(self.kernel, self.x_s, self.y_s, torch.cat([self.X, row[None]]),
                                torch.cat([self.y, yc]), 1e-6, clip)
                gap = float((s - base).norm())
                if gap > best[0]:
                    best = (gap, (row, yc))
        self.X2 = torch.cat([self.X, best[1][0][None]])
        self.y2 = torch.cat([self.y, best[1][1]])
        self.expected = float(n_records)        # q = 1: the expected batch is N, public
        other = clipped_sum(self.kernel, self.x_s, self.y_s, self.X2, self.y2, 1e-6, clip)
        self.stats = ((base / self.expected).flatten(), (other / self.expected).flatten())
        self.output_sensitivity = clip / self.expected      # the step returns the noisy sum / (q N)
        self.description = (f"one DP-SGD step of DP-KIP (private_gradient; full batch of {n_records} records, "
                            f"clip {clip:g})")

    def run(self, neighbour: bool) -> tuple[torch.Tensor, str]:
        from .kip.dpsgd import private_gradient
        from .privacy.mechanisms import NoiseSource

        X, y = (self.X2, self.y2) if neighbour else (self.X, self.y)
        noise = NoiseSource()
        g = private_gradient(self.kernel, self.x_s, self.y_s, X, y, reg=1e-6, clip=self.clip,
                             noise_multiplier=self.sigma, expected_batch=self.expected, noise=noise)
        return g.flatten().double(), noise.policy


def audit(epsilon: float = 1.0, delta: float = 1e-5, *, mechanism: str = "release",
          feature_map: FeatureMap | dict | None = None, n_records: int = 10, n_classes: int = 2,
          trials: int = 20000, confidence: float = 0.95, seed: int = 0) -> AuditResult:
    """Run the distinguishing attack on ``mechanism`` calibrated to (``epsilon``, ``delta``) and
    return the epsilon lower bound it proves (see the module docstring). ``mechanism``:
    ``"release"`` (the mean-embedding release under ``feature_map``, default two random Fourier
    features) or ``"dpsgd-step"`` (one DP-SGD step of DP-KIP). The noise is the library's default
    (secure) source, fresh for every run."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if mechanism not in MECHANISMS:
        raise InvalidParameterError(f"mechanism must be one of {', '.join(MECHANISMS)}; got {mechanism!r}.")
    trials = int(check_positive(trials, "trials", integer=True))
    if trials < MIN_TRIALS:
        raise InvalidParameterError(f"trials must be >= {MIN_TRIALS} (runs on each dataset; 20,000 resolve "
                                    f"epsilon 1 well); got {trials}.")
    if not 0.5 <= float(confidence) < 1:
        raise InvalidParameterError(f"confidence must be in [0.5, 1); got {confidence!r} (try 0.95).")
    n_records = int(check_positive(n_records, "n_records", integer=True))
    if n_records < 2:
        raise InvalidParameterError(f"n_records must be >= 2; got {n_records}.")
    start = time.perf_counter()
    if mechanism == "release":
        fmap = feature_map if isinstance(feature_map, FeatureMap) else \
            build_feature_map(feature_map) if feature_map is not None else default_audit_map()
        target = _ReleaseTarget(epsilon, delta, fmap, n_records, int(n_classes), seed)
    else:
        target = _DPSGDTarget(epsilon, delta, n_records, seed)
    s0, s1 = target.stats
    gap = float((s1 - s0).norm())
    if not gap > 0:
        raise InvalidParameterError("no canary moved the statistic: the audit cannot attack this map.")
    direction_vec = (s1 - s0) / gap
    scores = {False: np.empty(trials), True: np.empty(trials)}
    policy = ""
    for i in range(trials):
        for neighbour in (False, True):
            out, policy = target.run(neighbour)
            scores[neighbour][i] = float((out - s0) @ direction_vec)
    alpha = (1 - float(confidence)) / 2
    k = max(1, int(trials * SELECT_FRACTION))
    t, direction = _best_test(scores[False][:k], scores[True][:k], delta, alpha)
    neg, pos = scores[False][k:], scores[True][k:]
    n = len(neg)
    if direction == "above":
        tp, fp = int((pos > t).sum()), int((neg > t).sum())
    else:
        tp, fp = int((neg <= t).sum()), int((pos <= t).sum())
    lower, upper, point = epsilon_bounds(tp, fp, n, delta, alpha)
    from .privacy.calibration import epsilon_for_sigma

    canary_gap = gap / target.output_sensitivity
    optimal = epsilon_for_sigma(target.sigma / canary_gap, delta, accountant="exact") if canary_gap > 1e-9 else 0.0
    result = AuditResult(
        mechanism=mechanism, epsilon=epsilon, delta=delta, trials=trials, confidence=float(confidence),
        epsilon_lower=lower, epsilon_upper=upper, epsilon_point=point, optimal_epsilon=float(optimal),
        tpr=tp / n, fpr=fp / n, threshold=t, direction=direction, sigma=float(target.sigma),
        sensitivity=float(target.sensitivity), canary_gap=float(canary_gap), noise_source=policy,
        neighbouring=target.neighbouring, description=target.description,
        seconds=round(time.perf_counter() - start, 2))
    logger.info("audit: lower bound %.3f for claimed epsilon %g", lower, epsilon)
    return result
