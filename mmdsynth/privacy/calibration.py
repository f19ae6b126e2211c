"""Noise calibration: sigma from (epsilon, delta) and a plan of releases, and back.

Everything here runs before any private record is read. A *plan* says what
will be released with one base noise multiplier ``sigma`` (noise std divided by
L2 sensitivity):

* ``multipliers``: one-shot Gaussian releases with multipliers ``m_i * sigma``
  (DP-NTK: ``(1,)``; DP-MEPF: ``(1, 1, 10)``);
* ``sample_rate``/``steps``: ``steps`` Poisson-subsampled Gaussian steps with
  multiplier ``sigma`` at rate ``q`` (DP-SGD).

Accountants, by name: ``pld`` (dp-accounting's privacy-loss-distribution
accountant, pessimistic estimate; the default), ``rdp`` (dp-accounting's Renyi
accountant; looser, never tighter than PLD), ``exact`` (closed-form analytic
Gaussian, for plans without subsampling only).
"""
from __future__ import annotations

import functools

import logging
import math
from dataclasses import dataclass

from ..errors import InvalidParameterError, unknown_name
from ..validation import check_delta, check_epsilon, check_positive, check_probability
from . import analytic

ACCOUNTANTS = ("pld", "rdp", "exact")
#: the neighbouring relations a plan may name (dp-accounting's, imported only when a plan is priced: :func:`_relation`;
#: a process that prices nothing, such as ``mmdsynth sample``, never loads it)
NEIGHBOURING = ("add_remove", "replace_one")


def _relation(name: str):
    """dp-accounting's neighbouring relation of ``name``."""
    import dp_accounting

    return {"add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
            "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}[name]
#: PLD discretisation of the privacy loss; 1e-4 keeps sigma within ~1e-5 of exact. Above epsilon 1 it grows with
#: epsilon (the same relative precision): the PLD's size, hence its cost, grows like 1 / (interval x sigma^2), and
#: sigma^2 shrinks like 1 / epsilon, so a fixed interval made `budget --epsilon 1000` take six minutes
PLD_DISCRETIZATION = 1e-4
#: the largest epsilon calibrated: beyond it a release is protected by a likelihood ratio above e^1000, no privacy
MAX_EPSILON = 1000.0


def pld_interval(epsilon: float) -> float:
    """The PLD discretisation for a plan spending about ``epsilon``: 1e-4, times epsilon above 1 (cost bounded)."""
    return PLD_DISCRETIZATION * max(1.0, float(epsilon))


def check_calibrated_epsilon(epsilon) -> float:
    """``epsilon`` checked as a privacy level the library calibrates: finite, > 0 and at most MAX_EPSILON."""
    epsilon = check_epsilon(epsilon)
    if epsilon > MAX_EPSILON:
        raise InvalidParameterError(
            f"epsilon={epsilon:g} is above {MAX_EPSILON:g}: such a guarantee bounds the likelihood ratio of two "
            f"neighbouring datasets by e^{epsilon:g}, which protects nothing. Use epsilon <= 10 for a meaningful "
            f"guarantee (1 is common).")
    return epsilon


@dataclass(frozen=True)
class PrivacyPlan:
    """The releases one budget pays for, as multiples of one base sigma."""

    multipliers: tuple[float, ...] = (1.0,)
    sample_rate: float | None = None
    steps: int = 0
    #: the relation of the DP-SGD steps (one-shot releases declare their replace-one sensitivity
    #: and are accounted as a Gaussian of that sensitivity): replace-one, N public, like every
    #: other release; "add_remove" reproduces the DP-SGD papers' accounting
    neighbouring: str = "replace_one"

    def __post_init__(self):
        mults = tuple(float(check_positive(m, "multipliers[i]")) for m in self.multipliers)
        object.__setattr__(self, "multipliers", mults)
        if self.sample_rate is not None:
            object.__setattr__(self, "sample_rate", check_probability(self.sample_rate, "sample_rate"))
            object.__setattr__(self, "steps", int(check_positive(self.steps, "steps", integer=True)))
        elif self.steps:
            raise InvalidParameterError(
                f"steps={self.steps} was given without sample_rate; DP-SGD plans need both "
                f"(sample_rate = batch size / number of records)."
            )
        if not mults and self.sample_rate is None:
            raise InvalidParameterError(
                "a privacy plan needs at least one release: give multipliers (one-shot "
                "releases) or sample_rate and steps (DP-SGD)."
            )
        if self.neighbouring not in NEIGHBOURING:
            raise unknown_name("neighbouring relation", self.neighbouring, NEIGHBOURING)

    @property
    def subsampled(self) -> bool:
        return self.sample_rate is not None

    def event(self, sigma: float):
        """The plan as a dp-accounting event at noise multiplier ``sigma`` (dp-accounting imported here, when priced)."""
        import dp_accounting

        # one-shot releases declare the whole replace-one difference as their sensitivity; an accountant
        # run under dp-accounting's REPLACE_ONE relation (a subsampled replace-one plan) prices a Gaussian
        # event as a shift of 2 units, so such events get twice the multiplier: the same mechanism
        one_shot = 2.0 if self.subsampled and self.neighbouring == "replace_one" else 1.0
        events = [dp_accounting.GaussianDpEvent(one_shot * m * sigma) for m in self.multipliers]
        if self.subsampled:
            step = dp_accounting.PoissonSampledDpEvent(
                self.sample_rate, dp_accounting.GaussianDpEvent(sigma)
            )
            events.append(dp_accounting.SelfComposedDpEvent(step, self.steps))
        return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)

    def to_dict(self) -> dict:
        d = {"multipliers": list(self.multipliers)}
        if self.subsampled:  # the relation matters only for subsampling
            d.update(sample_rate=self.sample_rate, steps=self.steps, neighbouring=self.neighbouring)
        return d

    def describe(self) -> str:
        parts = []
        if self.multipliers:
            mult = ",".join(f"{m:g}" for m in self.multipliers)
            parts.append(f"{len(self.multipliers)} Gaussian release(s) at sigma x [{mult}]")
        if self.subsampled:
            parts.append(
                f"{self.steps} Poisson-subsampled Gaussian steps at q={self.sample_rate:g} "
                f"({self.neighbouring})"
            )
        return " + ".join(parts)


