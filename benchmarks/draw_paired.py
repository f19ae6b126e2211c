"""The hybrid's stratified draw, paired (issue 81; benchmarks/log/2026-12-05.md#stratified-draw): one table-default
fit per (table, epsilon, seed) on the suite's split, then its ``n`` rows drawn from the same reweighted pool twice:
by systematic resampling along the pool's cell order (:func:`~mmdsynth.methods.hybrid.draw_order`, the default) and
along the pool's stored order (its rows by class, in the model's random order within a class: the draw before), each
scored by the suite's evaluator. The same release and pool: only the draw differs. One JSON line per fit.

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/draw_paired.py --epsilon 1 --seeds 0 1 \\
        --tables wvs resume --out benchmarks/out/draw_paired.jsonl
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402


def fill(model, train, test, schema, seed: int, line: dict) -> None:
    """The same pool drawn along its stored order, then along its cell order, each scored."""
    pool = model._pool()
    cells = pool["order"]
    for how, order in (("stored", np.arange(len(pool["w"]))), ("cells", cells)):
        pool["order"] = order
        line[how] = suite.score(train, test, model.sample(len(train), seed=seed), schema)


if __name__ == "__main__":
    suite.paired(__doc__.split("\n\n")[0], fill)
