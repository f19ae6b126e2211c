"""The privacy engine: the one path from a declared plan to noisy tensors, ledger entries and a charge.

A method is a planner. Before any private row is read it declares its plan: the releases of one plan by name,
each with its noise multiplier relative to one base sigma (``multipliers``, e.g. ``{"embedding": 1, "proxy": 10,
"class_proportions": 3.2}``), and/or a DP-SGD schedule (the plan's sample rate and steps), or a zCDP filter whose
stages are decided as the plan goes (:class:`ZCDPEngine`). :class:`PrivacyEngine` then

1. calibrates the base sigma for the whole plan (the only caller of
   :func:`~mmdsynth.privacy.calibration.calibrate_sigma` outside the calculator commands) and checks
   the budget file, at construction, so nothing private can have been read yet;
2. runs the planner's stages, :meth:`PrivacyEngine.run` ``(source, planner)``: the planner (a generator) yields
   frozen stage values of the kinds in :data:`STAGES` (:class:`Sums`: a statistic read once where the rows live and
   its declared :class:`GaussianRelease` values; :class:`SubsampledSteps` and :class:`Step`; the marginal stages of
   :mod:`~mmdsynth.privacy.marginals`) and receives each one's noisy result; nothing else reaches the rows;
3. draws every random choice that touches private data from one secure source: the Gaussian noise
   (:class:`~mmdsynth.privacy.mechanisms.NoiseSource`) and which records a step reads
   (:class:`~mmdsynth.privacy.sampling.PoissonSampler`), and applies the mechanisms (the only caller of
   :func:`~mmdsynth.privacy.mechanisms.gaussian_mechanism` on private data);
4. builds every ledger entry (the only place that constructs :class:`LedgerEntry`), all sharing
   one budget id, with one neighbouring relation (replace-one unless a DP-SGD plan asks for
   add/remove by name: then every entry of the plan also records the replace-one epsilon of the same
   sigma, since the sums are divided by the public m and the add/remove figure holds only for zero-out
   neighbours, :data:`~mmdsynth.privacy.ledger.ZERO_OUT`);
5. charges the budget once (:meth:`charge`).

The sums themselves are computed where the data lives (memory, stream, Ray) by the statistics of
:mod:`mmdsynth.statistics`, each on the run's :class:`~mmdsynth.engines.Source`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
import uuid

import torch
from tqdm import tqdm

from ..engines import Source, SourceFacts, as_source
from ..engines.persons import person_source
from ..errors import InvalidParameterError
from ..runtime import phases_shown
from ..validation import check_delta, check_epsilon
from .budget import BudgetFile
from .calibration import PrivacyPlan, calibrate_sigma, replace_one_epsilon
from .ledger import PRIVACY_UNIT, Ledger, LedgerEntry
from .marginals import MARGINAL_STAGES, StageContext
from .mechanisms import NoiseSource, gaussian_mechanism
from .sampling import PoissonSampler

NON_PRIVATE = "none (NON-PRIVATE: no noise, benchmark only)"
#: :meth:`PrivacyEngine.run` without a value to send: the planner is started with ``next``
_NOTHING = object()


@dataclass(frozen=True)
class GaussianRelease:
    """A Gaussian release as a value (:meth:`PrivacyEngine.releases`): the plan's release ``name``, its L2
    ``sensitivity``, its ledger ``description`` and ``assumed`` public facts, ``exact`` (the released value as a
    function of the statistic's sums alone; None: the sums) and the mechanism's other ``options`` (a zCDP plan's
    ``rho``)."""

    name: str
    sensitivity: float
    description: str
    assumed: dict = field(default_factory=dict)
    exact: object = None
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SubsampledSteps:
    """The plan's subsampled Gaussian steps as a value (:meth:`PrivacyEngine.declare`; run one by one by
    :meth:`PrivacyEngine.step`): DP-SGD's, or a sampled embedding's. The rate and the number of steps are the plan's
    (calibrated before any record is read); here each step's per-record bound ``clip`` (a record's part of a step's
    sum has norm <= clip), the ledger's ``description``, the ``assumed`` public facts, the public ``n_records``,
    ``notes`` for the ledger and the ``mechanism``'s name ("dp-sgd"; a subsampled release of sums:
    "subsampled-gaussian")."""

    clip: float
    description: str
    assumed: dict = field(default_factory=dict)
    n_records: int = 0
    notes: tuple = ()
    mechanism: str = "dp-sgd"


@dataclass(frozen=True)
class Sums:
    """A stage (:meth:`PrivacyEngine.run`): the sums of one ``statistic`` (it reads each batch the source validated,
    :meth:`~mmdsynth.engines.Source.total`) read once where the rows live, then each :class:`GaussianRelease` of
    ``releases`` noised and recorded in order (none: a read that releases nothing, the rows' own checks before the
    charge). Result: the noisy values, in that order. ``validate``: a schema the run's rows are checked against
    first, for a statistic that must read that view (schema inference's: a schema still to complete,
    :meth:`~mmdsynth.engines.Source.validated`); None, the run's source as it is."""

    statistic: object = field(repr=False)
    releases: tuple
    validate: object = field(default=None, repr=False)


