import json

import numpy as np
import pytest

from mmdsynth.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("datasets", "budget", "inspect", "demo"):
        assert cmd in out


def test_budget_known_values(capsys):
    code, out, _ = run(capsys, "budget", "--epsilon", "1", "--delta", "1e-5")
    assert code == 0 and "sigma = 3.7306" in out
    code, out, _ = run(capsys, "budget", "--epsilon", "1", "--delta", "1e-5", "--releases", "3",
                       "--multipliers", "1,1,10", "--json")
    d = json.loads(out)
    assert d["sigma"] == pytest.approx(5.289, abs=1e-3) and len(d["release_sigmas"]) == 3
    code, out, _ = run(capsys, "budget", "--epsilon", "1", "--delta", "1e-5", "--sample-rate", "0.01",
                       "--steps", "100", "--json")
    assert code == 0 and 0.5 < json.loads(out)["sigma"] < 2
    code, out, _ = run(capsys, "budget", "--sigma", "3.7306", "--delta", "1e-5", "--json")
    assert json.loads(out)["epsilon"] == pytest.approx(1.0, abs=1e-3)


def test_budget_bad_input_exits_2_with_message(capsys):
    code, _, err = run(capsys, "budget", "--epsilon", "0", "--delta", "1e-5")
    assert code == 2 and "epsilon must be a finite number > 0" in err
    code, _, err = run(capsys, "budget", "--epsilon", "1", "--delta", "1e-5", "--releases", "2", "--multipliers", "1,1,10")
    assert code == 2 and "--releases 2 but --multipliers lists 3" in err
    code, _, err = run(capsys, "budget", "--epsilon", "1", "--delta", "1e-5", "--steps", "10")
    assert code == 2 and "--sample-rate and --steps go together" in err


def test_datasets_lists_everything(capsys):
    code, out, _ = run(capsys, "datasets")
    assert code == 0
    for name in ("mnist", "fashion-mnist", "cifar10", "digits", "adult", "census", "covtype", "intrusion"):
        assert name in out
    assert "(bundled with scikit-learn)" in out


def test_demo_then_inspect(capsys, tmp_path):
    code, out, _ = run(capsys, "demo", "--out", str(tmp_path / "demo"), "--seed", "0")
    assert code == 0
    assert "sigma=3.7306" in out
    acc = float(out.split("private ")[1].split(",")[0])
    assert 0.5 < acc < 0.97  # clearly above chance (0.1); noise keeps it below the non-private score
    code, out, _ = run(capsys, "inspect", str(tmp_path / "demo"))           # the summary, for people
    assert code == 0 and "privacy spent: epsilon=1, delta=1e-05 (replace-one neighbours" in out
    assert "release of digits (1,437 records, 10 classes)" in out and "fixed-seed" in out
    row = next(line for line in out.splitlines() if "class-conditional mean embedding" in line).split()
    assert row[0] == "1" and row[-3:] == ["3.731", "0.001392", "0.005192"]      # sigma, sensitivity, noise std
    assert len(out.splitlines()) <= 15 and "--ledger" in out
    code, out, _ = run(capsys, "inspect", str(tmp_path / "demo"), "--ledger")  # every field
    assert code == 0 and "noise multiplier sigma=3.73063" in out and "privacy spent: epsilon=1" in out
    assert "fixed-seed:0" in out
    code, out, _ = run(capsys, "inspect", str(tmp_path / "demo"), "--json")    # unchanged in content
    assert json.loads(out)["ledger"][0]["noise_multiplier"] == pytest.approx(3.7306, abs=1e-4)
    code, _, err = run(capsys, "demo", "--out", str(tmp_path / "demo"))
    assert code == 2 and "already holds a demo release" in err
    with pytest.raises(SystemExit) as exited:                  # refused while parsing, before torch is imported
        run(capsys, "inspect", str(tmp_path / "nothing"))
    assert exited.value.code == 2 and "argument path: no file or folder" in capsys.readouterr().err
    tmp_path.joinpath("empty").mkdir()
    code, _, err = run(capsys, "inspect", str(tmp_path / "empty"))
    assert code == 2 and "no release in" in err


