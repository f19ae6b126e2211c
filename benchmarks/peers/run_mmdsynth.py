"""mmdsynth's table methods on the exported preset splits, written as CSVs the peers' evaluation reads.

The same fit as ``benchmarks/table_utility.py`` (the method's tabular preset, ``--epsilon`` overriding
the preset's 1, the preset's seeded split), timed around ``fit`` only; ``len(train)`` rows are then
sampled and written as ``synth_{method}_eps{epsilon:g}.csv`` in the split folder, beside the peers'
``synth_mst_eps1.csv`` etc., so that ``evaluate_peers.py`` scores every method from the same files with
the same functions. The training split is checked against the folder's ``train.csv`` / ``test.csv``
(a different split would make the comparison meaningless).

    MMDSYNTH_DATA_DIR=... .venv/bin/python benchmarks/peers/run_mmdsynth.py benchmarks/out/splits/adult_s0 \\
        --method dp-merf dp-hp --epsilon 1 --out benchmarks/out/mmdsynth_issue32_fit.jsonl
    # the library's MST (issue 47): synth_mmdsynth-mst_eps1.csv, beside the mbi 2.0 peers' synth_mst_eps1.csv
    MMDSYNTH_DATA_DIR=... .venv/bin/python benchmarks/peers/run_mmdsynth.py benchmarks/out/splits/adult_s0 \\
        --method mmdsynth-mst --epsilon 1 --out benchmarks/out/mmdsynth_mst_fit.jsonl
    # one release, trained to 250, 500, 1000 and 2000 iterations in turn: synth_dp-merf_eps1_it250.csv, ...
    ... run_mmdsynth.py benchmarks/out/splits/cervical_s0 --method dp-merf --stops 250 500 1000 2000
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from mmdsynth import DPHP, DPMERF, DPNTK
from mmdsynth.methods import AIM, MST, Hybrid
from mmdsynth.data import load_preset
from mmdsynth.methods.presets import method_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _rows import add_set_option, add_stops_option, check_taken, set_overrides, staged_fits  # noqa: E402

#: "mmdsynth-mst" / "mmdsynth-aim": the library's MST and AIM (their files must not take the peers' synth_mst_*.csv
#: names); "hybrid": the library's table default
METHODS = {"dp-merf": DPMERF, "dp-hp": DPHP, "dp-ntk": DPNTK, "mmdsynth-mst": MST, "mmdsynth-aim": AIM, "hybrid": Hybrid}
#: methods with no tabular preset: their defaults, at --epsilon / --delta
NO_PRESET = ("mmdsynth-mst", "mmdsynth-aim", "hybrid")


def _same(a: pd.DataFrame, path: Path) -> bool:
    b = pd.read_csv(path, dtype=str, keep_default_na=False)
    return a.shape == b.shape and bool((a.astype(str).reset_index(drop=True)[b.columns].values == b.values).all())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folders", nargs="+", help="split folders NAME_sSEED written by export_splits.py (preset bounds)")
    p.add_argument("--method", nargs="+", default=["dp-merf"], choices=list(METHODS))
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--out", default=None)
    p.add_argument("--tag", default="", help="appended to the CSV name (runs with --set overrides)")
    add_stops_option(p)
    add_set_option(p)
    args = p.parse_args()
    if args.stops and any(m in NO_PRESET for m in args.method):
        p.error("--stops is for the generator methods (dp-merf, dp-hp, dp-ntk)")
    overrides = set_overrides(p, args.set)
    check_taken(p, {m: METHODS[m] for m in args.method}, overrides, every=True)
    for folder in map(Path, args.folders):
        name, _, seed = folder.name.rpartition("_s")
        seed = int(seed)
        data = load_preset(name, seed=seed)
        same = _same(data.train, folder / "train.csv") and _same(data.test, folder / "test.csv")
        if not same:
            raise SystemExit(f"{folder}: the preset's split differs from train.csv / test.csv")
        for method in args.method:
            preset = {} if method in NO_PRESET else method_preset(method, name)
            params = {**preset, "epsilon": args.epsilon, "delta": args.delta, **overrides}
            stages = staged_fits(lambda staged: METHODS[method](seed=seed, **{**params, **staged}),
                                 lambda model, out, resume: model.fit(
                                     data.train, label=data.schema.label, schema=data.schema, dataset=data.name,
                                     privacy_unit=data.privacy_unit, out=out, resume=resume), args.stops)
            for stage in stages:
                _write(args, folder, method, stage.model, data, {**params, **stage.params}, overrides, stage.fit_s,
                       stage.suffix)


def _write(args, folder: Path, method: str, model, data, params: dict, overrides: dict, fit_s: float, stop: str):
    t = time.perf_counter()
    synth = model.sample(len(data.train), seed=model.get_params()["seed"])
    csv = f"synth_{method}_eps{args.epsilon:g}{args.tag}{stop}.csv"
    synth.to_csv(folder / csv, index=False)
    row = {"folder": str(folder), "method": method, "fit_s": round(fit_s, 1),
           "sample_s": round(time.perf_counter() - t, 1), "epsilon": args.epsilon, "delta": args.delta,
           "params": params, "overrides": overrides, "model_params": model.get_params(), "synth_csv": csv,
           "n_rows": len(synth), "torch_threads": torch.get_num_threads(), "host_cpus": os.cpu_count(),
           "reweighting": getattr(model, "reweighting_", None)}
    print(json.dumps({k: row[k] for k in ("folder", "method", "epsilon", "fit_s", "sample_s", "torch_threads",
                                          "synth_csv")}), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(json.dumps(row, default=str) + "\n")


if __name__ == "__main__":
    main()
