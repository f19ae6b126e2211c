"""Score synthetic CSVs (peers' and mmdsynth's) with mmdsynth's 12-classifier protocol (main venv).

Reads ``synth_{method}_eps{epsilon:g}.csv`` from each split folder (``synth_{method}.csv`` without
``--epsilon``, the files of earlier sessions), so every method is scored from its file by the same code:
:func:`table_classifier_scores` and :func:`table_fidelity` against the real test split, and the 1-way /
2-way marginal TVD of ``marginal_tvd.py`` (deciles of the real test split, and the 32-bin public grid).
``--method real`` scores the folder's ``train.csv`` (the floor: real rows against the real test split).

    .venv/bin/python benchmarks/peers/evaluate_peers.py benchmarks/out/splits/adult_s0 --method mst aim
    .venv/bin/python benchmarks/peers/evaluate_peers.py benchmarks/out/splits/adult_s0 --method mst dp-merf \
        --epsilon 1 --out benchmarks/out/fidelity_issue32.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from mmdsynth.data import Schema
from mmdsynth.data.encoding import TableEncoder
from mmdsynth.evaluation.fidelity import table_fidelity
from mmdsynth.evaluation.tabular import table_classifier_scores

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from table_utility import summary  # noqa: E402
from marginal_tvd import marginal_tvd  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folders", nargs="+")
    p.add_argument("--method", nargs="+", default=["mst", "aim"])
    p.add_argument("--epsilon", type=float, default=None, help="read synth_{method}_eps{epsilon:g}.csv")
    p.add_argument("--tag", default="", help="read synth_{method}_eps{epsilon:g}{tag}.csv (run_mmdsynth.py --tag)")
    p.add_argument("--tvd-only", action="store_true", help="only the marginal TVDs (no classifiers, no table_fidelity)")
    p.add_argument("--triples", type=int, default=0, help="also the 3-way TVD over this many column triples, a fixed "
                   "random sample (marginal_tvd.sample_triples; 0: none, the rows as before)")
    p.add_argument("--triple-seed", type=int, default=0, help="seed of the public choice of triples")
    p.add_argument("--out", default="benchmarks/out/peers.jsonl")
    args = p.parse_args()
    for folder in map(Path, args.folders):
        schema = Schema.from_json(folder / "schema.json")
        enc = TableEncoder(schema)
        test = pd.read_csv(folder / "test.csv", dtype=str, keep_default_na=False)
        for col in schema.numeric:
            test[col] = pd.to_numeric(test[col])
        for method in args.method:
            if method == "real":
                path = folder / "train.csv"
            elif args.epsilon is None:
                path = folder / f"synth_{method}.csv"
            else:
                path = folder / f"synth_{method}_eps{args.epsilon:g}{args.tag}.csv"
            if not path.exists():
                print(json.dumps({"folder": folder.name, "method": method, "missing": str(path)}), flush=True)
                continue
            t = time.perf_counter()
            synth = pd.read_csv(path, dtype=str, keep_default_na=False)
            for col in schema.numeric:
                c = schema.column(col)
                synth[col] = pd.to_numeric(synth[col]).clip(*c.bounds)
            tvd = {s: marginal_tvd(test, synth, schema, s, args.triples, args.triple_seed) for s in ("deciles", "grid32")}
            if args.tvd_only:
                row = {"folder": folder.name, "method": method, "epsilon": None if method == "real" else args.epsilon,
                       "tag": args.tag, "synth_csv": path.name, "marginal_tvd": tvd}
                print(json.dumps({k: row[k] for k in ("folder", "method", "epsilon")} |
                                 {s: {k: round(v, 4) for k, v in tvd[s].items() if k.startswith("tvd") and v is not None}
                                  for s in tvd}),
                      flush=True)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
                continue
            r = table_classifier_scores(synth, test, enc, seed=0)
            fid = summary(table_fidelity(test, synth, schema))
            row = {"folder": folder.name, "method": method, "epsilon": None if method == "real" else args.epsilon,
                   "tag": args.tag, "synth_csv": path.name, "n_synth": len(synth), **r, "fidelity": fid, "marginal_tvd": tvd,
                   "eval_s": round(time.perf_counter() - t, 1)}
            print(json.dumps({"folder": folder.name, "method": method, "epsilon": row["epsilon"], "mean": r["mean"],
                              "skipped": list(r["skipped"]), "failures": list(r["failures"]),
                              "tvd1": round(tvd["deciles"]["tvd_1way"], 4), "tvd2": round(tvd["deciles"]["tvd_2way"], 4),
                              "tvd2_grid": round(tvd["grid32"]["tvd_2way"], 4),
                              **({"tvd3": round(tvd["deciles"]["tvd_3way"], 4)} if args.triples else {}),
                              "pair": fid["pairwise"]["mean_abs_error"]}), flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