def test_fit_sample_evaluate_resume_on_digits(capsys, tmp_path):
    out = tmp_path / "m"
    fit = ["fit", "--method", "dp-ntk", "--dataset", "digits", "--epsilon", "10", "--iterations", "150",
           "--batch-size", "200", "--ntk-width", "100", "--noise-seed", "0", "--out", str(out), "-q",
           "--budget", str(tmp_path / "budget.json")]
    code, text, err = run(capsys, *fit)
    assert code == 0, err
    assert "epsilon=10" in text and "150 iterations" in text
    code, text, _ = run(capsys, "sample", str(out), "--n", "50", "--out", str(tmp_path / "s.npz"), "--seed", "1")
    assert code == 0
    with np.load(tmp_path / "s.npz") as f:
        assert f["x"].shape == (50, 1, 8, 8) and f["y"].shape == (50,)
    code, text, _ = run(capsys, "evaluate", str(out), "--n", "1000")
    result = json.loads((out / "evaluation.json").read_text())       # images write it too (`report` reads it)
    assert f"LogisticRegression accuracy {result['logreg_acc']:.3f}" in text and "samples.png" in text
    assert len(text.splitlines()) <= 5 and json.loads(run(capsys, "evaluate", str(out), "--n", "1000", "--json")[1]) == result
    assert code == 0 and 0.3 < result["logreg_acc"] < 0.99 and 0.3 < result["mlp_acc"] < 0.99
    assert {"logreg_f1", "mlp_f1"} <= set(result) and result["epsilon"] == 10
    assert (out / "samples.png").stat().st_size > 1000
    # resume: continues training, spends nothing more
    code, text, err = run(capsys, *fit[:-2], "--resume", "--iterations", "160")
    assert code == 0, err
    assert "160 iterations" in text
    assert len(json.loads((tmp_path / "budget.json").read_text())["charges"]) == 1
    code, _, err = run(capsys, *fit)
    assert code == 2 and "already holds a release" in err


def test_fit_sample_bad_input(capsys, tmp_path):
    code, _, err = run(capsys, "sample", str(tmp_path), "--n", "5", "--out", str(tmp_path / "x.txt"))
    assert code == 2 and ".npz" in err and ".csv" in err
    code, _, err = run(capsys, "sample", str(tmp_path), "--n", "5", "--out", str(tmp_path / "x.npz"))
    assert code == 2 and "model.json is missing" in err and not (tmp_path / "x.npz").exists()
    code, _, err = run(capsys, "fit", "--method", "dp-ntk", "--dataset", "nope", "--epsilon", "1",
                       "--out", str(tmp_path / "m"))
    assert code == 2 and "digits" in err and not (tmp_path / "m").exists()
    code, _, err = run(capsys, "fit", "--method", "dp-ntk", "--dataset", "digits", "--out", str(tmp_path / "m"))
    assert code == 2 and "--epsilon is required" in err and not (tmp_path / "m").exists()
    (tmp_path / "x.csv").write_text("a,y\n1,0\n")
    code, _, err = run(capsys, "fit", "--method", "dp-merf", "--csv", str(tmp_path / "x.csv"), "--out",
                       str(tmp_path / "m"))
    assert code == 2 and "--schema" in err
    with pytest.raises(SystemExit) as exc:         # refused while parsing, before torch is imported
        main(["fit", "--method", "dp-merf", "--csv", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "m")])
    assert exc.value.code == 2 and "no file at" in capsys.readouterr().err and not (tmp_path / "m").exists()


def test_every_option_of_every_command_has_help():
    """`--help` explains each option (issue 35's list: budget --epsilon/--delta, sample --n/--seed,
    inspect --json, demo's options)."""
    from mmdsynth.cli import add_method_options, build_parser

    parser = build_parser()
    add_method_options(parser.fit_parser)
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    missing = [f"{name} {a.option_strings[0]}" for name, p in sub.choices.items() for a in p._actions
               if a.option_strings and a.help in (None, "") and a.dest != "help"]
    assert not missing, missing


