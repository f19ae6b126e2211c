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
   :func:`~mmdsynth.privacy.marginals.run_stages` through a zCDP filter), calibrated once to the claimed
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

import functools
import logging
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy.stats import beta

from .errors import InvalidParameterError
from .features.base import FeatureMap, build_feature_map, uniform_records
from .validation import check_delta, check_epsilon, check_positive

logger = logging.getLogger(__name__)

MECHANISMS = ("release", "dpsgd-step", "dpsgd-fit", "sampled-release", "selection", "tree-selection",
              "person-release", "person-marginals", "person-selection")
#: runs on each dataset when ``trials`` is not given (the selection reads its table through the stage each run: 5-8 ms;
#: the person release reads a table through the person reduction: about 10 ms)
DEFAULT_TRIALS = {"selection": 2000, "tree-selection": 4000, "person-release": 2000, "person-marginals": 2000,
                  "person-selection": 2000}
#: rows of the person-release audit's canary: one person with this many rows (the others have one to three)
CANARY_ROWS = 500
#: slack on the measured sensitivity (floating-point rounding of a clip or a norm bound)
GAP_TOLERANCE = 1e-6
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
def default_audit_map() -> FeatureMap:
    """Two random Fourier features of 2-d records: one cos/sin pair, so a canary can reach the
    full sensitivity (its features the negative of the record it replaces)."""
    from .features.rff import RandomFourierFeatures

    return RandomFourierFeatures(2, 2, seed=0)


def _candidates(records, rng: np.random.Generator) -> np.ndarray:
    """Candidate canaries from ``records(n, rng, low, high)`` (a map's :meth:`~mmdsynth.features.base.FeatureMap.records`,
    inputs of its kind): values on a wide box, zeros and huge values."""
    box = records(4000, rng, -10.0, 10.0)
    extremes = [records(1, rng, v, v) for v in (0.0, 1e6, -1e6, 1e39)]
    return np.concatenate([box, *extremes])


class _ProjectionTarget:
    """A mechanism whose output is one noisy statistic: the attacker projects it on the difference
    of the two noise-free statistics ``stats`` (the likelihood-ratio test for Gaussian noise)."""

    stats: tuple[torch.Tensor, torch.Tensor]
    output_sensitivity: float

    def prepare(self) -> float:
        """The canary's measured effect in units of the declared sensitivity."""
        s0, s1 = self.stats
        gap = float((s1 - s0).norm())
        if not gap > 0:
            raise InvalidParameterError("no canary moved the statistic: the audit cannot attack this map.")
        self._s0, self._dir = s0, (s1 - s0) / gap
        return gap / self.output_sensitivity

    def observe(self, neighbour: bool) -> tuple[np.ndarray, str]:
        out, policy = self.run(neighbour)
        return np.array([float((out - self._s0) @ self._dir)]), policy

    def optimal(self, gap: float) -> float:
        from .privacy.calibration import epsilon_for_sigma

        return epsilon_for_sigma(self.sigma / gap, self.delta, accountant="exact") if gap > 1e-9 else 0.0


class _ReleaseTarget(_ProjectionTarget):
    """The mean-embedding release (data-touching function 1), class-conditional, replace-one."""

    neighbouring = "replace_one"

    def __init__(self, epsilon, delta, feature_map: FeatureMap, n_records: int, n_classes: int, seed: int):
        from .embedding import mean_embedding, release_plan
        from .privacy.engine import open_engine

        self.fmap, self.n_classes = feature_map, n_classes
        self.epsilon, self.delta = epsilon, delta
        rng = np.random.default_rng(seed)
        self.X = feature_map.records(n_records, rng)        # inputs of the map's kind (a table map: encoded records)
        self.y = np.arange(n_records) % n_classes
        self.plan, self.multipliers = release_plan(feature_map)
        if len(self.multipliers) != 1:
            raise InvalidParameterError(f"the audit attacks one Gaussian release; {feature_map.spec()['name']} "
                                        f"makes {len(self.multipliers)}: audit a one-block map.")
        self.sigma = open_engine(epsilon, delta, self.plan, multipliers=self.multipliers).sigma
        self.sensitivity = 2.0 * feature_map.norm_bound / n_records
        self.output_sensitivity = self.sensitivity          # the release is the statistic itself
        base = mean_embedding(feature_map, torch.as_tensor(self.X, dtype=torch.float32),
                              torch.as_tensor(self.y), n_classes)
        # the canary replaces record 0 (label y0) by (x', label): the class-conditional embedding
        # moves by (phi(x') e_label - phi(x0) e_y0) / m; pick the candidate and label moving it most
        cands = _candidates(feature_map.records, rng)
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
                                     n_classes=self.n_classes)
        entry = rel.ledger.entries[0]
        return rel.tensors["embedding"].flatten(), entry.noise_source


