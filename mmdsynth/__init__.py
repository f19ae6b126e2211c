"""mmdsynth: differentially private synthetic data with kernel mean embeddings.

The public names below are imported on first use (PEP 562), so ``import mmdsynth.cli`` and
``mmdsynth --help`` do not pay for torch; ``from mmdsynth import DPNTK`` works as always.
"""
from __future__ import annotations

import importlib

from ._version import __version__
from .errors import (
    ArtifactError,
    DatasetNotFoundError,
    DataValidationError,
    InvalidParameterError,
    PrivacyBudgetError,
    SchemaError,
    UnknownNameError,
)

#: public name -> the module that defines it
_LAZY = {
    **dict.fromkeys(["Schema", "list_datasets", "load_dataset", "load_preset", "read_table"], ".data"),
    **dict.fromkeys(["mean_embedding", "release_mean_embedding"], ".embedding"),
    **dict.fromkeys(["ENTKFeatures", "HermiteFeatures", "RandomConvFeatures", "RandomFourierFeatures",
                     "build_feature_map"], ".features"),
    **dict.fromkeys(["AIM", "DPHP", "DPKIP", "DPMEPF", "DPMERF", "DPNTK", "DPRandConv", "Hybrid", "MST", "load"],
                    ".methods"),
    **dict.fromkeys(["PublicFacts", "choose_table_default", "default_delta"], ".choice"),
    **dict.fromkeys(["BudgetFile", "PrivacyPlan", "calibrate_sigma", "dpsgd_sigma", "epsilon_for_sigma",
                     "gaussian_sigma", "plan_sigma"], ".privacy"),
    "Release": ".release",
    "fit": ".methods.default",
    "fit_tables": ".methods.database",
    **dict.fromkeys(["DistilledSet", "distill_release"], ".methods.distill"),
}

__all__ = sorted([*_LAZY, "ArtifactError", "DataValidationError", "DatasetNotFoundError", "InvalidParameterError",
                  "PrivacyBudgetError", "SchemaError", "UnknownNameError", "__version__"])


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mmdsynth' has no attribute {name!r}")


def __dir__():
    return __all__
