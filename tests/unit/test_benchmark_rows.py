"""benchmarks/_rows.py and the scripts that take method parameters (issue 46): each method's constructor lists only
its own options (``param_names()``), so a parameter a chosen method does not take is refused by name before the
first run, not met as a TypeError hours into a sweep, and the help's examples name a method that takes them."""
import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mmdsynth.methods import METHODS

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _rows  # noqa: E402


def test_set_help_examples_name_a_method_that_takes_them():
    parser = argparse.ArgumentParser()
    _rows.add_set_option(parser)
    text = next(a.help for a in parser._actions if a.dest == "set")
    examples = re.findall(r"(\w+)=\S+ for ([\w-]+)", text)
    assert examples
    for key, method in examples:
        assert key in METHODS[method].param_names(), (key, method)


def test_check_taken_refuses_what_a_chosen_method_does_not_take(capsys):
    parser = argparse.ArgumentParser(prog="bench")
    chosen = {"dp-ntk": METHODS["dp-ntk"], "dp-mepf": METHODS["dp-mepf"]}
    with pytest.raises(SystemExit) as exited:                        # --set: every run gets it
        _rows.check_taken(parser, chosen, {"beta1": 0.5}, every=True)
    assert exited.value.code == 2 and "dp-ntk takes no 'beta1'" in capsys.readouterr().err
    _rows.check_taken(parser, chosen, {"beta1": 0.5}, every=False)     # a flag for some: goes to those
    assert _rows.taken(METHODS["dp-ntk"], {"beta1": 0.5, "lr": 0.1}) == {"lr": 0.1}
    with pytest.raises(SystemExit):                                  # ... but one no chosen method takes
        _rows.check_taken(parser, chosen, {"categorical_pairs": True}, every=False)
    _rows.check_taken(parser, chosen, {"lr": 0.1, "iterations": 10}, every=True)


@pytest.mark.parametrize("argv, named", [
    (["table_utility.py", "--method", "dp-kip", "--iterations", "5"], "dp-kip takes no 'iterations'"),
    (["table_utility.py", "--method", "dp-ntk", "--set", "n_features=10"], "dp-ntk takes no 'n_features'"),
    (["nulls_dates.py", "--methods", "mst", "dp-merf", "--set", 'grid="released"'], "dp-merf takes no 'grid'"),
    (["peers/hybrid_paired.py", "benchmarks/out/splits/none_s0", "--variants", "a:n_features=10"],
     "'n_features' is not a post-processing option"),
    (["peers/hybrid_paired.py", "benchmarks/out/splits/none_s0", "--variants", "a:steps=1", "a:steps=2"],
     "each NAME once"),
])
def test_benchmark_scripts_refuse_before_reading_data(argv, named, monkeypatch, capsys):
    """Each script run as ``python benchmarks/SCRIPT ...`` would run it (``__main__``, its folder first on the path),
    in this process: it exits with status 2 naming the parameter before it reads a row."""
    import runpy

    script = BENCHMARKS / argv[0]
    monkeypatch.chdir(BENCHMARKS.parent)
    monkeypatch.setattr(sys, "argv", [str(script), *argv[1:], "--out", "/dev/null"])
    monkeypatch.syspath_prepend(str(script.parent))
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(script), run_name="__main__")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and named in err, err[-2000:]


