"""Calibrating subsampled plans (DP-SGD, DP-KIP, dp-randconv's sampled release) with the PLD accountant: this
checkout's `mmdsynth/privacy/calibration.py` against the same file at another revision, each plan in both, alternating,
rounds apart, the cache bypassed (`_calibrate_sigma.__wrapped__`). Prints each plan's sigma and seconds in both and the
totals; a sigma that spends more than its epsilon on the fine PLD, or that is not the least that holds to 1e-5, is
flagged.

    .venv/bin/python benchmarks/calibration_speed.py --base 8e22358 --rounds 2
"""
from __future__ import annotations

import time

from _revision import in_turn, paired

#: the calibration module's relative imports, pointed at the installed package in the version at --base
IMPORTS = {"from ..errors": "from mmdsynth.errors", "from ..validation": "from mmdsynth.validation",
           "from . import analytic": "from mmdsynth.privacy import analytic"}
#: (one-shot multipliers, sample rate, steps, neighbouring, epsilon): the library's own subsampled plans (DP-KIP's 100
#: steps at q = 0.01; the sampled release's 256 networks at q = 0.125 and NDPDC's 32 at q = 0.5, add/remove), a plan
#: with one-shot releases beside its steps, and a long one
PLANS = [((), 0.01, 100, "replace_one", 1.0), ((), 0.01, 100, "replace_one", 10.0),
         ((), 0.125, 256, "replace_one", 1.0), ((), 0.125, 256, "replace_one", 10.0),
         ((), 0.5, 32, "add_remove", 1.0), ((), 0.5, 32, "add_remove", 10.0),
         ((1.0,), 0.01, 100, "add_remove", 1.0), ((1.0,), 0.01, 100, "add_remove", 10.0),
         ((1.0, 2.0), 0.02, 500, "replace_one", 1.0), ((1.0, 2.0), 0.02, 500, "replace_one", 10.0),
         ((), 0.004, 1000, "replace_one", 1.0), ((), 0.004, 1000, "replace_one", 10.0)]


def main() -> None:
    args, here, base = paired(__doc__, "mmdsynth.privacy.calibration", IMPORTS)
    times = {"here": 0.0, "base": 0.0}
    for r in range(args.rounds):
        for m, q, steps, relation, eps in PLANS:
            sig = {}
            for name, mod in in_turn(r, here, base):
                plan = mod.PrivacyPlan(m, q, steps, relation)
                t = time.perf_counter()
                sig[name] = mod._calibrate_sigma.__wrapped__(eps, 1e-5, plan, "pld")
                times[name] += time.perf_counter() - t
                spent = here._epsilon_for_sigma.__wrapped__(sig[name], 1e-5, here.PrivacyPlan(m, q, steps, relation),
                                                            "pld", eps)
                less = here._epsilon_for_sigma.__wrapped__(sig[name] * (1 - 1e-5), 1e-5,
                                                           here.PrivacyPlan(m, q, steps, relation), "pld", eps)
                flag = "" if spent <= eps < less else "  <- " + ("spends more" if spent > eps else "not the least")
                print(f"round {r} {name}: {m} q={q} steps={steps} {relation} eps={eps}: sigma {sig[name]!r}{flag}",
                      flush=True)
    print(f"total over {args.rounds} round(s): here {times['here']:.1f} s, base {times['base']:.1f} s "
          f"({times['here'] / times['base']:.2f})")


if __name__ == "__main__":
    main()
