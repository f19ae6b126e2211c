"""No silent surprises (issue 14): each case is a typed error or a clear warning."""
import json
import warnings

import pandas as pd
import pytest

import mmdsynth.runtime as runtime
import mmdsynth.training as training
from mmdsynth import DPMERF
from mmdsynth.cli import cli_message, main
from mmdsynth.data import read_table
from mmdsynth.errors import InvalidParameterError, SchemaError
from mmdsynth.training import describe_trend, loss_trend, progress_rate

from support import WIDE, heavy_table, interrupt_on_call


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def csv_run(tmp_path):
    heavy_table(400).to_csv(tmp_path / "train.csv", index=False)
    (tmp_path / "schema.json").write_text(json.dumps(WIDE))
    return tmp_path, ["fit", "--method", "dp-merf", "--csv", tmp_path / "train.csv", "--schema",
                      tmp_path / "schema.json", "--label", "y", "--iterations", "20", "--batch-size", "100",
                      "--n-features", "100", "-q", "--noise-seed", "0"]


def test_unlisted_csv_columns_are_refused_by_name_or_dropped_on_request(tmp_path, capsys):
    df = heavy_table(50).assign(secret_id=range(50), notes="x")
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(SchemaError, match=r"\['secret_id', 'notes'\].*drop_unlisted=True"):
        read_table(tmp_path / "t.csv", WIDE_SCHEMA())
    assert list(read_table(tmp_path / "t.csv", WIDE_SCHEMA(), drop_unlisted=True).columns) == \
        ["amount", "month", "rate", "y"]
    (tmp_path / "schema.json").write_text(json.dumps(WIDE))
    fit = ["fit", "--method", "dp-merf", "--csv", tmp_path / "t.csv", "--schema", tmp_path / "schema.json",
           "--label", "y", "--iterations", "5", "--n-features", "50", "-q"]
    code, _, err = run(capsys, *fit, "--out", tmp_path / "a")
    assert code == 2 and "secret_id" in err and "--drop-unlisted" in err and "drop_unlisted=" not in err
    assert not (tmp_path / "a").exists()
    assert run(capsys, *fit, "--out", tmp_path / "b", "--drop-unlisted")[0] == 0


def WIDE_SCHEMA():
    from mmdsynth.data import Schema
    return Schema.from_dict(WIDE)


def test_foreign_folders_and_existing_files_need_force(csv_run, capsys):
    root, fit = csv_run
    (root / "photos").mkdir()
    (root / "photos" / "cat.jpg").write_bytes(b"jpg")
    code, _, err = run(capsys, *fit, "--out", root / "photos")
    assert code == 2 and "not an mmdsynth run" in err and "--force" in err and not (root / "photos" / "release").exists()
    assert run(capsys, *fit, "--out", root / "photos", "--force")[0] == 0
    assert (root / "photos" / "cat.jpg").exists() and (root / "photos" / "model.json").exists()
    (root / "s.csv").write_text("keep me")
    code, _, err = run(capsys, "sample", root / "photos", "--n", 10, "--out", root / "s.csv")
    assert code == 2 and "exists" in err and "--force" in err and (root / "s.csv").read_text() == "keep me"
    assert run(capsys, "sample", root / "photos", "--n", 10, "--out", root / "s.csv", "--force")[0] == 0
    assert len(pd.read_csv(root / "s.csv")) == 10


def test_evaluate_real_without_real_rows_is_an_error(csv_run, capsys):
    root, fit = csv_run
    assert run(capsys, *fit, "--out", root / "m")[0] == 0
    heavy_table(100, seed=5).to_csv(root / "test.csv", index=False)
    code, _, err = run(capsys, "evaluate", root / "m", "--test", root / "test.csv", "--real")
    assert code == 2 and "--real-train FILE" in err and "Traceback" not in err


def test_resume_needs_only_out_and_reads_no_data(csv_run, capsys):
    root, fit = csv_run
    code, out, _ = run(capsys, *fit, "--out", root / "m")
    assert code == 0 and ("converge" in out or "too few iterations" in out)
    (root / "train.csv").unlink()                          # the private data is gone: resume must not need it
    code, out, err = run(capsys, "fit", "--resume", "--out", root / "m", "--iterations", 40, "-q")
    assert code == 0, err
    assert "40 iterations" in out and "dp-merf" in out
    meta = json.loads((root / "m" / "model.json").read_text())
    assert meta["iterations_done"] == 40 and meta["params"]["n_features"] == 100 and meta["params"]["noise_seed"] == 0


