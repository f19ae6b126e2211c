"""`mmdsynth schema` (issue 83): a schema drafted from a table with no codebook, its types, bounds and categories
released with budget. Worst-case neighbours (one record replaced by a rare category and extreme values; one person
with 2,000 rows of new values) move each of its two releases by at most the sensitivity its ledger entry records, a
record's rare category is at most one candidate with count 1, and every value is read by itself."""
import json

import numpy as np
import pandas as pd
import pytest

from mmdsynth.cli import main
from mmdsynth.data.draft import draft_schema
from mmdsynth.statistics.values import KINDS, value_kind
from mmdsynth.privacy.engine import PrivacyEngine

from support import toy_table


def table(n=3000, seed=0) -> pd.DataFrame:
    """Text cells, as a CSV gives them: integers, decimals with some missing, categories, yes/no, ISO dates."""
    df = toy_table(n, seed).astype(str)
    df.loc[::10, "score"] = ""
    g = np.random.default_rng(seed)
    df["visit"] = pd.Timestamp("2020-01-01") + pd.to_timedelta(g.integers(0, 700, n), unit="D")
    df["visit"] = df["visit"].dt.strftime("%Y-%m-%d")
    return df


@pytest.fixture
def releases(monkeypatch):
    """Every Gaussian release's exact values and sensitivity, by name, as the engine receives them."""
    seen = []
    original = PrivacyEngine.gaussian

    def spy(self, name, values, sensitivity, **kwargs):
        seen.append((name, {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}, float(sensitivity)))
        return original(self, name, values, sensitivity, **kwargs)

    monkeypatch.setattr(PrivacyEngine, "gaussian", spy)
    return seen


def test_a_draft_reads_types_bounds_categories_and_the_labels_classes():
    schema, ledger = draft_schema(table(), epsilon=2.0, label="y", noise_seed=0)
    cols = {c.name: c for c in schema.columns}
    assert cols["age"].kind == "numeric" and cols["age"].integer and cols["age"].bounds[0] <= 17 <= 90 <= \
        cols["age"].bounds[1] <= 200
    assert cols["score"].kind == "numeric" and not cols["score"].integer and cols["score"].nullable
    assert cols["colour"].categories[:3] == ["blue", "green", "red"]
    assert cols["smoker"].boolean                                  # yes / no
    assert cols["visit"].datetime == "s"
    assert schema.label_categories == ["neg", "pos"]
    assert ledger.total() == (2.0, 1e-5) and len(ledger.entries) == 2
    assert ledger.entries[0].description.startswith("schema draft, types: counts of ['missing', 'boolean'")
    assert ledger.entries[1].description.startswith("schema inference: numeric bounds of ['age', 'score', 'visit']")
    assert "categories of ['colour', 'y']" in ledger.entries[1].description


def test_each_value_is_read_by_itself():
    assert [KINDS[value_kind(v)] for v in ["", None, float("nan"), "yes", "N", "12", "-3.0", "0.25", "1e3",
                                           "2020-01-31", "2020-01-31T10:00:00+01:00", "abc", "1/2/2020"]] == \
        ["missing", "missing", "missing", "boolean", "boolean", "integer", "integer", "decimal", "integer", "date",
         "date", "text", "text"]


def neighbours(df):
    """Row 0 replaced by a rare category and extreme values of every kind."""
    other = df.copy()
    other.loc[0] = {"age": "1000000000", "score": "-987654.321", "colour": "violet-only-here", "smoker": "maybe",
                    "y": "pos", "visit": "1900-01-01"}
    return other


def keyed(exact: dict, df: pd.DataFrame) -> dict:
    """A release's exact counts as {(column, cell): count}: a categorical column's counts are in the order of its
    sorted observed values (the candidates), a numeric column's in its bins."""
    out = {}
    for col, values in exact.items():
        cells = sorted(set(df[col][df[col] != ""].astype(str))) if col in ("colour", "y") else range(len(values))
        out.update({(col, cell): float(v) for cell, v in zip(cells, values)})
    return out


def test_one_record_moves_each_release_within_its_sensitivity(releases):
    df, other = table(), neighbours(table())
    draft_schema(df, epsilon=1.0, label="y", noise_seed=0)
    draft_schema(other, epsilon=1.0, label="y", noise_seed=0)
    assert [name for name, _, _ in releases] == ["types", "schema", "types", "schema"]
    for k in (0, 1):
        (name, a, sens), (_, b, _) = releases[k], releases[k + 2]
        a, b = keyed(a, df), keyed(b, other)
        move = np.sqrt(sum((a.get(key, 0.0) - b.get(key, 0.0)) ** 2 for key in set(a) | set(b)))
        assert 0 < move <= sens * (1 + 1e-9), (name, move, sens)


