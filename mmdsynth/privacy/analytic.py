"""Closed-form analytic Gaussian mechanism (Balle and Wang, ICML 2018, Thm. 8).

A Gaussian mechanism with L2 sensitivity 1 and noise std ``s`` (the noise
multiplier) is (epsilon, delta)-DP if and only if

    delta >= Phi(1/(2s) - eps*s) - exp(eps) * Phi(-1/(2s) - eps*s).

k Gaussian releases with multipliers s_i compose exactly like a single one with
1/s^2 = sum_i 1/s_i^2 (their privacy-loss distributions are Gaussian), so a
whole plan of Gaussian releases has a closed form too. This module is
independent of dp-accounting and serves as the "exact" accountant and as the
cross-check of the PLD accountant in the tests.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, special


def delta_for(epsilon: float, noise_multiplier: float) -> float:
    """Smallest delta at which one sensitivity-1 Gaussian(s) is (epsilon, delta)-DP."""
    s = float(noise_multiplier)
    a = 1.0 / (2.0 * s)
    b = epsilon * s
    # exp(eps) * Phi(-a - b) in log space to avoid overflow for large eps.
    first = special.ndtr(a - b)
    second = math.exp(epsilon + special.log_ndtr(-a - b))
    return max(first - second, 0.0)


def effective_multiplier(noise_multipliers: Sequence[float]) -> float:
    """Noise multiplier of the single Gaussian equivalent to composing several."""
    inv = sum(1.0 / float(m) ** 2 for m in noise_multipliers)
    return 1.0 / math.sqrt(inv)


def sigma_for(epsilon: float, delta: float) -> float:
    """Smallest noise multiplier giving (epsilon, delta)-DP for one release."""
    f = lambda log_s: delta_for(epsilon, math.exp(log_s)) - delta  # noqa: E731
    lo, hi = math.log(1e-4), math.log(1e6)
    log_s = optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-14, maxiter=500)
    s = math.exp(log_s)
    # brentq may land a hair on the wrong side: step up until valid.
    while delta_for(epsilon, s) > delta:
        s = np.nextafter(s, np.inf) * (1 + 1e-12)
    return float(s)


def epsilon_for(noise_multiplier: float, delta: float) -> float:
    """Smallest epsilon for one release with the given multiplier at delta."""
    s = float(noise_multiplier)
    if delta_for(0.0, s) <= delta:
        return 0.0
    hi = 1.0
    while delta_for(hi, s) > delta:
        hi *= 2.0
        if hi > 1e8:
            return math.inf
    return float(optimize.brentq(lambda e: delta_for(e, s) - delta, 0.0, hi, xtol=1e-13, rtol=1e-13))
