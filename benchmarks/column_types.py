"""Nullable, datetime and id columns, and DP-MERF's numeric x categorical histograms (issue 32).

The synthetic table of ``tests/support.py: mixed_table`` (3,000 rows: an ID, age, an income missing in 20 %
of rows, a colour missing in about half the rows over 60 and never below, a visit date, a label following
age), DP-MERF at its table defaults with 600 iterations, epsilon 1, with and without the numeric x
categorical block; fidelity against a second 3,000-row draw. One JSON line per configuration.

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/column_types.py
"""
import sys, json, numpy as np, pandas as pd
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "tests"))
from support import MIXED_SCHEMA, mixed_table
from mmdsynth import DPMERF, Schema
from mmdsynth.evaluation.fidelity import table_fidelity
schema = Schema.from_dict(MIXED_SCHEMA)
df = mixed_table(3000)
test = schema.validate(mixed_table(3000, seed=7))
for cross in (False, "auto"):
    m = DPMERF(**{**DPMERF.defaults_for("table"), "iterations": 600, "numeric_categorical": cross}).fit(df, label="y", schema=schema)
    s = m.sample(3000, seed=1)
    f = table_fidelity(test, s, schema)
    old = s["age"] > 60
    print(json.dumps({"numeric_categorical": cross, "missing": {c: [round(df[c].isna().mean(), 3), round(s[c].isna().mean(), 3)] for c in ("income", "colour")},
          "colour_missing_over60": [round(df.colour.isna()[df.age > 60].mean(), 3), round(s.colour.isna()[old].mean(), 3)],
          "colour_missing_upto60": [round(df.colour.isna()[df.age <= 60].mean(), 3), round(s.colour.isna()[~old].mean(), 3)],
          "ids_unique_fresh": bool(s.pid.is_unique and s.pid.min() > 99999), "visit_range": [str(s.visit.min()), str(s.visit.max())],
          "pair_by_kind": {k: round(v, 4) for k, v in f["pairwise"]["mean_abs_error_by_kind"].items()},
          "pair": round(f["pairwise"]["mean_abs_error"], 4), "max_missing_gap": round(f["max_missing_rate_gap"], 4)}), flush=True)