class _PersonReleaseTarget(_ProjectionTarget):
    """The mean-embedding release of a table whose privacy unit is a person (:mod:`mmdsynth.engines.persons`):
    D holds ``n_records`` persons of one to three rows each; D' replaces person 0 by one canary person with
    ``CANARY_ROWS`` rows, every row at the table point and label that move the embedding most (a person's
    contribution is the mean of their rows' features, so identical rows are the worst case). The release runs
    through the same path a fit does (a :class:`~mmdsynth.engines.persons.PersonTable`, the table encoder,
    :func:`~mmdsynth.embedding.release_mean_embedding`), m = the number of persons."""

    neighbouring = "replace_one"

    def __init__(self, epsilon, delta, n_records: int, seed: int):
        import pandas as pd

        from .data.encoding import TableEncoder
        from .data.schema import Schema
        from .embedding import release_plan
        from .engines.persons import PersonTable
        from .privacy.engine import open_engine

        self.epsilon, self.delta, self.n_classes = epsilon, delta, 2
        self.fmap = default_audit_map()
        schema = Schema.from_dict({"columns": [{"name": "a", "type": "numeric", "bounds": [0, 1]},
                                               {"name": "b", "type": "numeric", "bounds": [0, 1]},
                                               {"name": "person", "type": "id"}],
                                   "label": "y", "label_categories": ["n", "p"], "privacy_unit": "person"})
        self.encoder = TableEncoder(schema, ["a", "b", "y", "person"])
        rng = np.random.default_rng(seed)
        sizes = rng.integers(1, 4, n_records)
        rows = int(sizes.sum())
        self.df = pd.DataFrame({"a": rng.random(rows).round(6), "b": rng.random(rows).round(6),
                                "y": np.where(np.arange(rows) % 2 == 0, "n", "p"),
                                "person": np.repeat([f"u{i}" for i in range(n_records)], sizes)})
        plan, mults = release_plan(self.fmap)
        self.sigma = open_engine(epsilon, delta, plan, multipliers=mults).sigma
        self.sensitivity = 2.0 * self.fmap.norm_bound / n_records
        self.output_sensitivity = self.sensitivity
        # the canary: the grid point and label whose features differ most from person 0's mean contribution
        grid = np.stack(np.meshgrid(np.linspace(0, 1, 41), np.linspace(0, 1, 41)), -1).reshape(-1, 2)
        first = self.df[self.df.person == "u0"]
        with torch.no_grad():
            phi = self.fmap.bounded(self.fmap(torch.as_tensor(grid, dtype=torch.float32)).double())
            X0, y0 = self.encoder.encode(first)
            phi0 = self.fmap.bounded(self.fmap(torch.as_tensor(X0, dtype=torch.float32)).double())
        own = torch.zeros(2, phi.shape[1], dtype=torch.float64)
        own.index_add_(0, torch.as_tensor(np.array(y0, dtype=np.int64)), phi0 / len(first))
        gaps = torch.stack([((phi - own[label]) ** 2).sum(1) + (own[1 - label] ** 2).sum() for label in (0, 1)])
        label, i = divmod(int(gaps.argmax()), len(grid))
        canary = pd.DataFrame({"a": [grid[i, 0]] * CANARY_ROWS, "b": [grid[i, 1]] * CANARY_ROWS,
                               "y": [["n", "p"][label]] * CANARY_ROWS, "person": ["canary"] * CANARY_ROWS})
        self.df2 = pd.concat([self.df[self.df.person != "u0"], canary], ignore_index=True)
        self.sources = (PersonTable(self.df, "person"), PersonTable(self.df2, "person"))
        exact = []
        for source in self.sources:
            X, y = self.encoder.encode(source.frame)
            w = torch.as_tensor(source.data.weights)
            sums = self.fmap.class_sums(torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(np.array(y)), 2,
                                        weights=w)
            exact.append((sums.T / n_records).flatten())
        self.stats = tuple(exact)
        self.description = (f"the mean-embedding release of a person table (privacy unit: a person; release_mean_"
                            f"embedding through PersonTable), {n_records} persons, canary: one person with "
                            f"{CANARY_ROWS} rows")

    def run(self, neighbour: bool) -> tuple[torch.Tensor, str]:
        from .embedding import release_mean_embedding

        rel = release_mean_embedding(self.fmap, self.sources[int(neighbour)], encoder=self.encoder, n_classes=2,
                                     epsilon=self.epsilon, delta=self.delta)
        return rel.tensors["embedding"].flatten(), rel.ledger.entries[0].noise_source


class _PersonMarginalTarget(_ProjectionTarget):
    """The measured 1-way marginals of a table whose privacy unit is a person, as MST, AIM and the hybrid measure
    them: a ``Measure`` stage of :func:`~mmdsynth.privacy.marginals.run_stages` on a
    :class:`~mmdsynth.engines.persons.PersonTable`, through a zCDP filter calibrated to the claim and opened for
    each run (the stage spends its whole rho). D holds ``n_records`` persons of one to three rows over two columns
    (values p, q); person 0's rows are all (p, p). D' replaces person 0 by one canary person with ``CANARY_ROWS``
    rows, all (q, q): with each person's rows weighing 1 in all, each column's counts move by (-1, +1), the
    release by exactly its recorded sensitivity sqrt(2 x 2 cliques) = 2; without the person reduction they would
    move by ``CANARY_ROWS`` times that. The attacker projects the noisy counts on the difference of the exact ones."""

    neighbouring = "replace_one"
    CLIQUES = (("a",), ("b",))

    def __init__(self, epsilon, delta, n_records: int, seed: int):
        import pandas as pd

        from .data.discrete import Domain
        from .data.encoding import TableEncoder
        from .data.schema import Schema
        from .engines.persons import PersonTable
        from .privacy.engine import open_engine
        from .privacy.marginals import clique_counts
        from .statistics.tables import clique_key

        self.epsilon, self.delta = epsilon, delta
        self._template = open_engine(epsilon, delta)           # calibrated once; no budget file
        self.sensitivity = math.sqrt(2 * len(self.CLIQUES))
        self.output_sensitivity = self.sensitivity
        self.sigma = 1.0 / math.sqrt(2 * self._template.rho)  # std / sensitivity of a Gaussian release spending rho
        schema = Schema.from_dict({"columns": [{"name": "a", "type": "categorical", "categories": ["p", "q"]},
                                               {"name": "b", "type": "categorical", "categories": ["p", "q"]},
                                               {"name": "person", "type": "id"}], "privacy_unit": "person"})
        learned = schema.without_ids()
        self.domain, self.encoder = Domain.of(learned), TableEncoder(learned, ["a", "b", "person"])
        rng = np.random.default_rng(seed)
        sizes = rng.integers(1, 4, n_records)
        rows = int(sizes.sum())
        values = np.where(rng.random((rows, 2)) < 0.5, "p", "q")
        values[:sizes[0]] = "p"                                # person 0: all (p, p)
        df = pd.DataFrame({"a": values[:, 0], "b": values[:, 1],
                           "person": np.repeat([f"u{i}" for i in range(n_records)], sizes)})
        canary = pd.DataFrame({"a": ["q"] * CANARY_ROWS, "b": ["q"] * CANARY_ROWS, "person": ["canary"] * CANARY_ROWS})
        df2 = pd.concat([df[df.person != "u0"], canary], ignore_index=True)
        self.sources = (PersonTable(df, "person"), PersonTable(df2, "person"))
        self.stats = tuple(torch.as_tensor(np.concatenate(
            [clique_counts(src, self.domain, self.encoder, self.CLIQUES)[clique_key(c)] for c in self.CLIQUES]))
            for src in self.sources)
        self.description = (f"the measured 1-way marginals of a person table (privacy unit: a person; a Measure stage "
                            f"of run_stages on a PersonTable, through a zCDP filter spending its whole rho "
                            f"{self._template.rho:.4g}), {n_records} persons, canary: one person with {CANARY_ROWS} "
                            f"rows replacing a person of {sizes[0]}")

    def run(self, neighbour: bool) -> tuple[torch.Tensor, str]:
        from .privacy.marginals import Measure, run_stages

        engine = _fresh_filter(self._template).open("privacy audit of the person-level marginals")

        def planner():
            return (yield Measure(self.CLIQUES, engine.remaining, what="1-way marginals"))
        noisy, _ = run_stages(engine, self.sources[int(neighbour)], self.domain, self.encoder, planner())
        return torch.as_tensor(np.concatenate([noisy[c] for c in self.CLIQUES])), engine.entries[-1].noise_source