def test_a_resume_to_fewer_iterations_than_done_is_refused(tmp_path, capsys):
    out = tmp_path / "m"
    base = ["fit", "--method", "dp-merf", "--dataset", "digits", "--epsilon", "1", "--batch-size", "50",
            "--n-features", "40", "--checkpoint-every", "2", "--out", str(out), "-q"]
    assert main(base + ["--iterations", "4"]) == 0
    assert main(["fit", "--resume", "--out", str(out), "--iterations", "2", "-q"]) == 2
    assert "fewer than the 4 the checkpoint" in capsys.readouterr().err
    assert main(["fit", "--resume", "--out", str(out), "--iterations", "6", "-q"]) == 0


def test_sample_says_how_many_points_a_support_set_holds(tmp_path, capsys):
    out = tmp_path / "k"
    assert main(["fit", "--method", "dp-kip", "--dataset", "digits", "--epsilon", "1", "--images-per-class", "1",
                 "--epochs", "1", "--batch-size", "100", "--out", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["sample", str(out), "--n", "5000", "--out", str(tmp_path / "s.npz")]) == 0
    text = capsys.readouterr().out
    assert "wrote 10 samples" in text and "a fixed set of 10, not 5000" in text


def test_an_unknown_method_is_one_line(capsys):
    code, out, err = run(capsys, "fit", "--method", "nope", "--dataset", "digits", "--epsilon", "1", "--out", "x")
    assert code == 2 and err.count("\n") == 1 and "unknown method 'nope'" in err and "dp-ntk" in err


def test_ctrl_c_while_torch_is_still_loading_is_one_line(monkeypatch, capsys):
    """Ctrl-C in the first seconds (fit's method options import torch) used to print a 39-line traceback."""
    import mmdsynth.cli as cli

    def interrupted(parser, **_):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "add_method_options", interrupted)
    code, out, err = run(capsys, "fit", "--method", "dp-ntk", "--dataset", "digits", "--epsilon", "1")
    assert code == 130 and err == "mmdsynth: interrupted\n" and out == ""


def test_top_level_help_names_every_registered_method(capsys):
    from mmdsynth.methods import METHODS

    with pytest.raises(SystemExit):
        main(["--help"])
    text = "".join(capsys.readouterr().out.lower().split())        # argparse may wrap a name at its hyphen
    for name in METHODS:
        assert name in text, name


def test_inspect_lines_fit_the_width_and_break_between_words(capsys, tmp_path):
    """`inspect`'s summary (issue 46): every line fits its 100 columns and is broken between words, never inside
    one: the long lines (the privacy unit, a table's feature spec and what it captures, zero-out accounting, a
    sampled release's steps) read whole once the lines are joined, and a ledger description too long for its
    column is cut between words with " ..."."""
    import pandas as pd
    import torch

    from mmdsynth.cli.inspect import WIDTH
    from mmdsynth.embedding import release_sampled_embedding
    from mmdsynth.features import RandomConvFeatures
    from mmdsynth.release import Release

    rng = np.random.default_rng(0)
    pd.DataFrame({"age": rng.integers(18, 90, 300), "blood": rng.choice(["A", "B", "AB", "O"], 300),
                  "sex": rng.choice(["f", "m"], 300), "bmi": rng.normal(26, 4, 300).round(1),
                  "outcome": rng.choice(["no", "yes"], 300)}).to_csv(tmp_path / "p.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps({"label": "outcome", "label_categories": ["no", "yes"], "columns": [
        {"name": "age", "type": "numeric", "bounds": [0, 120], "integer": True},
        {"name": "blood", "type": "categorical", "categories": ["A", "B", "AB", "O"]},
        {"name": "sex", "type": "categorical"}, {"name": "bmi", "type": "numeric", "bounds": [10, 60]}]}))
    table = tmp_path / "table"
    code, _, err = run(capsys, "fit", "--method", "dp-merf", "--csv", str(tmp_path / "p.csv"), "--schema",
                       str(tmp_path / "s.json"), "--label", "outcome", "--epsilon", "1", "--infer-schema", "0.1",
                       "--release-only", "--out", str(table))
    assert code == 0, err
    images, labels = torch.rand(40, 1, 8, 8, generator=torch.Generator().manual_seed(0)).numpy(), np.arange(40) % 2
    release_sampled_embedding(RandomConvFeatures((1, 8, 8), n_networks=8, width=2), images, labels, epsilon=1.0,
                              delta=1e-5, n_classes=2, sample_rate=0.5, neighbouring="add_remove").save(tmp_path / "z")

    for folder, release_dir in ((table, table / "release"), (tmp_path / "z", tmp_path / "z")):
        code, out, _ = run(capsys, "inspect", str(folder))
        assert code == 0
        long = [line for line in out.splitlines() if len(line) > WIDTH and " " in line.strip()]
        assert not long, long                          # only a word longer than a line (a path) may pass the edge
        joined = " ".join(out.split())
        release = Release.load(release_dir)
        spec = release.feature_spec
        assert f"one record = {release.ledger.entries[0].privacy_unit}" in joined
        for key, value in spec.items():
            if key not in ("name", "chunk_size", "fast", "captures") and not isinstance(value, (dict, list)):
                assert f"{key} {value}" in joined, key
        rows = [line for line in out.splitlines() if line[:4].strip().isdigit()]
        assert len(rows) == len(release.ledger.entries)
        for row, entry in zip(rows, release.ledger.entries):
            shown = row[6:64].rstrip()
            assert shown == entry.description or (shown.endswith(" ...") and
                                                  (entry.description + " ").startswith(shown[:-4] + " ")), shown
        if folder == table:                            # what a table's embedding holds, in words: whole
            assert len(spec["captures"]) > 2 * WIDTH and f"captures: {spec['captures']}" in joined
    assert ("(add/remove accounting, which holds for zero-out neighbours with m public, NOT for adding or removing "
            "a record;") in joined
    assert "each reading a secret Poisson sample at rate 0.5; each step's noise std above" in joined



