"""DP-NTK / DP-MERF / DP-HP / DP-KIP on the papers' tabular benchmarks (DP-NTK Table 4, DP-KIP Table 3).

For each (dataset, method, seed): the preset's seeded undersampling and split, the
method's preset settings (DP-NTK Table 5; epsilon 1, delta 1e-5), a fit on the training
split, as many synthetic rows as training rows, the 12 classifiers trained on them and
tested on the real test split, and the fidelity metrics against the real test split
(:func:`mmdsynth.evaluation.fidelity.table_fidelity`). ``--real`` adds the row of classifiers
trained on the real training split. ``--bounds wide`` replaces the preset's numeric bounds (the
published files' ranges) by the wide ones a user would write (``benchmarks/wide_bounds.json``);
``--numeric-encoding minmax quantile`` runs both encodings. One JSON line per run is appended to ``--out``.

    python benchmarks/table_utility.py --dataset adult cervical --method dp-ntk dp-merf \
        --seeds 0 1 2 3 4 --real --out benchmarks/out/tables.jsonl
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mmdsynth import DPHP, DPKIP, DPMERF, DPNTK
from mmdsynth.data import load_preset
from dataclasses import replace

from mmdsynth.data import Schema
from mmdsynth.data.encoding import TableEncoder
from mmdsynth.evaluation.fidelity import table_fidelity
from mmdsynth.evaluation.tabular import table_classifier_scores
from mmdsynth.methods.presets import method_preset
from _reference_view import reference_view
from _rows import add_set_option, check_taken, set_overrides, taken

METHODS = {"dp-ntk": DPNTK, "dp-merf": DPMERF, "dp-hp": DPHP, "dp-kip": DPKIP}


def run(data, method, seed, overrides, reference=False):
    params = {**method_preset(method, data.name), **taken(METHODS[method], overrides)}
    t = time.perf_counter()
    model = METHODS[method](seed=seed, **params).fit(data.train, label=data.schema.label, schema=data.schema,
                                                     dataset=data.name, privacy_unit=data.privacy_unit)
    fit_s = time.perf_counter() - t
    # generators: as many rows as the training split; DP-KIP: its support set (10 per class)
    synth = model.sample(None if method == "dp-kip" else len(data.train), seed=seed)
    scores = table_classifier_scores(synth, data.test, model.encoder_, seed=seed)
    if reference:      # the reference code's test-selected scoring, beside (never instead of) ours
        scores["reference_view"] = reference_view(synth, data.test, model.encoder_, scores, seed=seed)
    return {"method": method, "fit_s": round(fit_s, 1), "params": params, "model_params": model.get_params(), **scores,
            "fidelity": summary(table_fidelity(data.test, synth, data.schema, seed=seed))}


def summary(fid: dict) -> dict:
    """The fidelity numbers without the association matrices (kept out of the JSON lines)."""
    pair = {k: v for k, v in fid["pairwise"].items() if k not in ("real", "synthetic", "columns")}
    return {**{k: v for k, v in fid.items() if k != "pairwise"}, "pairwise": pair}


def _brief(view: dict) -> dict:
    if "hard_labels" in view:
        return view["hard_labels"]["mean"]
    return {"gnb_best": view["gaussian_nb_test_selected"]["best"], "mean_f1": view["mean_f1_with_it"]}


WIDE = Path(__file__).with_name("wide_bounds.json")


def with_bounds(data, which: str):
    """The preset with its numeric bounds replaced by the wide ones of ``benchmarks/wide_bounds.json``."""
    if which == "preset":
        return data
    wide = json.loads(WIDE.read_text())[data.name]
    cols = [replace(c, bounds=tuple(float(b) for b in wide[c.name])) if c.name in wide else c
            for c in data.schema.columns]
    data.schema = Schema(cols, data.schema.label, data.schema.label_categories,
                         "benchmarks/wide_bounds.json (a user's wide, round bounds)", data.schema.notes)
    return data


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", nargs="+", default=["adult"])
    p.add_argument("--method", nargs="+", default=["dp-ntk", "dp-merf"], choices=list(METHODS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--real", action="store_true", help="also the classifiers trained on real data")
    p.add_argument("--iterations", type=int, default=None, help="override the preset's iterations (generator "
                   "methods; DP-KIP trains for epochs: --set epochs=N)")
    p.add_argument("--lr", type=float, default=None, help="override the preset's learning rate")
    p.add_argument("--ntk-widths", default=None, help="override the DP-NTK preset's widths, e.g. 30,20")
    p.add_argument("--length-scale", type=float, default=None, help="override the DP-HP / DP-MERF length scale")
    p.add_argument("--bounds", default="preset", choices=["preset", "wide"])
    p.add_argument("--numeric-encoding", nargs="+", default=[None], help="minmax and/or quantile (default: "
                   "the method's default)")
    p.add_argument("--numeric-share", type=float, default=None)
    p.add_argument("--categorical-pairs", action="store_true", help="dp-merf: also release pairwise marginals")
    p.add_argument("--undersample", nargs="+", default=None, metavar="LABEL=RATE",
                   help="replace the preset's undersampling, e.g. 0=0.3 (the split is taken after it)")
    p.add_argument("--reference-view", action="store_true", help="also score the samples as the reference "
                   "code did (hard-label ROC/PR; Gaussian NB selected on the test split): biased, for reading "
                   "paper columns only")
    add_set_option(p)
    p.add_argument("--out", default="benchmarks/out/tables.jsonl")
    args = p.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    overrides = {"iterations": args.iterations} if args.iterations else {}
    if args.lr:
        overrides["lr"] = args.lr
    if args.length_scale:
        overrides["length_scale"] = args.length_scale
    if args.categorical_pairs:
        overrides["categorical_pairs"] = True
    if args.ntk_widths:
        overrides["widths"] = [int(w) for w in args.ntk_widths.split(",")]
    chosen = {m: METHODS[m] for m in args.method}      # each method's constructor lists only its own options:
    check_taken(p, chosen, overrides, every=False, what="a method flag")  # a flag goes to the methods taking it
    sets = set_overrides(p, args.set)
    check_taken(p, chosen, sets, every=True)           # --set goes to every run
    overrides.update(sets)
    under = None if args.undersample is None else {k: float(v) for k, _, v in
                                                   (u.partition("=") for u in args.undersample)}
    for name in args.dataset:
        for seed in args.seeds:
            data = with_bounds(load_preset(name, seed=seed, undersample=under), args.bounds)
            rows = []
            if args.real:
                t = time.perf_counter()
                real = table_classifier_scores(data.train, data.test, TableEncoder(data.schema), seed=seed)
                if args.reference_view:
                    real["reference_view"] = reference_view(data.train, data.test, TableEncoder(data.schema),
                                                            real, seed=seed)
                rows.append({"method": "real", "fit_s": 0.0, "eval_s": round(time.perf_counter() - t, 1), **real,
                             "fidelity": summary(table_fidelity(data.test, data.train, data.schema, seed=seed))})
            for method in args.method:
                for encoding in args.numeric_encoding:
                    extra = {"numeric_encoding": encoding} if encoding else {}
                    if args.numeric_share:
                        extra["numeric_share"] = args.numeric_share
                    rows.append(run(data, method, seed, {**overrides, **extra}, args.reference_view))
            for row in rows:
                row.update({"dataset": name, "seed": seed, "n_train": len(data.train), "n_test": len(data.test),
                            "bounds": args.bounds, "undersample": data.preset.undersample, "torch_threads": torch.get_num_threads()})
                fid = row["fidelity"]
                print(json.dumps({**{k: row[k] for k in ("dataset", "method", "seed", "mean", "fit_s")},
                                  "encoding": row.get("params", {}).get("numeric_encoding"),
                                  "num_tv": fid["mean_numeric_tv"], "cat_tv": fid["mean_categorical_tv"],
                                  "pair": fid["pairwise"]["mean_abs_error"],
                                  **({"reference_view": _brief(row["reference_view"])} if "reference_view" in row else {})}),
                      flush=True)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
