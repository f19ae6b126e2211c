"""Distillation from a release (issue 34): K images per class learned from a class-conditional release, scored by
the ConvNet on the real test split, under mmdsynth's fixed protocol and/or the dataset-condensation one (``dc``: 1,000
epochs with DSA augmentation, as NDPDC and Dosser report).

For each (dataset, method, epsilon, seed): one real release (the engine, secure noise unless --noise-seed), then
``mmdsynth distill``'s ``distill_release`` (post-processing), then the ConvNet protocols. One JSON line per run is
appended to ``--out`` with the release, distillation and evaluation times.

    python benchmarks/distill.py --dataset mnist --method dp-ntk --epsilon 1 10 --seeds 0 1 2 \
        --protocol fixed dc --out benchmarks/out/distill.jsonl

``--epsilon inf``: the exact embedding (no noise; benchmark-only, never a release), the check that a good score is
not a noise-free accident. ``--train-subset N`` releases the first N training images only (probes; recorded in the
row). ``--release-cache DIR`` keeps each release in DIR and reuses it, so distillation settings can be compared on
one release (post-processing, no new privacy cost).
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from _rows import emit

from mmdsynth.data import load_dataset
from mmdsynth.embedding import mean_embedding
from mmdsynth.evaluation.convnet import cnn_scores
from mmdsynth.methods import METHODS
from mmdsynth.methods.distill import distill_release
from mmdsynth.privacy.ledger import Ledger
from mmdsynth.release import Release

FEATURES = {"dp-ntk": {}, "dp-merf": {}, "dp-randconv": {}}


def release(method: str, eps: float, data, args):
    kwargs = {"n_classes": data.n_classes}
    if method == "dp-randconv":
        kwargs.update(n_networks=args.n_networks, conv_width=args.conv_width, conv_augment=args.augment,
                      conv_pool=args.pool, sample_rate=args.sample_rate, neighbouring=args.neighbouring)
    model = METHODS[method](epsilon=eps if math.isfinite(eps) else 1.0, delta=1e-5, noise_seed=args.noise_seed,
                            **kwargs)   # the papers' delta
    if math.isfinite(eps):
        return model.release(data.x_train, data.y_train, dataset=data.name)
    fmap = model.image_feature_map(tuple(data.shape), data.n_classes)
    exact = mean_embedding(fmap, data.x_train, data.y_train, data.n_classes)
    return Release({"embedding": exact}, fmap.spec(), {"name": data.name, "n_classes": data.n_classes,
                                                       "record_shape": list(data.shape)}, Ledger(()))


def scored(row: dict, dset, data, protocols, cnn_seeds: int, dataset: str) -> dict:
    """``row`` with each ConvNet protocol's score of the distilled set ``dset`` on ``data``'s real test split: the
    mean accuracy, each seed's, and the seconds."""
    for proto in protocols:
        t = time.perf_counter()
        r = cnn_scores(dset.x, dset.y, data.x_test, data.y_test, n_classes=data.n_classes,
                       seeds=tuple(range(cnn_seeds)), protocol=proto, dataset=dataset)
        row[f"cnn_{proto}"] = r["cnn_acc"]
        row[f"cnn_{proto}_accs"] = r["cnn_accs"]
        row[f"cnn_{proto}_s"] = round(time.perf_counter() - t, 1)
    return row


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
    p.add_argument("--augment", action="store_true", help="dp-randconv: a fixed public view per network")
    p.add_argument("--pool", type=int, default=None, help="dp-randconv: last map averaged to pool x pool cells")
    p.add_argument("--sample-rate", type=float, default=None,
                   help="dp-randconv: each network reads its own Poisson sample at this rate (NDPDC's sampling)")
    p.add_argument("--neighbouring", default="replace_one", choices=["replace_one", "add_remove"],
                   help="dp-randconv with --sample-rate: add_remove is NDPDC's accounting")
    p.add_argument("--smooth", action="store_true", help="distill: learn images through a fixed [1, 2, 1] blur")
    p.add_argument("--blocks-per-step", type=int, default=None, help="distill: networks matched per step")
    p.add_argument("--train-subset", type=int, default=None, help="release the first N training images only")
    p.add_argument("--release-cache", default=None, help="keep releases in this folder and reuse them")
    p.add_argument("--sets-dir", default=None, help="write each distilled set here as .npz (mmdsynth distill's format)")
    p.add_argument("--noise-seed", type=int, default=None, help="fixed noise (testing only; default: secure)")
    p.add_argument("--out", default="benchmarks/out/distill.jsonl")
    args = p.parse_args()
    for name in args.dataset:
        data = load_dataset(name)
        if args.train_subset:
            data.x_train, data.y_train = data.x_train[:args.train_subset], data.y_train[:args.train_subset]
        for method in args.method:
            for eps in args.epsilon:
                for seed in args.seeds:
                    t = time.perf_counter()
                    tag = (f"{name}_{method}_eps{eps:g}_seed{seed}_n{args.n_networks}_w{args.conv_width}"
                           f"{'_aug' if args.augment else ''}{f'_pool{args.pool}' if args.pool else ''}"
                           f"{f'_q{args.sample_rate:g}' if args.sample_rate else ''}"
                           f"{'_addrm' if args.neighbouring == 'add_remove' else ''}_sub{args.train_subset or 0}")
                    cached = Path(args.release_cache) / tag if args.release_cache else None
                    reused = cached is not None and cached.exists()
                    if reused:
                        rel = Release.load(cached)
                    else:
                        rel = release(method, eps, data, args)
                        if cached is not None:
                            rel.save(cached)
                    release_s = time.perf_counter() - t
                    t = time.perf_counter()
                    dset = distill_release(rel, args.per_class, iterations=args.iterations, lr=args.lr, seed=seed,
                                           blocks_per_step=args.blocks_per_step, smooth=args.smooth)
                    distill_s = time.perf_counter() - t
                    set_path = None
                    if args.sets_dir:
                        Path(args.sets_dir).mkdir(parents=True, exist_ok=True)
                        stamp = time.strftime("%Y%m%dT%H%M%S")
                        set_path = str(dset.save(Path(args.sets_dir) / f"{tag}_it{args.iterations}"
                                                 f"_b{args.blocks_per_step or 0}{'_smooth' if args.smooth else ''}_{stamp}.npz"))
                    row = {"dataset": name, "method": method, "epsilon": eps, "delta": 1e-5, "seed": seed,
                           "per_class": args.per_class, "iterations": args.iterations, "lr": args.lr,
                           "blocks_per_step": args.blocks_per_step, "sample_rate": args.sample_rate,
                           "neighbouring": args.neighbouring, "smooth": args.smooth,
                           "train_subset": args.train_subset,
                           "release_reused": reused, "set": set_path,
                           "feature_spec": rel.feature_spec, "release_s": round(release_s, 1),
                           "distill_s": round(distill_s, 1), "loss_start": dset.info["loss_start"],
                           "loss_final": dset.info["loss_final"]}
                    scored(row, dset, data, args.protocol, args.cnn_seeds, dataset=name)
                    emit(row, args.out)


if __name__ == "__main__":
    main()
