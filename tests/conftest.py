import os
import types
from pathlib import Path

import pytest

# Never touch the network from tests; real data comes from MMDSYNTH_DATA_DIR.
os.environ.setdefault("MMDSYNTH_OFFLINE", "1")
# `make test` runs the suite in two pytest-xdist workers on this 2-core machine: one compute thread
# each, so the two do not fight over the cores (set before torch is imported).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
if "MMDSYNTH_DATA_DIR" not in os.environ and SHARED.is_dir():
    os.environ["MMDSYNTH_DATA_DIR"] = str(SHARED)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MMDSYNTH_CACHE_DIR", str(tmp_path / "cache"))


def _defined_in(statistic) -> str:
    """The module a statistic is defined in: a function's (a partial's function's), else its class's."""
    f = getattr(statistic, "func", statistic)
    return f.__module__ if isinstance(f, types.FunctionType) else type(f).__module__


@pytest.fixture(autouse=True)
def _only_the_statistics_read_private_rows(request, monkeypatch):
    """Issue 82: every sum over private rows that a test runs in this process (an engine's pass over a source's
    shards, the privacy engine's subsampled step) reads the rows through a statistic of ``mmdsynth/statistics/``.
    A statistic defined anywhere else (a lambda in a method, a class beside a planner) fails the test that ran it.
    A test that feeds a source its own statistic says so (``@pytest.mark.own_statistic``): then statistics defined in
    that test's module pass too, and the library's own sums in it are still checked."""
    allowed = ("mmdsynth.statistics.",) + ((request.module.__name__,) if request.node.get_closest_marker(
        "own_statistic") else ())
    from mmdsynth.engines import StreamEngine
    from mmdsynth.engines.ray_engine import RayEngine
    from mmdsynth.privacy.engine import PrivacyEngine

    outside: list[str] = []

    def checked(original, statistic_of):
        def run(self, *args, **kwargs):
            where = _defined_in(statistic_of(args))
            if not where.startswith(allowed):
                outside.append(f"{original.__qualname__} ran a statistic defined in {where}")
            return original(self, *args, **kwargs)
        return run

    monkeypatch.setattr(StreamEngine, "partials", checked(StreamEngine.partials, lambda args: args[1]))
    monkeypatch.setattr(RayEngine, "partials", checked(RayEngine.partials, lambda args: args[1]))
    monkeypatch.setattr(PrivacyEngine, "_step", checked(PrivacyEngine._step, lambda args: args[1].statistic))
    yield
    assert not outside, f"private rows read outside mmdsynth/statistics/: {sorted(set(outside))}"


@pytest.fixture(scope="session")
def digits():
    """scikit-learn's digits (ships with a dependency: always available)."""
    from mmdsynth.data import load_dataset

    return load_dataset("digits")


def require_data(name: str):
    from mmdsynth.data import is_available

    if is_available(name) is None:
        if os.environ.get("CI") or os.environ.get("MMDSYNTH_REQUIRE_DATA") == "1":
            pytest.fail(f"dataset {name} is required in CI but was not found")
        pytest.skip(f"dataset {name} not available locally")


def assert_learns_digits_and_noise_shows(make_model, digits):
    """Fit ``make_model(epsilon)`` on digits at eps 10 and 0.01: eps 10 must learn the classes (LogReg on
    1,500 samples > 0.6) and eps 0.01, whose release is mostly noise, must score clearly lower (silently
    disabled noise would not). Returns the eps-0.01 model."""
    from mmdsynth.evaluation.downstream import image_classifier_scores

    scores = {}
    for eps in (10.0, 0.01):
        model = make_model(eps)
        model.fit(digits.x_train, digits.y_train, dataset="digits")
        x, y = model.sample(1500, seed=0)
        assert x.shape == (1500, 1, 8, 8) and 0 <= x.min() and x.max() <= 1
        scores[eps] = image_classifier_scores(x, y, digits.x_test, digits.y_test, seed=0)["logreg_acc"]
    assert scores[10.0] > 0.6, scores
    assert scores[0.01] < scores[10.0] - 0.2, scores
    return model


class Guarded:
    """Array-like private data whose values may be read only once ``flag["calibrated"]`` is set
    (its shape is public): calibration-before-reading tests."""

    def __init__(self, arr, flag):
        self.arr, self.flag, self.shape = arr, flag, arr.shape

    def __array__(self, dtype=None, copy=None):
        import numpy as np

        assert self.flag["calibrated"], "private records read before the noise was calibrated"
        return np.asarray(self.arr, dtype=dtype)

    def __len__(self):
        return len(self.arr)
