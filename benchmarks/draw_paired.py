"""The hybrid's stratified draw, paired (issue 81; benchmarks/log/2026-12-05.md#stratified-draw): one table-default
fit per (table, epsilon, seed) on the suite's split, then its ``n`` rows drawn from the same reweighted pool twice:
by systematic resampling along the pool's cell order (:func:`~mmdsynth.methods.hybrid.draw_order`, the default) and
along the pool's stored order (its rows by class, in the model's random order within a class: the draw before), each
scored by the suite's evaluator. The same release and pool: only the draw differs. One JSON line per fit.

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/draw_paired.py --epsilon 1 --seeds 0 1 \\
        --tables wvs resume --out benchmarks/out/draw_paired.jsonl
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402


def main() -> None:
    import mmdsynth

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", nargs="+", default=[t for t in suite.TABLES if t not in ("males", "flights")])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    for name in args.tables:
        schema, train, test = suite.split(name)
        for seed in args.seeds:
            model = mmdsynth.fit(train, label=schema.label, schema=schema, epsilon=args.epsilon, seed=seed)
            if model.method != "hybrid":
                continue
            line = {"table": name, "epsilon": args.epsilon, "seed": seed,
                    "params": suite.chosen_params(train, schema, args.epsilon), "date": time.strftime("%Y-%m-%d")}
            pool = model._pool()
            cells = pool["order"]
            for how, order in (("stored", np.arange(len(pool["w"]))), ("cells", cells)):
                pool["order"] = order
                line[how] = suite.score(train, test, model.sample(len(train), seed=seed), schema)
            suite.emit(line, args.out)


if __name__ == "__main__":
    main()
