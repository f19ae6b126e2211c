"""The Frechet distance (`mmdsynth.evaluation.frechet.frechet_distance`, behind `evaluate --frechet` and the
Inception FID): this checkout's file against the same file at another revision, on feature sets shaped like the
FID's (2,048 features) and the CNN's, more and fewer samples than features, alternating, rounds apart. The features
are rectified Gaussian mixtures (dead units make singular covariances, as real networks do). Prints each case's
distance and seconds in both and their relative difference; run it on one thread for stable times.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/frechet_speed.py --base 15273fd --rounds 2
"""
from __future__ import annotations

import time

import numpy as np

from _revision import in_turn, paired

#: (features, samples of the first set, of the second): the FID's 2,048 with more samples than features on both sides,
#: on one side, and a handful (a smoke test's); the CNN's 128 at the sizes `evaluate` uses
CASES = [(2048, 4000, 3000), (2048, 6000, 2000), (2048, 3, 3), (128, 10000, 2000)]


def features(d: int, n: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    mix = np.random.default_rng(0).normal(size=(d, d)) / np.sqrt(d)
    return np.maximum(g.normal(size=(n, d)) @ mix + 0.1 * seed, 0.0)


def main() -> None:
    args, here, base = paired(__doc__, "mmdsynth.evaluation.frechet",
                              {"from .._io import": "from mmdsynth._io import",
                               "from ..data.fetch import": "from mmdsynth.data.fetch import"})
    times = {"here": 0.0, "base": 0.0}
    sets = {case: (features(case[0], case[1], 1), features(case[0], case[2], 2)) for case in CASES}
    for r in range(args.rounds):
        for (d, n1, n2), (f1, f2) in sets.items():
            got = {}
            for name, mod in in_turn(r, here, base):
                start = time.perf_counter()
                got[name] = mod.frechet_distance(f1, f2)
                got[name + "_s"] = time.perf_counter() - start
                times[name] += got[name + "_s"]
            rel = abs(got["here"] - got["base"]) / abs(got["base"])
            print(f"round {r} d {d:>5} n {n1:>6} / {n2:>6}: distance {got['here']:.10g} (base {got['base']:.10g}, "
                  f"relative difference {rel:.1e}); here {got['here_s']:.2f} s base {got['base_s']:.2f} s",
                  flush=True)
    print(f"total: here {times['here']:.1f} s, base {times['base']:.1f} s, ratio {times['here'] / times['base']:.3f}")


if __name__ == "__main__":
    main()
