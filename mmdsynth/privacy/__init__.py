"""Privacy core: calibration, the Gaussian mechanism, the ledger and budget files."""
from .budget import BudgetFile
from .calibration import (
    ACCOUNTANTS,
    PrivacyPlan,
    calibrate_sigma,
    classical_sigma,
    compose_plan,
    dpsgd_sigma,
    epsilon_for_sigma,
    gaussian_sigma,
    plan_sigma,
)
from .ledger import Ledger, LedgerEntry

#: names loaded on first use: the mechanisms need torch, which the calculators (`mmdsynth budget`) never do
_LAZY = {"NoiseSource": "mechanisms", "gaussian_mechanism": "mechanisms"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ACCOUNTANTS", "BudgetFile", "Ledger", "LedgerEntry", "NoiseSource", "PrivacyPlan",
    "calibrate_sigma", "classical_sigma", "compose_plan", "dpsgd_sigma", "epsilon_for_sigma",
    "gaussian_mechanism", "gaussian_sigma", "plan_sigma",
]
