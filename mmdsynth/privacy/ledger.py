"""Immutable records of noisy releases (the privacy ledger)."""
from __future__ import annotations

import datetime as _dt
import uuid
from dataclasses import asdict, dataclass, field

from .._version import __version__

#: the privacy unit of every release unless a caller says more (presets add their preprocessing)
PRIVACY_UNIT = "one row (record) of the data given to fit"


@dataclass(frozen=True)
class LedgerEntry:
    """One privacy-consuming event: what was released, with which noise, at what cost."""

    mechanism: str              # e.g. "gaussian", "dp-sgd"
    description: str            # what was released ("class-conditional mean embedding")
    epsilon: float              # budget of the plan this entry belongs to
    delta: float
    noise_multiplier: float     # sigma (noise std / sensitivity)
    sensitivity: float          # L2 sensitivity under replace-one neighbours
    accountant: str             # pld | rdp | exact
    plan: dict                  # PrivacyPlan.to_dict(): all releases this budget pays for
    noise_source: str           # NoiseSource.policy: "secure (...)", "os-seeded (...)", "fixed-seed:N (...)"
    dataset: str = ""
    n_records: int | None = None
    #: which datasets count as neighbours: "replace_one" (every release by default: the record
    #: count is public) or "add_remove" (subsampled steps only, when asked for by name to reproduce a paper;
    #: the sums are divided by the public m, so it holds as zero-out neighbours: :func:`neighbouring_statement`)
    neighbouring: str = "replace_one"
    #: what one record is: the unit whose change the guarantee covers
    privacy_unit: str = PRIVACY_UNIT
    #: the public facts the calibration and the sensitivity rest on (record count m, classes, norm
    #: bound or clip, the sensitivity's formula, declared bounds): if one of them is not public,
    #: the guarantee does not hold as recorded
    assumed: dict = field(default_factory=dict)
    #: where the release's sums were computed (public): {"engine": memory | stream | ray, "shards", "m"}
    computation: dict = field(default_factory=dict)
    #: entries released under one calibration (one plan, one budget) share this id
    budget_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: which private records each step read, for subsampled releases (PoissonSampler.policy)
    sampler: str = ""
    #: what else the guarantee rests on that the fields above do not say (checks and their reach)
    notes: tuple = ()
    #: plans accounted add/remove (DP-SGD or a subsampled release asked for it by name): the epsilon the same
    #: sigma gives under replace-one neighbours (same plan, the accountant's replace-one relation), at ``delta``;
    #: None for every other plan (already replace-one)
    replace_one_epsilon: float | None = None
    #: plans accounted in zero-concentrated DP (accountant "zcdp": stages decided from earlier noisy results, AIM
    #: and MST): this release's rho; the plan's total rho is its (epsilon, delta), converted. None otherwise
    rho: float | None = None
    library_version: str = __version__
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    @property
    def noise_std(self) -> float:
        return self.noise_multiplier * self.sensitivity

    def to_dict(self) -> dict:
        d = asdict(self)
        d["noise_std"] = self.noise_std
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "LedgerEntry":
        d = {k: v for k, v in d.items() if k != "noise_std"}
        if "notes" in d:
            d["notes"] = tuple(d["notes"])
        if "seed_policy" in d:  # releases written before mmdsynth 0.x named the noise source so
            d["noise_source"] = d.pop("seed_policy")
        return cls(**d)


@dataclass(frozen=True)
class Ledger:
    entries: tuple[LedgerEntry, ...] = ()

    def add(self, entry: LedgerEntry) -> "Ledger":
        return Ledger(self.entries + (entry,))

    def to_list(self) -> list[dict]:
        return [e.to_dict() for e in self.entries]

    @classmethod
    def from_list(cls, items: list[dict]) -> "Ledger":
        return cls(tuple(LedgerEntry.from_dict(d) for d in items))

    def total(self) -> tuple[float, float]:
        """(epsilon, delta) spent, composing distinct budgets basically (summing).

        Entries that share a ``budget_id`` were paid for by one calibrated plan and
        are counted once. Summation is a valid (if loose) composition bound.
        """
        budgets = {e.budget_id: e for e in self.entries}
        eps = sum(e.epsilon for e in budgets.values())
        delta = sum(e.delta for e in budgets.values())
        return eps, delta

    def format(self) -> str:
        lines = []
        for i, e in enumerate(self.entries, 1):
            lines.append(
                f"[{i}] {e.mechanism}: {e.description}\n"
                f"    epsilon={e.epsilon:g} delta={e.delta:g} accountant={e.accountant}\n"
                f"    {_noise_words(e)}\n"
                f"    plan={e.plan}\n"
                f"    {neighbouring_statement(e)}{sep(e)}privacy unit: {e.privacy_unit}\n"
                + (f"    assumed public: {_facts(e.assumed)}\n" if e.assumed else "") +
                f"    dataset={e.dataset or '-'} n={e.n_records} noise={e.noise_source}\n"
                + (f"    records per step: {e.sampler}\n" if e.sampler else "")
                + "".join(f"    note: {n}\n" for n in e.notes)
                + (f"    sums computed: {_computed(e.computation)}\n" if e.computation else "") +
                f"    mmdsynth {e.library_version}, {e.created}"
            )
        if not lines:
            return "(no releases)"
        budgets = {}
        for e in self.entries:
            budgets.setdefault(e.budget_id, []).append(e)
        notes = []
        for entries in budgets.values():
            if len(entries) > 1:
                idx = [str(self.entries.index(e) + 1) for e in entries]
                notes.append(f"entries [{'], ['.join(idx)}] are shares of ONE budget of epsilon={entries[0].epsilon:g}, "
                             f"delta={entries[0].delta:g}, calibrated together (their noise composes exactly to "
                             f"it); they are not separate charges.")
        return "\n".join(lines + notes)


