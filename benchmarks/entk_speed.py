"""e-NTK mean-embedding speed: fast fc_1l path vs the reference algorithm.

The reference (DP-NTK authors' code) computes features one sample at a time with
torch.autograd.grad in a Python loop. Both are timed in the same run on the same
MNIST images (fc_1l, width 800, 10 outputs) and report samples/s.

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/entk_speed.py [--n-ref 500 --rounds 3]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from mmdsynth.data import load_dataset
from mmdsynth.embedding import mean_embedding
from mmdsynth.features import ENTKFeatures


def reference_embedding(fm: ENTKFeatures, x: torch.Tensor, y: torch.Tensor, n_classes: int) -> torch.Tensor:
    params = list(fm.net.parameters())
    for p in params:
        p.requires_grad_(True)
    emb = torch.zeros(fm.out_dim, n_classes)
    for i in range(x.shape[0]):
        out = fm.net(x[i:i + 1].reshape(1, -1)).sum()
        g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(out, params)])
        emb[:, y[i]] += g / g.norm()
    for p in params:
        p.requires_grad_(False)
    return emb / x.shape[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-ref", type=int, default=500, help="images for the (slow) reference loop")
    ap.add_argument("--width", type=int, default=800)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate reference and fast path this many times; report each ratio and the median")
    args = ap.parse_args()
    data = load_dataset("mnist")
    x, y = data.x_train, data.y_train
    fm = ENTKFeatures(784, "fc_1l", (args.width,), 10, seed=0)
    print(f"machine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
    ratios = []
    for r in range(args.rounds):
        t = time.perf_counter()
        ref = reference_embedding(fm, x[:args.n_ref], y[:args.n_ref], 10)
        t_ref = time.perf_counter() - t
        t = time.perf_counter()
        mean_embedding(fm, x, y, 10)  # the release path (ENTKFeatures.class_sums)
        t_fast = time.perf_counter() - t
        ref_rate, fast_rate = args.n_ref / t_ref, x.shape[0] / t_fast
        ratios.append(fast_rate / ref_rate)
        print(f"round {r + 1}: reference per-sample autograd loop {ref_rate:,.0f} samples/s ({args.n_ref} images, "
              f"{t_ref:.1f} s); fast path {fast_rate:,.0f} samples/s (60,000 images, {t_fast:.2f} s); "
              f"speed-up {ratios[-1]:.0f}x", flush=True)
    # the neighbour-difference error of the released statistic: D and D' differ in record 0 (image and
    # label); the sums' difference against the exact difference of that record's two contributions
    # (each materialised in float64 from its blocks in a full-size chunk, where the float32 kernels are
    # the release's), in units of the sensitivity (2 in sums, 2/m in means)
    j = int(torch.nonzero(y != y[0])[0])
    x2, y2 = x.clone(), y.clone()
    x2[0], y2[0] = x[j], y[j]
    diff = fm.class_sums(x, y, 10) - fm.class_sums(x2, y2, 10)
    alone = torch.zeros_like(diff)
    alone[y[0]] += fm.released_feature(x[:fm.CHUNK_ROWS])
    alone[y2[0]] -= fm.released_feature(x2[:fm.CHUNK_ROWS])
    print(f"neighbour-difference error of the released sums over all 60,000 records: "
          f"{float((diff - alone).norm()) / 2:.2e} of the sensitivity (||difference|| = {float(diff.norm()):.4f}, bound 2)")
    fast_sub = mean_embedding(fm, x[:args.n_ref], y[:args.n_ref], 10)
    err = float((fast_sub.float() - ref).norm() / ref.norm())
    print(f"median speed-up over {args.rounds} rounds: {statistics.median(ratios):.0f}x; relative difference of "
          f"the embeddings on the reference's images: {err:.2e}")


if __name__ == "__main__":
    main()
