"""Issue 32: a rare class does not wreck the other classes. The table of ``tests/support.py: five_class_table``
(four learnable classes, and with the rare class a fifth held by one row), 4,000 training rows, DP-MERF at its table
defaults with 500 iterations and a seeded noise (so the comparison is paired); weighted F1 of three classifiers
trained on 4,000 synthetic rows and tested on 2,000 fresh real ones, with and without the rare class, per seed. The
claim (one-sided): with the class, at most 0.05 below without, and without above 0.6.

The rare class's handling (released proportions floored at 1e-3, each class weighted by its proportion squared in
the loss, labels drawn from the proportions) is the kernel methods' shared code; its unit test is
``tests/unit/test_real_tables.py`` (the loss of a one-row class against the old weighting). This end-to-end check
was a 57-second test; it measures utility, so it runs here.

    .venv/bin/python benchmarks/rare_class.py --seeds 0 1 2 --out benchmarks/out/rare_class.jsonl

Exit status 1 when the claim fails.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import FIVE_SCHEMA, five_class_table  # noqa: E402

from _rows import emit  # noqa: E402

from mmdsynth import DPMERF, Schema  # noqa: E402
from mmdsynth.data.encoding import TableEncoder  # noqa: E402
from mmdsynth.evaluation import tabular  # noqa: E402

CLASSIFIERS = ["logistic_regression", "random_forest", "gaussian_nb"]


def f1(rare: bool, seed: int, iterations: int) -> float:
    train, test = five_class_table(4000, seed, rare), five_class_table(2000, 100 + seed, False)
    params = {**DPMERF.defaults_for("table"), "iterations": iterations, "seed": seed, "noise_seed": 1000 + seed}
    model = DPMERF(**params).fit(train, label="y", schema=FIVE_SCHEMA)
    enc = TableEncoder(Schema.from_dict(FIVE_SCHEMA), list(train.columns))
    scores = tabular.table_classifier_scores(model.sample(4000, seed=seed), test, enc, seed=seed,
                                             classifiers=CLASSIFIERS)
    return float(scores["mean"]["f1"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--iterations", type=int, default=500)
    p.add_argument("--out", default="benchmarks/out/rare_class.jsonl")
    args = p.parse_args()
    start = time.perf_counter()
    pairs = [(f1(True, s, args.iterations), f1(False, s, args.iterations)) for s in args.seeds]
    with_rare, without = (float(np.mean(v)) for v in zip(*pairs))
    ok = with_rare >= without - 0.05 and without > 0.6
    emit({"method": "dp-merf", "seeds": args.seeds, "iterations": args.iterations,
          "f1_with_rare": [round(a, 4) for a, _ in pairs], "f1_without": [round(b, 4) for _, b in pairs],
          "mean_with_rare": round(with_rare, 4), "mean_without": round(without, 4), "ok": ok,
          "seconds": round(time.perf_counter() - start, 1), "date": time.strftime("%Y-%m-%d"),
          "machine": platform.node()}, args.out)
    return int(not ok)


if __name__ == "__main__":
    sys.exit(main())