#: what an add/remove accounting holds for when the sums are divided by the public record count m
ZERO_OUT = ("zero-out neighbours with m public (one record replaced by a null record that adds nothing to any sum, "
            "the record count m unchanged); the released sums are divided by the public m, so adding or removing "
            "a record, which changes m, is NOT covered")


def zero_out_plan(plan: dict) -> bool:
    """The plan's subsampled steps are accounted add/remove: its (epsilon, delta) holds for zero-out neighbours."""
    return plan.get("neighbouring") == "add_remove" and plan.get("sample_rate") is not None


def sep(e: LedgerEntry) -> str:
    return "\n    " if zero_out_plan(e.plan) else "; "


def replace_one_of(e: LedgerEntry) -> float | None:
    """The replace-one epsilon of the entry's sigma for a plan accounted add/remove: as recorded, or for an entry
    written before mmdsynth recorded it, computed from the entry (its sigma, plan and delta). None otherwise."""
    if not zero_out_plan(e.plan) or not e.noise_multiplier > 0:
        return None
    if e.replace_one_epsilon is not None:
        return e.replace_one_epsilon
    from .calibration import PrivacyPlan, replace_one_epsilon

    plan = PrivacyPlan(tuple(e.plan.get("multipliers", ())), e.plan["sample_rate"], e.plan["steps"], "add_remove")
    return replace_one_epsilon(e.noise_multiplier, e.delta, plan)


def replace_one_words(e: LedgerEntry) -> str:
    ro = replace_one_of(e)
    return (f"epsilon={ro:.3f} at delta={e.delta:g}" if ro is not None else "no guarantee (no noise)") + \
        " (one record changed, m public: the relation of every other release)"


def neighbouring_statement(e: LedgerEntry) -> str:
    """Which neighbours the entry's (epsilon, delta) holds for, in words: the relation, and for a plan accounted
    add/remove what that means here (zero-out, m public) and the replace-one epsilon of the same sigma."""
    if not zero_out_plan(e.plan):
        return f"neighbouring={e.neighbouring}"
    own = "" if e.neighbouring == "add_remove" else \
        f" (this release's own sensitivity: {e.neighbouring}; the plan's subsampled steps: add_remove)"
    return (f"neighbouring=add_remove{own}, which holds as {ZERO_OUT}\n"
            f"    replace-one neighbours, the same sigma: {replace_one_words(e)}")


def _computed(c: dict) -> str:
    where = {"memory": "in memory", "stream": "streamed in one process", "ray": "on Ray"}.get(c.get("engine"),
                                                                                            c.get("engine"))
    return f"{where}, {c.get('shards')} shard(s), rows checked against the declared m={c.get('m')}" \
        if c.get("engine") != "memory" else f"{where} (m={c.get('m')} rows)"


def _facts(assumed: dict) -> str:
    return "; ".join(f"{k}={v}" for k, v in assumed.items())


def _noise_words(e: LedgerEntry) -> str:
    """The entry's noise in one line: sigma and std (a Gaussian release), the Gumbel scale (the exponential
    mechanism), and a zCDP plan's rho for this release."""
    if e.mechanism == "exponential":
        words = (f"exponential mechanism: score sensitivity={e.sensitivity:.6g}, Gumbel scale={e.noise_std:.6g} "
                 f"(epsilon0={2 / e.noise_multiplier:.6g})" if e.noise_multiplier else "exact argmax (no noise)")
    else:
        words = (f"noise multiplier sigma={e.noise_multiplier:.6g} sensitivity={e.sensitivity:.6g} "
                 f"noise std={e.noise_std:.6g}")
    return words + (f"; rho={e.rho:.6g} of the plan's {e.plan.get('rho', float('nan')):.6g}" if e.rho else "")