def _check_accountant(name: str, plan: PrivacyPlan) -> str:
    if name not in ACCOUNTANTS:
        raise unknown_name("accountant", name, ACCOUNTANTS)
    if name == "exact" and plan.subsampled:
        raise InvalidParameterError(
            "accountant='exact' has a closed form only for plans of plain Gaussian releases; "
            "this plan is subsampled (DP-SGD). Use accountant='pld' (tight) or 'rdp'."
        )
    if name == "rdp" and plan.subsampled and plan.neighbouring != "add_remove":
        raise InvalidParameterError(
            "accountant='rdp' supports Poisson subsampling only under add/remove neighbours; "
            "use neighbouring='add_remove' or accountant='pld'."
        )
    return name


def _accountant(name: str, plan: PrivacyPlan, epsilon: float = 1.0, coarser: float = 1.0):
    """A fresh accountant for ``plan``; a PLD one discretised for ``epsilon`` (:func:`pld_interval`), ``coarser``
    times that where a search only needs an approximate answer (:func:`_subsampled_pld_sigma`)."""
    from dp_accounting import pld, rdp

    relation = _relation(plan.neighbouring if plan.subsampled else "add_remove")
    if name == "pld":
        return pld.PLDAccountant(relation, value_discretization_interval=pld_interval(epsilon) * coarser)
    # RDP drops orders whose series does not converge (a valid, looser bound) and
    # says so through absl at WARNING for every call: keep that out of user logs.
    logging.getLogger("absl").setLevel(logging.ERROR)
    return rdp.RdpAccountant(neighboring_relation=relation)


