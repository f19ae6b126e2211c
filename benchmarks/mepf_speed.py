"""DP-MEPF speed: feature extraction throughput and the generator step, with peak memory.

- release features: images/s of phi1 + phi2 from ONE encoder pass per batch (the release path,
  ``FeatureMap.class_sums``), against the baseline of two maps (phi1, phi2) run one after the other
  over the same images (ratio > 1: the one-pass path is faster);
- generator step: seconds per step at the paper's batch (100 for 28x28, 128 for 32x32) with the
  moving-average loss, and its peak memory (CUDA: max allocated; CPU: growth of the peak RSS); the
  baseline in the same run is the generic feature route (phi materialised and normalised, then
  phi^T W), alternated with the current one ``--rounds`` times (medians reported).

    python benchmarks/mepf_speed.py --encoder ENC.safetensors --dataset mnist --out benchmarks/out/mepf_speed.jsonl
"""
from __future__ import annotations

import argparse
import datetime
import platform
import resource
import statistics
import time
import types

import torch
from _rows import emit

from mmdsynth.data import load_dataset
from mmdsynth.features.base import FeatureMap
from mmdsynth.features.perceptual import PerceptualFeatures
from mmdsynth.generators import build_generator, default_generator_spec
from mmdsynth.training import TrainConfig, default_device, train_generator


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--encoder", required=True)
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--images", type=int, default=5000, help="images for the throughput measurement")
    p.add_argument("--batch-size", type=int, default=None, help="generator batch (default: the paper's)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3, help="alternate the step and its baseline this many times")
    p.add_argument("--device", default=None)
    p.add_argument("--out", default="benchmarks/out/mepf_speed.jsonl")
    args = p.parse_args()
    dev = default_device(args.device)
    data = load_dataset(args.dataset)
    shape = tuple(data.x_train.shape[1:])
    x = data.x_train[:args.images].to(dev)
    y = data.y_train[:args.images].to(dev)
    both = PerceptualFeatures(args.encoder, shape, moments=(1, 2)).to(dev)
    singles = [PerceptualFeatures(args.encoder, shape, moments=(m,)).to(dev) for m in (1, 2)]
    both.class_sums(x[:256], y[:256], data.n_classes)            # warm-up
    t = time.perf_counter()
    both.class_sums(x, y, data.n_classes)
    one_pass = time.perf_counter() - t
    t = time.perf_counter()
    for fmap in singles:
        fmap.class_sums(x, y, data.n_classes)
    two_pass = time.perf_counter() - t
    batch = args.batch_size or (128 if shape[-1] == 32 else 100)
    gen = build_generator(default_generator_spec(shape, data.n_classes))
    target = torch.zeros(both.out_dim, data.n_classes)
    rss0 = rss_gib()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    train_generator(gen, both, target, TrainConfig(iterations=3, batch_size=batch, loss="mavg"), device=str(dev))

    def timed_steps() -> float:
        t = time.perf_counter()
        train_generator(gen, both, target, TrainConfig(iterations=args.steps, batch_size=batch, loss="mavg"),
                        device=str(dev))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t) / args.steps

    # baseline in the same run: the generic route (phi materialised, then phi^T W), alternating rounds
    steps, baseline = [], []
    for _ in range(args.rounds):
        steps.append(timed_steps())
        both.weighted_sum = types.MethodType(FeatureMap.weighted_sum, both)
        baseline.append(timed_steps())
        del both.weighted_sum
    step, base_step = statistics.median(steps), statistics.median(baseline)
    peak = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else rss_gib()
    emit({"bench": "mepf_speed", "date": datetime.date.today().isoformat(), "machine": platform.processor() or
          platform.machine(), "device": str(dev), "torch_threads": torch.get_num_threads(), "dataset": args.dataset,
          "encoder": args.encoder, "feature_dim": both.out_dim, "images": args.images,
          "release_images_per_s": round(args.images / one_pass, 1),
          "two_maps_images_per_s": round(args.images / two_pass, 1), "one_pass_speedup": round(two_pass / one_pass, 2),
          "generator_batch": batch, "step_s": round(step, 4), "step_s_rounds": [round(v, 4) for v in steps],
          "baseline_step_s": round(base_step, 4), "baseline_step_s_rounds": [round(v, 4) for v in baseline],
          "step_speedup": round(base_step / step, 2), "peak_gib": round(peak, 2),
          "peak_rss_before_steps_gib": round(rss0, 2)}, args.out)


if __name__ == "__main__":
    main()
