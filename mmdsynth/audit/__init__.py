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
   same function a fit uses (:func:`~mmdsynth.embedding.release_mean_embedding`, DP-KIP's
   :func:`~mmdsynth.privacy.dpsgd.private_gradient` for one step, a whole ``DPKIP.fit`` with its own
   secret sampler and clipping, or the marginal methods' private selection, a ``Select`` stage run by
   :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run` through a zCDP filter), calibrated once to the claimed
   (epsilon, delta);
3. the likelihood-ratio test of the attacker who knows D and D' (for Gaussian noise: project the
   output on the difference of the two noise-free statistics; for a DP-SGD fit, every step's noisy
   gradient, read off consecutive iterates, on the canary's direction, the steps weighted by how
   much they differed between D and D' in the selection runs, so a sample that is not secret,
   i.e. the same every run, is found and exploited; for the private selection, which candidate was
   selected), its weights, threshold and direction chosen
   on the first tenth of the trials (``SELECT_FRACTION``) and evaluated once on the rest;
4. Clopper-Pearson bounds on the held-out TPR (lower) and FPR (upper), each at (1 - confidence)/2,
   turn the test into ``epsilon_lower``: with probability >= ``confidence`` the mechanism's true
   epsilon is at least that. Its interval is ``[epsilon_lower, epsilon_upper]`` (the upper end
   uses the other sides of the two intervals); ``epsilon_point`` uses the observed rates.

A correct mechanism gives ``epsilon_lower <= claimed epsilon`` (up to the 1 - confidence chance
of a miss); a broken one (noise too small, sensitivity under-stated) shows up as
``epsilon_lower > epsilon``. Independently of the attack, the audit measures the canary's effect
on the noise-free statistic with the mechanism's own code (``canary_gap``, in units of the
declared sensitivity): a gap above 1 means a record moved the statistic further than the proof
allows, and the audit fails however weak the attack was. ``detectable_epsilon`` says how strong a
leak had to be for these trials to catch it (the true epsilon of a Gaussian-shaped leak at which
the ideal test's expected lower bound first exceeds the claim; for the subsampled release, whose
leaks are not Gaussian-shaped, the accounted epsilon of the same release with less noise that its own
attack, simulated on its exact output distribution, flags in 18 of 20 audits; for the selection the epsilon0 that
its audit flags with probability >= 0.9, from the exact binomial distribution of its counts: ``power_note`` says
so). How close an honest audit can get depends on the trials: the attack of this design reaches
``optimal_epsilon`` (the epsilon the canary costs under the calibrated noise) only with infinitely many. The
audit itself reads no private data: D is drawn from a public seed.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import InvalidParameterError
from ..features.base import FeatureMap
from ..validation import check_delta, check_epsilon, check_positive
from .attack import (GAP_TOLERANCE, MIN_TRIALS, SELECT_FRACTION, _decide, clopper_pearson, detectable_epsilon,
                     epsilon_bounds, flag_probability, smallest_provable_shift, threshold_test)
from .gaussian import (CANARY_ROWS, _DatabaseReleaseTarget, _fresh_filter, _PersonMarginalTarget, _PersonReleaseTarget,
                       _ReleaseTarget,
                       default_audit_map)
from .selection import _PersonSelectionTarget, _SelectionTarget, _TreeSelectionTarget
from .subsampled import _DPSGDFitTarget, _DPSGDTarget, _SampledReleaseTarget

#: what ``mmdsynth.audit`` holds for tests and tools (the attack's statistics and the targets live in its modules)
__all__ = ["AuditResult", "audit", "TARGETS", "MECHANISMS", "DEFAULT_TRIALS", "CANARY_ROWS", "GAP_TOLERANCE",
           "MIN_TRIALS", "SELECT_FRACTION", "clopper_pearson", "detectable_epsilon", "epsilon_bounds", "flag_probability",
           "smallest_provable_shift", "threshold_test", "default_audit_map", "_decide", "_fresh_filter",
           "_SelectionTarget", "_TreeSelectionTarget", "_SampledReleaseTarget"]

logger = logging.getLogger(__name__)

#: the audit's targets by the name ``mechanism`` takes, each running one of the engine's stage kinds (its ``stage``:
#: a statistic's Gaussian releases, a measured marginal, a subsampled step or steps, a selection, a tree selection)
#: through the code a fit uses; every stage kind of the engine's registry has one (tests/contract/test_audit.py)
TARGETS = {t.mechanism: t for t in (_ReleaseTarget, _DPSGDTarget, _DPSGDFitTarget, _SampledReleaseTarget,
                                    _SelectionTarget, _TreeSelectionTarget, _PersonReleaseTarget,
                                    _DatabaseReleaseTarget, _PersonMarginalTarget, _PersonSelectionTarget)}
MECHANISMS = tuple(TARGETS)
#: runs on each dataset when ``trials`` is not given (each target's ``default_trials``)
DEFAULT_TRIALS = {name: t.default_trials for name, t in TARGETS.items()}


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
    canary_gap: float               # the canary's measured effect / the declared bound (<= 1 if the proof holds)
    noise_source: str
    neighbouring: str
    description: str
    seconds: float
    detectable_epsilon: float = math.inf   # smallest true epsilon these trials would have caught
    #: what ``detectable_epsilon`` means when it is not the Gaussian-shaped bound (the subsampled release's own)
    power_note: str = ""
    #: the subsampled release's own power: its noise divided by this was flagged (None: the Gaussian-shaped bound)
    detectable_noise_divisor: float | None = None

    @property
    def sensitivity_ok(self) -> bool:
        """The canary moved the noise-free statistic no further than the declared bound."""
        return self.canary_gap <= 1 + GAP_TOLERANCE

    @property
    def passed(self) -> bool:
        """True when the measured sensitivity is within the declared bound and the lower bound
        does not exceed the claim."""
        return self.sensitivity_ok and self.epsilon_lower <= self.epsilon

    def to_dict(self) -> dict:
        return {**asdict(self), "sensitivity_ok": self.sensitivity_ok, "passed": self.passed}

    def format(self) -> str:
        upper = f"{self.epsilon_upper:.3f}" if self.epsilon_upper is not None else "inf"
        if not self.sensitivity_ok:
            verdict = (f"SENSITIVITY EXCEEDED: one record moved the statistic by {self.canary_gap:.3f} x the declared "
                       f"bound; the guarantee does not hold")
        elif not self.passed:
            verdict = "ABOVE THE CLAIM: the mechanism leaks more than it says"
        else:
            verdict = "consistent with the claim"
        detect = (f"{self.detectable_epsilon:.3f}" if math.isfinite(self.detectable_epsilon)
                  else "none (too few trials)")
        return (f"audit of {self.description}\n"
                f"  claimed epsilon {self.epsilon:g} (delta {self.delta:g}); {self.trials:,} runs on D and on D' "
                f"({self.neighbouring}, canary at {self.canary_gap:.3f} x the sensitivity)\n"
                f"  empirical epsilon lower bound {self.epsilon_lower:.3f} ({self.confidence:.0%} confidence; "
                f"this attack's epsilon lies in [{self.epsilon_lower:.3f}, {upper}])\n"
                f"  attack: TPR {self.tpr:.4f} at FPR {self.fpr:.4f} (held-out runs); with the calibrated noise an "
                f"ideal attack on this canary reaches {self.optimal_epsilon:.3f}\n"
                + (f"  power: {self.power_note}\n" if self.power_note else
                   f"  power: with these trials a leak of true epsilon >= {detect} would have been flagged\n") +
                f"  {verdict}")


# -- statistics of the attack ----------------------------------------------------------------


def _checked(epsilon, delta, mechanism: str, trials, neighbouring: str, confidence, n_records) -> tuple:
    """(epsilon, delta, trials, n_records) of an audit's arguments, each refused as the user must fix it."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if mechanism not in MECHANISMS:
        raise InvalidParameterError(f"mechanism must be one of {', '.join(MECHANISMS)}; got {mechanism!r}.")
    target = TARGETS[mechanism]
    trials = int(check_positive(target.default_trials if trials is None else trials, "trials", integer=True))
    if trials < MIN_TRIALS:
        raise InvalidParameterError(f"trials must be >= {MIN_TRIALS} (runs on each dataset; 20,000 resolve "
                                    f"epsilon 1 well); got {trials}.")
    if neighbouring != "replace_one" and target.neighbourings == ("replace_one",):
        others = " or ".join(f"mechanism={m!r}" for m, t in TARGETS.items() if t.neighbourings != ("replace_one",))
        raise InvalidParameterError(f"neighbouring={neighbouring!r} applies to {others} only (the other targets "
                                    f"audit the relation their mechanism is accounted under).")
    if not 0.5 <= float(confidence) < 1:
        raise InvalidParameterError(f"confidence must be in [0.5, 1); got {confidence!r} (try 0.95).")
    n_records = int(check_positive(target.default_records if n_records is None else n_records, "n_records",
                                   integer=True))
    if n_records < 2:
        raise InvalidParameterError(f"n_records must be >= 2; got {n_records}.")
    return epsilon, delta, trials, n_records


def _runs(target, trials: int) -> tuple[np.ndarray, np.ndarray, str]:
    """The attack's statistic of ``trials`` runs of ``target`` on D and as many on D' (alternating, each with fresh
    noise), and the noise source's policy."""
    feats: dict[bool, list] = {False: [], True: []}
    policy = ""
    for _ in range(trials):
        for neighbour in (False, True):
            out, policy = target.observe(neighbour)
            feats[neighbour].append(out)
    return np.stack(feats[False]), np.stack(feats[True]), policy


def audit(epsilon: float = 1.0, delta: float = 1e-5, *, mechanism: str = "release",
          feature_map: FeatureMap | dict | None = None, n_records: int | None = None, n_classes: int = 2,
          trials: int | None = None, confidence: float = 0.95, seed: int = 0,
          duplicate_start: bool = False, neighbouring: str = "replace_one") -> AuditResult:
    """Run the distinguishing attack on ``mechanism`` calibrated to (``epsilon``, ``delta``) and
    return the epsilon lower bound it proves (see the module docstring). ``mechanism``:
    ``"release"`` (the mean-embedding release under ``feature_map``, default two random Fourier
    features), ``"dpsgd-step"`` (one full-batch DP-SGD step of DP-KIP), ``"dpsgd-fit"`` (a whole
    ``DPKIP.fit``, ``duplicate_start`` for a public start of one point repeated) or ``"sampled-release"`` (the
    subsampled release of dp-randconv's ``sample_rate``, whole; ``neighbouring="add_remove"`` audits its
    add/remove accounting on zero-out neighbours, m public, as its ledger entry states) or ``"selection"`` (the
    private selection of MST and AIM: a ``Select`` stage run by a zCDP filter spending its whole rho on one
    exponential-mechanism draw between two cliques, the canary moving their score gap by twice the sensitivity),
    ``"tree-selection"`` (the hybrid's tree of pairs scored by dependence: a ``SelectTree`` stage of two rounds, the
    canary swapping the two pairs' dependence scores; :class:`_TreeSelectionTarget`) or
    ``"person-release"`` (the mean-embedding release of a table whose privacy unit is a person, ``n_records``
    persons; the canary one person with ``CANARY_ROWS`` rows replacing a person of one to three) or
    ``"person-marginals"`` (the measured 1-way marginals of such a table: a ``Measure`` stage on the person table,
    :class:`_PersonMarginalTarget`) or ``"person-selection"`` (the selection's ``Select`` stage on such a table,
    :class:`_PersonSelectionTarget`).
    ``trials``: runs on each dataset (default 20,000; the selection 2,000, the tree selection 4,000). The noise (and
    for a fit the sample) is the library's default secure source, fresh for every run."""
    epsilon, delta, trials, n_records = _checked(epsilon, delta, mechanism, trials, neighbouring, confidence,
                                                 n_records)
    start = time.perf_counter()
    target = TARGETS[mechanism].for_audit(epsilon, delta, n_records, seed, feature_map=feature_map,
                                          n_classes=n_classes, neighbouring=neighbouring,
                                          duplicate_start=duplicate_start)
    canary_gap = target.prepare()
    neg_all, pos_all, policy = _runs(target, trials)
    alpha = (1 - float(confidence)) / 2
    d = _decide(target, neg_all, pos_all, delta, alpha)
    lower, upper, point, tp, fp, n, t, direction = (d[k] for k in ("lower", "upper", "point", "tp", "fp", "n",
                                                                    "threshold", "direction"))
    optimal = target.optimal(canary_gap)
    if hasattr(target, "power"):             # a target whose leaks are not Gaussian-shaped: its own power
        detectable, power_note, divisor = target.power(epsilon, delta, trials, alpha)
    else:
        detectable, power_note, divisor = detectable_epsilon(epsilon, delta, n, alpha), "", None
    result = AuditResult(
        mechanism=mechanism, epsilon=epsilon, delta=delta, trials=trials, confidence=float(confidence),
        epsilon_lower=lower, epsilon_upper=upper, epsilon_point=point, optimal_epsilon=float(optimal),
        tpr=tp / n, fpr=fp / n, threshold=t, direction=direction, sigma=float(target.sigma),
        sensitivity=float(target.sensitivity), canary_gap=float(canary_gap), noise_source=policy,
        neighbouring=target.neighbouring, description=target.description,
        seconds=round(time.perf_counter() - start, 2),
        detectable_epsilon=detectable, power_note=power_note, detectable_noise_divisor=divisor)
    logger.info("audit: lower bound %.3f for claimed epsilon %g", lower, epsilon)
    return result