@dataclass(frozen=True)
class Facts:
    """The first stage of a fit's run (:func:`run_plan`): the input's public facts, a
    :class:`~mmdsynth.engines.SourceFacts` (the record count m, a person table or not, a table's column names, an
    array's record shape), read from its form and its declared or counted m, never from a value; no budget."""


@dataclass(frozen=True)
class Open:
    """The stage that opens a fit's run (:func:`run_plan`) once the planner has the input's public facts: the
    engine of this plan built by :func:`open_engine` (``plan`` None: a zCDP filter with ``shares``; ``options``: the
    accountant, budget file, seeds, dataset, privacy unit, reserved delta), calibrated and checked against the budget
    file before any row is read. Result: the engine (its public facts: sigma, multipliers, delta, the ledger so
    far). ``domain``, ``encoder``, ``assumed``: what the marginal stages count in and their ledger entries assume;
    ``progress``: the marginal stages' bar (:meth:`PrivacyEngine.run`). ``engine``: an engine restored from an
    interrupted run's ledger (:meth:`PrivacyEngine.resume`: nothing is calibrated or charged again), used as it is.
    ``check``: a table encoder whose check a DataFrame's rows pass once here, after the calibration and before any
    release (:meth:`~mmdsynth.engines.Source.checked_with`; its statistics then read the checked rows as they are;
    table shards are checked as they are read); None: no such check."""

    epsilon: float
    delta: float
    plan: object = None
    shares: dict | None = None
    options: dict = field(default_factory=dict)
    domain: object = None
    encoder: object = None
    assumed: dict = field(default_factory=dict)
    progress: object = None
    check: object = field(default=None, repr=False)
    engine: object = field(default=None, repr=False)


@dataclass(frozen=True)
class Step:
    """A stage (:meth:`PrivacyEngine.run`): one step of the plan's declared :class:`SubsampledSteps` over ``n`` public
    records (or persons): the engine draws the records it reads from its secret sampler, ``statistic(chosen)`` sums
    their parts (each of norm <= ``clip``), the engine adds N(0, (sigma clip)^2 I). Result: the noisy sum."""

    n: int
    statistic: object = field(repr=False)
    clip: float


