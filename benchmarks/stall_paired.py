"""The hybrid's stall rule, paired (issue 81; benchmarks/log/2026-12-05.md#stall-default): one table-default fit per
(table, epsilon, seed) on the suite's split, its pool reweighted with ``stall_stop`` off and again on (the same
release: the reweighting is post-processing), each scored by the suite's evaluator. One JSON line per fit.

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/stall_paired.py --epsilon 1 --seeds 0 1 2 \
        --tables wvs resume --out benchmarks/out/stall_paired.jsonl
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

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
            for stall in (False, True):
                model.settings_.stall_stop = stall
                t = time.perf_counter()
                model._reweight()
                seconds = time.perf_counter() - t
                r = model.reweighting_
                line["on" if stall else "off"] = {
                    **suite.score(train, test, model.sample(len(train), seed=seed), schema),
                    "reweight_s": round(seconds, 1), "steps": r["steps"], "stopped": r["stopped"],
                    "ess": round(r["effective_fraction"], 3)}
            suite.emit(line, args.out)


if __name__ == "__main__":
    main()
