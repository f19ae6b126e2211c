"""Privacy core: calibration, the Gaussian mechanism, the ledger and budget files."""
from .ledger import Ledger, LedgerEntry

#: names loaded on first use: the mechanisms need torch, which the calculators (`mmdsynth budget`) never do, and
#: calibration and the budget file dp-accounting, which reading a ledger (`mmdsynth inspect`) never does
_LAZY = {"NoiseSource": "mechanisms", "gaussian_mechanism": "mechanisms", "BudgetFile": "budget",
         **dict.fromkeys(["ACCOUNTANTS", "PrivacyPlan", "calibrate_sigma", "classical_sigma", "compose_plan",
                          "dpsgd_sigma", "epsilon_for_sigma", "gaussian_sigma", "plan_sigma"], "calibration")}


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