class PrivacyEngine:
    """One plan, calibrated once; every release of it noised, recorded and charged here.

    ``multipliers``: the plan's one-shot releases by name (their noise multiple of the base sigma);
    ``reserved_delta``: delta kept out of the calibration for a release that is not Gaussian
    (schema inference's thresholds); ``epsilon=math.inf`` with ``private=False`` is the
    non-private baseline of a benchmark (no noise, the ledger says so). ``noise_seed`` and
    ``sampler_seed`` fix the noise and the DP-SGD sample for tests only; each ledger entry says so.
    """

    #: the subsampled steps declared (:meth:`declare`; a resumed run's, :meth:`resume`); None before
    steps_: SubsampledSteps | None = None

    def __init__(self, epsilon: float, delta: float, plan: PrivacyPlan, *, multipliers: dict | None = None,
                 accountant: str = "pld", budget: BudgetFile | None = None, noise_seed: int | None = None,
                 sampler_seed: int | None = None, dataset: str = "", privacy_unit: str = PRIVACY_UNIT,
                 reserved_delta: float = 0.0, private: bool = True, sigma: float | None = None):
        self.private = bool(private)
        given = sigma is not None        # restored from a ledger entry, or a test's fixed sigma
        self.epsilon = float(check_epsilon(epsilon)) if self.private and not given else float(epsilon)
        self.delta = float(check_delta(delta))
        self.plan, self.accountant = plan, accountant
        self.multipliers = dict(multipliers or {})
        if sorted(float(v) for v in self.multipliers.values()) != sorted(plan.multipliers):
            raise InvalidParameterError(f"the plan's releases {self.multipliers} must be exactly its multipliers "
                                        f"{list(plan.multipliers)}; build both with compose_plan().")
        if sigma is not None:           # an engine restored from a ledger entry, or a test's fixed sigma
            self.sigma = float(sigma)
        else:
            self.sigma = calibrate_sigma(self.epsilon, self.delta - reserved_delta, plan, accountant) \
                if self.private else 0.0
        self.reserved_delta = float(reserved_delta)
        self._replace_one_epsilon = None
        self.budget = budget
        if budget is not None:
            budget.check(self.epsilon, self.delta)
        self.noise = NoiseSource(noise_seed)
        self.sampler = PoissonSampler(sampler_seed) if plan.subsampled else None
        self.dataset, self.privacy_unit = dataset, privacy_unit
        self.budget_id = uuid.uuid4().hex
        self.entries: list[LedgerEntry] = []
        self.charged = False

    # -- constructors for what is not a fresh plan ---------------------------------------------------
    @classmethod
    def resume(cls, entries, *, noise_seed: int | None = None, sampler_seed: int | None = None) -> "PrivacyEngine":
        """The engine of an interrupted DP-SGD run, from its ledger entries (the DP-SGD entry last,
        after any one-shot releases of the same plan): the calibration and the charge were made when
        it started; nothing is calibrated, checked or charged again."""
        entries = [entries] if isinstance(entries, LedgerEntry) else list(entries)
        entry = entries[-1]
        plan = PrivacyPlan(tuple(entry.plan.get("multipliers", ())), entry.plan["sample_rate"], entry.plan["steps"],
                           entry.plan.get("neighbouring", entry.neighbouring))
        private = entry.mechanism != NON_PRIVATE
        eng = cls(entry.epsilon, entry.delta, plan, accountant=entry.accountant, noise_seed=noise_seed,
                  sampler_seed=sampler_seed, dataset=entry.dataset, privacy_unit=entry.privacy_unit,
                  private=private, sigma=entry.noise_multiplier,
                  multipliers={f"release{i}": m for i, m in enumerate(entry.plan.get("multipliers", ()))})
        eng.budget_id, eng.entries, eng.charged = entry.budget_id, entries, True
        eng.steps_ = SubsampledSteps(clip=entry.sensitivity, description=entry.description, assumed=dict(entry.assumed),
                                     n_records=entry.n_records or 0, notes=tuple(entry.notes),
                                     mechanism=entry.mechanism)    # the steps declared when the run started
        return eng

    @classmethod
    def with_sigma(cls, sigma: float, *, noise_seed: int | None = None, sampler_seed: int | None = None,
                   plan: PrivacyPlan | None = None, multipliers: dict | None = None,
                   delta: float = 1e-5) -> "PrivacyEngine":
        """An engine at a given base sigma (worst-case-neighbour tests and audits that fix the noise
        level): its entries record the epsilon that sigma buys for ``plan`` at ``delta``."""
        from .calibration import epsilon_for_sigma

        plan = plan or PrivacyPlan((1.0,))
        multipliers = multipliers or {f"release{i}": m for i, m in enumerate(plan.multipliers)}
        eps = epsilon_for_sigma(sigma, delta, plan) if sigma >= 0.05 else math.inf   # ~noise-free test reads
        return cls(eps, delta, plan, multipliers=multipliers, noise_seed=noise_seed, sampler_seed=sampler_seed,
                   sigma=sigma)

    @property
    def replace_one_epsilon(self) -> float | None:
        """For a plan accounted add/remove (which holds for zero-out neighbours only, m public): the epsilon its
        sigma gives under replace-one neighbours, at the delta it was calibrated for (same plan, same sampling
        rate and steps, the accountant's replace-one relation; PLD, as RDP has no replace-one subsampling). None
        for replace-one plans and the non-private baseline. Computed once, when the first entry is recorded."""
        if not (self.private and self.plan.subsampled and self.plan.neighbouring == "add_remove"):
            return None
        if self._replace_one_epsilon is None:
            self._replace_one_epsilon = replace_one_epsilon(self.sigma, self.delta - self.reserved_delta, self.plan)
        return self._replace_one_epsilon

    # -- releases ------------------------------------------------------------------------------------
    def multiplier(self, name: str) -> float:
        """The noise multiple of release ``name`` in this plan (refused if it was not declared)."""
        if name not in self.multipliers:
            raise InvalidParameterError(f"release {name!r} is not in the plan {sorted(self.multipliers)}: every "
                                        f"release must be declared before calibration (compose_plan()).")
        return self.multipliers[name]

    def gaussian(self, name: str, values, sensitivity: float, *, description: str, assumed: dict,
                 n_records: int, computation: dict | None = None):
        """Noise a statistic (a tensor, or a dict of tensors released together at one sensitivity)
        with the Gaussian mechanism at this release's share of the plan, and record its ledger entry (the
        non-private baseline, ``private=False``: the statistic itself, recorded as non-private)."""
        s = self.sigma * self.multiplier(name) if self.private else 0.0

        def release(v):
            v = torch.as_tensor(v)
            if not self.private:
                return v.detach().to(device="cpu", dtype=torch.float64)
            return gaussian_mechanism(v, sensitivity, s, self.noise)
        noisy = {k: release(v) for k, v in values.items()} if isinstance(values, dict) else release(values)
        self._record("gaussian" if self.private else NON_PRIVATE, description, s, sensitivity, assumed, n_records,
                     computation)
        return noisy

    def run(self, source, planner, *, domain=None, encoder=None, assumed: dict | None = None, progress=None,
            sent=_NOTHING):
        """Run a planner's stages on ``source`` (a :class:`~mmdsynth.engines.Source`, or rows :func:`~mmdsynth.engines.
        as_source` makes one of): ``planner`` is a generator that yields stages, frozen values of the kinds in
        :data:`STAGES` (:class:`Sums`, :class:`SubsampledSteps`, :class:`Step`, and the marginal stages
        :class:`~mmdsynth.privacy.marginals.Measure`, :class:`~mmdsynth.privacy.marginals.Select`,
        :class:`~mmdsynth.privacy.marginals.SelectTree`), and receives each one's noisy result; what it returns is
        returned here. This is the one path from a method to the private rows: each stage is checked before it reads
        a record, its statistic read where the rows live, its noise drawn and its ledger entry written here; the
        planner sees only noisy results and the plan's public facts. ``domain`` and ``encoder``: the table's public
        discrete domain and encoder the marginal stages count in (their ledger entries assume ``assumed`` and the
        domain's sizes). On a terminal (``progress``, :func:`~mmdsynth.runtime.phases_shown`) a zCDP plan's stages
        show a bar of the share of their budget spent (public: the shares are the planner's). ``sent``: what the
        planner receives for the stage it yielded last (:func:`run_plan` sends the engine for its :class:`Open`);
        left out, the planner is started here."""
        source = as_source(source)
        assumed = dict(assumed or {})
        if domain is not None:
            assumed = {"m": source.n_records, "domain (public, from the schema)": domain.sizes, **assumed}
        context = StageContext(domain, encoder, assumed)
        total = self._stage_total()
        bar = tqdm(total=100, disable=not (phases_shown(progress) and total), desc="measuring and selecting marginals",
                   unit="%", bar_format="{desc}: {percentage:3.0f}% of their budget |{bar}| {elapsed}")
        try:
            stage = next(planner) if sent is _NOTHING else planner.send(sent)
            while True:
                execute = STAGES.get(type(stage))
                if execute is None:
                    raise InvalidParameterError(f"{stage!r} is not a stage the engine runs "
                                                f"({[s.__name__ for s in STAGES]}).")
                if type(stage) not in MARGINAL_STAGES:
                    bar.close()                    # the bar is the marginal stages'; what follows shows its own
                result = execute(self, source, stage, context)
                if total and type(stage) in MARGINAL_STAGES:
                    bar.n = min(100.0, 100.0 * self.spent / total)     # the stages spend first, from zero
                    bar.refresh()
                    if self.spent >= total * (1 - 1e-9):
                        bar.close()                # their budget spent: the marginal stages are done
                stage = planner.send(result)
        except StopIteration as done:
            return done.value
        finally:
            bar.close()

    def _stage_total(self) -> float | None:
        """What the stages may spend, for the progress bar: None (a calibrated plan's releases are not shares)."""
        return None

    def _sums(self, source, stage: Sums) -> list:
        """A :class:`Sums` stage: the sums of its statistic read once over ``source`` (or its rows checked against the
        stage's schema), then each declared :class:`GaussianRelease` noised and recorded in order."""
        source = source if stage.validate is None else source.validated(stage.validate)
        totals = source.total(stage.statistic)
        return [self.gaussian(d.name, totals if d.exact is None else d.exact(totals), d.sensitivity,
                              description=d.description, assumed=d.assumed, n_records=int(source.n_records),
                              computation=source.describe(), **dict(d.options))
                for d in stage.releases]

    def _declare(self, steps: SubsampledSteps) -> LedgerEntry:
        """A :class:`SubsampledSteps` stage: record the entry of the plan's subsampled steps (before the first); every
        step is then a :class:`Step` stage, at the declared ``clip`` and no other."""
        if not self.plan.subsampled:
            raise InvalidParameterError("subsampled steps need a plan with sample_rate and steps.")
        self.steps_ = steps
        return self._record(steps.mechanism if self.private else NON_PRIVATE, steps.description, self.sigma,
                            steps.clip, steps.assumed, steps.n_records, None, notes=steps.notes,
                            relation=self.plan.neighbouring, sampler=self.sampler.policy)

    def _step(self, source, stage: Step) -> torch.Tensor:
        """A :class:`Step` stage: the records it reads drawn from the secret sampler at the plan's rate (every one of
        the ``n`` records in a plan that is not subsampled: a one-step full-batch release), ``statistic(chosen)``
        their sum (each record's part of norm <= ``clip``, as the statistic bounds it), plus N(0, (sigma C)^2 I).
        Returns the noisy sum (the sum itself in a non-private run). A step at another clip than the one declared
        (which the ledger records as the sensitivity), or in a subsampled plan before any was declared, is refused
        before it reads a record."""
        declared = self.steps_
        if declared is None and self.plan.subsampled:
            raise InvalidParameterError("a subsampled step before its steps were declared (a SubsampledSteps stage): "
                                        "the ledger would not hold it; nothing was read.")
        if declared is not None and float(stage.clip) != float(declared.clip):
            raise InvalidParameterError(f"a step at clip {stage.clip:g}, but the declared steps' clip is "
                                        f"{declared.clip:g}: the ledger would state another sensitivity.")
        statistic = stage.statistic.on(source) if hasattr(stage.statistic, "on") else stage.statistic
        chosen = self.sampler.sample(stage.n, self.plan.sample_rate) if self.sampler is not None \
            else torch.arange(int(stage.n))
        total = statistic(chosen)
        if not self.private:
            return total.detach().to(dtype=torch.float64)
        return gaussian_mechanism(total, stage.clip, self.sigma, self.noise)

    def _record(self, mechanism, description, noise_multiplier, sensitivity, assumed, n_records, computation,
                *, notes: tuple = (), relation: str = "replace_one", sampler: str = "",
                rho: float | None = None) -> LedgerEntry:
        entry = LedgerEntry(
            mechanism=mechanism, description=description, epsilon=self.epsilon, delta=self.delta,
            noise_multiplier=float(noise_multiplier), sensitivity=float(sensitivity), accountant=self.accountant,
            plan=self.plan.to_dict(), noise_source=self.noise.policy, dataset=self.dataset,
            n_records=None if n_records is None else int(n_records), neighbouring=relation,
            privacy_unit=self.privacy_unit, assumed=dict(assumed), computation=dict(computation or {}),
            budget_id=self.budget_id, sampler=sampler, notes=tuple(notes), replace_one_epsilon=self.replace_one_epsilon,
            rho=rho)
        self.entries.append(entry)
        return entry

    # -- the end of a plan ---------------------------------------------------------------------------------
    @property
    def ledger(self) -> Ledger:
        return Ledger(tuple(self.entries))

    def charge(self, what: str) -> None:
        """Charge the budget file once for the whole plan (later calls do nothing)."""
        if self.budget is not None and not self.charged:
            self.budget.charge(self.epsilon, self.delta, what, self.budget_id)
        self.charged = True


