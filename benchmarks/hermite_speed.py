"""DP-HP speed: Hermite feature computation for the release, and the generator step.

- release: ``HermiteFeatures.class_sums`` (the release path: float64 recursion written in place,
  rows bounded, product blocks summed through their factors) over the MNIST training set
  (60,000 x 784, sum kernel order 100, and the default 10 product releases of order 20 over 2
  pixels), in images/s; against a baseline in the same run on the first ``--baseline-images``:
  the straightforward route (each order a new tensor, stacked, every product block materialised
  per record, then the generic bounded class sums), ratio > 1 when the release path is faster;
- generator step: seconds per step at batch 200 (the authors' setting) with the conv generator.

    python benchmarks/hermite_speed.py --out benchmarks/out/hermite_speed.jsonl
"""
from __future__ import annotations

import argparse
import datetime
import math
import platform
import resource
import time

import torch
from _rows import emit

from mmdsynth.data import load_dataset
from mmdsynth.features import HermiteFeatures
from mmdsynth.features.base import FeatureMap
from mmdsynth.generators import build_generator, default_generator_spec
from mmdsynth.training import TrainConfig, default_device, train_generator


class StackedHermite(HermiteFeatures):
    """Baseline: the recursion as a list of per-order tensors, stacked; generic class sums."""

    def __call__(self, x):
        x = x.reshape(x.shape[0], -1).double()

        def stacked(v, order, rho, dim=-1):
            out = [(1 - rho ** 2) ** 0.25 * torch.exp(-rho * v ** 2 / (1 + rho))]
            out.append(torch.sqrt(2 * rho) * v * out[0])
            for k in range(1, order):
                out.append(torch.sqrt(2 * rho / (k + 1)) * v * out[k] - rho * math.sqrt(k / (k + 1)) * out[k - 1])
            return torch.stack(out, dim)
        blocks = [(stacked(x, self.order, self.rho.double(), 1) / math.sqrt(self.input_dim)).reshape(x.shape[0], -1)]
        if self.n_product:
            h = stacked(x[:, self.subsets], self.product_order, self.rho_product[self.subsets].double())
            prod = h[:, :, 0]
            for i in range(1, self.product_dims):
                prod = (prod[..., :, None] * h[:, :, i, None, :]).reshape(x.shape[0], self.n_product, -1)
            blocks.append(prod.reshape(x.shape[0], -1))
        return torch.cat(blocks, 1)

    def class_sums(self, X, y=None, n_classes=None, batch_size=None):
        return FeatureMap.class_sums(self, X, y, n_classes, batch_size)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--images", type=int, default=None, help="images for the release timing (default: all)")
    p.add_argument("--baseline-images", type=int, default=3000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--device", default=None)
    p.add_argument("--out", default="benchmarks/out/hermite_speed.jsonl")
    args = p.parse_args()
    dev = default_device(args.device)
    data = load_dataset(args.dataset)
    n = args.images or len(data.x_train)
    x, y = data.x_train[:n].to(dev), data.y_train[:n].to(dev)
    d = int(x[0].numel())
    fmap = HermiteFeatures(d, order=100, length_scale=0.005 ** 0.5, n_product=10, product_dims=2,
                           product_order=20).to(dev)
    base = StackedHermite(d, order=100, length_scale=0.005 ** 0.5, n_product=10, product_dims=2,
                          product_order=20).to(dev)
    fmap.class_sums(x[:256], y[:256], data.n_classes)                    # warm-up
    t = time.perf_counter()
    sums = fmap.class_sums(x, y, data.n_classes)
    release_s = time.perf_counter() - t
    nb = min(args.baseline_images, n)
    t = time.perf_counter()
    fast_sub = fmap.class_sums(x[:nb], y[:nb], data.n_classes)
    fast_sub_s = time.perf_counter() - t
    t = time.perf_counter()
    base_sub = base.class_sums(x[:nb], y[:nb], data.n_classes)
    base_sub_s = time.perf_counter() - t
    agree = float((fast_sub - base_sub).abs().max())
    gen = build_generator(default_generator_spec(tuple(x.shape[1:]), data.n_classes))
    target = torch.zeros(fmap.out_dim, data.n_classes)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t = time.perf_counter()
    train_generator(gen, fmap, target, TrainConfig(iterations=args.steps, batch_size=200, lr=0.01, lr_step=300),
                    device=str(dev))
    step_s = (time.perf_counter() - t) / args.steps
    emit({"benchmark": "hermite_speed", "date": datetime.date.today().isoformat(), "machine": platform.machine(),
          "device": str(dev), "torch_threads": torch.get_num_threads(), "dataset": args.dataset, "images": n,
          "features": fmap.out_dim, "release_s": round(release_s, 1), "release_images_per_s": round(n / release_s),
          "baseline_images": nb, "release_path_s": round(fast_sub_s, 2), "baseline_s": round(base_sub_s, 2),
          "speedup_vs_baseline": round(base_sub_s / fast_sub_s, 2), "max_abs_difference": agree,
          "sum_finite": bool(torch.isfinite(sums).all()), "step_s_batch200": round(step_s, 3),
          "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
          "rss_growth_gib_during_steps": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20 - rss0, 2)},
         args.out)


if __name__ == "__main__":
    main()
