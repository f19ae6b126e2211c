"""Issue 46: careless inputs a new user makes, one table: each gets exit status 2 and a one-line message that
names the problem (or does what the user asked), and leaves no half-written output behind."""
import json

import pytest

import mmdsynth

from mmdsynth.cli import main

from support import SCHEMA, WIDE, heavy_table, toy_table


@pytest.fixture
def files(tmp_path):
    heavy_table(200).to_csv(tmp_path / "train.csv", index=False)
    (tmp_path / "wide.json").write_text(json.dumps(WIDE))
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "latin.csv").write_bytes("amount,month,rate,y\n1,2,0.5,a\n".encode() + "3,4,0.5,\xe9\n".encode("latin-1"))
    (tmp_path / "huge.json").write_text(json.dumps({**WIDE, "columns": [
        {"name": "amount", "type": "numeric", "bounds": [0, 1e304]}] + WIDE["columns"][1:]}))
    toy_table(60).to_csv(tmp_path / "toy.csv", index=False)
    (tmp_path / "toy.json").write_text(json.dumps(SCHEMA))
    toy_table(60).rename(columns={"y": "Y"}).to_csv(tmp_path / "renamed.csv", index=False)
    smoker = {**SCHEMA, "columns": SCHEMA["columns"][:3] + [{"name": "smoker", "type": "boolean"}]}
    (tmp_path / "bool.json").write_text(json.dumps(smoker))
    toy_table(60).assign(smoker="maybe").to_csv(tmp_path / "maybe.csv", index=False)
    return tmp_path


FIT = ["fit", "--method", "dp-merf", "--schema", "{d}/wide.json", "--label", "y", "--epsilon", "1"]
CASES = [  # (argv, first words of the one-line message)
    (FIT + ["--csv", "{d}/empty.csv", "--out", "{d}/o"], "mmdsynth: error: {d}/empty.csv is empty"),
    (FIT + ["--csv", "{d}/latin.csv", "--out", "{d}/o"], "mmdsynth: error: {d}/latin.csv is not utf-8 text"),
    (FIT + ["--csv", "{d}/train.csv", "--epsilon", "1e9", "--out", "{d}/o"], "mmdsynth: error: --epsilon 1e+09 is above 1000"),
    (FIT + ["--csv", "{d}/train.csv", "--iterations", "many", "--out", "{d}/o"],
     "mmdsynth fit: error: argument --iterations: invalid int value: 'many'"),
    (FIT + ["--csv", "{d}/train.csv", "--categorical-pairs", "maybe", "--out", "{d}/o"],
     "mmdsynth fit: error: argument --categorical-pairs: takes one of auto, true, false; got 'maybe'"),
    (FIT + ["--csv", "{d}/train.csv", "--conditional", "maybe", "--out", "{d}/o"],
     "mmdsynth fit: error: argument --conditional: takes true or false; got 'maybe'"),
    (["fit", "--method", "dp-merf", "--csv", "{d}/train.csv", "--schema", "{d}/huge.json", "--label", "y",
      "--epsilon", "1", "--out", "{d}/o"], "mmdsynth: error: numeric column 'amount': bounds [0, 1e+304] span 1e+304"),
    (FIT + ["--csv", "{d}/train.csv", "--conditional", "false", "--out", "{d}/o"],   # was dropped: now applied, so refused
     "mmdsynth: error: tables are modelled class-conditionally: use conditional=True"),
    (["evaluate", "{d}", "--n", "0"], "mmdsynth evaluate: error: argument --n: takes a whole number >= 1; got '0'"),
    (["sample", "{d}", "--n", "-3"], "mmdsynth sample: error: argument --n: takes a whole number >= 1; got '-3'"),
    (["sample", "{d}/o", "--n", "5"], "mmdsynth sample: error: argument model: no file or folder '{d}/o'"),
    (["inspect", "{d}/o"], "mmdsynth inspect: error: argument path: no file or folder '{d}/o'"),
    (["budget", "--epsilon", "1e4", "--delta", "1e-5"], "mmdsynth: error: --epsilon 10000 is above 1000"),
    # issue 83: what a newcomer met
    (["fit", "--csv", "{d}/renamed.csv", "--schema", "{d}/toy.json", "--label", "y", "--epsilon", "1", "--out",
      "{d}/o"], "mmdsynth: error: {d}/renamed.csv lacks the declared label ['y'] and has column(s) ['Y'] that the "
                "schema does not list: is one of them the same column under another name"),
    (["fit", "--dataset", "adultt", "--out", "{d}/o"], "mmdsynth: error: unknown dataset 'adultt'"),
    (["fit", "--csv", "{d}/toy.csv", "--schema", "{d}/toy.json", "--label", "Y", "--epsilon", "1", "--out", "{d}/o"],
     "mmdsynth: error: --label Y but the schema's label is 'y'; they must agree (leave --label out"),
    (FIT + ["--csv", "{d}/train.csv", "--epsilon", "0", "--out", "{d}/o"],
     "mmdsynth: error: --epsilon must be a finite number > 0"),
    (["fit", "--method", "dp-merf", "--csv", "{d}/maybe.csv", "--schema", "{d}/bool.json", "--label", "y", "--epsilon",
      "1", "--out", "{d}/o"], "mmdsynth: error: boolean column 'smoker' has 60 value(s) (1 distinct) that are not "
                              "booleans (true/false, yes/no, y/n, t/f, 1/0, in any case)"),
]


