"""The replace-one epsilon of every recorded add/remove run (issue 45, item 6).

dp-randconv's ``--sample-rate`` and DP-KIP under ``neighbouring="add_remove"`` divide their sums by the public
record count m, so their add/remove accounting holds for zero-out neighbours (a record replaced by a null record,
m unchanged), not for adding or removing a record. What the same noise gives under the library's own relation,
replace-one, is computed here from each recorded configuration with the library's functions: sigma as the run's
engine calibrated it (``dpsgd_sigma``: add/remove, its sample rate and steps, epsilon, delta), then
``replace_one_epsilon`` (the same plan under the PLD accountant's replace-one relation). One JSON line per run.

    python benchmarks/replace_one_epsilon.py --rows benchmarks/out/distill.jsonl \
        --kip-rows benchmarks/out/kip.jsonl --out benchmarks/out/replace_one_epsilon.jsonl

``--kip-rows``: DP-KIP rows, which record their sigma, steps and batch size but not the relation; N is the
dataset's public training size. A row counts as add/remove when the add/remove epsilon of its recorded sigma (a
plan of its q and steps alone: N(0, I) and public starts) is its claimed epsilon within 1e-3; each distinct
configuration is computed once.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

from _rows import emit

from mmdsynth.privacy.calibration import PrivacyPlan, dpsgd_sigma, replace_one_epsilon


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="benchmarks/out/distill.jsonl")
    p.add_argument("--kip-rows", default=None)
    p.add_argument("--out", default="benchmarks/out/replace_one_epsilon.jsonl")
    args = p.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    for line in Path(args.rows).read_text().splitlines():
        row = json.loads(line)
        if row.get("neighbouring") != "add_remove":
            continue
        q, steps = float(row["sample_rate"]), int(row["feature_spec"]["n_networks"])   # one step per network
        eps, delta = float(row["epsilon"]), float(row["delta"])
        start = time.perf_counter()
        sigma = dpsgd_sigma(eps, delta, q, steps, neighbouring="add_remove")
        ro = replace_one_epsilon(sigma, delta, PrivacyPlan((), q, steps, "add_remove"))
        emit({"source": args.rows, "set": row.get("set"), "dataset": row["dataset"], "method": row["method"],
              "epsilon_add_remove": eps, "delta": delta, "sample_rate": q, "steps": steps, "sigma": sigma,
              "epsilon_replace_one": ro, "score_dc": row.get("cnn_dc"), "seconds": round(time.perf_counter() - start, 1),
              "commit": commit, "machine": platform.machine(), "date": time.strftime("%Y-%m-%d")}, args.out)
    if args.kip_rows:
        kip_rows(args.kip_rows, args.out, commit)


TRAIN_SIZE = {"mnist": 60000, "fashion-mnist": 60000, "cifar10": 50000}      # public: the datasets' training splits


def kip_rows(path: str, out: str, commit: str) -> None:
    from mmdsynth.privacy.calibration import epsilon_for_sigma

    seen = {}
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        eps, sigma = float(row["epsilon"]), row.get("sigma")
        if not sigma or eps == float("inf") or row["dataset"] not in TRAIN_SIZE:
            continue
        n, steps = TRAIN_SIZE[row["dataset"]], int(row["steps"])
        q, delta = int(row["batch_size"]) / n, 1e-5
        key = (row["dataset"], eps, q, steps, round(float(sigma), 9))
        seen.setdefault(key, []).append(row)
    for (dataset, eps, q, steps, sigma), rows in seen.items():
        start = time.perf_counter()
        add_remove = epsilon_for_sigma(sigma, 1e-5, PrivacyPlan((), q, steps, "add_remove"))
        if abs(add_remove - eps) > 1e-3:
            print(f"skip {dataset} eps {eps} sigma {sigma}: add/remove epsilon {add_remove:.4f} (not an add/remove "
                  f"row of this plan: {[r.get('init') for r in rows]})")
            continue
        ro = replace_one_epsilon(sigma, 1e-5, PrivacyPlan((), q, steps, "add_remove"))
        emit({"source": path, "dataset": dataset, "method": "dp-kip", "inits": sorted({str(r.get("init")) for r in rows}),
              "rows": len(rows), "epsilon_add_remove": eps, "epsilon_of_recorded_sigma": add_remove, "delta": 1e-5,
              "sample_rate": q, "steps": steps, "sigma": sigma, "epsilon_replace_one": ro,
              "seconds": round(time.perf_counter() - start, 1), "commit": commit, "machine": platform.machine(),
              "date": time.strftime("%Y-%m-%d")}, out)


if __name__ == "__main__":
    main()
