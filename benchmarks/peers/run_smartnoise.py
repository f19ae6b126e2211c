"""MST and AIM (smartnoise-synth) on the preset splits: run in the peers venv.

Numeric columns are discretised into 32 equal-width bins over the schema's declared
(public) bounds, categorical columns label-encoded, so no budget is spent on
preprocessing (preprocessor_eps=0) and the whole (epsilon, delta) goes to the synthesizer.
Writes synth_{method}_eps{epsilon:g}.csv next to train.csv (so runs at different epsilons do not
overwrite each other) and prints a JSON line with the fit time (the fit only: not the sampling, not
reading the CSV), appended to ``--out`` when given.

    .venv-peers/bin/python benchmarks/peers/run_smartnoise.py benchmarks/out/splits/adult_s0 \
        --method mst aim --epsilon 1 --delta 1e-5 --out benchmarks/out/peers_issue32_fit.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import pandas as pd
from snsynth import Synthesizer
from snsynth.transform import BinTransformer, LabelTransformer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folders", nargs="+")
    p.add_argument("--method", nargs="+", default=["mst", "aim"])
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--bins", type=int, default=32)
    p.add_argument("--out", default=None, help="append the JSON line of each fit to this file")
    p.add_argument("--verbose", action="store_true", help="AIM: print every round (progress of long fits)")
    args = p.parse_args()
    for folder in map(Path, args.folders):
        schema = json.loads((folder / "schema.json").read_text())
        train = pd.read_csv(folder / "train.csv", dtype=str, keep_default_na=False)
        constraints = {}
        for col in schema["columns"]:
            if col["type"] == "numeric":
                lo, hi = col["bounds"]
                train[col["name"]] = pd.to_numeric(train[col["name"]])
                constraints[col["name"]] = BinTransformer(bins=args.bins, lower=lo, upper=hi)
            else:
                constraints[col["name"]] = LabelTransformer(nullable=False)
        constraints[schema["label"]] = LabelTransformer(nullable=False)
        train = train[[c["name"] for c in schema["columns"]] + [schema["label"]]]
        for method in args.method:
            t = time.perf_counter()
            extra = {"verbose": True} if args.verbose and method == "aim" else {}
            synth = Synthesizer.create(method, epsilon=args.epsilon, delta=args.delta, **extra)
            synth.fit(train, transformer=constraints, preprocessor_eps=0.0)
            fit_s = time.perf_counter() - t
            t = time.perf_counter()
            name = f"synth_{method}_eps{args.epsilon:g}.csv"
            synth.sample(len(train)).to_csv(folder / name, index=False)
            row = {"folder": str(folder), "method": method, "fit_s": round(fit_s, 1),
                   "sample_s": round(time.perf_counter() - t, 1), "epsilon": args.epsilon, "delta": args.delta,
                   "bins": args.bins, "preprocessor_eps": 0.0, "synth_csv": name, "n_rows": len(train),
                   "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
                   "host_cpus": os.cpu_count(), "python": platform.python_version()}
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
