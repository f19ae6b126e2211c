"""Audit targets of the subsampled steps (stage kinds ``Step`` and ``SubsampledSteps``): one DP-SGD step of DP-KIP, a
whole DP-KIP fit with its own secret sampler, and the subsampled release of dp-randconv's ``sample_rate``."""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

from ..embedding import release_sampled_embedding
from ..errors import InvalidParameterError
from ..features.base import uniform_records
from ..features.randconv import RandomConvFeatures
from ..kip.kernels import FCReLUKernel
from ..kip.krr import centred_one_hot
from ..methods.kip import DPKIP, to_kernel_space
from ..privacy.calibration import epsilon_for_sigma, PrivacyPlan
from ..privacy.dpsgd import private_gradient
from ..privacy.engine import Step, SubsampledSteps, open_engine
from ..statistics import gradients
from ..statistics.embedding import sampled_block_sums
from ..statistics.gradients import clipped_sum
from .attack import Target, _decide
from .gaussian import _candidates, _ProjectionTarget


def _ideal_epsilon(sigma: float, gap: float, delta: float, plan: PrivacyPlan) -> float:
    """What an ideal attack reaches on a subsampled plan whose canary moved each step by ``gap`` x the sensitivity:
    the plan's epsilon at noise ``sigma / gap``. Priced first on a coarse grid (for epsilon about 1,000), then on the
    grid the library gives a plan spending what that found (:func:`~mmdsynth.privacy.calibration.pld_interval`): a
    leaky fit's canary at 17 x the sensitivity spends about 600, which the grid for epsilon 1 took 39 s to price and
    this takes well under one, to the same digits."""
    if gap <= 1e-9:
        return 0.0
    rough = epsilon_for_sigma(sigma / gap, delta, plan, epsilon_hint=1000.0)
    return epsilon_for_sigma(sigma / gap, delta, plan, epsilon_hint=max(1.0, rough))


class _DPSGDTarget(_ProjectionTarget):
    """One DP-SGD step of DP-KIP (data-touching function 2) on the full batch, add/remove:
    D' is D plus the canary."""

    neighbouring = "add_remove"

    mechanism, stage = "dpsgd-step", Step

    def __init__(self, epsilon, delta, n_records: int, seed: int, clip: float = 1e-3):

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

        X, y = (self.X2, self.y2) if neighbour else (self.X, self.y)
        g = private_gradient(self.kernel, self.x_s, self.y_s, X, y, reg=1e-6, clip=self.clip, engine=self.engine,
                             expected_batch=self.expected)
        return g.flatten().double(), self.engine.noise.policy