def test_a_records_rare_category_is_one_candidate_and_never_drafted(releases):
    """The rare value adds one candidate with count 1 (the threshold keeps it with the delta it was set for): over
    20 drafts with fresh noise it is never written."""
    other = neighbours(table())
    for seed in range(20):
        schema, _ = draft_schema(other, epsilon=1.0, label="y", noise_seed=seed)
        assert "violet-only-here" not in json.dumps(schema.to_dict())
        assert schema.column("age").bounds[1] < 1e6                  # one extreme value does not set a bound
    name, exact, _ = releases[1]
    assert name == "schema" and keyed(exact, other)[("colour", "violet-only-here")] == 1.0


def test_one_person_with_many_rows_moves_each_release_within_its_sensitivity(releases):
    df = table(2000).assign(pid=lambda d: [f"p{i // 2}" for i in range(len(d))])      # 1,000 persons of 2 rows
    heavy = table(2000, seed=5).assign(pid="q", colour=[f"secret-{k}" for k in range(2000)], age="999999")
    other = pd.concat([df[df.pid != "p0"], heavy], ignore_index=True)
    draft_schema(df, epsilon=1.0, label="y", privacy_unit="pid", noise_seed=0)
    schema, ledger = draft_schema(other, epsilon=1.0, label="y", privacy_unit="pid", noise_seed=0)
    assert ledger.entries[0].n_records == 1000 and "one person" in ledger.entries[0].privacy_unit
    assert schema.privacy_unit == "pid" and schema.column("pid").kind == "id"
    (_, a1, s1), (_, a2, s2), (_, b1, _), (_, b2, _) = releases
    move = np.sqrt(sum(float(((a1[c] - b1[c]) ** 2).sum()) for c in a1))
    assert move <= s1 * (1 + 1e-9)
    assert len(b2["colour"]) <= len(a2["colour"]) + 1           # the person's 2,000 values: one candidate


def test_the_command_writes_the_draft_and_its_ledger_charges_the_budget_and_inspect_shows_it(tmp_path, capsys):
    df = table()
    df.to_csv(tmp_path / "t.csv.gz", index=False, sep=";")
    argv = ["schema", "--csv", str(tmp_path / "t.csv.gz"), "--label", "y", "--epsilon", "0.5", "--out",
            str(tmp_path / "s.json"), "--budget", str(tmp_path / "b.json")]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "drafted" in out and "spent epsilon=0.5" in out and (tmp_path / "s.ledger.json").exists()
    # a new budget file leaves room for one fit at a table's default epsilon, and the next step says so
    budget = json.loads((tmp_path / "b.json").read_text())
    assert [c["epsilon"] for c in budget["charges"]] == [0.5] and budget["epsilon"] == 1.5
    # its delta twice the draft's, settled in the draft's run from the public count (no --delta given)
    assert budget["delta"] == 2 * budget["charges"][0]["delta"] == 2e-5
    assert "--epsilon 1 --budget" in out
    assert main(["inspect", str(tmp_path / "s.json")]) == 0
    assert "privacy spent: epsilon=0.5" in capsys.readouterr().out
    import subprocess
    import sys
    shown = subprocess.run([sys.executable, "-c", "import sys; from mmdsynth.cli import main; "
                            f"main(['inspect', {str(tmp_path / 's.json')!r}]); print('torch' in sys.modules)"],
                           capture_output=True, text=True, timeout=120)
    assert shown.stdout.strip().endswith("False"), shown.stdout + shown.stderr       # inspect imports no torch
    assert main(argv) == 2 and "exists; pass --force" in capsys.readouterr().err       # nothing replaced
    # the draft fits as it is (values outside its bounds clipped, categories it left out read as "(other)")
    assert main(["fit", "--method", "dp-merf", "--csv", str(tmp_path / "t.csv.gz"), "--schema", str(tmp_path / "s.json"),
                 "--label", "y", "--epsilon", "1", "--iterations", "2", "--n-features", "50", "-q", "--budget",
                 str(tmp_path / "b.json"), "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    assert [c["epsilon"] for c in json.loads((tmp_path / "b.json").read_text())["charges"]] == [0.5, 1]
    refused = ["schema", "--csv", str(tmp_path / "t.csv.gz"), "--epsilon", "0", "--out", str(tmp_path / "z.json")]
    assert main(refused) == 2 and not (tmp_path / "z.json").exists()
