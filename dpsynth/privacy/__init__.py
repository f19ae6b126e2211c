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
from .mechanisms import NoiseSource, gaussian_mechanism

__all__ = [
    "ACCOUNTANTS", "BudgetFile", "Ledger", "LedgerEntry", "NoiseSource", "PrivacyPlan",
    "calibrate_sigma", "classical_sigma", "compose_plan", "dpsgd_sigma", "epsilon_for_sigma",
    "gaussian_mechanism", "gaussian_sigma", "plan_sigma",
]