def epsilon_for_sigma(sigma: float, delta: float, plan: PrivacyPlan | None = None,
                      accountant: str = "pld", *, epsilon_hint: float | None = None) -> float:
    """Epsilon spent by ``plan`` run with base noise multiplier ``sigma`` at ``delta``. ``epsilon_hint``: about
    how much a subsampled plan spends, where the caller knows it is large: the PLD grid follows it
    (:func:`pld_interval`; the estimate stays pessimistic, only coarser and faster). Deterministic in its (public)
    arguments, so results are cached as :func:`calibrate_sigma`'s are (a fixed-sigma engine asks for each one's
    epsilon: 0.17 s of PLD a call)."""
    plan = plan or PrivacyPlan()
    sigma = check_positive(sigma, "sigma")
    delta = check_delta(delta)
    _check_accountant(accountant, plan)
    hint = None if epsilon_hint is None else float(epsilon_hint)
    try:
        hash(plan)
    except TypeError:                    # a plan built with lists: same answer, not cached
        return _epsilon_for_sigma.__wrapped__(float(sigma), float(delta), plan, accountant, hint)
    return _epsilon_for_sigma(float(sigma), float(delta), plan, accountant, hint)


@functools.lru_cache(maxsize=512)
def _epsilon_for_sigma(sigma: float, delta: float, plan: PrivacyPlan, accountant: str,
                       epsilon_hint: float | None) -> float:
    if accountant == "exact":
        return analytic.epsilon_for(sigma * analytic.effective_multiplier(plan.multipliers), delta)
    # the discretisation follows the epsilon spent (its exact value for plans of plain Gaussian releases)
    hint = (epsilon_hint or 1.0) if plan.subsampled else \
        analytic.epsilon_for(sigma * analytic.effective_multiplier(plan.multipliers), delta)
    acc = _accountant(accountant, plan, hint)
    acc.compose(plan.event(sigma))
    return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=128)
def replace_one_epsilon(sigma: float, delta: float, plan: PrivacyPlan) -> float:
    """The epsilon that ``plan``'s base noise multiplier ``sigma`` gives under replace-one neighbours (the same
    releases, sampling rate and steps; the PLD accountant's replace-one relation, under which one record changed
    moves a step's clipped sum by up to twice the clip). For a plan accounted add/remove this is what its sigma
    buys for the library's own relation: e.g. q 0.5, 32 steps, add/remove epsilon 1 -> replace-one 2.12."""
    ro = PrivacyPlan(plan.multipliers, plan.sample_rate, plan.steps, "replace_one")
    return epsilon_for_sigma(sigma, delta, ro, "pld")


def calibrate_sigma(epsilon: float, delta: float, plan: PrivacyPlan | None = None,
                    accountant: str = "pld") -> float:
    """Smallest base noise multiplier for which ``plan`` is (epsilon, delta)-DP.

    The result is verified: ``epsilon_for_sigma(result) <= epsilon`` under the
    same accountant. Deterministic in its (public) arguments, so results are cached
    (after validation, keyed by the validated floats).
    """
    plan = plan or PrivacyPlan()
    epsilon = check_calibrated_epsilon(epsilon)
    delta = check_delta(delta)
    _check_accountant(accountant, plan)
    try:
        hash(plan)
    except TypeError:                    # a plan built with lists: same answer, not cached
        return _calibrate_sigma.__wrapped__(float(epsilon), float(delta), plan, accountant)
    return _calibrate_sigma(float(epsilon), float(delta), plan, accountant)