@pytest.mark.parametrize("argv, first", CASES, ids=[" ".join(a[:2] + a[-4:-2]) for a, _ in CASES])
def test_a_careless_input_gets_one_line_naming_the_problem_and_leaves_nothing(files, capsys, argv, first):
    argv = [a.format(d=files) for a in argv]
    with pytest.raises(SystemExit) if "error: argument" in first else _no_exit() as exited:
        code = main(argv)
    if exited is not None and exited.value is not None:
        code = exited.value.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(first.format(d=files)), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "usage:" not in err
    assert not (files / "o").exists()


#: a reader that stops early (`mmdsynth datasets | head -1`): the command ends quietly, no traceback, with 141
#: (128 + SIGPIPE, what a Unix tool the closed pipe killed gives; `--help` is printed by argparse, which ignores the
#: closed pipe itself and exits 0)
CLOSED_PIPE = [(["datasets"], 141), (["budget", "--epsilon", "1", "--delta", "1e-5"], 141),
               (["inspect", "{d}/toy.json"], 2), (["fit", "--help"], 0), (["--help"], 0)]


@pytest.mark.parametrize("argv, status", CLOSED_PIPE, ids=[" ".join(a) for a, _ in CLOSED_PIPE])
def test_stdout_closed_early_ends_quietly(files, argv, status):
    import subprocess
    import sys
    from pathlib import Path

    command = [str(Path(sys.executable).parent / "mmdsynth")] + [a.format(d=files) for a in argv]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()                       # before the command writes a byte: `| head -0`, deterministic
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == status, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err
    if status != 2:                           # an error is still said, on stderr, in its one line
        assert err == "", err


class _no_exit:
    value = None

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("flag, param, value", [("--categorical-pairs", "categorical_pairs", False),
                                                 ("--numeric-categorical", "numeric_categorical", False),
                                                 ("--categorical-pairs", "categorical_pairs", True),
                                                 ("--rff-inputs", "rff_inputs", "all")])
def test_a_generated_flag_given_is_applied_false_too(files, capsys, flag, param, value):
    """`--conditional false` and friends were dropped as if absent (issue 46): the fitted model holds the value."""
    out = files / "m"
    code = main(["fit", "--method", "dp-merf", "--csv", str(files / "toy.csv"), "--schema", str(files / "toy.json"),
                 "--label", "y", "--epsilon", "1", "--iterations", "2", "--n-features", "50", "-q", "--noise-seed",
                 "0", "--out", str(out), flag, json.dumps(value) if not isinstance(value, str) else value])
    assert code == 0, capsys.readouterr().err
    assert json.loads((out / "model.json").read_text())["params"][param] == value


