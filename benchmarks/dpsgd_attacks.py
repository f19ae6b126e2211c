"""The DP-SGD leaks of issue 30, attacked through the public API before and after the fix.

``--behaviour old`` puts back the two defects as the test doubles do (``tests/doubles``): the
Poisson sampler seeded from a public value (every run reads the same batches), and the factored
clipping that added a record unclipped when its norm formula cancelled. ``--behaviour fixed``
runs the library as it is. Three measurements per behaviour:

* ``sample``: two DP-KIP fits on two different datasets of the same size (digits, 300 records,
  ``seed=0`` as the CLI passes): how many of their batches are identical (old: all of them);
* ``clip``: the largest contribution of one record, in units of C, to the clipped sum of a step on
  a public start of one digit repeated (20 points), over lambda 1e-6/1e-7, all labels;
* ``audit``: ``mmdsynth.audit.audit(mechanism="dpsgd-fit")`` at a claimed epsilon 1, with a public
  start of distinct points (catches the sample) and of one point repeated (catches the clipping):
  the empirical lower bound, the measured sensitivity (canary gap) and the verdict.

    .venv/bin/python benchmarks/dpsgd_attacks.py --behaviour old --trials 1000 --out benchmarks/out/dpsgd_attacks.jsonl
    .venv/bin/python benchmarks/dpsgd_attacks.py --behaviour fixed --trials 1000 --out benchmarks/out/dpsgd_attacks.jsonl
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

import mmdsynth
from mmdsynth import DPKIP
from mmdsynth.audit import audit
from mmdsynth.statistics import gradients
from mmdsynth.kip.kernels import FCReLUKernel
from mmdsynth.kip.krr import centred_one_hot
from mmdsynth.methods.kip import to_kernel_space
from mmdsynth.privacy import engine as engine_module
from mmdsynth.privacy.sampling import PoissonSampler

ROOT = Path(__file__).resolve().parents[1]


def put_back_old_behaviour() -> None:
    sys.path.insert(0, str(ROOT / "tests" / "doubles"))
    import leaky_per_record

    class PublicSampler(PoissonSampler):
        def __init__(self, seed=None):
            super().__init__(seed=0)

    engine_module.PoissonSampler = PublicSampler
    gradients.factored_clipped_sum = leaky_per_record.factored_clipped_sum


def identical_batches() -> dict:
    digits = mmdsynth.load_dataset("digits")
    runs = []
    for offset in (0, 300):
        seen = []
        sampler_cls = engine_module.PoissonSampler
        real = sampler_cls.sample

        def logged(self, n, q, real=real, seen=seen):
            idx = real(self, n, q)
            seen.append(tuple(idx.tolist()))
            return idx
        sampler_cls.sample = logged
        try:
            DPKIP(1.0, 1e-5, n_classes=10, images_per_class=1, epochs=2, batch_size=30, clip=1e-2, seed=0).fit(
                digits.x_train[offset:offset + 300].numpy(), digits.y_train[offset:offset + 300].numpy())
        finally:
            sampler_cls.sample = real
        runs.append(seen)
    same = sum(a == b for a, b in zip(*runs))
    return {"batches": len(runs[0]), "identical": same}


def worst_clip() -> dict:
    digits = mmdsynth.load_dataset("digits")
    x = to_kernel_space(digits.x_train[:40]).double()
    xs, ys = x[:1].repeat(20, 1), centred_one_hot(torch.arange(20) // 2, 10).double()
    xb, yb = x[1:30], centred_one_hot(digits.y_train[1:30], 10).double()
    k, clip, out = FCReLUKernel(1), 1e-6, {}
    for reg in (1e-6, 1e-7):
        base = gradients.clipped_sum(k, xs, ys, xb, yb, reg, clip)
        worst = 0.0
        for label in range(10):
            yt = centred_one_hot(torch.tensor([label]), 10).double()
            more = gradients.clipped_sum(k, xs, ys, torch.cat([xb, x[:1]]), torch.cat([yb, yt]), reg, clip)
            worst = max(worst, float((more - base).norm()) / clip)
        out[f"lambda={reg:g}"] = round(worst, 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--behaviour", choices=["old", "fixed"], required=True)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.behaviour == "old":
        put_back_old_behaviour()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    row = {"behaviour": args.behaviour, "commit": commit, "machine": platform.machine(), "trials": args.trials,
           "date": time.strftime("%Y-%m-%d"), "sample": identical_batches(), "clip_worst_over_C": worst_clip()}
    print(json.dumps(row), flush=True)
    for duplicate in (False, True):
        start = time.perf_counter()
        r = audit(1.0, 1e-5, mechanism="dpsgd-fit", trials=args.trials, duplicate_start=duplicate)
        row[f"audit_{'duplicate' if duplicate else 'distinct'}_start"] = {
            "epsilon_lower": round(r.epsilon_lower, 3), "epsilon_upper": r.epsilon_upper, "tpr": r.tpr,
            "fpr": r.fpr, "canary_gap": round(r.canary_gap, 4), "detectable_epsilon": round(r.detectable_epsilon, 3),
            "passed": r.passed, "seconds": round(time.perf_counter() - start, 1)}
        print(r.format(), flush=True)
    print(json.dumps(row))
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
