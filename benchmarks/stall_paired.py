"""The hybrid's stall rule, paired (issue 81; benchmarks/log/2026-12-05.md#stall-default): one table-default fit per
(table, epsilon, seed) on the suite's split, its pool reweighted with ``stall_stop`` off and again on (the same
release: the reweighting is post-processing), each scored by the suite's evaluator. One JSON line per fit.

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/stall_paired.py --epsilon 1 --seeds 0 1 2 \
        --tables wvs resume --out benchmarks/out/stall_paired.jsonl
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402


def fill(model, train, test, schema, seed: int, line: dict) -> None:
    """The same pool reweighted with the stall rule off, then on, each drawn and scored."""
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


if __name__ == "__main__":
    suite.paired(__doc__.split("\n\n")[0], fill)
