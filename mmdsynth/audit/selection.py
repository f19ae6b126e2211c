"""Audit targets of the private selections (stage kinds ``Select`` and ``SelectTree``): the marginal methods'
exponential-mechanism draw between cliques, of rows or of persons, and the hybrid's tree of pairs scored by
dependence. The attacker reads which candidate was selected."""
from __future__ import annotations

import math

import numpy as np

from ..data import Schema
from ..data.discrete import Domain
from ..data.encoding import TableEncoder
from ..engines.persons import PersonTable
from ..privacy.engine import open_engine
from ..privacy.marginals import dependence_sensitivity, L1_SENSITIVITY, Select, SelectTree
from .attack import SELECT_FRACTION, Target, flag_probability
from .gaussian import CANARY_ROWS, _fresh_filter


def _log_choice_probabilities(scores: np.ndarray, epsilon0: float, sensitivity: float) -> np.ndarray:
    """ln P(candidate i) of the exponential mechanism: P proportional to exp(epsilon0 score / (2 sensitivity))."""
    z = epsilon0 * np.asarray(scores, dtype=np.float64) / (2 * sensitivity)
    return z - (z.max() + np.log(np.exp(z - z.max()).sum()))


class _SelectionTarget(Target):
    """The private selection of the marginal methods (AIM's and MST's rounds): the whole ``Select`` stage as
    :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run` runs it, through a :class:`~mmdsynth.privacy.engine.ZCDPEngine`
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

    mechanism, stage = "selection", Select
    default_trials = 2000             # it reads its table through the stage each run: 5-8 ms

    def __init__(self, epsilon, delta, n_records: int, seed: int):

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

        def planner():
            return (yield Select(self.CANDIDATES, self.estimates, engine.remaining))
        return engine.run(self.tables[neighbour], planner(), domain=self.domain, encoder=self.encoder)

    def prepare(self) -> float:
        """The scores the stage hands the exponential mechanism on D and on D', and the sensitivity it declares, as its
        own code computes them (a non-private filter whose observer records them: the noise-free statistic); the
        canary's measured effect is the largest move of a score in units of that sensitivity."""

        seen = []
        for neighbour in (False, True):
            engine = open_engine(self.epsilon, self.delta, private=False,
                                 observer=lambda name, scores, sensitivity: seen.append((scores, sensitivity)))
            self._run(engine.open("audit: noise-free scores"), neighbour)
        (s0, sens), (s1, _) = seen[::len(seen) // 2]      # each run's first draw: the one the attacker sees
        self.scores, self.sensitivity = (s0, s1), sens
        gap = float(np.abs(s1 - s0).max()) / sens
        self.description = self._describe(s0, s1, sens, gap)
        return gap

    def _describe(self, s0, s1, sens: float, gap: float) -> str:
        fmt = lambda s: ", ".join(f"{v:g}" for v in s)          # noqa: E731
        return (
            f"the private selection (the Select stage of engine.run through a ZCDPEngine filter opened for each run: "
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

    mechanism = "person-selection"


    def _tables(self, seed: int) -> tuple:
        import pandas as pd


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
    :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run` runs it, through a filter calibrated to the claim and opened for
    each run. Three attributes ``a``, ``b``, ``c`` (values p, q) and the candidates (a, c), (a, b): the tree takes two
    rounds of rho / 2 each; the attacker sees the first round's pick (the second takes the other pair, whatever
    the data: it tells nothing). epsilon0 of the round = sqrt(8 rho / 2).

    The table: record 0 = (p, q, q) and the other m - 1 records (q, q, p). On D, b is constant, so (a, b) scores 0
    (independent), and c copies a, so (a, c) scores 4 (m - 1) / m. The canary (p, p, p) swaps the two: each score
    moves by 4 (m - 1) / m (3.6 at m = 10), within the declared 6 + 4/m, and the gap between them by twice that
    (found by an exhaustive search over 10-record tables as the largest move of the gap). Its exact epsilon at the
    round's epsilon0 is :meth:`optimal`."""

    mechanism, stage = "tree-selection", SelectTree
    default_trials = 4000


    #: in this order the canary's D' favours the second (index 1), as the attack's test expects ("D'" when above)
    CANDIDATES = (("a", "c"), ("a", "b"))
    COLUMNS, ROUNDS = ("a", "b", "c"), 2

    def _declared_sensitivity(self) -> float:
        return dependence_sensitivity(self.n_records)

    def _tables(self, seed: int) -> tuple:
        import pandas as pd

        D = pd.DataFrame([("p", "q", "q")] + [("q", "q", "p")] * (self.n_records - 1), columns=list(self.COLUMNS))
        D2 = D.copy()
        D2.loc[0] = ["p", "p", "p"]                            # the canary
        return D, D2

    def _run(self, engine, neighbour: bool):

        def planner():
            return (yield SelectTree(self.COLUMNS, self.CANDIDATES, {}, engine.remaining, score="dependence"))
        return engine.run(self.tables[neighbour], planner(), domain=self.domain, encoder=self.encoder)[0]

    def _describe(self, s0, s1, sens: float, gap: float) -> str:
        fmt = lambda s: ", ".join(f"{v:g}" for v in s)          # noqa: E731
        return (f"the tree selection by dependence (the SelectTree stage with score \"dependence\" of engine.run "
                f"through a ZCDPEngine filter opened for each run: two rounds of rho / 2 = {self.rho / 2:.4g}, the "
                f"first an exponential-mechanism draw at epsilon0 = sqrt(8 rho / 2) = {self.epsilon0:.3f}; the claim "
                f"({self.epsilon:g}, {self.delta:g}) is the filter's total) between the pairs (a, c) and (a, b) of a "
                f"{self.n_records}-record table; the canary moves their dependence scores from ({fmt(s0)}) on D to "
                f"({fmt(s1)}) on D' (sensitivity 6 + 4/m = {sens:g}); its exact epsilon at epsilon0 is "
                f"{self.optimal(gap):.3f}; the attacker sees the first round's pick)")
