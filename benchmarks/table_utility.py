"""DP-NTK / DP-MERF / DP-HP / DP-KIP on the papers' tabular benchmarks (DP-NTK Table 4, DP-KIP Table 3).

For each (dataset, method, seed): the preset's seeded undersampling and split, the
method's preset settings (DP-NTK Table 5; epsilon 1, delta 1e-5), a fit on the training
split, as many synthetic rows as training rows, the 12 classifiers trained on them and
tested on the real test split. ``--real`` adds the row of classifiers trained on the real
training split. One JSON line per run is appended to ``--out``.

    python benchmarks/table_utility.py --dataset adult cervical --method dp-ntk dp-merf \
        --seeds 0 1 2 3 4 --real --out benchmarks/out/tables.jsonl
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dpsynth import DPHP, DPKIP, DPMERF, DPNTK
from dpsynth.data import load_preset
from dpsynth.data.encoding import TableEncoder
from dpsynth.evaluation.tabular import table_classifier_scores
from dpsynth.methods.presets import method_preset

METHODS = {"dp-ntk": DPNTK, "dp-merf": DPMERF, "dp-hp": DPHP, "dp-kip": DPKIP}


def run(data, method, seed, overrides):
    params = {**method_preset(method, data.name), **overrides}
    t = time.perf_counter()
    model = METHODS[method](seed=seed, **params).fit(data.train, label=data.schema.label, schema=data.schema,
                                                     dataset=data.name, privacy_unit=data.privacy_unit)
    fit_s = time.perf_counter() - t
    # generators: as many rows as the training split; DP-KIP: its support set (10 per class)
    synth = model.sample(None if method == "dp-kip" else len(data.train), seed=seed)
    scores = table_classifier_scores(synth, data.test, model.encoder_, seed=seed)
    return {"method": method, "fit_s": round(fit_s, 1), "params": params, **scores}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", nargs="+", default=["adult"])
    p.add_argument("--method", nargs="+", default=["dp-ntk", "dp-merf"], choices=list(METHODS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--real", action="store_true", help="also the classifiers trained on real data")
    p.add_argument("--iterations", type=int, default=None, help="override the preset's iterations")
    p.add_argument("--ntk-widths", default=None, help="override the DP-NTK preset's widths, e.g. 30,20")
    p.add_argument("--length-scale", type=float, default=None, help="override the DP-HP / DP-MERF length scale")
    p.add_argument("--out", default="benchmarks/out/tables.jsonl")
    args = p.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    overrides = {"iterations": args.iterations} if args.iterations else {}
    if args.length_scale:
        overrides["length_scale"] = args.length_scale
    if args.ntk_widths:
        overrides["widths"] = [int(w) for w in args.ntk_widths.split(",")]
    for name in args.dataset:
        for seed in args.seeds:
            data = load_preset(name, seed=seed)
            rows = []
            if args.real:
                t = time.perf_counter()
                real = table_classifier_scores(data.train, data.test, TableEncoder(data.schema), seed=seed)
                rows.append({"method": "real", "fit_s": 0.0, "eval_s": round(time.perf_counter() - t, 1), **real})
            for method in args.method:
                rows.append(run(data, method, seed, overrides))
            for row in rows:
                row.update({"dataset": name, "seed": seed, "n_train": len(data.train), "n_test": len(data.test),
                            "torch_threads": torch.get_num_threads()})
                print(json.dumps({k: row[k] for k in ("dataset", "method", "seed", "mean", "fit_s")}), flush=True)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
