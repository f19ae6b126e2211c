"""DP-NTK / DP-MERF / DP-HP / DP-MEPF utility on MNIST and Fashion-MNIST (DP-NTK paper, Table 2 protocol).

For each (dataset, method, epsilon, seed): fit on the training split (delta 1e-5),
draw 6,000 samples with balanced labels, train LogisticRegression and MLP on them,
test on the real test split; ``--cnn`` adds the ConvNet protocol (``cnn_acc``) trained on 60,000
samples. ``--epsilon inf`` gives the non-private row (the exact
embedding, no noise: benchmark-only, never a release). One JSON line per run is
appended to ``--out``, with the fit wall time and peak resident memory.

    python benchmarks/image_utility.py --dataset mnist --method dp-ntk --epsilon 10 1 0.2 \
        --seeds 0 1 2 --iterations 2000 --batch-size 1000 --out benchmarks/out/image.jsonl

DP-HP at the authors' settings (10 epochs of batch 200 = 3,000 iterations, lr 0.01 x0.9 per epoch;
length scale and gamma per dataset from ``mmdsynth.methods.presets.DPHP_IMAGE``):

    python benchmarks/image_utility.py --dataset mnist --method dp-hp --epsilon 1 --seeds 0 1 2 \
        --iterations 3000 --batch-size 200 --lr 0.01 --lr-step 300 --out benchmarks/out/dphp.jsonl

dp-randconv's release (32 random ConvNets; about 10 minutes on MNIST here) can be made once
(``mmdsynth fit --method dp-randconv --dataset mnist --epsilon 1 --release-only --out DIR``) and given as
``--release DIR``: each run then trains a generator from a copy of it (no data read, no privacy spent; ``fit_s``
is the training time only, ``release_dir`` names the release). ``--cnn-width/--cnn-epochs/--cnn-seeds/--cnn-samples``
shrink the ConvNet protocol to a CPU-sized proxy (the row's ``cnn_protocol`` says which); only the defaults are
the fixed protocol of ``benchmarks/RESULTS.md``.

    python benchmarks/image_utility.py --dataset mnist --method dp-randconv --release DIR --epsilon 1 \
        --iterations 1000 --batch-size 500 --set blocks_per_step=2 --out benchmarks/out/randconv_generator.jsonl

DP-MEPF needs ``--encoder`` (a PUBLIC encoder from ``mmdsynth pretrain-encoder``); with DP early
stopping (default) the row also scores the final checkpoint (``final_*``) beside the selected one.

    python benchmarks/image_utility.py --dataset mnist --method dp-mepf --encoder ENC.safetensors \
        --epsilon 10 1 0.2 --seeds 0 1 2 --iterations 2000 --batch-size 100 --lr 1e-3 --out benchmarks/out/mepf.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _rows import add_set_option, check_taken, emit, set_overrides

from mmdsynth import DPHP, DPMEPF, DPMERF, DPNTK
from mmdsynth.methods.kernel import DPRandConv
from mmdsynth.methods import KernelGeneratorMethod
from mmdsynth.data import load_dataset
from mmdsynth.embedding import mean_embedding
from mmdsynth.evaluation import image_classifier_scores, save_image_grid
from mmdsynth.evaluation.convnet import cnn_scores
from mmdsynth.evaluation.frechet import frechet_report
from mmdsynth.runtime import flush_subnormals, subnormals_flushed, tune_allocator
from mmdsynth.methods.presets import image_preset
from mmdsynth.privacy.ledger import Ledger
from mmdsynth.release import Release
from mmdsynth.training import Selection

METHODS = {"dp-ntk": DPNTK, "dp-merf": DPMERF, "dp-hp": DPHP, "dp-mepf": DPMEPF, "dp-randconv": DPRandConv}


def fit_from_release(model, release_dir: str, dataset: str, eps: float):
    """Train ``model``'s generator from a saved release (a copy of it: the folder is left as it was): no data
    read, no privacy spent. The release must hold ``dataset`` at ``eps``: checked before any training."""
    release = Release.load(Path(release_dir) / "release")
    name, got = release.dataset.get("name"), release.ledger.total()[0]
    if name != dataset or not math.isclose(got, eps):
        raise SystemExit(f"--release {release_dir} holds {name} at eps {got:g}, not {dataset} at eps {eps:g}")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(Path(release_dir) / "release", Path(tmp) / "release")
        model.fit(None, out=tmp, resume=True)
    return model


def fit_nonprivate(model, data):
    """epsilon = infinity: the exact embedding, for the reference row only."""
    model._validate = lambda: None
    model.early_stopping = False
    fmap = model.image_feature_map(tuple(data.shape), data.n_classes)
    exact = mean_embedding(fmap, data.x_train, data.y_train, data.n_classes)
    model.release_ = Release({"embedding": exact}, fmap.spec(),
                             {"name": data.name, "n_classes": data.n_classes, "record_shape": list(data.shape)},
                             Ledger(()))
    model._train(None, False)
    return model


class TracedSelection(Selection):
    """Benchmark-only: each checkpoint the proxy scores is also scored by the Frechet distance on the
    named network against the REAL test split (non-private; for the early-stopping table only)."""

    def __init__(self, base: Selection, data):
        super().__init__(base.proxy_map, base.proxy, base.every, base.n_samples, base.seed)
        self.data, self.trace = data, []

    def score(self, generator, iteration):
        value = super().score(generator, iteration)
        with torch.no_grad():
            labels = torch.arange(self.n_samples) % generator.n_classes
            x = generator.generate(labels, torch.Generator().manual_seed(self.seed + 1)).cpu().numpy()
        self.trace.append([iteration, value, frechet_report(self.data, x)["fd"]])
        return value


def run(args, data, method, eps, seed):
    kwargs = {"n_classes": data.n_classes, "conditional": not args.unconditional, "iterations": args.iterations, "batch_size": args.batch_size,
              "seed": seed, "progress": args.progress, "lr_step": args.lr_step}
    if args.generator:
        kwargs["generator"] = json.loads(args.generator)
    if method == "dp-ntk":
        kwargs["ntk_width"] = args.ntk_width
    if method == "dp-mepf":
        kwargs.update(encoder=args.encoder, loss=args.loss, moments=tuple(args.moments),
                      early_stopping=not args.no_early_stopping, select_every=args.select_every)
        if args.mavg_lr:
            kwargs["mavg_lr"] = args.mavg_lr
    if method == "dp-hp":           # the authors' per-dataset length scale and gamma, then overrides
        kwargs.update({k: v for k, v in image_preset(method, data.name).items()
                       if k != "generator" or not args.generator})
        kwargs.update({k: v for k, v in {"length_scale": args.length_scale, "sum_weight": args.sum_weight,
                                         "order": args.hp_order, "n_product": args.product_releases}.items()
                       if v is not None})
    if args.lr:
        kwargs["lr"] = args.lr
    kwargs.update(args.overrides)
    model = METHODS[method](epsilon=eps if math.isfinite(eps) else 1.0, delta=1e-5, **kwargs)   # the papers' delta
    traced = []
    if args.trace_fd:
        make = model._selection
        model._selection = lambda: traced.append(TracedSelection(make(), data)) or traced[-1]
    t = time.perf_counter()
    if args.release:
        fit_from_release(model, args.release, data.name, eps)
    elif math.isfinite(eps):
        model.fit(data.x_train, data.y_train, dataset=data.name)
    else:
        fit_nonprivate(model, data)
    fit_s = time.perf_counter() - t
    x, y = model.sample(6000, seed=seed)
    labelled = y is not None                 # unlabelled generation has no downstream accuracy
    scores = image_classifier_scores(x, y, data.x_test, data.y_test, seed=seed) if labelled else {}
    if getattr(model, "final_generator_", None) is not None:   # DP early stopping: the last checkpoint too
        xf, yf = model.sample(6000, seed=seed, checkpoint="final")
        if labelled:
            scores.update({f"final_{k}": v for k, v in
                           image_classifier_scores(xf, yf, data.x_test, data.y_test, seed=seed).items()})
    if getattr(model, "selection_", None):
        scores["selection"] = model.selection_
    if args.fd:
        scores["fd"] = frechet_report(data, x)["fd"]
        scores["fd_network"] = frechet_report(data, x[:10])["fd_network"]
        if getattr(model, "final_generator_", None) is not None:
            scores["final_fd"] = frechet_report(data, xf)["fd"]
    if traced:
        scores["trace"] = traced[0].trace        # [iteration, proxy distance, true FD]
    if args.cnn:       # the ConvNet protocol on 60,000 samples (DPImageBench's count), 3 training seeds
        xc, yc = model.sample(args.cnn_samples, seed=seed + 1000)
        t_cnn = time.perf_counter()
        proxy = {k: v for k, v in {"width": args.cnn_width, "epochs": args.cnn_epochs}.items() if v is not None}
        scores.update(cnn_scores(xc, yc, data.x_test, data.y_test, n_classes=data.n_classes,
                                 seeds=tuple(args.cnn_seeds), **proxy))
        scores["cnn_setting"] = {"samples": args.cnn_samples, "seeds": args.cnn_seeds, **proxy,
                                 "fixed_protocol": not proxy and args.cnn_samples == 60_000}
        scores["cnn_s"] = round(time.perf_counter() - t_cnn, 1)
    if args.grids:
        Path(args.grids).mkdir(parents=True, exist_ok=True)
        tag = "" if labelled else "_unlab"
        save_image_grid(x, y if labelled else np.zeros(len(x), int),
                        Path(args.grids) / f"{data.name}_{method}{tag}_eps{eps:g}_s{seed}.png",
                        classes=data.classes if labelled else ["all"])
    return {"dataset": data.name, "method": method, "conditional": not args.unconditional, "epsilon": eps,
            "delta": 1e-5, "seed": seed, "iterations": args.iterations, "batch_size": args.batch_size,
            "features": {k: v for k, v in model.get_params().items() if k not in KernelGeneratorMethod.param_names()}, "lr_step": args.lr_step, "lr": model.lr, "loss": model.loss,
            "generator": model.generator_.spec(), **({"release_dir": args.release, "release_features": model.release_.feature_spec} if args.release else {}), **({"set": args.overrides} if args.overrides else {}), "fit_s": round(fit_s, 1),
            "final_loss": model.losses_[-1],
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "device": "cuda" if torch.cuda.is_available() else "cpu", "torch_threads": torch.get_num_threads(),
            "subnormals": "flushed" if subnormals_flushed() else "kept",
            **scores}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", nargs="+", default=["mnist"])
    p.add_argument("--method", nargs="+", default=["dp-ntk"], choices=list(METHODS))
    p.add_argument("--epsilon", nargs="+", type=float, default=[10.0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=5000)
    p.add_argument("--ntk-width", type=int, default=800)
    p.add_argument("--lr-step", type=int, default=1500, help="StepLR step size (lr x 0.9 every N iterations)")
    p.add_argument("--generator", default=None,
                   help='generator spec as JSON, e.g. \'{"name": "conv", "upsample": "bilinear"}\' '
                        "(default: mmdsynth's conv generator)")
    p.add_argument("--lr", type=float, default=None, help="generator learning rate (default: the method's)")
    p.add_argument("--encoder", default=None, help="dp-mepf: PUBLIC encoder weights (mmdsynth pretrain-encoder)")
    p.add_argument("--loss", default="mavg", choices=["mavg", "direct"], help="dp-mepf: generator loss")
    p.add_argument("--mavg-lr", type=float, default=None, help="dp-mepf: moving-average learning rate")
    p.add_argument("--moments", nargs="+", type=int, default=[1, 2], help="dp-mepf: 1 2 (phi1, phi2) or 1")
    p.add_argument("--no-early-stopping", action="store_true", help="dp-mepf: no proxy release, no selection")
    p.add_argument("--select-every", type=int, default=None, help="dp-mepf: score every N iterations")
    p.add_argument("--length-scale", type=float, default=None, help="dp-hp: kernel length scale (default: the "
                   "authors' per dataset)")
    p.add_argument("--sum-weight", type=float, default=None, help="dp-hp: gamma (default: the authors' per dataset)")
    p.add_argument("--hp-order", type=int, default=None, help="dp-hp: sum-kernel order (default 100)")
    p.add_argument("--product-releases", type=int, default=None, help="dp-hp: product releases (default 10)")
    p.add_argument("--fd", action="store_true", help="also the Frechet distance on mmdsynth's named network")
    p.add_argument("--trace-fd", action="store_true", help="dp-mepf: also the true FD (real test split) of "
                   "every checkpoint the proxy scores (benchmark-only, for the early-stopping table)")
    p.add_argument("--unconditional", action="store_true", help="unlabelled generation")
    p.add_argument("--grids", default=None, help="folder for sample grids")
    p.add_argument("--progress", action="store_true")
    p.add_argument("--cnn", action="store_true", help="also the ConvNet protocol on --cnn-samples samples")
    p.add_argument("--cnn-samples", type=int, default=60_000)
    p.add_argument("--cnn-width", type=int, default=None, help="a smaller ConvNet (proxy; default: the protocol's 128)")
    p.add_argument("--cnn-epochs", type=int, default=None, help="fewer epochs (proxy; default: the protocol's)")
    p.add_argument("--cnn-seeds", nargs="+", type=int, default=[0, 1, 2], help="ConvNet training seeds")
    p.add_argument("--release", default=None, help="a saved release folder (fit --release-only): train from it")
    add_set_option(p)
    p.add_argument("--out", default="benchmarks/out/image.jsonl")
    args = p.parse_args()
    tune_allocator()                # as the mmdsynth command does, before any tensor work starts torch's threads
    flush_subnormals()
    args.overrides = set_overrides(p, args.set)
    check_taken(p, {m: METHODS[m] for m in args.method}, args.overrides, every=True)
    if args.progress:
        import logging
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for name in args.dataset:
        data = load_dataset(name)
        for method in args.method:
            for eps in args.epsilon:
                for seed in args.seeds:
                    row = run(args, data, method, eps, seed)
                    emit(row, args.out)


if __name__ == "__main__":
    main()
