"""Where one DP-KIP step's time goes (MNIST-sized problem: 784 dims, batch 500 real MNIST records).

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/kip_speed.py --ipc 10 [--device cuda]

Times, as medians over ``--rounds`` repeats after one warm-up: the support-set terms (NTK and its
element-wise partials, Cholesky), the per-record factors (cross kernel, solves), the per-record
norms (R matrices, tr(R G R)), the clipped sum, the noise (secure source) and the Adam update; the
whole ``private_gradient``; and, once, the ``torch.func`` reference (vmap of grad) for the ratio.
Rows go to ``--out`` as JSON lines.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from _rows import emit

from mmdsynth import load_dataset
from mmdsynth.privacy.dpsgd import private_gradient
from mmdsynth.kip.kernels import FCReLUKernel
from mmdsynth.kip.krr import centred_one_hot
from mmdsynth.statistics.gradients import _support_terms, clipped_sum, gradient_matrices, per_record_factors, squared_norms
from mmdsynth.methods.kip import to_kernel_space
from mmdsynth.privacy import NoiseSource
from mmdsynth.privacy.engine import PrivacyEngine


def timed(fn, device, rounds):
    def once():
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t, out
    once()
    runs = [once() for _ in range(rounds)]
    return statistics.median(r[0] for r in runs), runs[-1][1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ipc", type=int, default=10)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--reference", action="store_true", help="also time the torch.func reference once")
    p.add_argument("--out", default="benchmarks/out/kip_speed.jsonl")
    args = p.parse_args()
    dev = torch.device(args.device)
    data = load_dataset("mnist")
    g = torch.Generator().manual_seed(0)
    idx = torch.randperm(len(data.y_train), generator=g)[:args.batch]
    xb = to_kernel_space(data.x_train[idx]).double().to(dev)
    yb = centred_one_hot(data.y_train[idx], 10, torch.float64).to(dev)
    m = 10 * args.ipc
    xs = torch.randn(m, 784, generator=g, dtype=torch.float64).to(dev)
    ys = centred_one_hot(torch.arange(m) // args.ipc, 10, torch.float64).to(dev)
    k, reg, clip = FCReLUKernel(), 1e-6, 1e-6
    row = {"ipc": args.ipc, "m": m, "batch": args.batch, "device": str(dev), "machine": platform.machine(),
           "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else None, "threads": torch.get_num_threads(),
           "date": time.strftime("%Y-%m-%d")}
    row["support_terms_s"], s = timed(lambda: _support_terms(k, xs, ys, reg), dev, args.rounds)
    row["per_record_factors_s"], (b, c, u, v) = timed(lambda: per_record_factors(k, s, xb, yb), dev, args.rounds)
    row["norms_s"], _ = timed(lambda: squared_norms(s, gradient_matrices(s, b, c, u), v, xb), dev, args.rounds)
    row["clipped_sum_s"], total = timed(lambda: clipped_sum(k, xs, ys, xb, yb, reg, clip), dev, args.rounds)
    noise = NoiseSource()
    engine = PrivacyEngine.with_sigma(1.3, multipliers={"step": 1.0})
    row["noise_s"], _ = timed(lambda: noise.add_noise(total.cpu(), 1.3 * clip), dev, args.rounds)
    row["private_gradient_s"], grad = timed(
        lambda: private_gradient(k, xs, ys, xb, yb, reg=reg, clip=clip, expected_batch=args.batch,
                                 engine=engine), dev, args.rounds)
    x = xs.float().clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=1e-2)

    def adam():
        x.grad = grad.float()
        opt.step()
    row["adam_s"], _ = timed(adam, dev, args.rounds)
    row["epoch_s_estimate"] = round(120 * (row["private_gradient_s"] + row["adam_s"]), 1)
    if args.reference:
        xs32, ys32, xb32, yb32 = xs.float(), ys.float(), xb.float(), yb.float()
        row["torch_func_reference_s"], _ = timed(
            lambda: clipped_sum(k, xs32, ys32, xb32, yb32, reg, clip, factored=False), dev, 1)
        row["speedup_vs_reference"] = round(row["torch_func_reference_s"] / row["clipped_sum_s"], 1)
    emit(row, args.out)


if __name__ == "__main__":
    main()