class _DPSGDTarget(_ProjectionTarget):
    """One DP-SGD step of DP-KIP (data-touching function 2) on the full batch, add/remove:
    D' is D plus the canary."""

    neighbouring = "add_remove"

    def __init__(self, epsilon, delta, n_records: int, seed: int, clip: float = 1e-3):
        from .statistics.gradients import clipped_sum
        from .kip.kernels import FCReLUKernel
        from .privacy.calibration import PrivacyPlan
        from .privacy.engine import open_engine

        self.epsilon, self.delta, self.clip = epsilon, delta, clip
        rng = np.random.default_rng(seed)
        g = torch.Generator().manual_seed(seed)
        self.kernel = FCReLUKernel(1)
        self.x_s = torch.rand(4, 3, generator=g, dtype=torch.float64)
        self.y_s = torch.nn.functional.one_hot(torch.arange(4) % 2, 2).double()
        self.X = torch.as_tensor(rng.random((n_records, 3)))
        self.y = torch.nn.functional.one_hot(torch.arange(n_records) % 2, 2).double()
        self.engine = open_engine(epsilon, delta, PrivacyPlan((1.0,)), multipliers={"step": 1.0})
        self.sigma = self.engine.sigma
        self.sensitivity = clip
        base = clipped_sum(self.kernel, self.x_s, self.y_s, self.X, self.y, 1e-6, clip)
        cands = torch.as_tensor(_candidates(functools.partial(uniform_records, dim=3), rng)[:1000])
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
        from .privacy.dpsgd import private_gradient

        X, y = (self.X2, self.y2) if neighbour else (self.X, self.y)
        g = private_gradient(self.kernel, self.x_s, self.y_s, X, y, reg=1e-6, clip=self.clip, engine=self.engine,
                             expected_batch=self.expected)
        return g.flatten().double(), self.engine.noise.policy