@functools.lru_cache(maxsize=512)
def _calibrate_sigma(epsilon: float, delta: float, plan: PrivacyPlan, accountant: str) -> float:
    import dp_accounting
    from dp_accounting.mechanism_calibration import ExplicitBracketInterval, LowerEndpointAndGuess

    gaussian_only = not plan.subsampled
    if gaussian_only:
        guess = analytic.sigma_for(epsilon, delta) / analytic.effective_multiplier(plan.multipliers)
        if accountant == "exact":
            return guess
    else:
        guess = None

    eps_of = _priced(accountant, plan, epsilon, delta)

    def make_accountant():
        return _Priced(eps_of)

    if guess is None and accountant == "pld":
        coarse = _priced(accountant, plan, epsilon, delta, COARSE_PLD)
        found = _subsampled_pld_sigma(epsilon, delta, plan, eps_of, coarse)
        if found is not None:
            return found
    brackets = []
    if guess is not None:
        # PLD is pessimistic and RDP looser, so the answer lies at or above the exact one.
        brackets.append(ExplicitBracketInterval(guess * 0.999, guess * (3.0 if accountant == "rdp" else 1.01)))
        brackets.append(LowerEndpointAndGuess(guess * 0.5, guess * 2))
    else:
        # RDP is never tighter than PLD, so its (fast) answer bounds the PLD one from above.
        # Under replace-one a step is at most as leaky as add/remove with half the noise.
        upper = None
        if accountant == "pld":
            add_remove = PrivacyPlan(plan.multipliers, plan.sample_rate, plan.steps, "add_remove")
            factor = 1.0 if plan.neighbouring == "add_remove" else 2.0
            upper = factor * calibrate_sigma(epsilon, delta, add_remove, "rdp")
        if upper is not None:
            brackets.append(_bracket_below(eps_of, epsilon, upper))
            brackets.append(LowerEndpointAndGuess(upper * 0.1, upper))
        else:
            brackets.append(LowerEndpointAndGuess(0.1, 1.0))
    sigma = None
    for bracket in brackets:
        try:
            sigma = dp_accounting.calibrate_dp_mechanism(
                make_accountant, float, epsilon, delta, bracket,
                tol=1e-7 * (guess or 1.0) if guess else 1e-5,
            )
            break
        except (ValueError, dp_accounting.mechanism_calibration.NoBracketIntervalFoundError):
            continue
    if sigma is None:  # pragma: no cover - would need an absurd plan
        raise InvalidParameterError(
            f"could not calibrate noise for epsilon={epsilon}, delta={delta}, plan {plan.describe()}"
        )
    sigma = float(sigma)
    for _ in range(100):
        if eps_of(sigma) <= epsilon:
            return sigma
        sigma *= 1 + 1e-6
    raise InvalidParameterError(  # pragma: no cover
        f"calibration did not converge for epsilon={epsilon}, delta={delta}"
    )


#: a subsampled plan's sigma is first searched on a PLD this many times coarser than the final one (its epsilon within
#: about 1e-3 of the fine one's at a tenth to a thirtieth of the cost), then refined on the fine PLD from there
COARSE_PLD = 10
#: the refinement stops at a sigma whose (fine) epsilon lies within this relative distance below the target
REFINED = 1e-6


def _priced(accountant: str, plan: PrivacyPlan, epsilon: float, delta: float, coarser: float = 1.0):
    """The plan's epsilon at a sigma, as a function pricing each sigma once per calibration (the bracket's ends, the
    search's last point and the final check ask again: a third of a subsampled plan's accountings were repeats), on a
    fresh accountant of :func:`_accountant`'s (``coarser``: its PLD's discretisation, times)."""
    known: dict[float, float] = {}

    def eps_of(s: float) -> float:
        s = float(s)
        if s not in known:
            acc = _accountant(accountant, plan, epsilon, coarser)
            acc.compose(plan.event(s))
            known[s] = float(acc.get_epsilon(delta))
        return known[s]
    return eps_of


def _subsampled_pld_sigma(epsilon: float, delta: float, plan: PrivacyPlan, eps_of, coarse) -> float | None:
    """The smallest sigma for which the subsampled ``plan`` spends at most ``epsilon`` under the PLD accountant
    (``eps_of``: the fine PLD, ``coarse``: one ``COARSE_PLD`` times coarser, each pricing a sigma once), or None where
    the refinement does not settle (the caller's bracketed search then runs): the coarse search's answer
    (:func:`_coarse_sigma`) refined on the fine PLD (:func:`_refined_sigma`): two or three fine PLDs where the
    bracketed search built about ten."""
    s0 = _coarse_sigma(epsilon, delta, plan, coarse)
    if s0 is None:  # pragma: no cover - a plan 2^60 times off its analytic sigma
        return None
    h = 1e-4 * s0                                   # the coarse slope near its root, for the first refining step
    return _refined_sigma(epsilon, eps_of, s0, (coarse(s0 + h) - coarse(s0 - h)) / (2 * h))


