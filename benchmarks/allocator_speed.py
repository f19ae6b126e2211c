"""The C allocator's settings (``mmdsynth.runtime.tune_allocator``) against glibc's defaults, paired in one run.

Each round starts two fresh processes in turn, one with ``MMDSYNTH_MALLOC=default`` (glibc as it is) and one tuned
as ``mmdsynth`` commands are; each times the two image workloads that allocate tens of MiB per batch:

* release: the class sums of ``--images`` real MNIST training images under dp-randconv's map (``--networks`` random
  ConvNets, the release's batches);
* steps: ``--steps`` generator-like steps (a batch of ``--batch`` images through 2 networks' ``block_loss``,
  backward to the images).

Printed and written: each process's seconds, user / system CPU and minor page faults, then per workload the median
over rounds of the ratio default / tuned (> 1: tuned is faster).

    MMDSYNTH_DATA_DIR=... OMP_NUM_THREADS=1 .venv/bin/python benchmarks/allocator_speed.py --rounds 3 \\
        --out benchmarks/out/allocator_speed.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from _rows import emit

from mmdsynth.runtime import ALLOCATOR_ENV


def child(args) -> dict:
    import torch

    from mmdsynth.data import load_dataset
    from mmdsynth.features.randconv import RandomConvFeatures
    from mmdsynth.runtime import tune_allocator

    took = tune_allocator()
    data = load_dataset("mnist")
    x = torch.as_tensor(data.x_train[:args.images]).float()
    y = torch.as_tensor(data.y_train[:args.images]).long()
    fmap = RandomConvFeatures((1, 28, 28), n_networks=args.networks)
    t = time.perf_counter()
    fmap.class_sums(x, y, 10)
    release_s = time.perf_counter() - t
    images = x[:args.batch].clone().requires_grad_(True)
    weights = torch.full((args.batch, 10), 1.0 / args.batch, dtype=torch.float64)
    target = torch.zeros(fmap.out_dim, 10, dtype=torch.float64)
    t = time.perf_counter()
    for step in range(args.steps):
        fmap.block_loss(target, images, weights, [step % args.networks, (step + 1) % args.networks]).backward()
    steps_s = time.perf_counter() - t
    use = resource.getrusage(resource.RUSAGE_SELF)
    return {"tuned": took, "release_s": round(release_s, 2), "steps_s": round(steps_s, 2),
            "user_s": round(use.ru_utime, 1), "sys_s": round(use.ru_stime, 1), "minor_faults": use.ru_minflt,
            "peak_rss_mib": round(use.ru_maxrss / 1024)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--images", type=int, default=3000)
    p.add_argument("--networks", type=int, default=4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=250)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    runs = {"default": [], "tuned": []}
    for r in range(args.rounds):
        for mode in ("default", "tuned"):
            env = {**os.environ, ALLOCATOR_ENV: "default" if mode == "default" else ""}
            out = subprocess.run([sys.executable, __file__, "--child", *sys.argv[1:]], env=env, check=True,
                                 capture_output=True, text=True).stdout
            runs[mode].append(json.loads(out.strip().splitlines()[-1]))
            print(mode, runs[mode][-1], flush=True)
    ratios = {w: statistics.median(d[w] / t[w] for d, t in zip(runs["default"], runs["tuned"]))
              for w in ("release_s", "steps_s")}
    emit({"benchmark": "allocator_speed", "images": args.images, "networks": args.networks, "steps": args.steps,
          "batch": args.batch, "rounds": args.rounds, "runs": runs,
          "ratio_default_over_tuned": {k: round(v, 2) for k, v in ratios.items()},
          "torch_threads": int(os.environ.get("OMP_NUM_THREADS", "0") or 0)}, args.out)


if __name__ == "__main__":
    main()