class ZCDPPlan:
    """The plan of a :class:`ZCDPEngine`: a total rho, spent by stages decided as the plan goes (public)."""

    multipliers: tuple = ()
    subsampled = False
    neighbouring = "replace_one"
    sample_rate = steps = None

    def __init__(self, rho: float):
        self.rho = float(rho)

    def to_dict(self) -> dict:
        return {"accountant": "zcdp", "rho": self.rho, "adaptive": True, "neighbouring": self.neighbouring}


class ZCDPEngine(PrivacyEngine):
    """A privacy filter for plans whose stages are decided from earlier noisy results (AIM's and MST's rounds: select
    -> measure -> estimate -> select): the total rho is calibrated from (epsilon, delta) and the budget file checked
    at construction (:func:`~mmdsynth.privacy.zcdp.rho_for_epsilon`), before any private row is read; :meth:`open`
    **charges** the whole total before the first release (a plan that stops early has still spent it: the stages
    are not known in advance), so the input checks between the two can refuse a table at no cost. Each release
    then spends a share of rho that the caller decides from public facts and earlier releases only;
    :meth:`gaussian` and :meth:`exponential` refuse a share beyond what is left before they draw anything. zCDP
    composes by adding rho, adaptively (a filter with a fixed total), so the whole plan is (epsilon, delta)-DP
    whatever the stages chose. Neighbours: replace-one, m public, like every release."""

    def __init__(self, epsilon: float, delta: float, *, budget: BudgetFile | None = None,
                 noise_seed: int | None = None, dataset: str = "", privacy_unit: str = PRIVACY_UNIT,
                 private: bool = True, shares: dict | None = None, observer=None):
        from .zcdp import rho_for_epsilon

        self.private = bool(private)
        if observer is not None and self.private:
            raise InvalidParameterError("an observer sees the exact scores: it is for a non-private filter "
                                        "(private=False: the audit's noise-free run) only.")
        #: called with (name, scores, sensitivity) before each selection of a non-private filter (the audit's record
        #: of the exact scores a stage computes); None: nothing seen
        self.observer = observer
        self.epsilon = float(check_epsilon(epsilon)) if self.private else float(epsilon)
        self.delta = float(check_delta(delta))
        self.accountant, self.multipliers, self.reserved_delta = "zcdp", {}, 0.0
        self.rho = rho_for_epsilon(self.epsilon, self.delta) if self.private else math.inf
        self.plan = ZCDPPlan(self.rho)
        self.sigma, self._replace_one_epsilon, self.sampler = 0.0, None, None
        self.spent = 0.0
        self.budget = budget
        if budget is not None:
            budget.check(self.epsilon, self.delta)
        self.noise = NoiseSource(noise_seed)
        self.dataset, self.privacy_unit = dataset, privacy_unit
        self.budget_id = uuid.uuid4().hex
        self.entries: list[LedgerEntry] = []
        self.charged = False
        #: named Gaussian releases declared up front as shares of rho (e.g. a kernel embedding in the same plan as
        #: measured marginals): release functions written for a PrivacyEngine find them through multiplier() and
        #: sigma, and gaussian(name) spends the share
        self.shares = {}
        for name, share in (shares or {}).items():
            if not 0 < float(share) < 1:
                raise InvalidParameterError(f"the share of release {name!r} must be in (0, 1); got {share!r}.")
            self.shares[name] = float(share)
        if sum(self.shares.values()) >= 1:
            raise InvalidParameterError(f"the declared shares {self.shares} leave nothing for the stages.")
        if self.shares and self.private:
            first = next(iter(self.shares.values()))
            self.sigma = 1.0 / math.sqrt(2 * first * self.rho)      # noise multiplier of the first declared release
            self.multipliers = {n: math.sqrt(first / v) for n, v in self.shares.items()}

    def open(self, what: str) -> "ZCDPEngine":
        """Charge the filter's whole total to the budget file: before the first release (:meth:`_spend` refuses
        any release of a filter not opened)."""
        self.charge(what)
        return self

    @property
    def stage_rho(self) -> float:
        """The rho the stages may spend: the total less the declared shares (public: fixed at construction)."""
        return self.rho * (1.0 - sum(self.shares.values())) if self.private else math.inf

    @property
    def remaining(self) -> float:
        """The rho not yet spent (public: the total and the shares the stages took)."""
        return max(self.rho - self.spent, 0.0)

    def _spend(self, rho: float, name: str) -> float:
        rho = float(rho)
        if not self.charged:
            raise InvalidParameterError(f"release {name!r} before the plan was charged: open() the filter first.")
        if not rho > 0:
            raise InvalidParameterError(f"release {name!r} must spend a positive share of rho; got {rho!r}.")
        if self.private and rho > self.remaining * (1 + 1e-9):
            raise InvalidParameterError(
                f"release {name!r} asks for rho={rho:.6g} but the plan has {self.remaining:.6g} of {self.rho:.6g} "
                f"left; nothing was released (a stage's share must come from what is left).")
        self.spent += rho if self.private else 0.0
        return rho

    def gaussian(self, name: str, values, sensitivity: float, *, description: str, assumed: dict,
                 n_records: int, computation: dict | None = None, rho: float | None = None):
        """Noise a statistic (a tensor, or a dict of tensors released together at one L2 ``sensitivity``) so that it
        costs ``rho`` (noise std ``sensitivity / sqrt(2 rho)``), and record its ledger entry."""
        from .zcdp import gaussian_std

        if rho is None and name in self.shares:
            rho = self.shares[name] * self.rho if self.private else 1.0
        if rho is None:
            raise InvalidParameterError(f"release {name!r}: a zCDP plan's release says its rho, or is declared as a "
                                        f"share (shares=).")
        rho = self._spend(rho, name)
        std = gaussian_std(sensitivity, rho) if self.private else 0.0

        def release(v):
            v = torch.as_tensor(v)
            if not self.private:
                return v.detach().to(device="cpu", dtype=torch.float64)
            return gaussian_mechanism(v, sensitivity, std / sensitivity, self.noise)
        noisy = {k: release(v) for k, v in values.items()} if isinstance(values, dict) else release(values)
        self._record("gaussian" if self.private else NON_PRIVATE, description, std / sensitivity, sensitivity,
                     assumed, n_records, computation, rho=rho if self.private else None)
        return noisy

    def exponential(self, name: str, scores, sensitivity: float, *, description: str, assumed: dict,
                    n_records: int, computation: dict | None = None, rho: float) -> int:
        """One candidate's index, drawn by the exponential mechanism from ``scores`` (higher is better; one
        record changes any score by at most ``sensitivity``) at the ``epsilon0 = sqrt(8 rho)`` that costs ``rho``
        (bounded range); the non-private baseline takes the best score. Records one ledger entry."""
        from .mechanisms import exponential_mechanism
        from .zcdp import exponential_epsilon

        rho = self._spend(rho, name)
        if not self.private:
            exact = torch.as_tensor(scores, dtype=torch.float64)
            if self.observer is not None:
                self.observer(name, exact.numpy().copy(), float(sensitivity))
            choice = int(torch.argmax(exact))
            self._record(NON_PRIVATE, description, 0.0, sensitivity, assumed, n_records, computation)
            return choice
        eps0 = exponential_epsilon(rho)
        choice = exponential_mechanism(scores, sensitivity, eps0, self.noise)
        self._record("exponential", description, 2.0 / eps0, sensitivity, assumed, n_records, computation, rho=rho)
        return choice

    def multiplier(self, name: str) -> float:
        """The noise multiple of a declared share's release relative to :attr:`sigma` (release functions written
        for a PrivacyEngine read it); a stage's release has none: it spends the rho it says."""
        if name not in self.multipliers:
            raise InvalidParameterError(f"release {name!r} is not a declared share of this zCDP plan "
                                        f"({sorted(self.multipliers)}); stages spend the rho they say.")
        return self.multipliers[name]

    def charge(self, what: str) -> None:
        """The filter is charged whole by :meth:`open`; a release function's closing charge adds nothing."""
        if not self.charged:
            super().charge(what)

    def _declare(self, steps):
        raise InvalidParameterError("subsampled steps are calibrated by a PrivacyEngine plan, not a zCDP filter.")

    def _stage_total(self) -> float | None:
        return self.stage_rho if self.private else None


