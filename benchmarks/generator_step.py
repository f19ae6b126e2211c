"""Time and peak memory of one DP-NTK generator step (MNIST shapes, fc_1l width 800).

Runs each measurement in a fresh subprocess so that the peak resident set size
(ru_maxrss, which includes the Python interpreter and torch itself) belongs to one
step alone. The target embedding is random (same shape as MNIST's): the step's cost
does not depend on its values.

    .venv/bin/python benchmarks/generator_step.py [--batch-size 5000] [--steps 5] [--bf16]

``--bf16`` times the step as ``TrainConfig(precision="bfloat16")`` runs it (the same autocast context).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one_run(batch_size: int, steps: int, width: int, bf16: bool = False) -> dict:
    import torch

    from mmdsynth.features import ENTKFeatures
    from mmdsynth.generators import ConvGenerator
    from mmdsynth.runtime import flush_subnormals, tune_allocator
    from mmdsynth.training import TrainConfig, embedding_loss, step_precision

    tune_allocator()                   # as every mmdsynth command starts (before torch's threads)
    flush_subnormals()

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    torch.manual_seed(0)
    gen, fmap = ConvGenerator((1, 28, 28), 10), ENTKFeatures(784, "fc_1l", (width,), 10)
    target = torch.randn(fmap.out_dim, 10) * 1e-4
    opt = torch.optim.Adam(gen.parameters(), lr=0.01)
    times = []
    precision = TrainConfig(precision="bfloat16" if bf16 else "float32")
    for _ in range(steps + 1):  # the first step warms up
        t = time.perf_counter()
        labels = gen.draw_labels(batch_size)
        with step_precision(precision, torch.device("cpu")):
            loss = embedding_loss(fmap, target, gen.generate(labels), labels, 10)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"batch_size": batch_size, "width": width, "step_s_median": sorted(times[1:])[len(times[1:]) // 2],
            "peak_rss_gib": peak / 2**20, "rss_before_model_gib": base / 2**20,
            "torch_threads": torch.get_num_threads(), "bf16_autocast": bf16}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, nargs="+", default=[5000, 1000])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--width", type=int, default=800)
    ap.add_argument("--bf16", action="store_true",
                    help="also the step with precision=\"bfloat16\" (the training option), beside float32")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_run(args.batch_size[0], args.steps, args.width, args.bf16)))
        return
    for b in args.batch_size:
        for bf16 in ([False, True] if args.bf16 else [False]):
            out = subprocess.run([sys.executable, __file__, "--child", "--batch-size", str(b), "--steps",
                                  str(args.steps), "--width", str(args.width)] + (["--bf16"] if bf16 else []),
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"batch {r['batch_size']}{' (bfloat16 autocast)' if bf16 else ''}: {r['step_s_median']:.3f} s/step "
                  f"(median of {args.steps}), peak RSS {r['peak_rss_gib']:.2f} GiB (of which "
                  f"{r['rss_before_model_gib']:.2f} GiB interpreter + torch), {r['torch_threads']} threads")


if __name__ == "__main__":
    main()
