"""The hybrid's draw with each pool row's copies capped, paired (issue 81 item 3: synthetic rows should not repeat
more often than real ones do; benchmarks/log/2026-12-07.md#copies-capped): one table-default fit per (table, epsilon,
seed) on the suite's split, then its ``n`` rows drawn from the same reweighted pool twice: by systematic resampling of
the pool's weights (the draw before) and of the weights capped at ``ceil(n / pool rows) / n`` each
(:func:`capped`: a pool row drawn at most once where the pool holds n rows or more), each scored by the suite's
evaluator. The same release and pool: only the draw differs. One JSON line per fit. Tried and not adopted (the log
says why), so the cap lives here, not in the library.

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/cap_paired.py --epsilon 10 --seeds 0 1 2 \\
        --tables resume census --out benchmarks/out/cap_paired.jsonl
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402


def capped(w: np.ndarray, n: int) -> np.ndarray:
    """Weights ``w`` (normalised) capped so that systematic resampling of ``n`` rows draws no row more than
    ``ceil(n / len(w))`` times: every weight at most that many ``1 / n``, the excess spread over the rows below the
    cap in proportion to their weights (water-filling; the order of the rows' weights kept). Post-processing of
    public weights."""
    w = np.asarray(w, dtype=np.float64)
    w = w / w.sum()
    cap = math.ceil(n / len(w)) / n
    if w.max() <= cap:
        return w
    desc = np.sort(w)[::-1]
    k = np.arange(1, len(w))                             # k rows at the cap, the rest scaled up to fill 1
    rest = 1.0 - np.cumsum(desc)[:-1]                    # the weight below the k heaviest rows
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (1.0 - k * cap) / rest
    fits = (desc[1:] * scale <= cap) & (rest > 0)
    return np.minimum(w * scale[np.argmax(fits)], cap)


def fill(model, train, test, schema, seed: int, line: dict) -> None:
    """The same pool drawn with its weights as they are, then capped, each scored."""
    import mmdsynth.methods.hybrid as hybrid
    from mmdsynth.generators.reweight import systematic

    for how, draw in (("uncapped", lambda w, n, rng: systematic(w, n, rng)),
                      ("capped", lambda w, n, rng: systematic(capped(w, n), n, rng))):
        hybrid.systematic = draw
        try:
            line[how] = suite.score(train, test, model.sample(len(train), seed=seed), schema)
        finally:
            hybrid.systematic = systematic


if __name__ == "__main__":
    suite.paired(__doc__.split("\n\n")[0], fill)
