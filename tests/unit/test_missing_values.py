"""Declared missing-value markers (issue 46's new-user trial: the cervical CSV marks missing cells with "?")."""
import json

import numpy as np
import pandas as pd
import pytest

from mmdsynth.data import Schema
from mmdsynth.errors import DataValidationError, SchemaError
from mmdsynth.evaluation.fidelity import categorical_marginal

from support import run_cli

COLUMNS = [{"name": "age", "type": "numeric", "bounds": [0, 100], "nullable": True},
           {"name": "smokes", "type": "categorical", "categories": ["0.0", "1.0"], "nullable": True}]


def _schema(**extra):
    return Schema.from_dict({"columns": COLUMNS, "label": "y", "label_categories": ["0", "1"], **extra})


def test_a_declared_marker_is_read_as_missing_cell_by_cell():
    df = pd.DataFrame({"age": ["30", "?", "41"], "smokes": ["1.0", "0.0", "?"], "y": ["0", "1", "0"]})
    out = _schema(missing_values=["?"]).validate(df)
    assert out["age"].isna().tolist() == [False, True, False] and out["age"][0] == 30.0
    assert out["smokes"].isna().tolist() == [False, False, True] and out["smokes"][0] == "1"


def test_without_the_declaration_the_marker_is_refused_naming_the_fix_never_the_value():
    df = pd.DataFrame({"age": ["30", "?", "41"], "smokes": ["1.0", "0.0", "0.0"], "y": ["0", "1", "0"]})
    with pytest.raises(DataValidationError) as err:
        _schema().validate(df)
    assert "missing_values" in str(err.value) and "'?'" not in str(err.value) and "1 value(s)" in str(err.value)


def test_a_marker_in_a_column_that_is_not_nullable_is_refused():
    cols = [dict(COLUMNS[0], nullable=False), COLUMNS[1]]
    schema = Schema.from_dict({"columns": cols, "label": "y", "label_categories": ["0", "1"],
                               "missing_values": ["?"]})
    with pytest.raises(DataValidationError, match="'age' has 1 missing value"):
        schema.validate(pd.DataFrame({"age": ["?"], "smokes": ["1.0"], "y": ["0"]}))


def test_the_declaration_round_trips_and_is_checked():
    schema = _schema(missing_values=["?", "n/a"])
    assert Schema.from_dict(schema.to_dict()).missing_values == ["?", "n/a"]
    assert "missing_values" not in _schema().to_dict()
    with pytest.raises(SchemaError, match="missing_values"):
        _schema(missing_values="?")


def test_neighbours_differing_in_one_marker_cell_leave_every_other_row_alone():
    """Record isolation: replacing one row's cell by the marker changes that row only."""
    g = np.random.default_rng(0)
    df = pd.DataFrame({"age": [str(v) for v in g.integers(0, 100, 50)],
                       "smokes": g.choice(["0.0", "1.0", "?"], 50), "y": g.choice(["0", "1"], 50)})
    other = df.copy()
    other.loc[7, "age"] = "?"
    schema = _schema(missing_values=["?"])
    a, b = schema.validate(df), schema.validate(other)
    rest = a.index != 7
    pd.testing.assert_frame_equal(a[rest], b[rest])


def test_fidelity_compares_categories_as_their_text():
    """A declared "0.0", a read "0" and a sampled 0.0 are one category (the trial's Smokes TV read 0.976 for two
    near-identical columns)."""
    real = pd.Series(["0", "0", "1", None], dtype=object)
    synth = pd.Series([0.0, 0.0, 1.0, np.nan], dtype=object)
    assert categorical_marginal(real, synth, ["0.0", "1.0"])["tv"] == pytest.approx(0.0)


def test_fit_takes_missing_values_on_the_command_line(tmp_path, capsys):
    g = np.random.default_rng(1)
    n = 300
    df = pd.DataFrame({"age": g.integers(18, 90, n).astype(str), "smokes": g.choice(["0.0", "1.0"], n),
                       "y": g.choice(["0", "1"], n)})
    df.loc[::10, "age"] = "?"
    df.to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps({"columns": COLUMNS, "label": "y", "label_categories": ["0", "1"]}))
    cmd = ["fit", "--method", "dp-merf", "--csv", tmp_path / "d.csv", "--schema", tmp_path / "s.json", "--label", "y",
           "--epsilon", "1", "--iterations", "5", "--out", tmp_path / "run", "--quiet"]
    code, _, err = run_cli(capsys, *cmd)
    assert code == 2 and "--missing-values" in err and not (tmp_path / "run").exists()
    code, _, err = run_cli(capsys, *cmd, "--missing-values", "?")
    assert code == 0, err[-800:]
    saved = json.loads((tmp_path / "run" / "release" / "release.json").read_text())
    assert "?" in json.dumps(saved)      # the public declaration travels with the release's schema
