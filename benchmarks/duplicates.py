"""How often synthetic rows repeat, beside how often real ones do (issue 81, item 3: "synthetic rows should not repeat
more often than real ones do, on any table").

For each table of ``../shared/datasets/tables/`` named: the suite's 80/20 split (``df.sample(frac=0.2,
random_state=0)`` is the test part), the table default fitted on the rest (``mmdsynth.fit`` without a method, epsilon
``--epsilon``, seed ``--seed``), as many synthetic rows as training rows, and the share of rows that repeat an earlier
row exactly (all columns, the label included) in the real training part and in the synthetic rows. Also the 2-way TVD
against the real training part (numeric columns cut at the real deciles), with ``--classifiers`` the ML efficacy, and
the fit time. For the hybrid, the same numbers for the same release and draw with every pool row repeated as it is
(``*_drawn_as_is``: how rows were drawn before a repeated pool row got fresh numeric values). One JSON line per run is
appended to ``--out``.

    python benchmarks/duplicates.py --tables cps1988 fertility2 doctorcontacts --out benchmarks/out/duplicates.jsonl
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

import mmdsynth
from mmdsynth.data import Schema
from mmdsynth.evaluation.tabular import table_classifier_scores
from mmdsynth.generators.reweight import systematic
from mmdsynth.methods.tables import encoder_of

ROOT = Path(os.environ.get("MMDSYNTH_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "datasets")) / "tables"


def repeated_share(df: pd.DataFrame) -> float:
    """The share of rows equal (every column) to an earlier row."""
    return float(df.astype(str).duplicated().mean())


def two_way_tvd(real: pd.DataFrame, synth: pd.DataFrame, schema: Schema) -> float:
    """Mean total variation distance over all column pairs (label included), numeric columns cut at the real deciles."""
    def cells(df, name):
        col = schema.column(name) if name != schema.label else None
        if col is not None and col.kind == "numeric":
            edges = np.unique(np.nanquantile(real[name].astype(float), np.linspace(0, 1, 11))[1:-1])
            return np.searchsorted(edges, df[name].astype(float), side="right").astype(str)
        return df[name].astype(str).to_numpy()
    names = [c.name for c in schema.columns if c.kind != "id"] + [schema.label]
    r = {n: cells(real, n) for n in names}
    s = {n: cells(synth, n) for n in names}
    out = []
    for a, b in itertools.combinations(names, 2):
        p = pd.Series(list(zip(r[a], r[b]))).value_counts(normalize=True)
        q = pd.Series(list(zip(s[a], s[b]))).value_counts(normalize=True)
        out.append(0.5 * p.sub(q, fill_value=0).abs().sum())
    return float(np.mean(out))


def efficacy(synth: pd.DataFrame, test: pd.DataFrame, model) -> float:
    scores = table_classifier_scores(synth, test, model.encoder_, seed=0)
    return float(scores["mean"]["roc_auc" if scores["binary"] else "f1"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", nargs="+", required=True)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--classifiers", action="store_true", help="also the ML efficacy: the 12 classifiers' mean "
                    "score (ROC AUC for two classes, else weighted F1) trained on synthetic rows, tested on the real test part")
    ap.add_argument("--label", default="", help="a name for this code's variant in the output lines")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    for name in args.tables:
        schema = Schema.from_json(ROOT / name / "schema.json")
        df = schema.validate(pd.read_csv(ROOT / name / "data.csv.gz", dtype=str, keep_default_na=False))
        test = df.sample(frac=0.2, random_state=0)
        train = df.drop(test.index).reset_index(drop=True)
        t = time.perf_counter()
        model = mmdsynth.fit(train, label=schema.label, schema=schema, epsilon=args.epsilon, seed=args.seed)
        fit_s = time.perf_counter() - t
        synth = model.sample(len(train), seed=args.seed)
        line = {"table": name, "variant": args.label, "epsilon": args.epsilon, "seed": args.seed,
                "method": model.method, "rows": len(train), "fit_s": round(fit_s, 1),
                "repeated_real": round(repeated_share(train), 4), "repeated_synthetic": round(repeated_share(synth), 4),
                "tvd_2way": round(two_way_tvd(train, synth, schema), 4)}
        if args.classifiers:
            line["ml_efficacy"] = round(efficacy(synth, test, model), 4)
        if hasattr(model, "_fresh_copies"):       # the same release and draw, the pool rows repeated as they are
            rng = np.random.default_rng(args.seed)
            pool = model._pool()
            idx = rng.permutation(systematic(pool["w"], len(train), rng))
            drawn = encoder_of(model.release_).minmax().decode(pool["X"][idx], pool["y"][idx], categorical="argmax",
                                                                rng=rng)
            line.update({"repeated_drawn_as_is": round(repeated_share(drawn), 4),
                         "tvd_2way_drawn_as_is": round(two_way_tvd(train, drawn, schema), 4)})
            if args.classifiers:
                line["ml_efficacy_drawn_as_is"] = round(efficacy(drawn, test, model), 4)
        line["date"] = time.strftime("%Y-%m-%d")
        print(json.dumps(line), flush=True)
        with open(args.out, "a") as fh:
            fh.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