def test_a_corrupt_release_is_named_corrupt_not_replaced(tmp_path, capsys):
    import shutil
    from pathlib import Path

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "written-by-0.1" / "run", run)
    text = (run / "release" / "release.json").read_text()
    (run / "release" / "release.json").write_text(text[: len(text) // 2])          # truncated
    assert main(["sample", str(run), "--n", "5", "--out", str(tmp_path / "s.npz")]) == 2
    err = capsys.readouterr().err
    assert "is not valid JSON (truncated or corrupt?)" in err and "replaced" not in err
    assert not (tmp_path / "s.npz").exists()


def test_ctrl_c_after_the_release_says_the_budget_is_spent_and_how_to_resume(files, capsys, monkeypatch):
    from mmdsynth.methods import base

    def interrupt(self, *a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(base.KernelGeneratorMethod, "_train", interrupt)
    out = files / "m"
    code = main(["fit", "--method", "dp-merf", "--csv", str(files / "toy.csv"), "--schema", str(files / "toy.json"),
                 "--label", "y", "--epsilon", "1", "--iterations", "2", "--n-features", "50", "-q", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 130 and len(err.splitlines()) == 1
    assert "after the private release was written" in err and "privacy budget is spent" in err
    assert f"mmdsynth fit --resume --out {out}" in err


def test_log_records_and_warnings_share_one_form(capsys):
    import logging
    import warnings

    from mmdsynth.cli import _LineFormatter, _show_warning

    record = logging.LogRecord("mmdsynth.methods.kernel", logging.WARNING, __file__, 1, "pairs left out: %d", (3,), None)
    assert _LineFormatter().format(record) == "mmdsynth: warning: pairs left out: 3"
    _show_warning(warnings.WarningMessage("noise swamps", UserWarning, __file__, 1).message, UserWarning, __file__, 1)
    assert capsys.readouterr().err.strip() == "mmdsynth: warning: noise swamps"


def test_dp_hp_defaults_fit_a_table_with_few_encoded_inputs(tmp_path, capsys):
    import numpy as np
    import pandas as pd

    g = np.random.default_rng(0)
    pd.DataFrame({"a": g.random(200), "b": g.choice(["u", "v"], 200), "y": g.choice(["p", "q"], 200)}).to_csv(
        tmp_path / "t.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps({"columns": [{"name": "a", "type": "numeric", "bounds": [0, 1]},
                                                             {"name": "b", "type": "categorical", "categories": ["u", "v"]}],
                                                 "label": "y", "label_categories": ["p", "q"]}))
    code = main(["fit", "--method", "dp-hp", "--csv", str(tmp_path / "t.csv"), "--schema", str(tmp_path / "s.json"),
                 "--label", "y", "--epsilon", "1", "--iterations", "2", "-q", "--out", str(tmp_path / "m")])
    assert code == 0, capsys.readouterr().err                      # 3 encoded inputs; the table default was 5


@pytest.mark.parametrize("fault", ["latin-1 bytes", "a malformed line"])
@pytest.mark.parametrize("how", ["read_table", "shards"])
def test_unreadable_csv_files_are_refused_naming_the_rule_never_a_byte_or_a_line(fault, how, tmp_path):
    """Issue 80: a non-UTF-8 shard was refused with the decoder's text, which quotes the private byte, and a
    malformed line escaped as pandas' error with its line number."""
    from mmdsynth.data import Schema, ShardedTable, read_table
    from mmdsynth.errors import DataValidationError

    rows = ["x,y"] + [f"0.{k},a" for k in range(1, 40)]
    rows[37] = "0.5,Zoë" if fault == "latin-1 bytes" else "0.5,a,extra,cells"
    path = tmp_path / "t.csv"
    path.write_bytes("\n".join(rows).encode("latin-1"))
    schema = {"columns": [{"name": "x", "type": "numeric", "bounds": [0, 1]}], "label": "y",
              "label_categories": ["a", "Zoë"]}
    with pytest.raises(DataValidationError) as err:
        if how == "read_table":
            read_table(path, Schema.from_dict(schema), label="y")
        else:
            table = ShardedTable(path, schema, n_records=39, batch_rows=10)
            for _ in table.batches(0):
                pass
    text = str(err.value)
    assert "t.csv" in text and ("not utf-8 text" in text if fault == "latin-1 bytes" else "well-formed" in text)
    said = text.replace(str(path), "FILE")        # the user's own path may hold any digits (pytest-38/...)
    for quoted in ("0xeb", "position", "line 38", "38", "37", "Zo", "byte 1", "byte 2", "byte 3", "byte 4"):
        assert quoted not in said, (quoted, text)


def test_files_people_have_are_read_as_the_plain_csv(tmp_path):
    """Issue 83: a compressed CSV was refused, a semicolon- or tab-separated one read as one unlisted column; the
    delimiter is the one whose split of the header line gives the declared columns (or --sep), and yes/no, y/n,
    t/f are booleans."""
    import pandas as pd

    from mmdsynth.data import Schema, ShardedTable, read_table

    df = toy_table(50).assign(smoker=lambda d: d.smoker.map({"yes": "Yes", "no": "N"}))
    schema = Schema.from_dict({**SCHEMA, "columns": SCHEMA["columns"][:3] + [{"name": "smoker", "type": "boolean"}]})
    df.to_csv(tmp_path / "plain.csv", index=False)
    plain = read_table(tmp_path / "plain.csv", schema)
    assert plain.smoker.tolist() == (df.smoker == "Yes").map({True: "True", False: "False"}).tolist()
    for name, sep in [("t.csv.gz", ","), ("t.csv.bz2", ","), ("semi.csv", ";"), ("tab.csv", "\t"), ("pipe.csv", "|")]:
        df.to_csv(tmp_path / name, index=False, sep=sep)
        pd.testing.assert_frame_equal(read_table(tmp_path / name, schema), plain, obj=name)
        shards = ShardedTable(tmp_path / name, schema, n_records=50)
        pd.testing.assert_frame_equal(pd.concat([b for b, _ in shards.batches(0)], ignore_index=True), plain, obj=name)
    assert read_table(tmp_path / "semi.csv", schema, sep=";").equals(plain)


def test_the_delimiter_is_read_off_the_header_record_alone(tmp_path):
    """csv_delimiter reads the header record once (not a pandas parse per delimiter): a quoted name may hold a
    delimiter or a line break, a byte order mark and blank lines before it are skipped, compressed files are read
    by their suffix, and no data row sways the choice (rows full of semicolons under a comma header)."""
    import gzip

    from mmdsynth.data.user import csv_delimiter

    def written(name, text, encoding="utf-8"):
        path = tmp_path / name
        if name.endswith(".gz"):
            with gzip.open(path, "wt", encoding=encoding, newline="") as fh:
                fh.write(text)
        else:
            path.write_bytes(text.encode(encoding))
        return path

    rows = "".join("1;2;3;4;5;6\n" for _ in range(50))
    assert csv_delimiter(written("comma.csv", "a,b,c\n" + rows), ["a", "b", "c"]) == ","
    assert csv_delimiter(written("quoted.csv", '"a,b";"multi\nline";c\n1;2;3\n'), ["a,b", "multi\nline", "c"]) == ";"
    assert csv_delimiter(written("bom.csv", "\ufeffa\tb\tc\n1\t2\t3\n"), ["a", "b", "c"]) == "\t"
    assert csv_delimiter(written("blank.csv", "\n\na|b|c\n1|2|3\n"), None) == "|"
    assert csv_delimiter(written("t.csv.gz", "a;b;c\n1;2;3\n"), ["a", "b", "c"]) == ";"
    assert csv_delimiter(written("latin.csv", "\u00e9;b;c\n1;2;3\n", "latin-1"), ["\u00e9", "b"], "latin-1") == ";"
    assert csv_delimiter(written("bad.csv", "\u00e9;b;c\n1;2;3\n", "latin-1"), ["b", "c"]) == ","   # not utf-8
    assert csv_delimiter(written("empty.csv", ""), ["a"]) == ","


def test_a_misspelled_keyword_names_the_method_and_the_closest_parameter():
    from mmdsynth.errors import InvalidParameterError
    from mmdsynth.methods import DPMERF

    with pytest.raises(InvalidParameterError, match=r"dp-merf takes no parameter 'iteratons'; did you mean "
                                                    r"'iterations'\?") as err:
        DPMERF(1.0, iteratons=5)
    assert isinstance(err.value, TypeError)         # what Python itself raises for an unknown keyword


def test_python_fit_refuses_a_column_the_schema_does_not_list_as_the_command_line_does():
    """Issue 83: `mmdsynth.fit(df, ...)` dropped a column the schema does not list, where the CLI and read_table
    refuse it."""
    import mmdsynth
    from mmdsynth.errors import SchemaError

    df = toy_table(300).assign(notes="free text")
    for method in ("dp-merf", "mst", "dp-kip"):
        with pytest.raises(SchemaError, match=r"the DataFrame has column\(s\) \['notes'\] that the schema does not "
                                              r"list.*df\.drop"):
            mmdsynth.fit(df, label="y", schema=SCHEMA, epsilon=1.0, method=method)


def test_a_table_too_small_to_release_anything_is_refused(tmp_path, capsys):
    """Issue 83: a 1-row table fitted ("converged") and sampled copies of its row. Fewer than 10 records (persons under
    a person unit: the public count) are refused before anything is read, in Python and on the command line."""
    import mmdsynth
    from mmdsynth.errors import DataValidationError

    with pytest.raises(DataValidationError, match=r"the table holds 9 rows; a fit needs at least 10"):
        mmdsynth.fit(toy_table(9), label="y", schema=SCHEMA, epsilon=1.0, method="mst")
    persons = toy_table(40).assign(pid=[f"p{i % 5}" for i in range(40)])     # 40 rows, 5 persons
    schema = mmdsynth.Schema.from_dict(SCHEMA).with_privacy_unit("pid")
    with pytest.raises(DataValidationError, match=r"the table holds 5 persons"):
        mmdsynth.fit(persons, label="y", schema=schema, epsilon=1.0, method="dp-merf")
    toy_table(1).to_csv(tmp_path / "one.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    assert main(["fit", "--csv", str(tmp_path / "one.csv"), "--schema", str(tmp_path / "s.json"), "--label", "y",
                 "--epsilon", "1", "--out", str(tmp_path / "run")]) == 2
    captured = capsys.readouterr()
    assert "the table holds 1 row; a fit needs at least 10" in captured.err and "method:" not in captured.out
    assert not (tmp_path / "run").exists()


def test_the_default_delta_is_a_public_function_of_the_count(tmp_path, recwarn):
    """Issue 83: a fit given no delta takes choice.default_delta of its public count (1e-5 up to 10,000 records, then
    the largest power of ten at most 1/(10 n)), never a value the library then warns about; a delta given wins, and a
    registered dataset keeps the papers' 1e-5."""
    import mmdsynth
    from mmdsynth.choice import default_delta
    from mmdsynth.cli.fit import _default_delta

    assert default_delta(None) == default_delta(10) == default_delta(10_000) == 1e-5
    assert default_delta(10_001) == default_delta(100_000) == 1e-6 and default_delta(327_346) == 1e-7
    # at most a tenth of 1/n above 10,000 records: validation.warn_delta_vs_n (delta >= 1/n) never fires on it
    assert all(default_delta(n) <= 0.1 / n for n in (10_001, 23_790, 99_999, 100_001, 327_346, 10 ** 7))
    df = toy_table(12_000)
    model = mmdsynth.fit(df, label="y", schema=SCHEMA, epsilon=1.0, method="mst", iters=20)
    assert model.release_.ledger.total() == (1.0, 1e-6)
    given = mmdsynth.fit(df, label="y", schema=SCHEMA, epsilon=1.0, delta=1e-5, method="mst", iters=20)
    assert given.release_.ledger.total() == (1.0, 1e-5)

    class Args:
        dataset = "adult"
    assert _default_delta(Args, (df,)) == 1e-5           # the command line's, for arrays (a table's is the run's)
    Args.dataset = None
    assert _default_delta(Args, (df,)) == 1e-6


def test_the_schemas_label_needs_no_label_flag(files, capsys):
    """A schema that declares its label is enough (``--label`` was required beside it, naming the same column)."""
    code = main(["fit", "--method", "dp-merf", "--csv", str(files / "toy.csv"), "--schema", str(files / "toy.json"),
                 "--epsilon", "1", "--iterations", "2", "--n-features", "20", "--out", str(files / "o"), "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert list(mmdsynth.load(files / "o").sample(5).columns) == ["age", "score", "colour", "smoker", "y"]