def test_second_evaluator_scores_signal_above_shuffled_labels(tmp_path):
    """peers/second_evaluator.py: rows that carry the label's signal score above the same rows with shuffled labels
    under both of its models, and a category the schema does not declare is read as unknown, not a crash."""
    import json

    import numpy as np

    from support import SCHEMA, toy_table

    toy_table(1500, seed=1).to_csv(tmp_path / "test.csv", index=False)
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    good = toy_table(1500, seed=2)
    good.loc[good.index[:3], "colour"] = "purple"
    good.to_csv(tmp_path / "good.csv", index=False)
    shuffled = good.assign(y=np.random.default_rng(0).permutation(good["y"].to_numpy()))
    shuffled.to_csv(tmp_path / "shuffled.csv", index=False)
    out = tmp_path / "rows.jsonl"
    run = subprocess.run([sys.executable, str(BENCHMARKS / "peers" / "second_evaluator.py"), str(tmp_path), "--csv",
                          "good.csv", "shuffled.csv", "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    rows = {r["csv"]: r for r in map(json.loads, out.read_text().splitlines())}
    for model in ("hgb", "logreg"):
        assert rows["good.csv"][model]["roc_auc"] > rows["shuffled.csv"][model]["roc_auc"] + 0.1, rows


def test_staged_fits_resume_one_run_and_name_each_stop():
    """--stops: the first stop fits into a temporary folder, later ones resume there; each stage carries the
    iteration count it added and its files' suffix; a plain fit (no stops) is one stage without either."""
    calls = []

    def fit(model, out, resume):
        calls.append((model, out is not None, resume))
        return model

    stages = list(_rows.staged_fits(lambda params: dict(params), fit, [250, 1000]))
    assert [(s.stop, s.params, s.suffix) for s in stages] == [(250, {"iterations": 250}, "_it250"),
                                                              (1000, {"iterations": 1000}, "_it1000")]
    assert calls == [({"iterations": 250}, True, False), ({"iterations": 1000}, True, True)]
    assert stages[1].fit_s >= stages[0].fit_s >= 0
    (plain,) = _rows.staged_fits(lambda params: dict(params), fit, None)
    assert (plain.stop, plain.params, plain.suffix, calls[-1]) == (None, {}, "", ({}, False, False))
    with pytest.raises(SystemExit, match="must increase"):
        list(_rows.staged_fits(lambda params: params, fit, [1000, 250]))


def test_the_opendp_peer_gets_mmdsynths_public_cells_and_empty_end_cells():
    """benchmarks/suite.py: opendp_cuts. OpenDP's contingency table cuts left-open cells and decodes its two open end
    cells one unit wide beside the first and last cut; given a grid without the bounds, spam7's first cell [0, 1.09)
    came out as (0.09, 1.09] and lost the column's zeros (benchmarks/log/2026-12-05.md#opendp-cuts). Every value
    inside the declared bounds must fall in an OpenDP cell that holds one of mmdsynth's public cells (atoms included)
    and in neither end cell (up to a real value exactly on an interval's inner edge, which the two put on either
    side)."""
    import numpy as np

    from mmdsynth.data import Schema
    from mmdsynth.data.discrete import Domain

    import suite  # noqa: E402  (benchmarks/suite.py)

    schema = Schema.from_dict({"label": "y", "label_categories": ["a", "b"], "columns": [
        {"name": "rate", "type": "numeric", "bounds": [0, 35.0]},
        {"name": "weeks", "type": "numeric", "bounds": [0, 55], "integer": True},
        {"name": "age", "type": "numeric", "bounds": [20, 35], "integer": True},
        {"name": "wage", "type": "numeric", "bounds": [50, 20000]}]})
    cuts = suite.opendp_cuts(schema)
    for name, grid in Domain.of(schema).grids.items():
        col = schema.column(name)
        lo, hi = col.bounds
        values = np.unique(np.r_[np.arange(lo, hi + 1) if col.integer else np.linspace(lo, hi, 20001), grid.edges])
        if col.integer:
            values = values[values == np.round(values)]
        else:       # a real value exactly on an interval's inner edge: ours [a, b) and OpenDP's (a, b] differ there only
            values = values[~np.isin(values, grid.edges[1:-1][~grid.atoms[1:-1]])]
        c = np.asarray(cuts[name])
        odp = np.searchsorted(c, values, side="left")          # OpenDP's cell (c[i-1], c[i]] of each value
        assert odp.min() >= 1 and odp.max() <= len(c) - 1, name  # never an open end cell
        ours = grid.cells(values)
        for k in np.unique(odp):                                 # one mmdsynth cell per OpenDP cell
            assert len(np.unique(ours[odp == k])) == 1, (name, c[k - 1], c[k])
        for v in (lo, hi, 0.0):                                  # an atom of ours is a cell of its own there
            if lo <= v <= hi and grid.atoms[np.isclose(grid.edges, v)].any():
                k = np.searchsorted(c, v, side="left")
                assert set(values[odp == k]) == {v}, (name, v)


def test_the_goal_verdict_judges_against_the_same_guarantee_and_says_the_add_remove_miss():
    """benchmarks/suite.py: the verdict of issue 81's goal table. mmdsynth's releases protect one record replaced;
    OpenDP's default protects one row added or removed, a weaker relation whose counts get 1/sqrt(2) of the noise at
    the same epsilon. The verdict is taken against the peers of the same guarantee (mmdsynth's AIM and MST, OpenDP's
    lines with one row replaced, DP-MERF for the classifiers); an add/remove line that would decide otherwise is said
    beside it, never dropped; a same-guarantee OpenDP line decides like any peer."""
    import suite  # noqa: E402  (benchmarks/suite.py)

    def line(method, seed, tvd, ml, fit, **extra):
        return {"table": "wvs", "epsilon": 1.0, "rows": 4305, "method": method, "seed": seed, "fit_s": fit,
                "ml_efficacy": ml, "tvd_1way": tvd / 2, "tvd_2way": tvd, "tvd_3way": 2 * tvd,
                "chose": "hybrid" if method == "default" else method, **extra}

    from mmdsynth.choice import PublicFacts, choose_table_default
    params = choose_table_default(PublicFacts(4305, None, 1.0, 1e-5)).params
    lines = [line("default", s, 0.040 + s / 1000, 0.43, 2.0, params=params) for s in range(3)]
    lines += [line("aim", s, 0.041, 0.41, 3.0) for s in range(3)]
    lines += [line("opendp-aim", s, 0.030, 0.42, 60.0) for s in range(3)]               # add/remove
    (row,) = suite.goal_rows(lines)
    verdict = suite._verdict(row)
    assert verdict.startswith("2-way met (against OpenDP's add/remove lines: misses by 0.011, opendp-aim)"), verdict
    assert "ML met;" in verdict and "(0.03 of OpenDP's)" in verdict

    lines += [line("opendp-aim", s, 0.035, 0.42, 64.0, unit="changes=1") for s in range(3)]  # one row replaced
    (row,) = suite.goal_rows(lines)
    assert row["roles"][suite.ODP_R1_AIM]["tvd_2way"][2] == 3 and row["roles"]["opendp-aim"]["tvd_2way"][2] == 3
    verdict = suite._verdict(row)
    assert verdict.startswith("2-way misses by 0.006 (opendp-aim (replace-one)) (against OpenDP's add/remove lines: "
                              "misses by 0.011, opendp-aim)"), verdict
    assert "(0.03 of OpenDP's)" in verdict                       # its same-guarantee AIM's time: 2 / 64

    # behind inside the seeds' spread: met, and the gap said
    lines = lines[:3] + [line("aim", s, 0.041, ml, 3.0) for s, ml in enumerate((0.42, 0.44, 0.45))]
    (row,) = suite.goal_rows(lines)
    assert "ML met inside the seeds' spread (0.007 behind aim, sd 0.015);" in suite._verdict(row), suite._verdict(row)


def test_a_goal_cell_without_an_aim_line_says_why():
    """benchmarks/suite.py: a cell where OpenDP's or mmdsynth's AIM gave no model (stopped at ``--peer-timeout``) says
    so with its cap, seed and date instead of leaving the peer silently absent; a scored line of it in the cell wins."""
    import suite  # noqa: E402  (benchmarks/suite.py)

    def line(method, seed, **extra):
        return {"table": "resume", "epsilon": 10.0, "rows": 3896, "method": method, "seed": seed, "fit_s": 5.0,
                "ml_efficacy": 0.5, "tvd_1way": 0.01, "tvd_2way": 0.02, "tvd_3way": 0.04, "date": "2026-12-07",
                "chose": "hybrid" if method == "default" else method, **extra}

    from mmdsynth.choice import PublicFacts, choose_table_default
    params = choose_table_default(PublicFacts(3896, None, 10.0, 1e-5)).params
    stopped = {**line("opendp-aim", 0), "failed": suite.stopped_words(900)}
    for key in ("fit_s", "ml_efficacy", "tvd_1way", "tvd_2way", "tvd_3way"):
        del stopped[key]
    lines = [line("default", 0, params=params), line("aim", 0)]
    (row,) = suite.goal_rows(lines, [stopped])
    assert suite._verdict(row).endswith(
        "OpenDP's AIM: no model within 900 CPU s on one thread (stopped), seed 0, 2026-12-07"), suite._verdict(row)
    (row,) = suite.goal_rows(lines + [line("opendp-aim", 1)], [stopped])
    assert "OpenDP's AIM:" not in suite._verdict(row) and "of OpenDP's)" in suite._verdict(row)
    # mmdsynth's own AIM stopped the same way (suite.stopped_after): its cell says so where AIM's time would be
    (row,) = suite.goal_rows(lines[:1], [stopped, {**stopped, "method": "aim", "seed": 1}])
    assert "AIM not run: no model within 900 CPU s on one thread (stopped), seed 1, 2026-12-07" in suite._verdict(row)
