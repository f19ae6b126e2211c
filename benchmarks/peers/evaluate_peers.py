"""Score peers' synthetic CSVs with dpsynth's 12-classifier protocol (main venv).

    .venv/bin/python benchmarks/peers/evaluate_peers.py benchmarks/out/splits/adult_s0 --method mst aim
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from dpsynth.data import Schema
from dpsynth.data.encoding import TableEncoder
from dpsynth.evaluation.tabular import table_classifier_scores


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folders", nargs="+")
    p.add_argument("--method", nargs="+", default=["mst", "aim"])
    p.add_argument("--out", default="benchmarks/out/peers.jsonl")
    args = p.parse_args()
    for folder in map(Path, args.folders):
        schema = Schema.from_json(folder / "schema.json")
        enc = TableEncoder(schema)
        test = pd.read_csv(folder / "test.csv", dtype=str, keep_default_na=False)
        for col in schema.numeric:
            test[col] = pd.to_numeric(test[col])
        for method in args.method:
            path = folder / f"synth_{method}.csv"
            if not path.exists():
                continue
            synth = pd.read_csv(path, dtype=str, keep_default_na=False)
            for col in schema.numeric:
                c = schema.column(col)
                synth[col] = pd.to_numeric(synth[col]).clip(*c.bounds)
            r = table_classifier_scores(synth, test, enc, seed=0)
            row = {"folder": folder.name, "method": method, **r}
            print(json.dumps({"folder": folder.name, "method": method, "mean": r["mean"]}), flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
