"""zero-concentrated DP (zCDP) accounting, for plans whose stages are decided as they go (AIM, MST).

A plan of one-shot Gaussian releases is calibrated exactly by :mod:`~mmdsynth.privacy.calibration` (PLD). A plan
that selects what to measure from earlier noisy results (the exponential mechanism, then the marginals it chose,
round after round) cannot be listed before the first read. It is accounted in zCDP (Bun and Steinke 2016):

* the whole plan gets a total ``rho`` from (epsilon, delta) before any private row is read
  (:func:`rho_for_epsilon`), and every stage spends a share of it, decided from what was already released
  (public); zCDP composes by adding rho, and composition is fully adaptive (a privacy filter with a fixed total:
  Whitehouse, Ramdas, Rogers, Wu 2023), so the plan is (epsilon, delta)-DP whatever the stages chose;
* a Gaussian release of L2 sensitivity ``s`` with noise std ``sigma`` costs ``s^2 / (2 sigma^2)``
  (:func:`gaussian_rho`; conversely :func:`gaussian_std`);
* the exponential mechanism with parameter ``eps0`` over scores of sensitivity ``s`` (probability proportional to
  ``exp(eps0 q / (2 s))``) costs ``eps0^2 / 8`` (bounded-range analysis: Cesar and Rogers 2021, Lemma 3.2 of
  Dong, Durfee, Rogers 2020) (:func:`exponential_rho`).

The conversion from rho to (epsilon, delta) takes the smaller of dp-accounting's Renyi accountant on a
``ZCDpEvent`` (the RDP curve ``alpha * rho`` on a grid of orders) and Canonne, Kamath and Steinke 2020's Proposition
12 optimised over the order (what the mechanisms of mbi use in ``cdp_rho``); both are valid, tests cross-check
them against each other.
"""
from __future__ import annotations

import functools
import math

import dp_accounting
from dp_accounting import rdp

from ..validation import check_delta, check_positive
from .calibration import check_calibrated_epsilon

#: the Renyi orders the conversion reads (dp-accounting's defaults, extended to the large orders a tiny rho needs)
ORDERS = tuple(rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS) + tuple(range(300, 4001, 50)) + (6000, 10000, 20000)


def epsilon_for_rho(rho: float, delta: float) -> float:
    """The epsilon at ``delta`` of a rho-zCDP plan: the smaller of two valid conversions, dp-accounting's Renyi
    accountant (its orders are a grid) and Canonne, Kamath and Steinke's Proposition 12 optimised over the order
    (:func:`cks_epsilon`)."""
    rho, delta = check_positive(rho, "rho"), check_delta(delta)
    accountant = rdp.RdpAccountant(list(ORDERS))
    accountant.compose(dp_accounting.ZCDpEvent(rho))
    return min(float(accountant.get_epsilon(delta)), cks_epsilon(rho, delta))


def cks_delta(rho: float, epsilon: float) -> float:
    """delta of a rho-zCDP mechanism at ``epsilon`` by Canonne, Kamath, Steinke 2020, Proposition 12:
    ``min over alpha > 1 of exp((alpha - 1)(alpha rho - epsilon)) / (alpha - 1) * (1 - 1/alpha)^alpha``, the
    minimising alpha found by bisection on the derivative of the exponent's logarithm."""
    lo, hi = 1.0 + 1e-9, max((epsilon + 1) / (2 * rho) + 2, 2.0)
    for _ in range(200):
        a = (lo + hi) / 2
        if a in (lo, hi):          # the interval holds no float between its ends: more rounds change nothing
            break
        if (2 * a - 1) * rho - epsilon + math.log1p(-1 / a) < 0:
            lo = a
        else:
            hi = a
    a = (lo + hi) / 2
    return min(math.exp((a - 1) * (a * rho - epsilon) + a * math.log1p(-1 / a)) / (a - 1), 1.0)


def cks_epsilon(rho: float, delta: float) -> float:
    """The smallest epsilon with :func:`cks_delta` <= ``delta`` (bisection; rounded up, so valid)."""
    lo, hi = 0.0, rho + 2 * math.sqrt(rho * math.log(1 / delta)) + 1e-12
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):        # as in cks_delta: the float interval is exhausted
            break
        if cks_delta(rho, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


@functools.lru_cache(maxsize=256)
def rho_for_epsilon(epsilon: float, delta: float) -> float:
    """The largest rho whose plan is (epsilon, delta)-DP (bisection on :func:`epsilon_for_rho`, which increases
    with rho), rounded down: calibration before any read. A pure function of public numbers, kept per process
    (about 0.15 s a call: a marginal fit converts twice, for its outline and its plan)."""
    epsilon, delta = check_calibrated_epsilon(epsilon), check_delta(delta)
    lo, hi = 0.0, max(1.0, epsilon)
    while epsilon_for_rho(hi, delta) <= epsilon:
        lo, hi = hi, 2 * hi
    for _ in range(80):
        mid = (lo + hi) / 2
        if mid > 0 and epsilon_for_rho(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return lo


def gaussian_rho(sensitivity: float, std: float) -> float:
    """The zCDP cost of a Gaussian release: L2 ``sensitivity``, noise std ``std``."""
    return check_positive(sensitivity, "sensitivity") ** 2 / (2 * check_positive(std, "std") ** 2)


def gaussian_std(sensitivity: float, rho: float) -> float:
    """The noise std that makes a Gaussian release of L2 ``sensitivity`` cost ``rho``."""
    return check_positive(sensitivity, "sensitivity") / math.sqrt(2 * check_positive(rho, "rho"))


def exponential_rho(epsilon0: float) -> float:
    """The zCDP cost of the exponential mechanism with parameter ``epsilon0`` (bounded range: eps0^2 / 8)."""
    return check_positive(epsilon0, "epsilon0") ** 2 / 8


def exponential_epsilon(rho: float) -> float:
    """The exponential mechanism's parameter that costs ``rho``."""
    return math.sqrt(8 * check_positive(rho, "rho"))