def _coarse_sigma(epsilon: float, delta: float, plan: PrivacyPlan, coarse) -> float | None:
    """The sigma at which ``coarse`` (the plan's epsilon on a PLD ``COARSE_PLD`` times coarser) reaches ``epsilon``:
    from an upper end found without accounting (every step reading every record, sampling rate 1, is a Gaussian
    release, so the plan at the analytic Gaussian's sigma for their composition spends at most ``epsilon``) down by
    halves (:func:`_bracket_below`), every evaluation but the last at a sigma above the answer, where the PLD is
    narrow; then Brent's method."""
    from scipy.optimize import brentq

    shift = 2.0 if plan.neighbouring == "replace_one" else 1.0      # a step's shift in the accountant's units
    high = analytic.sigma_for(epsilon, delta) * math.sqrt(plan.steps * shift ** 2 +
                                                          sum(1.0 / m ** 2 for m in plan.multipliers))
    for _ in range(60):                     # (the upper end holds; a coarse grid a hair above it is stepped past)
        if coarse(high) <= epsilon:
            break
        high *= 2.0
    else:  # pragma: no cover - 2^60 times the analytic sigma
        return None
    bracket = _bracket_below(coarse, epsilon, high, step=2.0)
    low, high = bracket.endpoint_1, bracket.endpoint_2
    return float(brentq(lambda s: coarse(s) - epsilon, low, high, xtol=1e-5 * high, rtol=1e-10))


def _refined_sigma(epsilon: float, eps_of, s: float, slope: float) -> float | None:
    """From ``s`` (the coarse answer) and ``slope`` (the coarse epsilon's per unit of sigma there), secant steps on
    the fine PLD (``eps_of``) until a sigma spends at most ``epsilon`` and within ``REFINED`` of it (each step aimed a
    hair below the target, as one landing just above it costs another PLD); None where eight steps do not settle and
    none came within 1e-4 of the target."""
    points = [(s, eps_of(s))]
    for _ in range(8):
        e = points[-1][1]
        if epsilon * (1 - REFINED) <= e <= epsilon:
            return s
        if len(points) >= 2 and points[-1][1] != points[-2][1]:
            (sa, ea), (sb, eb) = points[-2], points[-1]
            slope = (eb - ea) / (sb - sa)
        if not slope < 0:
            return None
        s = s + (epsilon * (1 - REFINED / 2) - e) / slope
        if not s > 0:
            return None
        points.append((s, eps_of(s)))
    ok = [p for p in points if p[1] <= epsilon]
    return min(ok)[0] if ok and epsilon - max(p[1] for p in ok) <= 1e-4 * epsilon else None


class _Priced:
    """What ``dp_accounting.calibrate_dp_mechanism`` asks of a fresh accountant, for an "event" that is the sigma
    itself: its epsilon comes from the calibration's ``eps_of`` (the real accountant, each sigma priced once)."""

    def __init__(self, eps_of):
        from dp_accounting import NoOpDpEvent

        self.ledger, self._eps_of, self._sigma = NoOpDpEvent(), eps_of, None

    def compose(self, sigma: float) -> "_Priced":
        self._sigma = float(sigma)
        return self

    def get_epsilon(self, delta: float) -> float:
        return self._eps_of(self._sigma)


def _bracket_below(eps_of, epsilon: float, upper: float, step: float = 1.25):
    """A bracket of the sigma that spends ``epsilon``, found walking down from ``upper`` (a sigma that spends at most
    ``epsilon``) by factors of ``step``: every evaluation but the last is at a sigma above the answer, where the PLD
    is narrow and quick (the bracket of a subsampled plan was [upper / 2, upper] and missed its answer under
    replace-one, then a search from upper / 10 built wide PLDs: 49 s for 100 steps at q = 0.01, now 23 s)."""
    from dp_accounting.mechanism_calibration import ExplicitBracketInterval

    high = upper
    for _ in range(40):
        low = high / step
        if eps_of(low) > epsilon:
            return ExplicitBracketInterval(low, high)
        high = low
    return ExplicitBracketInterval(high / step, high)  # pragma: no cover - 40 steps down is 1e-4 of upper