class _DPSGDFitTarget:
    """A whole DP-KIP fit through ``DPKIP.fit`` (data-touching function 2 in its real loop: the
    method's own Poisson sampler, clipping and noise), replace-one. The public start is a seeded set
    of distinct points, or one point repeated (``duplicate_start``: the ill-conditioned case that
    broke the factored clipping). D's other records equal the start points with their own labels
    (their gradients are ~1e-7, far below the clip, so they hide nothing). Record 0 and the canary
    that replaces it sit at one public point x* (the repeated start point, or the midpoint of the
    first start point of each class) with the two labels: with two centred classes their residuals,
    hence their gradients, point in opposite directions and both are clipped to C, so replacing one
    by the other moves a step's sum by the full 2C that replace-one allows. Optimiser SGD at a
    known rate, so the attacker, who sees every iterate, reads every step's noisy sum off
    consecutive iterates."""

    neighbouring = "replace_one"
    DIM, PER_CLASS, CLASSES = 4, 2, 2

    def __init__(self, epsilon, delta, n_records: int, seed: int, *, duplicate_start: bool = False,
                 epochs: int = 1, clip: float = 1e-3, reg: float = 1e-8, lr: float = 1e-3):
        from .kip.krr import centred_one_hot
        from .methods.kip import to_kernel_space

        self.epsilon, self.delta, self.clip, self.reg, self.lr = epsilon, delta, clip, reg, lr
        self.epochs, self.n_records = epochs, n_records
        rng = np.random.default_rng(seed)
        m = self.PER_CLASS * self.CLASSES
        points = rng.random((1 if duplicate_start else m, self.DIM))
        self.start = np.repeat(points, m, 0) if duplicate_start else points
        labels = np.arange(m) // self.PER_CLASS
        self.X = self.start[np.arange(n_records) % m].astype(np.float64)
        self.y = labels[np.arange(n_records) % m]
        self.X[0], self.y[0] = (self.start[0] + self.start[self.PER_CLASS]) / 2, 0      # x*, label 0
        self.X2, self.y2 = self.X.copy(), self.y.copy()
        self.y2[0] = 1                                                                  # x*, label 1
        self._to_kernel, self._one_hot = to_kernel_space, centred_one_hot
        # one run on D' gives the calibrated entry, and the iterates that prepare() measures
        self._iterates, fitted = self._run(self.X2, self.y2)
        entry = fitted.release_.ledger.entries[-1]                 # the DP-SGD entry
        self.sigma, self.sensitivity = entry.noise_multiplier, clip
        self.plan_dict = entry.plan
        self.description = (f"a whole DP-KIP fit (DPKIP.fit: secret Poisson sampler, clipping, noise; "
                            f"{entry.plan['steps']} steps at q={entry.plan['sample_rate']:g}, {n_records} records, "
                            f"clip {clip:g}, lambda {reg:g}; public start of "
                            f"{'ONE point repeated' if duplicate_start else 'distinct points'}; record 0 and the "
                            f"canary: one public point with either label; the attacker sees every iterate)")

    def _model(self):
        from .methods.kip import DPKIP

        return DPKIP(self.epsilon, self.delta, n_classes=self.CLASSES, images_per_class=self.PER_CLASS,
                     epochs=self.epochs, batch_size=1, lr=self.lr, clip=self.clip, reg=self.reg, optimizer="sgd",
                     dtype="float64", seed=0, progress=False)

    def _run(self, X, y) -> tuple[list[torch.Tensor], object]:
        """One fit on (X, y) from the public start: every iterate (the attacker's view) and the model."""
        iterates: list[torch.Tensor] = []
        model = self._model()
        model._observer = iterates.append
        model.fit(X, y, public_init=self.start)
        return iterates, model

    def _contribution(self, x_s, X, y) -> torch.Tensor:
        """The fit's own clipped sum (the function its private_gradient calls) over records X, y."""
        from .statistics import gradients

        y_s = self._one_hot(torch.arange(x_s.shape[0]) // self.PER_CLASS, self.CLASSES, torch.float64)
        xb = self._to_kernel(torch.as_tensor(X)).double()
        yb = self._one_hot(torch.as_tensor(y), self.CLASSES, torch.float64)
        return gradients.clipped_sum(self._kernel, x_s, y_s, xb, yb, self.reg, self.clip)

    def prepare(self) -> float:
        """Direction of the canary at the public start, and its measured sensitivity: the largest
        effect on the clipped sum, over the start and every iterate of one run, of adding the
        canary or record 0 to the other records, in units of the clip."""
        from .kip.kernels import FCReLUKernel

        self._kernel = FCReLUKernel(1)
        iterates = self._iterates
        gap = 0.0
        others = (self.X[1:], self.y[1:])
        for x_s in iterates:
            base = self._contribution(x_s, *others)
            for X, y in ((self.X2[:1], self.y2[:1]), (self.X[:1], self.y[:1])):
                more = self._contribution(x_s, np.concatenate([others[0], X]), np.concatenate([others[1], y]))
                gap = max(gap, float((more - base).norm()) / self.clip)
        x0 = iterates[0]
        diff = self._contribution(x0, self.X2[:1], self.y2[:1]) - self._contribution(x0, self.X[:1], self.y[:1])
        self._dir = diff / diff.norm()
        # the others' expected share of a step (q x their sum), which the attacker knows
        self._others = self._contribution(x0, *others) / self.n_records
        return gap

    def observe(self, neighbour: bool) -> tuple[np.ndarray, str]:
        """Every step's noisy sum (from consecutive iterates) projected on the canary's direction."""
        iterates, model = self._run(*((self.X2, self.y2) if neighbour else (self.X, self.y)))
        xs = torch.stack(iterates)
        sums = (xs[:-1] - xs[1:]) / self.lr          # SGD: x_{t+1} = x_t - lr * noisy sum / (q N), q N = 1
        proj = ((sums - self._others) * self._dir).sum((1, 2))
        e = model.release_.ledger.entries[0]
        return proj.numpy(), f"{e.noise_source}; records per step: {e.sampler}"

    def power(self, claim: float, delta: float, trials: int, alpha: float) -> tuple[float, str, None]:
        """No power statement: each step reads a secret Poisson sample, so the statistic is a mixture, and the
        Gaussian-shaped bound of the one-shot targets (:func:`detectable_epsilon`) would promise power this
        audit has not been shown to have (issue 45: the sampled release passed noise/4 while it promised 3.79).
        Said in the output instead of a number."""
        q = self.plan_dict["sample_rate"]
        return math.inf, (f"not stated: every step reads a secret Poisson sample (q={q:g}), so the per-step "
                          f"statistic is a mixture and the Gaussian-shaped bound of the one-shot targets does not "
                          f"say what {trials} trials can catch; this target's own power has not been simulated"), None

    def optimal(self, gap: float) -> float:
        from .privacy.calibration import PrivacyPlan, epsilon_for_sigma

        plan = PrivacyPlan((), self.plan_dict["sample_rate"], self.plan_dict["steps"], self.neighbouring)
        return epsilon_for_sigma(self.sigma / max(gap, 1e-9), self.delta, plan) if gap > 1e-9 else 0.0


class _SampledReleaseTarget:
    """The subsampled release (:func:`~mmdsynth.embedding.release_sampled_embedding`, dp-randconv's
    ``sample_rate``: one secret Poisson sample and one Gaussian step per network), run whole with its own
    secure sampler and noise. The map: ``BLOCKS`` random ConvNets of ``WIDTH`` filters on public 4 x 4 images.

    ``neighbouring="replace_one"`` (the default, the release's default): record 0 is a random image of class 0
    and the canary the same image in class 1: each step's sum moves by sqrt(2), the most any replacement can (a
    record's features are non-negative, norm 1 per network). ``neighbouring="add_remove"`` (the release's
    ``add_remove`` accounting, which holds for zero-out neighbours with m public, as its ledger entry says): the
    canary replaces record 0 by the null record, a constant image whose features are exactly zero in every
    network (its instance norm is 0), so D and D' have the same public m and differ by one record's whole
    contribution: a step's sum moves by 1 when record 0 is sampled, the clip.

    The other records are in class 2, so their sums are orthogonal to the canary's move and hide nothing. The
    attacker sees every block, recovers each step's noisy sum, projects it on that step's canary direction and adds
    up the steps' log-likelihood ratios of the two Poisson mixtures (record 0 or the canary in the step with
    probability q; :meth:`statistic`): a large shift in any one step counts, and a sample that is not secret (the
    same every run) shows as the same steps shifted every time. A small q makes the amplification, hence what a
    public sample or too little noise would leak, large.

    Its power is not the Gaussian-shaped bound of the other targets (:func:`detectable_epsilon`): the record is in
    a step with probability q only, so most of this mechanism's epsilon comes from rare runs that a few hundred
    trials may never see (with a quarter of the noise its accounted epsilon is 21 while the Gaussian bound said
    3.79 would be caught). :meth:`power` simulates this audit on outputs drawn from the mechanism's own output
    distribution with less noise instead."""

    SHAPE, BLOCKS, WIDTH, RATE, CLASSES = (1, 4, 4), 100, 2, 0.02, 3
    #: the power simulation: audits per noise level, how many must flag it, the noise divisors tried
    SIM_AUDITS, SIM_FLAGGED, SIM_SEED = 20, 18, 2024
    SIM_DIVISORS = tuple(float(2 ** (k / 4)) for k in range(1, 29))      # 1.19 .. 128

    def __init__(self, epsilon, delta, n_records: int, seed: int, neighbouring: str = "replace_one"):
        from .statistics.embedding import sampled_block_sums
        from .features.randconv import RandomConvFeatures
        from .privacy.calibration import PrivacyPlan
        from .privacy.engine import open_engine

        if neighbouring not in ("replace_one", "add_remove"):
            raise InvalidParameterError(f"neighbouring must be 'replace_one' or 'add_remove'; got {neighbouring!r}.")
        self.epsilon, self.delta, self.n_records, self.neighbouring = epsilon, delta, n_records, neighbouring
        self.fmap = RandomConvFeatures(self.SHAPE, n_networks=self.BLOCKS, width=self.WIDTH, seed=0)
        self.plan = PrivacyPlan((), self.RATE, self.BLOCKS, neighbouring)
        self.sigma = open_engine(epsilon, delta, self.plan).sigma
        self.sensitivity = 1.0                                   # the clip: one record's share of a step's sum
        rng = np.random.default_rng(seed)
        self.X = rng.random((n_records, *self.SHAPE))
        self.y = np.full(n_records, 2)
        self.y[0] = 0
        self.X2, self.y2 = self.X.copy(), self.y.copy()
        if neighbouring == "replace_one":
            self.y2[0] = 1
        else:
            self.X2[0] = 0.5                                     # the null record: zero features, m unchanged
        self._sums = lambda t, X, y: sampled_block_sums(self.fmap, t, torch.as_tensor(X, dtype=torch.float32),
                                                        torch.as_tensor(y, dtype=torch.int64), self.CLASSES,
                                                        self.BLOCKS ** 0.5, 64)
        canary = ("one image in class 0 or 1" if neighbouring == "replace_one" else
                  "one image in class 0, or the null record (zero features; zero-out neighbours, m public)")
        self.description = (f"the subsampled release (release_sampled_embedding: secret Poisson sampler and noise; "
                            f"{self.BLOCKS} random ConvNets, one step each at q={self.RATE:g}, {n_records} records, "
                            f"{neighbouring}; record 0 and the canary: {canary}, the others in class 2; the "
                            f"attacker sees every block)")

    def prepare(self) -> float:
        """Each step's canary direction, the others' expected share, and the measured sensitivity: the largest
        contribution of record 0 or the canary to a step's sum (replace-one), or the largest move of a step's
        sum between them (zero-out), in units of the clip."""
        gap, self._dirs, self._others, self._shifts = 0.0, [], [], []
        for t in range(self.BLOCKS):
            a, b = self._sums(t, self.X[:1], self.y[:1]), self._sums(t, self.X2[:1], self.y2[:1])
            if self.neighbouring == "add_remove" and float(b.norm()) != 0.0:      # zero-out needs a true null record
                raise InvalidParameterError(f"the null record has features of norm {float(b.norm()):.3g} in network "
                                            f"{t}: it is not a zero-out neighbour.")
            move = max(float(a.norm()), float(b.norm())) if self.neighbouring == "replace_one" else float((b - a).norm())
            gap = max(gap, move)
            d = b - a
            d = d / d.norm().clamp_min(1e-300)
            self._dirs.append(d)
            self._shifts.append((float((a * d).sum()), float((b * d).sum())))   # record 0's / the canary's
            self._others.append(self.RATE * self._sums(t, self.X[1:], self.y[1:]))
        return gap

    def observe(self, neighbour: bool) -> tuple[np.ndarray, str]:
        from .embedding import release_sampled_embedding

        X, y = (self.X2, self.y2) if neighbour else (self.X, self.y)
        rel = release_sampled_embedding(self.fmap, X, y, epsilon=self.epsilon, delta=self.delta,
                                        sample_rate=self.RATE, n_classes=self.CLASSES, neighbouring=self.neighbouring)
        emb, width, scale = rel.tensors["embedding"], self.fmap.block, self.RATE * self.n_records * self.BLOCKS ** 0.5
        proj = [float(((emb[t * width:(t + 1) * width].T * scale - self._others[t]) * self._dirs[t]).sum())
                for t in range(self.BLOCKS)]
        e = rel.ledger.entries[0]
        return np.array(proj), f"{e.noise_source}; records per step: {e.sampler}"

    def statistic(self, neg: np.ndarray, pos: np.ndarray):
        """The test, fitted on the selection runs' per-step projections: each step's log-likelihood ratio of the
        two Poisson mixtures at the noise level the runs show (not the claimed one: too little noise is what
        the audit must see), the steps weighted by how much their ratio differed between D and D' (a public
        sample: the steps that always hold record 0)."""
        q = self.RATE
        sd = float(np.sqrt(np.mean((neg - neg.mean(0)) ** 2))) or 1.0
        a, b = (np.array(v) for v in zip(*self._shifts))

        def llr(x):
            no = np.log1p(-q) - x ** 2 / (2 * sd ** 2)
            return (np.logaddexp(no, np.log(q) - (x - b) ** 2 / (2 * sd ** 2))
                    - np.logaddexp(no, np.log(q) - (x - a) ** 2 / (2 * sd ** 2)))
        w = np.clip(llr(pos).mean(0) - llr(neg).mean(0), 0, None)
        w = w if w.sum() > 0 else np.ones_like(w)
        return lambda runs: llr(runs) @ w

    def optimal(self, gap: float) -> float:
        from .privacy.calibration import epsilon_for_sigma

        return epsilon_for_sigma(self.sigma / max(gap, 1e-9), self.delta, self.plan) if gap > 1e-9 else 0.0

    # -- power ---------------------------------------------------------------------------------------------
    def simulated_runs(self, neighbour: bool, runs: int, noise_std: float, rng: np.random.Generator) -> np.ndarray:
        """``runs`` of what :meth:`observe` returns, drawn from their exact distribution (after :meth:`prepare`):
        a step's projection is its noise, N(0, noise_std^2) (the others' sums are orthogonal to the canary's
        direction), plus record 0's or the canary's shift when the secret sample holds it (probability q)."""
        shift = np.array([s[1] if neighbour else s[0] for s in self._shifts])
        held = rng.random((runs, self.BLOCKS)) < self.RATE
        return rng.normal(0.0, noise_std, (runs, self.BLOCKS)) + held * shift

    def power(self, claim: float, delta: float, trials: int, alpha: float) -> tuple[float, str, float | None]:
        """(detectable epsilon, what it means, the noise divisor f): the smallest noise divisor f of :attr:`SIM_DIVISORS` at which
        at least ``SIM_FLAGGED`` of ``SIM_AUDITS`` simulated audits of ``trials`` runs (this audit's own test,
        threshold and bounds, on :meth:`simulated_runs` with the noise std sigma / f; public seed) bound epsilon
        above ``claim``, and the epsilon the accountant gives this release at sigma / f (a pessimistic PLD
        estimate, so a true epsilon at least as large means at least as little noise). inf when no divisor
        up to the largest is flagged so often."""
        from .privacy.calibration import epsilon_for_sigma

        def flagged(f: float) -> bool:
            rng = np.random.default_rng(self.SIM_SEED)
            hits = 0
            for i in range(self.SIM_AUDITS):
                neg = self.simulated_runs(False, trials, self.sigma / f, rng)
                pos = self.simulated_runs(True, trials, self.sigma / f, rng)
                hits += _decide(self, neg, pos, delta, alpha)["lower"] > claim
                if hits >= self.SIM_FLAGGED or hits + self.SIM_AUDITS - 1 - i < self.SIM_FLAGGED:
                    break
            return hits >= self.SIM_FLAGGED

        lo, hi = -1, len(self.SIM_DIVISORS) - 1           # smallest index flagged (power grows with the divisor)
        if not flagged(self.SIM_DIVISORS[hi]):
            return math.inf, (f"none: even this release with its noise divided by {self.SIM_DIVISORS[hi]:.0f} was "
                              f"flagged in fewer than {self.SIM_FLAGGED} of {self.SIM_AUDITS} simulated audits of "
                              f"{trials:,} runs"), None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if flagged(self.SIM_DIVISORS[mid]) else (mid, hi)
        f = self.SIM_DIVISORS[hi]
        eps = epsilon_for_sigma(self.sigma / f, delta, self.plan, epsilon_hint=10.0)
        return eps, (f"this release with its noise divided by {f:.3g} (accounted epsilon {eps:.3f}) or more was "
                     f"flagged in >= {self.SIM_FLAGGED} of {self.SIM_AUDITS} audits of {trials:,} runs simulated "
                     f"from its own output distribution (a subsampled release hides the record in most steps, so "
                     f"the Gaussian-shaped bound of the other targets does not apply)"), f


def _fresh_filter(template):
    """A new zCDP filter with ``template``'s calibration (its total rho: :func:`~mmdsynth.privacy.zcdp.rho_for_epsilon`
    takes about a second, so an audit calibrates once) and nothing spent, charged or recorded, with a new secure noise
    source (OS randomness: every run's draw independent of every other). A filter's attributes are its calibration
    (copied) and the state of one plan (reset here); tests/contract/test_audit_selection.py checks the result against
    a filter the constructor builds, so a new attribute of the engine shows there. (A ``rho=`` argument of
    ``ZCDPEngine``, as ``PrivacyEngine`` takes ``sigma=``, would make this a constructor call.)"""
    import copy
    import uuid

    from .privacy.mechanisms import NoiseSource

    f = copy.copy(template)
    f.noise, f.budget_id = NoiseSource(None), uuid.uuid4().hex
    f.spent, f.entries, f.charged = 0.0, [], False
    return f


def _log_choice_probabilities(scores: np.ndarray, epsilon0: float, sensitivity: float) -> np.ndarray:
    """ln P(candidate i) of the exponential mechanism: P proportional to exp(epsilon0 score / (2 sensitivity))."""
    z = epsilon0 * np.asarray(scores, dtype=np.float64) / (2 * sensitivity)
    return z - (z.max() + np.log(np.exp(z - z.max()).sum()))


def flag_probability(p_tp: float, p_fp: float, n: int, claim: float, delta: float, alpha: float) -> float:
    """The exact probability that a fixed test with true-positive rate ``p_tp`` and false-positive rate ``p_fp``,
    counted over ``n`` runs on each dataset (binomial counts), proves epsilon > ``claim``
    (:func:`epsilon_bounds`' lower bound, each rate at level ``alpha``): the sum over the false positives fp of
    P(fp) P(tp >= the fewest true positives that prove it at fp)."""
    from scipy.stats import binom

    fp = np.arange(int(binom.ppf(1e-12, n, p_fp)), int(binom.isf(1e-12, n, p_fp)) + 1)
    fpr_hi = np.where(fp >= n, 1.0, beta.ppf(1 - alpha, fp + 1, np.maximum(n - fp, 1)))
    need = math.exp(claim) * fpr_hi + delta           # the lower bound exceeds the claim iff TPR_lo exceeds this
    lo, hi = np.zeros(len(fp), dtype=np.int64), np.full(len(fp), n + 1, dtype=np.int64)   # hi: fewest tp (n+1: none)
    while (open_ := hi - lo > 1).any():
        mid = (lo + hi) // 2
        ok = beta.ppf(alpha, np.clip(mid, 1, n), n - np.clip(mid, 1, n) + 1) > need
        hi, lo = np.where(open_ & ok, mid, hi), np.where(open_ & ~ok, mid, lo)
    return float((binom.pmf(fp, n, p_fp) * binom.sf(hi - 1, n, p_tp)).sum())


class _SelectionTarget:
    """The private selection of the marginal methods (AIM's and MST's rounds): the whole ``Select`` stage as
    :func:`~mmdsynth.privacy.marginals.run_stages` runs it, through a :class:`~mmdsynth.privacy.engine.ZCDPEngine`
    filter calibrated to the claim and opened (charged) for each run, the stage reading the table's counts with its
    own code and spending the filter's whole rho on one exponential-mechanism draw (epsilon0 = sqrt(8 rho), the
    engine's secure Gumbel noise, fresh every run). The attacker sees which candidate was selected.

    The table: two categorical attributes ``a`` and ``b`` (values p, q) of ``n_records`` records, record 0 = (p, p);
    the canary replaces it by (q, q). Candidates (index 0, 1): the cliques (b,) and (a,); public estimates: a's counts
    on D exactly, b's counts on D moved by (-2, +2). So (b,)'s L1 score is 4 on D and 2 on D' (the canary moves both
    of its counts a step towards the estimate) and (a,)'s is 0 and 2 (both a step away): each score moves by 2, the
    sensitivity, in opposite directions, and the gap between them by 4, the most one record can move it. (b,) leads by 4
    on D, they are level on D': P_D'((a,)) = 1/2, P_D((a,)) = 1 / (1 + e^eps0), so this canary costs exactly
    ln((1 + e^eps0) / 2) (:meth:`optimal`), below the selection's own eps0 (pure DP), itself below the filter's
    claimed epsilon. Of the places a gap that moves by 4 can sit, level on D' gives the stronger audit (the epsilon0
    :meth:`power` flags at claim 1: 2.30, 1.77, 1.57 at 300, 2,000, 20,000 runs, against 2.89, 2.32, 2.10 with the
    gap centred on 0; at claim 4: 5.89 and 4.98 at 2,000 and 20,000 runs against 9.40 and 8.38, but none at 300 runs,
    where the centred gap flags 15.7): one outcome keeps probability 1/2 on D' whatever the true eps0, so too small a
    noise shows as a vanishing false-positive rate at a true-positive rate of 1/2.

    Its power is its own (:meth:`power`): the outcome is one of two candidates, not a Gaussian shift."""

    neighbouring = "replace_one"
    CANDIDATES = (("b",), ("a",))
    #: the power statement: the flagged share of audits required, and the largest epsilon0 searched
    POWER_SHARE, POWER_MAX = 0.9, 50.0

    #: the table's two-valued columns, and how many rounds share the filter's rho (the attacked draw spends one share)
    COLUMNS, ROUNDS = ("a", "b"), 1

    def __init__(self, epsilon, delta, n_records: int, seed: int):
        from .data import Schema
        from .data.discrete import Domain
        from .data.encoding import TableEncoder
        from .privacy.engine import open_engine

        self.epsilon, self.delta, self.n_records = epsilon, delta, n_records
        self._template = open_engine(epsilon, delta)            # calibrated once (rho_for_epsilon); no budget file
        self.rho = self._template.rho
        # the audit's own reference: the bounded-range cost rho = eps0^2 / 8 (not the engine's conversion, which
        # the audit checks), for the attacked draw's share of rho
        self.epsilon0 = math.sqrt(8 * self.rho / self.ROUNDS)
        self.sigma = 2.0 / self.epsilon0                       # the Gumbel noise's scale / the sensitivity (ledger)
        self.sensitivity = self._declared_sensitivity()       # as declared by the stage: prepare() reads it
        schema = Schema.from_dict({"columns": [{"name": c, "type": "categorical", "categories": ["p", "q"]}
                                               for c in self.COLUMNS]})
        self.domain, self.encoder = Domain.of(schema), TableEncoder(schema, list(self.COLUMNS))
        self.tables = self._tables(seed)
        self.description = "the private selection"             # completed by prepare()

    def _declared_sensitivity(self) -> float:
        from .privacy.marginals import L1_SENSITIVITY
        return L1_SENSITIVITY

    def _tables(self, seed: int) -> tuple:
        """(D, D'): the canary's neighbouring tables; also sets ``self.estimates``, the public 1-way estimates that
        make the canary's move of the L1 scores the largest (see the class)."""
        import pandas as pd

        rest = np.where(np.random.default_rng(seed).random(self.n_records - 1) < 0.5, "p", "q")
        D = pd.DataFrame({"a": ["p", *rest], "b": ["p", *rest]})
        D2 = D.copy()
        D2.loc[0] = ["q", "q"]                                 # the canary
        counts = {c: np.array([(D[c] == v).sum() for v in ("p", "q")], dtype=np.float64) for c in ("a", "b")}
        self.estimates = {("a",): counts["a"], ("b",): counts["b"] + np.array([-2.0, 2.0])}
        return D, D2

    def _run(self, engine, neighbour: bool):
        from .privacy.marginals import Select, run_stages

        def planner():
            return (yield Select(self.CANDIDATES, self.estimates, engine.remaining))
        return run_stages(engine, self.tables[neighbour], self.domain, self.encoder, planner())

    def prepare(self) -> float:
        """The scores the stage hands the exponential mechanism on D and on D', and the sensitivity it declares, as its
        own code computes them (a non-private filter that records the call: the noise-free statistic); the canary's
        measured effect is the largest move of a score in units of that sensitivity."""
        from .privacy.engine import ZCDPEngine

        seen = []

        class Recording(ZCDPEngine):
            def exponential(self, name, scores, sensitivity, **kw):
                seen.append((np.asarray(scores, dtype=np.float64).copy(), float(sensitivity)))
                return super().exponential(name, scores, sensitivity, **kw)

        for neighbour in (False, True):
            self._run(Recording(self.epsilon, self.delta, private=False).open("audit: noise-free scores"), neighbour)
        (s0, sens), (s1, _) = seen[::len(seen) // 2]      # each run's first draw: the one the attacker sees
        self.scores, self.sensitivity = (s0, s1), sens
        gap = float(np.abs(s1 - s0).max()) / sens
        self.description = self._describe(s0, s1, sens, gap)
        return gap

    def _describe(self, s0, s1, sens: float, gap: float) -> str:
        fmt = lambda s: ", ".join(f"{v:g}" for v in s)          # noqa: E731
        return (
            f"the private selection (the Select stage of run_stages through a ZCDPEngine filter opened for each run: "
            f"one exponential-mechanism draw spending the filter's whole rho {self.rho:.4g}, i.e. epsilon0 = "
            f"sqrt(8 rho) = {self.epsilon0:.3f}, which alone is {self.epsilon0:.3f}-DP (pure); the claim "
            f"({self.epsilon:g}, {self.delta:g}) is the filter's total) among the cliques (b,) and (a,) of a "
            f"{self.n_records}-record table; the canary moves their L1 scores from ({fmt(s0)}) on D to ({fmt(s1)}) on "
            f"D' (sensitivity {sens:g}); its exact epsilon at epsilon0 is {self.optimal(gap):.3f}; the attacker sees "
            f"which candidate was selected)")

    def observe(self, neighbour: bool) -> tuple[np.ndarray, str]:
        engine = _fresh_filter(self._template).open("privacy audit of the selection")
        pick = self._run(engine, neighbour)
        return np.array([float(self.CANDIDATES.index(pick))]), engine.entries[-1].noise_source

    def _canary_epsilon(self, epsilon0: float) -> float:
        """max over the outcomes of |ln P_D(o) / P_D'(o)| for this canary's scores at ``epsilon0``."""
        lp, lq = (_log_choice_probabilities(s, epsilon0, self.sensitivity) for s in self.scores)
        return float(np.abs(lq - lp).max())

    def optimal(self, gap: float) -> float:
        """This canary's exact epsilon at the calibrated epsilon0 (what an ideal attack on it reaches)."""
        return self._canary_epsilon(self.epsilon0)

    def power(self, claim: float, delta: float, trials: int, alpha: float) -> tuple[float, str, float | None]:
        """(detectable epsilon0, what it means, epsilon0 / the calibrated one): the smallest epsilon0 of this selection
        (the same scores and sensitivity; a larger eps0 is a smaller noise, or an under-stated sensitivity) at which
        the audit with ``trials`` runs proves epsilon above ``claim`` with probability >= ``POWER_SHARE``, exactly
        (:func:`flag_probability` over the binomial counts of the held-out runs, for the test the selection runs
        pick: "D'" when the candidate D' favours is selected). inf when not even ``POWER_MAX`` is."""
        n = trials - max(1, int(trials * SELECT_FRACTION))

        def flagged(epsilon0: float) -> bool:
            lp, lq = (_log_choice_probabilities(s, epsilon0, self.sensitivity) for s in self.scores)
            j = int(np.argmax(lq - lp))
            return flag_probability(math.exp(lq[j]), math.exp(lp[j]), n, claim, delta, alpha) >= self.POWER_SHARE

        lo, hi = 0.0, self.POWER_MAX
        if not flagged(hi):
            return math.inf, (f"none: even a selection at epsilon0 {hi:g} would be flagged in fewer than "
                              f"{self.POWER_SHARE:.0%} of audits of {trials:,} runs"), None
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if flagged(mid) else (mid, hi)
        return hi, (f"this selection at epsilon0 >= {hi:.3f} (its noise divided by {hi / self.epsilon0:.3g}; this "
                    f"canary's epsilon then {self._canary_epsilon(hi):.3f}) would have been flagged in >= "
                    f"{self.POWER_SHARE:.0%} of audits of {trials:,} runs (exact binomial; the honest one runs at "
                    f"epsilon0 {self.epsilon0:.3f})"), hi / self.epsilon0


class _PersonSelectionTarget(_SelectionTarget):
    """The same ``Select`` stage on a table whose privacy unit is a person (a
    :class:`~mmdsynth.engines.persons.PersonTable`, as AIM's and MST's rounds read one): every record of
    :class:`_SelectionTarget`'s table is a person of one row, and the canary is one person with ``CANARY_ROWS`` rows of
    (q, q) replacing person 0. With each person's rows weighing 1 in all, the scores move as the row-level canary's
    do (by the sensitivity, in opposite directions); without the person reduction they would move by ``CANARY_ROWS``
    times that."""

    def _tables(self, seed: int) -> tuple:
        import pandas as pd

        from .data.encoding import TableEncoder
        from .engines.persons import PersonTable

        D, _ = super()._tables(seed)
        D = D.assign(person=[f"u{i}" for i in range(len(D))])
        canary = pd.DataFrame({"a": ["q"] * CANARY_ROWS, "b": ["q"] * CANARY_ROWS, "person": ["canary"] * CANARY_ROWS})
        D2 = pd.concat([D.iloc[1:], canary], ignore_index=True)
        self.encoder = TableEncoder(self.domain.schema, ["a", "b", "person"])    # the person column is never read
        return PersonTable(D, "person"), PersonTable(D2, "person")

    def _describe(self, s0, s1, sens: float, gap: float) -> str:
        return (super()._describe(s0, s1, sens, gap).replace("the private selection", "the private selection on a "
                "person table (privacy unit: a person; the canary one person with " + f"{CANARY_ROWS} rows)", 1))


class _TreeSelectionTarget(_SelectionTarget):
    """The hybrid's tree of pairs scored by dependence: the whole ``SelectTree`` stage with ``score="dependence"`` as
    :func:`~mmdsynth.privacy.marginals.run_stages` runs it, through a filter calibrated to the claim and opened for
    each run. Three attributes ``a``, ``b``, ``c`` (values p, q) and the candidates (a, c), (a, b): the tree takes two
    rounds of rho / 2 each; the attacker sees the first round's pick (the second takes the other pair, whatever
    the data: it tells nothing). epsilon0 of the round = sqrt(8 rho / 2).

    The table: record 0 = (p, q, q) and the other m - 1 records (q, q, p). On D, b is constant, so (a, b) scores 0
    (independent), and c copies a, so (a, c) scores 4 (m - 1) / m. The canary (p, p, p) swaps the two: each score
    moves by 4 (m - 1) / m (3.6 at m = 10), within the declared 6 + 4/m, and the gap between them by twice that
    (found by an exhaustive search over 10-record tables as the largest move of the gap). Its exact epsilon at the
    round's epsilon0 is :meth:`optimal`."""

    #: in this order the canary's D' favours the second (index 1), as the attack's test expects ("D'" when above)
    CANDIDATES = (("a", "c"), ("a", "b"))
    COLUMNS, ROUNDS = ("a", "b", "c"), 2

    def _declared_sensitivity(self) -> float:
        from .privacy.marginals import dependence_sensitivity
        return dependence_sensitivity(self.n_records)

    def _tables(self, seed: int) -> tuple:
        import pandas as pd

        D = pd.DataFrame([("p", "q", "q")] + [("q", "q", "p")] * (self.n_records - 1), columns=list(self.COLUMNS))
        D2 = D.copy()
        D2.loc[0] = ["p", "p", "p"]                            # the canary
        return D, D2

    def _run(self, engine, neighbour: bool):
        from .privacy.marginals import SelectTree, run_stages

        def planner():
            return (yield SelectTree(self.COLUMNS, self.CANDIDATES, {}, engine.remaining, score="dependence"))
        return run_stages(engine, self.tables[neighbour], self.domain, self.encoder, planner())[0]

    def _describe(self, s0, s1, sens: float, gap: float) -> str:
        fmt = lambda s: ", ".join(f"{v:g}" for v in s)          # noqa: E731
        return (f"the tree selection by dependence (the SelectTree stage with score \"dependence\" of run_stages "
                f"through a ZCDPEngine filter opened for each run: two rounds of rho / 2 = {self.rho / 2:.4g}, the "
                f"first an exponential-mechanism draw at epsilon0 = sqrt(8 rho / 2) = {self.epsilon0:.3f}; the claim "
                f"({self.epsilon:g}, {self.delta:g}) is the filter's total) between the pairs (a, c) and (a, b) of a "
                f"{self.n_records}-record table; the canary moves their dependence scores from ({fmt(s0)}) on D to "
                f"({fmt(s1)}) on D' (sensitivity 6 + 4/m = {sens:g}); its exact epsilon at epsilon0 is "
                f"{self.optimal(gap):.3f}; the attacker sees the first round's pick)")


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
    from scipy.stats import norm

    if thresholds is None:
        thresholds = lambda mu: np.linspace(-4, mu + 4, 400)  # noqa: E731

    def caught(mu: float) -> bool:
        for t in thresholds(mu):
            tp, fp = round(n * norm.sf(t - mu)), round(n * norm.sf(t))
            if epsilon_bounds(tp, fp, n, delta, alpha)[0] > claim:
                return True
        return False

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
    from .privacy import analytic

    mu = smallest_provable_shift(claim, delta, n, alpha)
    return math.inf if math.isinf(mu) else float(analytic.epsilon_for(1.0 / mu, delta))


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
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if mechanism not in MECHANISMS:
        raise InvalidParameterError(f"mechanism must be one of {', '.join(MECHANISMS)}; got {mechanism!r}.")
    trials = int(check_positive(DEFAULT_TRIALS.get(mechanism, 20000) if trials is None else trials, "trials",
                                integer=True))
    if trials < MIN_TRIALS:
        raise InvalidParameterError(f"trials must be >= {MIN_TRIALS} (runs on each dataset; 20,000 resolve "
                                    f"epsilon 1 well); got {trials}.")
    if neighbouring != "replace_one" and mechanism != "sampled-release":
        raise InvalidParameterError(f"neighbouring={neighbouring!r} applies to mechanism='sampled-release' only (the "
                                    f"other targets audit the relation their mechanism is accounted under).")
    if not 0.5 <= float(confidence) < 1:
        raise InvalidParameterError(f"confidence must be in [0.5, 1); got {confidence!r} (try 0.95).")
    if n_records is None:      # a fit needs enough records for a small sampling rate (q = 1 / n_records)
        n_records = 40 if mechanism == "dpsgd-fit" else 10
    n_records = int(check_positive(n_records, "n_records", integer=True))
    if n_records < 2:
        raise InvalidParameterError(f"n_records must be >= 2; got {n_records}.")
    start = time.perf_counter()
    if mechanism == "release":
        fmap = feature_map if isinstance(feature_map, FeatureMap) else \
            build_feature_map(feature_map) if feature_map is not None else default_audit_map()
        target = _ReleaseTarget(epsilon, delta, fmap, n_records, int(n_classes), seed)
    elif mechanism == "dpsgd-step":
        target = _DPSGDTarget(epsilon, delta, n_records, seed)
    elif mechanism == "sampled-release":
        target = _SampledReleaseTarget(epsilon, delta, n_records, seed, neighbouring)
    elif mechanism == "selection":
        target = _SelectionTarget(epsilon, delta, n_records, seed)
    elif mechanism == "tree-selection":
        target = _TreeSelectionTarget(epsilon, delta, n_records, seed)
    elif mechanism == "person-release":
        target = _PersonReleaseTarget(epsilon, delta, n_records, seed)
    elif mechanism == "person-marginals":
        target = _PersonMarginalTarget(epsilon, delta, n_records, seed)
    elif mechanism == "person-selection":
        target = _PersonSelectionTarget(epsilon, delta, n_records, seed)
    else:
        target = _DPSGDFitTarget(epsilon, delta, n_records, seed, duplicate_start=duplicate_start)
    canary_gap = target.prepare()
    feats: dict[bool, list] = {False: [], True: []}
    policy = ""
    for _ in range(trials):
        for neighbour in (False, True):
            out, policy = target.observe(neighbour)
            feats[neighbour].append(out)
    neg_all, pos_all = np.stack(feats[False]), np.stack(feats[True])
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
