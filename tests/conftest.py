import os
from pathlib import Path

import pytest

# Never touch the network from tests; real data comes from DPSYNTH_DATA_DIR.
os.environ.setdefault("DPSYNTH_OFFLINE", "1")
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
if "DPSYNTH_DATA_DIR" not in os.environ and SHARED.is_dir():
    os.environ["DPSYNTH_DATA_DIR"] = str(SHARED)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSYNTH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def digits():
    """scikit-learn's digits (ships with a dependency: always available)."""
    from dpsynth.data import load_dataset

    return load_dataset("digits")


def require_data(name: str):
    from dpsynth.data import is_available

    if is_available(name) is None:
        if os.environ.get("CI") or os.environ.get("DPSYNTH_REQUIRE_DATA") == "1":
            pytest.fail(f"dataset {name} is required in CI but was not found")
        pytest.skip(f"dataset {name} not available locally")
