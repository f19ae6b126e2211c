"""Distillation from a release (issue 34): K images per class learned from a class-conditional release, scored by
the ConvNet on the real test split, under dpsynth's fixed protocol and/or the dataset-condensation one (``dc``: 1,000
epochs with DSA augmentation, as NDPDC and Dosser report).

For each (dataset, method, epsilon, seed): one real release (the engine, secure noise unless --noise-seed), then
``dpsynth distill``'s ``distill_release`` (post-processing), then the ConvNet protocols. One JSON line per run is
appended to ``--out`` with the release, distillation and evaluation times.

    python benchmarks/distill.py --dataset mnist --method dp-ntk --epsilon 1 10 --seeds 0 1 2 \
        --protocol fixed dc --out benchmarks/out/distill.jsonl

``--epsilon inf``: the exact embedding (no noise; benchmark-only, never a release), the check that a good score is
not a noise-free accident.
"""
from __future__ import annotations

import argparse
import math
import time

from _rows import emit

from dpsynth.data import load_dataset
from dpsynth.embedding import mean_embedding
from dpsynth.evaluation.convnet import cnn_scores
from dpsynth.methods import METHODS
from dpsynth.methods.distill import distill_release
from dpsynth.privacy.ledger import Ledger
from dpsynth.release import Release

FEATURES = {"dp-ntk": {}, "dp-merf": {}, "dp-randconv": {}}


def release(method: str, eps: float, data, args):
    kwargs = {"n_classes": data.n_classes}
    if method == "dp-randconv":
        kwargs.update(n_networks=args.n_networks, conv_width=args.conv_width)
    model = METHODS[method](epsilon=eps if math.isfinite(eps) else 1.0, noise_seed=args.noise_seed, **kwargs)
    if math.isfinite(eps):
        return model.release(data.x_train, data.y_train, dataset=data.name)
    fmap = model.image_feature_map(tuple(data.shape), data.n_classes)
    exact = mean_embedding(fmap, data.x_train, data.y_train, data.n_classes)
    return Release({"embedding": exact}, fmap.spec(), {"name": data.name, "n_classes": data.n_classes,
                                                       "record_shape": list(data.shape)}, Ledger(()))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", nargs="+", default=["mnist"])
    p.add_argument("--method", nargs="+", default=["dp-ntk"], choices=list(FEATURES))
    p.add_argument("--epsilon", nargs="+", type=float, default=[1.0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--per-class", type=int, default=10)
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--protocol", nargs="+", default=["fixed"], choices=["fixed", "dc"])
    p.add_argument("--cnn-seeds", type=int, default=1, help="ConvNet training seeds per protocol")
    p.add_argument("--n-networks", type=int, default=8, help="dp-randconv: random networks")
    p.add_argument("--conv-width", type=int, default=64, help="dp-randconv: filters per layer")
    p.add_argument("--noise-seed", type=int, default=None, help="fixed noise (testing only; default: secure)")
    p.add_argument("--out", default="benchmarks/out/distill.jsonl")
    args = p.parse_args()
    for name in args.dataset:
        data = load_dataset(name)
        for method in args.method:
            for eps in args.epsilon:
                for seed in args.seeds:
                    t = time.perf_counter()
                    rel = release(method, eps, data, args)
                    release_s = time.perf_counter() - t
                    t = time.perf_counter()
                    dset = distill_release(rel, args.per_class, iterations=args.iterations, lr=args.lr, seed=seed)
                    distill_s = time.perf_counter() - t
                    row = {"dataset": name, "method": method, "epsilon": eps, "delta": 1e-5, "seed": seed,
                           "per_class": args.per_class, "iterations": args.iterations, "lr": args.lr,
                           "feature_spec": rel.feature_spec, "release_s": round(release_s, 1),
                           "distill_s": round(distill_s, 1), "loss_start": dset.info["loss_start"],
                           "loss_final": dset.info["loss_final"]}
                    for proto in args.protocol:
                        t = time.perf_counter()
                        r = cnn_scores(dset.x, dset.y, data.x_test, data.y_test, n_classes=data.n_classes,
                                       seeds=tuple(range(args.cnn_seeds)), protocol=proto, dataset=name)
                        row[f"cnn_{proto}"] = r["cnn_acc"]
                        row[f"cnn_{proto}_accs"] = r["cnn_accs"]
                        row[f"cnn_{proto}_s"] = round(time.perf_counter() - t, 1)
                    emit(row, args.out)


if __name__ == "__main__":
    main()
