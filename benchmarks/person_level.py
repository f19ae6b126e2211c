"""Issue 48: a person as the privacy unit, against a row-level fit that gives the same person-level guarantee.

The table (built here, stated as such): adult's preset split (train and test) turned into a panel. Each real
row is a person who answers 1 + min(Poisson(2), K - 1) yearly surveys (K = 8, public by construction: no person
has more than 8 rows): the first row is the real row; each later one is a year older (age + t, clipped to the
bounds) with hours-per-week redrawn around the real value (rounded N(value, 4), clipped); every other column,
the label included, stays the person's. Seeded, public construction (``--panel-seed``).

Two fits at the same person-level guarantee (epsilon, delta) for one person with all their rows:
- **person**: ``Schema.with_privacy_unit("person")`` at epsilon: each person's rows weighted 1 / their rows;
- **row, eps/K**: one row as the unit at epsilon / K (a person changes at most K rows; group privacy gives
  (epsilon, K e^(epsilon) delta)-DP for the person: the row-level fit is given delta / (K e^epsilon)
  so that its person-level delta is no larger).

Scores on the test panel: mean ROC AUC of the 12-classifier protocol (synthetic train, real test panel), and
1-way / 2-way TVD at the real deciles (all pairs). Numbers go to ``--out`` as JSON lines.

    MMDSYNTH_DATA_DIR=/work/shared/datasets .venv/bin/python benchmarks/person_level.py --seeds 0 1 2 \\
        --method dp-merf --epsilon 1 --out benchmarks/out/person_level.jsonl
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from mmdsynth.data import load_preset
from mmdsynth.data.schema import Column, Schema
from mmdsynth.evaluation.tabular import table_classifier_scores
from mmdsynth.data.encoding import TableEncoder
from mmdsynth.methods.contract import METHODS

from _rows import emit

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
from marginal_tvd import marginal_tvd  # noqa: E402

K = 8


def panel(df: pd.DataFrame, schema: Schema, seed: int, prefix: str) -> pd.DataFrame:
    """Each row a person with 1 + min(Poisson(2), K - 1) yearly rows (see the module docstring)."""
    g = np.random.default_rng(seed)
    n = 1 + np.minimum(g.poisson(2.0, len(df)), K - 1)
    rows = df.loc[df.index.repeat(n)].reset_index(drop=True)
    t = np.concatenate([np.arange(k) for k in n])
    lo, hi = schema.column("age").bounds
    rows["age"] = np.clip(rows["age"].to_numpy() + t, lo, hi)
    hlo, hhi = schema.column("hours-per-week").bounds
    hours = rows["hours-per-week"].to_numpy(dtype=float)
    redrawn = np.clip(np.rint(g.normal(hours, 4.0)), hlo, hhi)
    rows["hours-per-week"] = np.where(t > 0, redrawn, hours)
    rows["person"] = np.repeat([f"{prefix}{i}" for i in range(len(df))], n)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--method", default="dp-merf")
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--panel-seed", type=int, default=0)
    p.add_argument("--units", nargs="+", default=["person", "row"])
    p.add_argument("--out", default=None)
    args = p.parse_args()
    for seed in args.seeds:
        data = load_preset("adult", seed=seed)
        base = data.schema
        train = panel(data.train, base, args.panel_seed + 100 * seed, "P")
        test = panel(data.test, base, args.panel_seed + 100 * seed + 1, "T")
        with_id = Schema([*base.columns, Column("person", "id", prefix="syn-")], base.label, base.label_categories)
        for unit in args.units:
            if unit == "person":
                schema, eps, delta = with_id.with_privacy_unit("person"), args.epsilon, args.delta
            else:
                schema, eps, delta = with_id, args.epsilon / K, args.delta / (K * math.exp(args.epsilon))
            t0 = time.perf_counter()
            model = METHODS[args.method](epsilon=eps, delta=delta, seed=seed).fit(train, label=base.label,
                                                                                   schema=schema, dataset="adult-panel")
            fit_s = time.perf_counter() - t0
            synth = model.sample(len(train), seed=seed)
            encoder = TableEncoder(base, [c for c in train.columns if c != "person"]).minmax()
            cols = [c for c in synth.columns if c != "person"]
            scores = table_classifier_scores(synth[cols], test[cols], encoder, seed=seed)
            tvd = marginal_tvd(test[cols], synth[cols], base)
            per = synth["person"].value_counts()
            row = {"seed": seed, "method": args.method, "unit": unit, "person_epsilon": args.epsilon,
                   "fit_epsilon": eps, "fit_delta": delta, "rows": len(train), "persons": int(train.person.nunique()),
                   "fit_s": round(fit_s, 1), "roc_auc": scores["mean"].get("roc_auc"),
                   "tvd_1way": tvd["tvd_1way"], "tvd_2way": tvd["tvd_2way"],
                   "synthetic_rows_per_person": float(per.mean()), "real_rows_per_person": float(len(train) / train.person.nunique()),
                   "failures": scores.get("failures"), "host_cpus": os.cpu_count()}
            emit(row, args.out)


if __name__ == "__main__":
    main()
