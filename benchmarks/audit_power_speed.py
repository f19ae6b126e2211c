"""The audit's Gaussian-shaped power (`detectable_epsilon`, `smallest_provable_shift`: what leak an audit of n runs
would catch, computed by every release audit): this checkout's `mmdsynth/audit/attack.py` against the same file at
another revision, on the held-out run counts of audits of 100 to 20,000 trials, alternating, rounds apart. Prints each
case's answer and seconds in both; an answer that differs between the two is flagged.

    .venv/bin/python benchmarks/audit_power_speed.py --base cfe562d --rounds 2
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (claim, held-out runs, thresholds): the held-out counts of audits of 100, 300, 1,000, 3,000 and 20,000 trials at
#: the claims 1 and 4 (the best threshold), and the isolation benchmark's fixed midpoint test
CASES = ([(claim, n, "best") for claim in (1.0, 4.0) for n in (90, 270, 900, 2700, 18000)]
         + [(1.0, n, "midpoint") for n in (900, 2700)])


def module_at(rev: str | None):
    """`mmdsynth.audit.attack` as this checkout has it (None) or as it was at ``rev``."""
    if rev is None:
        import mmdsynth.audit.attack as here
        return here
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:mmdsynth/audit/attack.py"],
                          capture_output=True, text=True, check=True).stdout
    text = text.replace("from ..privacy import analytic", "from mmdsynth.privacy import analytic")
    path = Path(tempfile.mkdtemp()) / f"attack_{rev}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def answer(mod, claim: float, n: int, kind: str) -> float:
    if kind == "best":
        return mod.detectable_epsilon(claim, 1e-5, n, 0.025)
    return mod.smallest_provable_shift(claim, 1e-5, n, 0.025, thresholds=lambda mu: [mu / 2], steps=40)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the revision to compare with")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    here, base = module_at(None), module_at(args.base)
    times = {"here": 0.0, "base": 0.0}
    for r in range(args.rounds):
        for claim, n, kind in CASES:
            got = {}
            for name, mod in (("base", base), ("here", here)) if r % 2 == 0 else (("here", here), ("base", base)):
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
