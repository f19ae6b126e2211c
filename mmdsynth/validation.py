"""Parameter and data checks shared by every public entry point.

All checks raise typed errors from :mod:`mmdsynth.errors` whose messages say
which parameter, what is allowed, what was given, and how to fix it.
"""
from __future__ import annotations

import logging
import math
import os
import sys
import warnings
from numbers import Real

import numpy as np

from .errors import DataValidationError, InvalidParameterError

logger = logging.getLogger(__name__)


class PrivacyWarning(UserWarning):
    """A setting is legal but weakens the guarantee (e.g. delta >= 1/n)."""


def _is_real(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    if not _is_real(epsilon) or not math.isfinite(float(epsilon)) or float(epsilon) <= 0:
        raise InvalidParameterError(
            f"{name} must be a finite number > 0 (the privacy loss bound); got {epsilon!r}. "
            f"Pass e.g. {name}=1.0; smaller means more private and more noise."
        )
    return float(epsilon)


def check_delta(delta, name: str = "delta") -> float:
    if not _is_real(delta) or not math.isfinite(float(delta)) or not 0 < float(delta) < 1:
        raise InvalidParameterError(
            f"{name} must be a number in the open interval (0, 1); got {delta!r}. "
            f"Pass e.g. {name}=1e-5, well below 1/n for a dataset of n records."
        )
    return float(delta)


def user_stacklevel() -> int:
    """The ``stacklevel`` for :func:`warnings.warn`, called in the function that warns, that names the first caller
    outside this package: the user's line, however deep in the library (and in a planner's stages) the warning is
    raised."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def warn_delta_vs_n(delta: float, n: int) -> None:
    """delta >= 1/n allows mechanisms that publish a whole record: warn."""
    if n > 0 and delta >= 1.0 / n:
        warnings.warn(
            f"delta={delta:g} is >= 1/n = {1.0 / n:.3g} for n={n} records: such a delta "
            f"permits releasing a record outright. Use delta < 1/n (e.g. {0.1 / n:.1g}).",
            PrivacyWarning,
            stacklevel=user_stacklevel(),
        )


def check_positive(value, name: str, *, integer: bool = False, allow_zero: bool = False) -> float | int:
    ok = _is_real(value) and math.isfinite(float(value))
    if ok and integer:
        ok = float(value) == int(value)
    if ok:
        ok = float(value) >= 0 if allow_zero else float(value) > 0
    if not ok:
        kind = "an integer" if integer else "a finite number"
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidParameterError(f"{name} must be {kind} {bound}; got {value!r}.")
    return int(value) if integer else float(value)


def check_probability(value, name: str) -> float:
    if not _is_real(value) or not 0 < float(value) <= 1:
        raise InvalidParameterError(
            f"{name} must be a number in (0, 1]; got {value!r}. "
            f"For DP-SGD it is the batch size divided by the number of records."
        )
    return float(value)


def check_features(X, name: str = "X") -> np.ndarray:
    """A finite, non-empty numeric array with one row per record."""
    try:
        arr = np.asarray(X.detach().cpu().numpy() if hasattr(X, "detach") else X)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise DataValidationError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise DataValidationError(
            f"{name} must be numeric; got dtype {arr.dtype}. Encode categorical columns first "
            f"(or pass a DataFrame with a schema)."
        )
    if arr.ndim == 0 or arr.shape[0] == 0:
        raise DataValidationError(f"{name} is empty (shape {arr.shape}); pass at least one record.")
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise DataValidationError(
            f"{name} contains {bad} NaN or infinite value(s); impute or drop them before fitting "
            f"(mmdsynth never imputes silently: imputation statistics would leak)."
        )
    return arr


def check_labels(y, n_rows: int, name: str = "y", n_classes: int | None = None) -> np.ndarray:
    """Integer labels >= 0, one per row, and below ``n_classes`` when it is given (the input domain of a
    class-conditional release). How many classes are present is NOT checked: the labels
    are private, and an error that depends on them (one class present, or two) would tell
    neighbouring datasets apart. The number of classes is public (``n_classes``)."""
    arr = np.asarray(y.detach().cpu().numpy() if hasattr(y, "detach") else y)
    if arr.ndim != 1:
        raise DataValidationError(f"{name} must be one-dimensional; got shape {arr.shape}.")
    if arr.shape[0] != n_rows:
        raise DataValidationError(
            f"X has {n_rows} rows but {name} has {arr.shape[0]} labels; they must have the same length."
        )
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise DataValidationError(
                f"{name} must hold integer class labels 0..C-1; got dtype {arr.dtype}. "
                f"Map class names to integers first."
            )
    if arr.size and arr.min() < 0:
        raise DataValidationError(f"{name} must hold labels >= 0; found {int(arr.min())}.")
    if n_classes is not None and arr.size and arr.max() >= n_classes:
        raise DataValidationError(f"labels must lie in 0..{n_classes - 1} for n_classes={n_classes}; found "
                                  f"{int(arr.max())}.")
    return arr.astype(np.int64)