def gaussian_sigma(epsilon: float, delta: float, accountant: str = "pld") -> float:
    """Noise multiplier for one Gaussian release at (epsilon, delta)."""
    return calibrate_sigma(epsilon, delta, PrivacyPlan((1.0,)), accountant)


def plan_sigma(epsilon: float, delta: float, multipliers=(1.0,), accountant: str = "pld") -> float:
    """Base sigma for several releases whose multipliers are fixed multiples of it."""
    return calibrate_sigma(epsilon, delta, PrivacyPlan(tuple(multipliers)), accountant)


def dpsgd_sigma(epsilon: float, delta: float, sample_rate: float, steps: int,
                accountant: str = "pld", neighbouring: str = "replace_one") -> float:
    """Noise multiplier for ``steps`` Poisson-subsampled Gaussian steps at ``sample_rate``."""
    plan = PrivacyPlan((), sample_rate=sample_rate, steps=steps, neighbouring=neighbouring)
    return calibrate_sigma(epsilon, delta, plan, accountant)


def classical_sigma(epsilon: float, delta: float) -> float:
    """The textbook sqrt(2 ln(1.25/delta))/epsilon (valid only for epsilon < 1); for comparison."""
    return math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def shared_plan(shares: dict[str, float]) -> tuple[PrivacyPlan, dict[str, float]]:
    """One budget split between named one-shot Gaussian releases by explicit shares.

    Privacy adds up as 1/sigma^2 over Gaussian releases, so release k run at noise
    multiplier ``sigma / sqrt(share_k)`` uses ``share_k`` of what one release at ``sigma``
    would: with shares summing to 1 the plan costs exactly one release at ``sigma``.
    Returns the plan (multipliers in the dict's order) and name -> multiplier.
    """
    bad = {k: v for k, v in shares.items() if not 0 < float(v) <= 1}
    total = sum(float(v) for v in shares.values())
    if bad or abs(total - 1) > 1e-9:
        raise InvalidParameterError(
            f"privacy shares must be numbers in (0, 1] that add up to 1; got {dict(shares)} (sum {total:g}). "
            f"Lower the other shares (e.g. proportions_share, schema_share) so the embedding keeps a part."
        )
    mults = {k: 1 / float(v) ** 0.5 for k, v in shares.items()}
    return PrivacyPlan(tuple(mults.values())), mults


def compose_plan(relative: dict[str, float], shares: dict[str, float] | None = None
                 ) -> tuple[PrivacyPlan, dict[str, float]]:
    """One plan for named one-shot Gaussian releases; returns it and name -> noise multiplier
    (relative to the plan's calibrated base sigma).

    ``relative``: releases whose noise multipliers are fixed multiples of one another (DP-MEPF:
    phi1 1, phi2 1, early-stopping proxy 10). ``shares``: releases given an explicit fraction of
    the privacy (class proportions, schema statistics; see :func:`shared_plan`). Without shares
    the plan is the relative multipliers as given. With shares, the relative group keeps
    1 - sum(shares), split between its members in proportion to 1/m_k^2, so the multiples stay
    as given. Either way the plan's releases compose exactly (1/sigma^2 adds up).
    """
    bad = {k: v for k, v in relative.items() if not float(v) > 0}
    if not relative or bad:
        raise InvalidParameterError(f"relative noise multipliers must be positive numbers; got {dict(relative)}.")
    if not shares:
        mults = {k: float(v) for k, v in relative.items()}
        return PrivacyPlan(tuple(mults.values())), mults
    left = 1 - sum(float(v) for v in shares.values())
    weight = sum(1 / float(v) ** 2 for v in relative.values())
    group = {k: left * (1 / float(v) ** 2) / weight for k, v in relative.items()}
    return shared_plan({**shares, **group})
