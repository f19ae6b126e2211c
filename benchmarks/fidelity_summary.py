"""Summarise fidelity + utility JSON lines (table_utility.py, peers/evaluate_peers.py) as a Markdown table.

DP-MERF rows without a recorded ``categorical_pairs`` ran before it existed (first order), except in a
file whose name says ``pairs`` (runs of the default, ``"auto"``).

    python benchmarks/fidelity_summary.py benchmarks/out/fidelity_wide.jsonl benchmarks/out/peers_wide.jsonl
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np


def _key(row, path=""):
    if "folder" in row:                                     # a peer: adult_wide_s0
        name, _, seed = row["folder"].rpartition("_s")
        dataset, _, bounds = name.partition("_")
        return row["dataset"] if "dataset" in row else dataset, row["method"], "-", bounds or "preset", "-"
    params = row.get("params") or {}
    enc = params.get("numeric_encoding") or ("-" if row["method"] == "real" else "quantile")
    pairs = params.get("categorical_pairs", "auto" if "pairs" in path else None)   # pairs.jsonl: the default
    cat = "-" if row["method"] != "dp-merf" else ("pairs" if pairs in (True, "auto") else "first order")
    return row["dataset"], row["method"], enc, row.get("bounds", "preset"), cat


def fmt(values):
    v = [x for x in values if x is not None]
    if not v:
        return "-"
    return f"{np.mean(v):.3f} +- {np.std(v):.3f}" if len(v) > 1 else f"{v[0]:.3f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    groups = defaultdict(list)
    for path in args.files:
        for line in open(path):
            row = json.loads(line)
            groups[_key(row, path)].append(row)
    print("| dataset | bounds | method | numeric encoding | categorical (dp-merf) | n | ROC / PR or F1 | numeric TV | "
          "numeric W1/std | categorical TV | pairwise error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (dataset, method, enc, bounds, cat), rows in sorted(groups.items()):
        util = [r["mean"] for r in rows]
        if "roc_auc" in util[0]:
            u = f"{fmt([x['roc_auc'] for x in util])} / {fmt([x['pr_auc'] for x in util])}"
        else:
            u = fmt([x["f1"] for x in util])
        fid = [r["fidelity"] for r in rows]
        print(f"| {dataset} | {bounds} | {method} | {enc} | {cat} | {len(rows)} | {u} | "
              f"{fmt([f['mean_numeric_tv'] for f in fid])} | {fmt([f['mean_numeric_wasserstein'] for f in fid])} | "
              f"{fmt([f['mean_categorical_tv'] for f in fid])} | {fmt([f['pairwise']['mean_abs_error'] for f in fid])} |")


if __name__ == "__main__":
    main()