class _DPSGDFitTarget(Target):
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

    mechanism, stage = "dpsgd-fit", SubsampledSteps
    default_records = 40              # a fit needs enough records for a small sampling rate (q = 1 / n_records)

    @classmethod
    def for_audit(cls, epsilon, delta, n_records, seed, *, duplicate_start=False, **_):
        return cls(epsilon, delta, n_records, seed, duplicate_start=duplicate_start)

    def __init__(self, epsilon, delta, n_records: int, seed: int, *, duplicate_start: bool = False,
                 epochs: int = 1, clip: float = 1e-3, reg: float = 1e-8, lr: float = 1e-3):

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

        y_s = self._one_hot(torch.arange(x_s.shape[0]) // self.PER_CLASS, self.CLASSES, torch.float64)
        xb = self._to_kernel(torch.as_tensor(X)).double()
        yb = self._one_hot(torch.as_tensor(y), self.CLASSES, torch.float64)
        return gradients.clipped_sum(self._kernel, x_s, y_s, xb, yb, self.reg, self.clip)

    def prepare(self) -> float:
        """Direction of the canary at the public start, and its measured sensitivity: the largest
        effect on the clipped sum, over the start and every iterate of one run, of adding the
        canary or record 0 to the other records, in units of the clip."""

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

        plan = PrivacyPlan((), self.plan_dict["sample_rate"], self.plan_dict["steps"], self.neighbouring)
        return _ideal_epsilon(self.sigma, gap, self.delta, plan)


class _SampledReleaseTarget(Target):
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
    #: the test's kinds of step weights (:meth:`statistic`), and the standard errors a step's ratio must differ by
    #: between D and D' to weigh in the last kind
    WEIGHTS, SIGNIFICANT = ("alike", "clipped", "significant"), 3.0

    mechanism, stage = "sampled-release", SubsampledSteps
    neighbourings = ("replace_one", "add_remove")

    @classmethod
    def for_audit(cls, epsilon, delta, n_records, seed, *, neighbouring="replace_one", **_):
        return cls(epsilon, delta, n_records, seed, neighbouring)

    def __init__(self, epsilon, delta, n_records: int, seed: int, neighbouring: str = "replace_one"):

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
        self._block_sums = lambda t, X, y: sampled_block_sums(self.fmap, t, torch.as_tensor(X, dtype=torch.float32),
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
            a, b = self._block_sums(t, self.X[:1], self.y[:1]), self._block_sums(t, self.X2[:1], self.y2[:1])
            if self.neighbouring == "add_remove" and float(b.norm()) != 0.0:      # zero-out needs a true null record
                raise InvalidParameterError(f"the null record has features of norm {float(b.norm()):.3g} in network "
                                            f"{t}: it is not a zero-out neighbour.")
            move = max(float(a.norm()), float(b.norm())) if self.neighbouring == "replace_one" else float((b - a).norm())
            gap = max(gap, move)
            d = b - a
            d = d / d.norm().clamp_min(1e-300)
            self._dirs.append(d)
            self._shifts.append((float((a * d).sum()), float((b * d).sum())))   # record 0's / the canary's
            self._others.append(self.RATE * self._block_sums(t, self.X[1:], self.y[1:]))
        return gap

    def observe(self, neighbour: bool) -> tuple[np.ndarray, str]:

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
        the audit must see), the steps weighted by one of :attr:`WEIGHTS`: every step alike (the mixtures' own
        ratio, best where the sample is secret), by how much its ratio differed between D and D' (clipped at 0), or
        that only where it differed by more than ``SIGNIFICANT`` standard errors (a public sample: the few steps that
        always hold record 0, which the clipped noise of the others dilutes). The kind is chosen on the second half of
        the selection runs by how far it separates D from D' when fitted on the first half, then fitted on all of
        them (every step alike where those weights sum to 0; the held-out runs are never seen). Measured on simulated
        runs of this target (against the clipped weights alone): a public sample's bound at 600 runs 1.99 median
        (1.68), the stated power at 300 runs noise / 5.66 (6.73), at 20,000 runs noise / 2.83 (the same)."""
        q = self.RATE
        sd = float(np.sqrt(np.mean((neg - neg.mean(0)) ** 2))) or 1.0
        a, b = (np.array(v) for v in zip(*self._shifts))

        def llr(x):
            no = np.log1p(-q) - x ** 2 / (2 * sd ** 2)
            return (np.logaddexp(no, np.log(q) - (x - b) ** 2 / (2 * sd ** 2))
                    - np.logaddexp(no, np.log(q) - (x - a) ** 2 / (2 * sd ** 2)))

        def weights(kind: str, on_neg: np.ndarray, on_pos: np.ndarray) -> np.ndarray:
            diff = on_pos.mean(0) - on_neg.mean(0)
            if kind == "alike":
                return np.ones_like(diff)
            if kind == "clipped":
                return np.clip(diff, 0, None)
            se = np.sqrt(on_pos.var(0, ddof=1) / len(on_pos) + on_neg.var(0, ddof=1) / len(on_neg))
            return np.where(diff > self.SIGNIFICANT * se, diff, 0.0)

        on_neg, on_pos, half = llr(neg), llr(pos), len(neg) // 2
        best, separation = "alike", -np.inf
        for kind in self.WEIGHTS:
            w = weights(kind, on_neg[:half], on_pos[:half])
            if w.sum() <= 0:
                continue
            s_neg, s_pos = on_neg[half:] @ w, on_pos[half:] @ w
            z = (s_pos.mean() - s_neg.mean()) / np.sqrt(s_pos.var(ddof=1) / len(s_pos) + s_neg.var(ddof=1) / len(s_neg)
                                                        + 1e-300)
            if z > separation:
                best, separation = kind, z
        w = weights(best, on_neg, on_pos)
        w = w if w.sum() > 0 else np.ones_like(w)
        return lambda runs: llr(runs) @ w

    def optimal(self, gap: float) -> float:

        return _ideal_epsilon(self.sigma, gap, self.delta, self.plan)

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
