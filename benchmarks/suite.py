"""The twelve-table suite (issue 81): each method fitted on each table of ``../shared/datasets/tables/`` as a user runs
it, scored by one evaluator, one JSON line per (table, method, epsilon, seed) appended to ``--out``.

Per table: the suite's 80/20 split (``df.sample(frac=0.2, random_state=0)`` is the test part, as the tables' README
says), the method fitted on the rest with ``mmdsynth.fit`` (``default``: no method named, the table default the
library chooses; otherwise the registry name, ``mst`` / ``aim`` / ``dp-merf`` / ``hybrid``, at its defaults unless
``--set`` says otherwise), as many synthetic rows as training rows, then

* **ML efficacy**: the mean of the 12 classifiers of :func:`mmdsynth.evaluation.tabular.table_classifier_scores`
  trained on the synthetic rows and tested on the real test part (ROC AUC for two classes, weighted F1 for more);
* **1-, 2- and 3-way TVD** against the real training part (``peers/marginal_tvd.py``: numeric columns cut at the
  real deciles; 3-way over 50 column triples chosen from the column names alone);
* the fit time (wall, this process) and the share of synthetic rows repeating an earlier one (the real part's
  beside it).

    python benchmarks/suite.py --methods default mst --epsilon 1 --seeds 0 --out benchmarks/out/suite.jsonl
    python benchmarks/suite.py --tables males spam7 --methods hybrid --set max_cells=16 --variant mc16 --out ...

``summarize`` mode prints the table of stored lines (means over seeds) without fitting anything:

    python benchmarks/suite.py --summarize benchmarks/out/suite.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(os.environ.get("MMDSYNTH_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "datasets")) / "tables"
TABLES = ["cps1988", "arrests", "fertility2", "college", "males", "spam7", "wvs", "nmes", "resume", "benefits",
          "doctorcontacts", "flights"]
TRIPLES = 50


def split(name: str):
    """The table's schema and its suite split (train, test), read as the schema says."""
    from mmdsynth.data import Schema
    schema = Schema.from_json(ROOT / name / "schema.json")
    df = schema.validate(pd.read_csv(ROOT / name / "data.csv.gz", dtype=str, keep_default_na=False))
    test = df.sample(frac=0.2, random_state=0)
    return schema, df.drop(test.index).reset_index(drop=True), test.reset_index(drop=True)


def score(train: pd.DataFrame, test: pd.DataFrame, synth: pd.DataFrame, schema) -> dict:
    """The evaluator: ML efficacy on the real test part, k-way TVD against the real training part."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
    from marginal_tvd import marginal_tvd
    from mmdsynth.data.encoding import TableEncoder
    from mmdsynth.evaluation.tabular import table_classifier_scores

    scores = table_classifier_scores(synth, test, TableEncoder(schema), seed=0)
    tvd = marginal_tvd(train, synth, schema, "deciles", TRIPLES, 0)
    return {"ml_efficacy": round(scores["mean"]["roc_auc" if scores["binary"] else "f1"], 4),
            "metric": "roc_auc" if scores["binary"] else "f1",
            "tvd_1way": round(tvd["tvd_1way"], 4), "tvd_2way": round(tvd["tvd_2way"], 4),
            "tvd_3way": round(tvd["tvd_3way"], 4) if tvd.get("tvd_3way") is not None else None,
            "repeated_real": round(float(train.astype(str).duplicated().mean()), 4),
            "repeated_synthetic": round(float(synth.astype(str).duplicated().mean()), 4)}


def run(args) -> None:
    import mmdsynth

    params = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    for name in args.tables:
        schema, train, test = split(name)
        for method in args.methods:
            for seed in args.seeds:
                t = time.perf_counter()
                model = mmdsynth.fit(train, label=schema.label, schema=schema, epsilon=args.epsilon, seed=seed,
                                     method=None if method == "default" else method, **params)
                fit_s = time.perf_counter() - t
                synth = model.sample(len(train), seed=seed)
                line = {"table": name, "method": method, "chose": model.method, "variant": args.variant,
                        "set": params, "epsilon": args.epsilon, "seed": seed, "rows": len(train),
                        "fit_s": round(fit_s, 1), **score(train, test, synth, schema),
                        "date": time.strftime("%Y-%m-%d"), "threads": os.environ.get("OMP_NUM_THREADS")}
                print(json.dumps(line), flush=True)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(line) + "\n")


def summarize(paths) -> None:
    groups: dict = {}
    for path in paths:
        for raw in open(path):
            d = json.loads(raw)
            key = (d["table"], d["epsilon"], d["method"] + (f" [{d['variant']}]" if d.get("variant") else ""))
            groups.setdefault(key, []).append(d)
    print("| table | eps | method (chose) | n | ML efficacy | 1-way | 2-way | 3-way | fit s | repeats (real) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (table, eps, method), ds in sorted(groups.items(), key=lambda kv: (TABLES.index(kv[0][0]) if kv[0][0] in TABLES
                                                                         else 99, kv[0][1], kv[0][2])):
        mean = lambda k: statistics.mean(d[k] for d in ds if d.get(k) is not None)  # noqa: E731
        print(f"| {table} | {eps:g} | {method} ({ds[0]['chose']}) | {len(ds)} | {mean('ml_efficacy'):.3f} | "
              f"{mean('tvd_1way'):.3f} | {mean('tvd_2way'):.3f} | {mean('tvd_3way'):.3f} | {mean('fit_s'):.0f} | "
              f"{mean('repeated_synthetic'):.3f} ({ds[0]['repeated_real']:.3f}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", nargs="+", default=TABLES)
    ap.add_argument("--methods", nargs="+", default=["default"])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--set", nargs="*", default=[], help="KEY=JSON parameters for every method named")
    ap.add_argument("--variant", default="", help="a name for this code's or setting's variant in the lines")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--summarize", nargs="+", type=Path, help="print the table of these stored lines and stop")
    args = ap.parse_args()
    if args.summarize:
        summarize(args.summarize)
    elif args.out is None:
        ap.error("--out is required to fit (the lines are appended there)")
    else:
        run(args)


if __name__ == "__main__":
    main()