#: every kind of stage :meth:`PrivacyEngine.run` runs, and how (the audit has a target for each:
#: tests/contract/test_audit.py)
STAGES = {Sums: lambda engine, source, stage, context: engine._sums(source, stage),
          SubsampledSteps: lambda engine, source, stage, context: engine._declare(stage),
          Step: lambda engine, source, stage, context: engine._step(source, stage),
          **MARGINAL_STAGES}


def open_engine(epsilon: float, delta: float, plan: PrivacyPlan | None = None, *, shares: dict | None = None,
                **options) -> PrivacyEngine:
    """Every fresh privacy engine is built here (issue 82: one construction site; an interrupted DP-SGD run comes
    back through :meth:`PrivacyEngine.resume`, a test's fixed noise level through :meth:`PrivacyEngine.with_sigma`):
    without a ``plan``, a zCDP filter whose stages are decided as the plan goes (:class:`ZCDPEngine`; ``shares``: its
    named releases declared up front); with one, the engine of that calibrated plan (:class:`PrivacyEngine`;
    ``options``: its multipliers, accountant, budget file, seeds, dataset, privacy unit, reserved delta, private).
    Either is calibrated and checked against the budget file here, before any private row is read."""
    if plan is None:
        return ZCDPEngine(epsilon, delta, shares=shares, **options)
    if shares:
        raise InvalidParameterError("a plan's releases are its multipliers; shares= belong to a zCDP filter "
                                    "(plan=None).")
    return PrivacyEngine(epsilon, delta, plan, **options)


