"""Issue 46: files written before the rename (a model folder, its release, a distilled set, a budget file, made by
0.1's own code: tests/fixtures/written-by-0.1) still load, with one line saying where they come from."""
import logging
import shutil
from pathlib import Path

import pytest

import mmdsynth
from mmdsynth.cli import main
from mmdsynth.methods.distill import DistilledSet
from mmdsynth.privacy import BudgetFile
from mmdsynth.release import Release

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "written-by-0.1"


@pytest.fixture
def old(tmp_path):
    shutil.copytree(OLD, tmp_path / "old")
    return tmp_path / "old"


def _said(caplog, path) -> list[str]:
    return [r.getMessage() for r in caplog.records if str(path) in r.getMessage() and "0.1" in r.getMessage()]


def test_an_old_model_release_set_and_budget_file_load_with_one_line_each(old, caplog):
    caplog.set_level(logging.WARNING)
    release = Release.load(old / "run" / "release")
    assert release.ledger.total() == (1.0, 1e-5)
    assert len(_said(caplog, old / "run" / "release" / "release.json")) == 1
    model = mmdsynth.load(old / "run")
    x, y = model.sample(20)
    assert x.shape == (20, 1, 8, 8) and 0 <= float(x.min()) and float(x.max()) <= 1
    assert len(_said(caplog, old / "run" / "model.json")) == 1
    s = DistilledSet.load(old / "set.npz")
    assert s.x.shape[0] == 10 and s.ledger.total() == (1.0, 1e-5)
    assert len(_said(caplog, old / "set.npz")) == 1
    budget = BudgetFile.open(old / "budget.json")
    assert budget.spent == pytest.approx((1.0, 1e-5)) and len(_said(caplog, old / "budget.json")) == 1
    budget.save()                                   # rewritten in today's format: no line next time
    caplog.clear()
    BudgetFile.open(old / "budget.json")
    assert _said(caplog, old / "budget.json") == []


def test_the_cli_reads_an_old_folder(old, capsys):
    assert main(["inspect", str(old / "run")]) == 0
    out, err = capsys.readouterr()
    assert "epsilon" in out and "written by dpsynth 0.1" in err and len(err.strip().splitlines()) == 1
