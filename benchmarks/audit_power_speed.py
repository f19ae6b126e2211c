"""The audit's Gaussian-shaped power (`detectable_epsilon`, `smallest_provable_shift`: what leak an audit of n runs
would catch, computed by every release audit): this checkout's `mmdsynth/audit/attack.py` against the same file at
another revision, on the held-out run counts of audits of 100 to 20,000 trials, alternating, rounds apart. Prints each
case's answer and seconds in both; an answer that differs between the two is flagged.

    .venv/bin/python benchmarks/audit_power_speed.py --base cfe562d --rounds 2
"""
from __future__ import annotations

import time

from _revision import in_turn, paired

#: (claim, held-out runs, thresholds): the held-out counts of audits of 100, 300, 1,000, 3,000 and 20,000 trials at
#: the claims 1 and 4 (the best threshold), and the isolation benchmark's fixed midpoint test
CASES = ([(claim, n, "best") for claim in (1.0, 4.0) for n in (90, 270, 900, 2700, 18000)]
         + [(1.0, n, "midpoint") for n in (900, 2700)])


def answer(mod, claim: float, n: int, kind: str) -> float:
    if kind == "best":
        return mod.detectable_epsilon(claim, 1e-5, n, 0.025)
    return mod.smallest_provable_shift(claim, 1e-5, n, 0.025, thresholds=lambda mu: [mu / 2], steps=40)


def main() -> None:
    args, here, base = paired(__doc__, "mmdsynth.audit.attack",
                              {"from ..privacy import analytic": "from mmdsynth.privacy import analytic"})
    times = {"here": 0.0, "base": 0.0}
    for r in range(args.rounds):
        for claim, n, kind in CASES:
            got = {}
            for name, mod in in_turn(r, here, base):
                start = time.perf_counter()
                got[name] = answer(mod, claim, n, kind)
                seconds = time.perf_counter() - start
                times[name] += seconds
                got[name + "_s"] = seconds
            flag = "" if got["here"] == got["base"] else "  DIFFERS"
            print(f"round {r} claim {claim:g} n {n:>6} {kind:8s} answer {got['here']:.6g} "
                  f"here {got['here_s']:.3f} s base {got['base_s']:.3f} s{flag}", flush=True)
    print(f"total: here {times['here']:.1f} s, base {times['base']:.1f} s, ratio {times['here'] / times['base']:.4f}")


if __name__ == "__main__":
    main()
