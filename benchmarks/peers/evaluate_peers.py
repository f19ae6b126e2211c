"""Score peers' synthetic CSVs with dpsynth's 12-classifier protocol (main venv).

    .venv/bin/python benchmarks/peers/evaluate_peers.py benchmarks/out/splits/adult_s0 --method mst aim
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from dpsynth.data import Schema
from dpsynth.data.encoding import TableEncoder
from dpsynth.evaluation.fidelity import table_fidelity
from dpsynth.evaluation.tabular import table_classifier_scores

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from table_utility import summary  # noqa: E402


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
            fid = summary(table_fidelity(test, synth, schema))
            row = {"folder": folder.name, "method": method, **r, "fidelity": fid}
            print(json.dumps({"folder": folder.name, "method": method, "mean": r["mean"],
                              "num_tv": fid["mean_numeric_tv"], "cat_tv": fid["mean_categorical_tv"],
                              "pair": fid["pairwise"]["mean_abs_error"]}), flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