def test_commands_that_do_not_train_never_import_torch():
    """Issue 83: every command paid about 5 s importing torch, even `inspect`, which reads a ledger. `inspect` reads
    the tensors' shapes from their file's header and imports neither torch nor dp-accounting; `datasets` and `budget`
    run without torch."""
    import subprocess
    import sys
    from pathlib import Path

    run = Path(__file__).resolve().parents[1] / "fixtures" / "written-by-0.1" / "run"
    code = ("import sys; from mmdsynth.cli import main; "
            f"codes = [main(['inspect', {str(run)!r}]), main(['inspect', {str(run)!r}, '--ledger'])]; "
            "seen = sorted(m for m in ('torch', 'dp_accounting') if m in sys.modules); "
            "codes.append(main(['datasets'])); "
            "codes.append(main(['budget', '--epsilon', '1', '--delta', '1e-5'])); "
            "print(codes, seen, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[0, 0, 0, 0] [] False", done.stdout[-2000:]
    assert "tensors: embedding (50, 10) float64" in done.stdout


def test_a_long_table_fit_shows_its_phases_on_a_terminal_only(tmp_path):
    """Issue 83: on a terminal `fit` shows each phase of a hybrid fit as it runs (reading, the marginals' releases
    with a bar, the kernel embedding, the model's estimate, the pool, the reweighting with a bar) with its seconds; off a terminal
    (a log, a pipe) stderr holds none of it, so a refusal there stays one line."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from support import SCHEMA, toy_table

    toy_table(400).to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    argv = [sys.executable, "-m", "mmdsynth.cli", "fit", "--csv", str(tmp_path / "t.csv"), "--schema",
            str(tmp_path / "s.json"), "--label", "y", "--epsilon", "1", "--method", "hybrid", "--iters", "50",
            "--n-features", "100", "--pool", "2"]
    phases = ["reading t.csv ...", "measuring and selecting marginals:", "measuring the kernel embedding ...",
              "estimating the graphical model ...", "sampling a pool of 800 rows from the model ...",
              "the releases' statistics of the pool ...", "reweighting the pool toward the releases:"]
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))    # a terminal 120 wide
    proc = subprocess.Popen(argv + ["--out", str(tmp_path / "tty")], stdin=follower, stdout=follower, stderr=follower,
                            close_fds=True)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:                      # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=600) == 0, seen.decode(errors="replace")[-2000:]
    text = seen.decode(errors="replace").replace("\r", "\n")
    for what in phases:
        assert what in text, (what, text[-3000:])
    piped = subprocess.run(argv + ["--out", str(tmp_path / "pipe")], capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0, piped.stderr
    assert not any(what.split(" ...")[0].rstrip(":") in piped.stderr for what in phases), piped.stderr
