"""Issue 47's table with nulls and dates: the 1970-82 cars of the UCI Auto MPG data (406 rows: miles per gallon
missing in 8, horsepower in 6; the model year a date), label the origin (USA / Europe / Japan).

No table under ``../shared/datasets`` carries a date; this one ships offline inside the ``vega_datasets`` package
(MIT; ``pip install vega_datasets==0.9.0``, the file ``vega_datasets/_data/cars.json``), and is read from there,
never copied into this repository. ``Name`` (the car's make and model, an identifier) is left out.

The schema is declared here from the data's public description, not from its values: the model years 1970-1982
(the documentation's "model year 70-82"), and plausible ranges for a car of those years (mpg 0-60, displacement
50-500 cubic inches, horsepower 0-300, weight 1,000-6,000 lbs, 0-60 mph in 5-30 s); missing values are
modelled (``nullable``), not imputed.

For each seed: a split (80 / 20, ``numpy.random.default_rng(seed)``), written as CSVs a user would hand to
``mmdsynth fit --csv``; each method is fitted on the training CSV read by the library's reader (``read_table``:
dates and missing values read value by value under the schema), as a user runs it (the table default with no
method, or the one named; its defaults), ``len(train)`` rows sampled, and scored against the test CSV by the
evaluator of the other tables (12 classifiers trained on synthetic rows, tested on real; 1-, 2- and 3-way TVD at
the real deciles, with "missing" a cell of its own; also against the training rows, since 81 test rows make the
TVD against them noisy). One JSON line per (seed, method) to ``--out``; ``--score-only`` scores the CSVs of an
earlier run again.

    .venv/bin/pip install vega_datasets==0.9.0
    .venv/bin/python benchmarks/nulls_dates.py --methods default hybrid mst aim --seeds 0 1 2 --epsilon 1
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from mmdsynth.choice import table_default, table_default_params
from mmdsynth.data import Schema, read_table
from mmdsynth.data.encoding import TableEncoder
from mmdsynth.evaluation.tabular import table_classifier_scores
from mmdsynth.methods import METHODS

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rows import add_set_option, add_stops_option, check_taken, set_overrides, staged_fits  # noqa: E402
from marginal_tvd import marginal_tvd  # noqa: E402

#: the columns kept, in the file's order; Name (make and model) is an identifier and left out
COLUMNS = ("Miles_per_Gallon", "Cylinders", "Displacement", "Horsepower", "Weight_in_lbs", "Acceleration", "Year",
           "Origin")
SCHEMA = {
    "label": "Origin", "label_categories": ["USA", "Europe", "Japan"],
    "columns": [
        {"name": "Miles_per_Gallon", "type": "numeric", "bounds": [0, 60], "nullable": True},
        {"name": "Cylinders", "type": "categorical", "categories": ["3", "4", "5", "6", "8"]},
        {"name": "Displacement", "type": "numeric", "bounds": [50, 500]},
        {"name": "Horsepower", "type": "numeric", "bounds": [0, 300], "nullable": True},
        {"name": "Weight_in_lbs", "type": "numeric", "bounds": [1000, 6000]},
        {"name": "Acceleration", "type": "numeric", "bounds": [5, 30]},
        {"name": "Year", "type": "datetime", "bounds": ["1970-01-01", "1982-12-31"], "resolution": "D"},
    ]}
TEST_SHARE = 0.2
NULLABLE = [c["name"] for c in SCHEMA["columns"] if c.get("nullable")]


def cars_json(path: str | None) -> Path:
    """The cars file: ``path``, or the one inside the installed vega_datasets package."""
    if path:
        return Path(path)
    spec = importlib.util.find_spec("vega_datasets")
    if spec is None or spec.origin is None:
        raise SystemExit("the cars table ships in the vega_datasets package: .venv/bin/pip install "
                         "vega_datasets==0.9.0 (or give --data PATH/cars.json)")
    return Path(spec.origin).parent / "_data" / "cars.json"


def write_split(rows: list[dict], seed: int, folder: Path) -> None:
    """train.csv, test.csv and schema.json of one seed (missing values as empty cells, dates as ISO text)."""
    df = pd.DataFrame(rows)[list(COLUMNS)]
    order = np.random.default_rng(seed).permutation(len(df))
    n_test = int(round(TEST_SHARE * len(df)))
    folder.mkdir(parents=True, exist_ok=True)
    df.iloc[order[n_test:]].to_csv(folder / "train.csv", index=False)
    df.iloc[order[:n_test]].to_csv(folder / "test.csv", index=False)
    (folder / "schema.json").write_text(json.dumps(SCHEMA, indent=1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=["default", "hybrid", "mst", "aim"],
                   help="'default' (the table default for the training rows, chosen and sized as `fit` does it), method "
                        "names, or 'real' (the training rows themselves: the floor)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--triples", type=int, default=50)
    p.add_argument("--data", default=None, help="cars.json (default: the installed vega_datasets package's)")
    p.add_argument("--splits", default="benchmarks/out/splits")
    p.add_argument("--out", default="benchmarks/out/nulls_dates.jsonl")
    p.add_argument("--score-only", action="store_true",
                   help="score the synth_{method}_eps{E}.csv files an earlier run wrote (no fit; fit_s null)")
    p.add_argument("--tag", default="", help="appended to the method's name in the CSV and the row (runs with --set)")
    add_stops_option(p)
    add_set_option(p)
    args = p.parse_args()
    overrides = set_overrides(p, args.set)
    check_taken(p, {m: METHODS[m] for m in args.methods if m in METHODS}, overrides, every=True)
    rows = json.loads(cars_json(args.data).read_text())
    schema = Schema.from_dict(SCHEMA)
    for seed in args.seeds:
        folder = Path(args.splits) / f"cars_s{seed}"
        if not args.score_only:
            write_split(rows, seed, folder)
        train = read_table(folder / "train.csv", schema, label="Origin")
        test = read_table(folder / "test.csv", schema, label="Origin")
        for name in args.methods:
            method = table_default(len(train), args.epsilon) if name == "default" else name
            if method == "real" or args.score_only:
                csv = folder / f"synth_{name}_eps{args.epsilon:g}{args.tag}.csv"
                synth = train if method == "real" else read_table(csv, schema, label="Origin")
                _score(args, folder, seed, name, method, train, test, schema, synth, None, None, "")
                continue
            sized = table_default_params(len(train), args.epsilon) if name == "default" else {}   # as `fit` does
            stages = staged_fits(
                lambda staged: METHODS[method](epsilon=args.epsilon, delta=args.delta, seed=seed, progress=False,
                                               **{**sized, **overrides, **staged}),
                lambda model, out, resume: model.fit(train, label="Origin", schema=schema, dataset="cars", out=out,
                                                     resume=resume), args.stops)
            for stage in stages:
                synth = stage.model.sample(len(train), seed=seed)
                synth.to_csv(folder / f"synth_{name}_eps{args.epsilon:g}{args.tag}{stage.suffix}.csv", index=False)
                _score(args, folder, seed, name, method, train, test, schema, synth, round(stage.fit_s, 1),
                       stage.model.release_.ledger.total()[0], stage.suffix)


def _score(args, folder: Path, seed: int, name: str, method: str, train, test, schema, synth, fit_s, ledger, stop):
    """Score ``synth`` (classifiers on the test rows; TVD against the test and the training rows); print and append
    its row."""
    scores = table_classifier_scores(synth, test, TableEncoder(schema), seed=0)
    tvd = marginal_tvd(test, synth, schema, "deciles", args.triples)
    # 81 test rows: the real training rows are 0.33-0.35 from them in 2-way TVD, so the TVD against the
    # training rows (the distribution each method learns, at the same deciles rule) is kept beside it
    fit_tvd = marginal_tvd(train, synth, schema, "deciles", args.triples)
    missing = {c: [int(train[c].isna().sum()), int(synth[c].isna().sum())] for c in NULLABLE}
    row = {"date": time.strftime("%Y-%m-%d"), "folder": folder.name, "seed": seed, "method": name + args.tag + stop,
           "resolved": method, "epsilon": args.epsilon, "delta": args.delta, "n_train": len(train),
           "n_test": len(test), "fit_s": fit_s, "mean": scores["mean"],
           "failures": list(scores["failures"]), "skipped": list(scores["skipped"]),
           "tvd_1way": tvd["tvd_1way"], "tvd_2way": tvd["tvd_2way"], "tvd_3way": tvd.get("tvd_3way"),
           "train_tvd": {k: fit_tvd.get(k) for k in ("tvd_1way", "tvd_2way", "tvd_3way")},
           "missing_train_synth": missing, "ledger_epsilon": ledger, "set": args.set}
    print(json.dumps({k: row[k] for k in ("folder", "method", "resolved", "fit_s", "mean", "tvd_2way",
                                          "tvd_3way", "missing_train_synth")}), flush=True)
    with open(args.out, "a") as fh:
        fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