def _declared_schema(data, schema):
    """A run's schema (public): the one given, or the one table shards declare; both, the same."""
    own = getattr(data, "schema", None) if isinstance(data, Source) else None
    if own is None:
        return schema
    if schema is not None and schema.to_dict() != own.to_dict():
        raise InvalidParameterError("a ShardedTable carries its schema: pass schema=None (or the same).")
    return own


def run_plan(data, planner, *, y=None, schema=None):
    """A fit's one run (issue 82): ``data`` (a DataFrame, table shards, arrays ``data`` with labels ``y``) becomes
    the run's :class:`~mmdsynth.engines.Source` (a person table when ``schema`` declares a privacy unit; table shards
    carry their own schema), and ``planner``, a generator, is the whole fit: it asks
    for the input's public facts (a :class:`Facts` stage, answered by a :class:`~mmdsynth.engines.SourceFacts`),
    opens the engine of its plan (an :class:`Open` stage: calibrated and budget-checked before any row is read),
    yields its stages (:data:`STAGES`, run by :meth:`PrivacyEngine.run`) and learns from their noisy results alone;
    what it returns is returned here. The planner never holds the rows: a method's fit hands them here and nowhere
    else."""
    schema = _declared_schema(data, schema)
    source = person_source(data, schema) if schema is not None else as_source(data, y)
    stage = next(planner)
    if isinstance(stage, Facts):
        stage = planner.send(SourceFacts.of(source, data, y, schema))
    if not isinstance(stage, Open):
        planner.close()
        raise InvalidParameterError(f"a fit's run opens its engine (an Open stage) before any other stage; got "
                                    f"{stage!r}: nothing was read.")
    engine = stage.engine if stage.engine is not None else \
        open_engine(stage.epsilon, stage.delta, stage.plan, shares=stage.shares, **stage.options)
    if stage.check is not None:                  # the rows checked once, after the calibration
        source = source.checked_with(stage.check)
    return engine.run(source, planner, domain=stage.domain, encoder=stage.encoder, assumed=stage.assumed,
                      progress=stage.progress, sent=engine)