def test_ctrl_c_checkpoints_and_exits_130_with_one_line(csv_run, capsys, monkeypatch):
    root, fit = csv_run
    real_loss = interrupt_on_call(monkeypatch, training, "embedding_loss", 13)
    code, _, err = run(capsys, *fit, "--out", root / "m")
    assert code == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"Resume with: mmdsynth fit --resume --out {root / 'm'}" in err and "iteration 12" in err
    assert json.loads((root / "m" / "checkpoint.json").read_text())["iteration"] == 12
    monkeypatch.setattr(training, "embedding_loss", real_loss)
    assert run(capsys, "fit", "--resume", "--out", root / "m", "-q")[0] == 0
    assert json.loads((root / "m" / "model.json").read_text())["iterations_done"] == 20


def test_cli_messages_speak_flags_python_messages_speak_parameters(capsys):
    with pytest.raises(InvalidParameterError, match=r"epsilon=1.0"):
        DPMERF(epsilon=-1).fit(heavy_table(20), label="y", schema=WIDE)
    code, _, err = run(capsys, "fit", "--method", "dp-merf", "--dataset", "digits", "--epsilon", "-1", "--out", "/tmp/x")
    assert code == 2 and "--epsilon must" in err and "--epsilon 1.0" in err and "epsilon=" not in err
    assert cli_message("pass resume=True or schema_share=0.1") == "pass --resume or --infer-schema 0.1"
    assert cli_message("the shares proportions_share=0.1") == "the shares proportions_share=0.1"   # no flag: as is


def test_warnings_on_the_command_line_are_one_line_without_source(tmp_path, capsys):
    code, _, err = run(capsys, "fit", "--method", "dp-merf", "--dataset", "digits", "--epsilon", "1", "--delta",
                       "0.01", "--iterations", "2", "--n-features", "20", "-q", "--out", tmp_path / "m")
    assert code == 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and all(line.startswith("mmdsynth: warning: ") for line in lines)
    assert "--delta 0.01" in err and "warnings.warn" not in err and ".py:" not in err
    assert warnings.showwarning.__name__ != "_show_warning"           # restored after the command


def test_fit_help_states_the_defaults_for_user_tables(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())        # as read, not as wrapped
    assert ("--csv (your table): epsilon 1, delta 1e-5 up to 10,000 records, then at most 1/(10 x records), 2000 "
            "iterations, batch 200") in text
    assert "quantile-encoded" in text and "not extra charges" in text


def test_ledger_says_entries_are_shares_of_one_budget():
    m = DPMERF(epsilon=1, iterations=2, batch_size=50, n_features=50, noise_seed=0).fit(heavy_table(200), label="y",
                                                                                       schema=WIDE)
    text = m.release_.ledger.format()
    assert "entries [1], [2], [3] are shares of ONE budget of epsilon=1, delta=1e-05" in text
    assert "not separate charges" in text


def test_progress_is_rate_limited_off_a_terminal_and_convergence_is_judged(monkeypatch):
    class Pipe:
        def isatty(self):
            return False
    monkeypatch.setattr(runtime.sys, "stderr", Pipe())
    assert progress_rate()["mininterval"] >= 60
    flat = [1.0 + 0.001 * (i % 3) for i in range(400)]
    falling = [10.0 - 0.02 * i for i in range(400)]
    assert loss_trend(flat)["converged"] is True and "converged" in describe_trend(loss_trend(flat))
    trend = loss_trend(falling)
    assert trend["converged"] is False and trend["relative_change"] < -0.2
    assert "not converged" in describe_trend(trend)
    assert loss_trend([1.0] * 5)["converged"] is None


def test_progress_bar_does_not_flood_a_log(csv_run):
    import subprocess
    import sys

    root, fit = csv_run
    argv = [str(a) for a in fit if a != "-q"]
    argv[argv.index("--iterations") + 1] = "150"
    proc = subprocess.run([sys.executable, "-m", "mmdsynth.cli", *argv, "--out", str(root / "m")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert 1 <= proc.stderr.count("training generator") <= 3, proc.stderr[-500:]      # not one line per iteration
    assert "iterations:" in proc.stdout or "converge" in proc.stdout
