"""The table default's fit (``Hybrid``) at this checkout against an earlier revision, paired in one run.

Each round starts two fresh processes in turn, one importing ``mmdsynth`` from this checkout and one from ``--base``
(a git revision, checked out once into a temporary worktree); each loads a preset's split (``--dataset``,
``--seed``) and fits ``Hybrid(seed=S, epsilon=E)`` on it, one thread (as the peers' comparisons run). Printed and
written: each process's fit seconds, wall seconds and peak memory, then the median over rounds of the ratio
base / this (> 1: this checkout is faster). Each fit draws fresh noise, so the reweighting may stop after a
different number of steps: the steps are printed beside the times.

    MMDSYNTH_DATA_DIR=... .venv/bin/python benchmarks/hybrid_speed.py --base 3d3a917 --dataset adult --epsilon 10 \\
        --rounds 2 --out benchmarks/out/hybrid_speed.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _rows import emit

ROOT = Path(__file__).resolve().parents[1]
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
FIT = """
import json, resource, sys, time
import mmdsynth
from mmdsynth.data import load_preset
from mmdsynth.methods import Hybrid
name, seed, eps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
data = load_preset(name, seed=seed)
t = time.perf_counter()
m = Hybrid(seed=seed, epsilon=eps).fit(data.train, label=data.schema.label, schema=data.schema, dataset=data.name,
                                       privacy_unit=data.privacy_unit)
fit_s, use = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"fit_s": fit_s, "steps": m.reweighting_["steps"], "cpu_s": use.ru_utime + use.ru_stime,
                  "peak_mib": use.ru_maxrss / 1024, "from": mmdsynth.__file__}))
"""


def run(code_root: Path, args) -> dict:
    """One fresh process fitting the hybrid with ``mmdsynth`` imported from ``code_root``."""
    env = {**os.environ, **THREADS, "PYTHONPATH": str(code_root)}
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", FIT, args.dataset, str(args.seed), str(args.epsilon)], env=env,
                         cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if not row.pop("from").startswith(str(code_root)):
        raise SystemExit(f"the process did not import mmdsynth from {code_root}")
    return {**row, "wall_s": wall}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the git revision to compare against")
    p.add_argument("--dataset", default="adult")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epsilon", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base], check=True,
                       capture_output=True)
        try:
            rows = []
            for r in range(args.rounds):
                for label, root in (("base", base), ("this", ROOT)):
                    row = {"round": r, "code": label, "revision": args.base if label == "base" else "checkout",
                           "dataset": args.dataset, "seed": args.seed, "epsilon": args.epsilon, **run(root, args)}
                    rows.append(row)
                    emit(row, args.out)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    for what in ("fit_s", "wall_s"):
        ratios = [a[what] / b[what] for a, b in zip(rows[0::2], rows[1::2])]
        emit({"summary": f"{what} base / this, median of {len(ratios)}", "ratio": statistics.median(ratios),
              "ratios": ratios}, args.out)


if __name__ == "__main__":
    main()
