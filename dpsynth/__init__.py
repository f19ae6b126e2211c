"""dpsynth: differentially private synthetic data with kernel mean embeddings."""
from ._version import __version__
from .data import Schema, list_datasets, load_dataset, load_preset, read_table
from .embedding import mean_embedding, release_mean_embedding
from .errors import (
    ArtifactError,
    DataValidationError,
    DatasetNotFoundError,
    InvalidParameterError,
    PrivacyBudgetError,
    SchemaError,
    UnknownNameError,
)
from .features import ENTKFeatures, HermiteFeatures, RandomFourierFeatures, build_feature_map
from .methods import DPHP, DPKIP, DPMEPF, DPMERF, DPNTK, load
from .privacy import (
    BudgetFile,
    PrivacyPlan,
    calibrate_sigma,
    dpsgd_sigma,
    epsilon_for_sigma,
    gaussian_sigma,
    plan_sigma,
)
from .release import Release

__all__ = [
    "ArtifactError", "BudgetFile", "DPHP", "DPKIP", "DPMEPF", "DPMERF", "DPNTK", "ENTKFeatures", "HermiteFeatures", "DataValidationError", "DatasetNotFoundError", "InvalidParameterError",
    "PrivacyBudgetError", "PrivacyPlan", "RandomFourierFeatures", "Release", "Schema", "SchemaError",
    "UnknownNameError", "__version__", "build_feature_map", "calibrate_sigma", "dpsgd_sigma",
    "epsilon_for_sigma", "gaussian_sigma", "list_datasets", "load", "load_dataset", "load_preset",
    "mean_embedding", "plan_sigma", "read_table", "release_mean_embedding",
]
