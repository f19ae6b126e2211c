"""The ``dpsynth`` command."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from . import __version__
from .errors import DpsynthError, InvalidParameterError


def _floats(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like 1,1,10; got {text!r}")


def cmd_datasets(args) -> int:
    from .data import DATASETS, is_available

    print(f"{'name':<14} {'kind':<6} {'rows (train / test)':<44} local copy")
    for name, info in DATASETS.items():
        where = is_available(name, args.data_dir)
        print(f"{name:<14} {info.kind:<6} {info.rows:<44} {where or 'not found (see README: Datasets)'}")
    return 0


def cmd_budget(args) -> int:
    from .privacy import PrivacyPlan, calibrate_sigma, classical_sigma, epsilon_for_sigma

    if (args.sample_rate is None) != (args.steps is None):
        raise InvalidParameterError("--sample-rate and --steps go together (DP-SGD); give both or neither.")
    if args.sample_rate is not None:
        if args.releases is not None or args.multipliers is not None:
            raise InvalidParameterError("give either --releases/--multipliers or --sample-rate/--steps, not both.")
        plan = PrivacyPlan((), sample_rate=args.sample_rate, steps=args.steps, neighbouring=args.neighbouring)
    else:
        mults = args.multipliers or [1.0] * (args.releases or 1)
        if args.releases is not None and len(mults) != args.releases:
            raise InvalidParameterError(
                f"--releases {args.releases} but --multipliers lists {len(mults)} value(s); they must agree."
            )
        plan = PrivacyPlan(tuple(mults))
    if args.sigma is not None:
        eps = epsilon_for_sigma(args.sigma, args.delta, plan, args.accountant)
        out = {"sigma": args.sigma, "delta": args.delta, "epsilon": eps}
        text = f"epsilon = {eps:.4f} for sigma = {args.sigma:g} at delta = {args.delta:g}"
    else:
        if args.epsilon is None:
            raise InvalidParameterError("--epsilon is required (or give --sigma to get epsilon).")
        sigma = calibrate_sigma(args.epsilon, args.delta, plan, args.accountant)
        out = {"epsilon": args.epsilon, "delta": args.delta, "sigma": sigma,
               "release_sigmas": [m * sigma for m in plan.multipliers]}
        text = f"sigma = {sigma:.4f}"
        if len(plan.multipliers) > 1:
            text += "  (per release: " + ", ".join(f"{s:.4f}" for s in out["release_sigmas"]) + ")"
        if not plan.subsampled and len(plan.multipliers) == 1 and args.epsilon < 1:
            text += f"  [classical sqrt(2 ln(1.25/delta))/epsilon: {classical_sigma(args.epsilon, args.delta):.4f}]"
    out.update({"accountant": args.accountant, "plan": plan.describe()})
    if args.json:
        print(json.dumps(out))
    else:
        print(f"plan: {plan.describe()}; accountant: {args.accountant}")
        print(text)
    return 0


def cmd_inspect(args) -> int:
    from .release import META_FILE, Release

    path = Path(args.path)
    if path.is_file() and path.name == META_FILE:
        path = path.parent
    if not (path / META_FILE).exists() and (path / "release" / META_FILE).exists():
        path = path / "release"
    release = Release.load(path)
    if args.json:
        print(json.dumps({"dataset": release.dataset, "feature_spec": release.feature_spec,
                          "ledger": release.ledger.to_list(),
                          "tensors": {k: list(v.shape) for k, v in release.tensors.items()}}, indent=2))
        return 0
    print(f"release: {path}")
    print(f"dataset: {json.dumps(release.dataset)}")
    print(f"feature map: {json.dumps(release.feature_spec)}")
    print("tensors: " + ", ".join(f"{k} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}"
                                  for k, v in release.tensors.items()))
    eps, delta = release.ledger.total()
    print(f"privacy spent: epsilon={eps:g}, delta={delta:g}")
    print(release.ledger.format())
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    out = Path(args.out)
    if (out / "budget.json").exists():
        raise InvalidParameterError(
            f"{out} already holds a demo release and its budget file; pass a new --out folder "
            f"(or delete {out}): the budget would refuse a second release."
        )
    run_demo(out, args.epsilon, args.delta, seed=args.seed)
    return 0


def _atomic_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


def cmd_fit(args) -> int:
    from .data import get_info, load_dataset
    from .methods import METHODS
    from .privacy import BudgetFile

    info = get_info(args.dataset)
    if info.kind != "image":
        raise InvalidParameterError(
            f"dataset {args.dataset!r} is a table; `dpsynth fit` handles image datasets "
            f"(digits, mnist, fashion-mnist, cifar10) in this version."
        )
    out = Path(args.out)
    method_kwargs = {"dp-ntk": {"arch": args.arch, "ntk_width": args.ntk_width},
                     "dp-merf": {"n_features": args.n_features, "length_scale": args.length_scale}}[args.method]
    data = load_dataset(args.dataset, data_dir=args.data_dir)
    model = METHODS[args.method](
        epsilon=args.epsilon, delta=args.delta, n_classes=data.n_classes, iterations=args.iterations,
        batch_size=args.batch_size, lr=args.lr, seed=args.seed, noise_seed=args.noise_seed, device=args.device,
        checkpoint_every=args.checkpoint_every, progress=not args.quiet, **method_kwargs)
    budget = BudgetFile.open(args.budget, args.dataset, args.budget_epsilon or args.epsilon, args.delta) \
        if args.budget else None
    model.fit(data.x_train, data.y_train, dataset=args.dataset, out=out, budget=budget, resume=args.resume)
    eps, delta = model.release_.ledger.total()
    print(f"fitted {args.method} on {args.dataset}: epsilon={eps:g}, delta={delta:g}; "
          f"{len(model.losses_)} iterations, final loss {model.losses_[-1]:.4g}; saved to {out}")
    return 0


def cmd_sample(args) -> int:
    import numpy as np

    from .methods import load

    out = Path(args.out)
    if out.suffix != ".npz":
        raise InvalidParameterError(f"--out must end in .npz (arrays x and y); got {out.name!r}.")
    model = load(args.model)
    x, y = model.sample(args.n, seed=args.seed)
    tmp = _atomic_path(out)
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, x=x, **({"y": y} if y is not None else {}))
    tmp.replace(out)
    print(f"wrote {args.n} samples to {out} (x {tuple(x.shape)}" + (", y)" if y is not None else ")"))
    return 0


def cmd_evaluate(args) -> int:
    from .data import DATASETS, load_dataset
    from .evaluation import image_classifier_scores, save_image_grid
    from .methods import load

    model = load(args.model)
    name = model.release_.dataset.get("name", "")
    if name not in DATASETS:
        raise InvalidParameterError(
            f"the model was fitted on {name or 'user data'!r}, not a registered dataset, so there is no real "
            f"test split to evaluate on; use dpsynth.evaluation.image_classifier_scores with your own test data."
        )
    data = load_dataset(name, data_dir=args.data_dir)
    x, y = model.sample(args.n, seed=args.seed)
    result = {"dataset": name, "method": model.method, "epsilon": model.release_.ledger.total()[0],
              "delta": model.release_.ledger.total()[1], "n_synthetic": args.n}
    result.update(image_classifier_scores(x, y, data.x_test, data.y_test, seed=args.seed))
    if args.frechet:
        from .evaluation.frechet import frechet_report

        result.update(frechet_report(data, x, seed=args.seed))
    grid = save_image_grid(x, y, Path(args.model) / "samples.png", classes=data.classes)
    result["samples_png"] = str(grid)
    print(json.dumps(result))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dpsynth", description="Differentially private synthetic data "
                                "from kernel mean embeddings (DP-NTK, DP-MERF, DP-MEPF, DP-KIP).")
    p.add_argument("--version", action="version", version=f"dpsynth {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("datasets", help="list datasets and whether each is available locally")
    s.add_argument("--data-dir", default=None, help="extra folder to search (besides DPSYNTH_DATA_DIR)")
    s.set_defaults(func=cmd_datasets)

    s = sub.add_parser("budget", help="calibrate the noise multiplier sigma (or epsilon from --sigma)")
    s.add_argument("--epsilon", type=float)
    s.add_argument("--delta", type=float, required=True)
    s.add_argument("--releases", type=int, help="number of one-shot Gaussian releases (default 1)")
    s.add_argument("--multipliers", type=_floats, help="noise multiple of each release, e.g. 1,1,10")
    s.add_argument("--sample-rate", type=float, help="DP-SGD Poisson sampling rate q = batch / n")
    s.add_argument("--steps", type=int, help="DP-SGD number of steps T")
    s.add_argument("--neighbouring", default="add_remove", choices=["add_remove", "replace_one"],
                   help="neighbouring relation for DP-SGD (default add_remove)")
    s.add_argument("--accountant", default="pld", choices=["pld", "rdp", "exact"])
    s.add_argument("--sigma", type=float, help="compute epsilon for this sigma instead")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_budget)

    s = sub.add_parser("inspect", help="print a release's privacy ledger")
    s.add_argument("path", help="a release folder (or a folder holding release/)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("fit", help="release a private embedding of a dataset, then train a generator")
    s.add_argument("--method", required=True, choices=["dp-ntk", "dp-merf"])
    s.add_argument("--dataset", required=True, help="a registered image dataset (see `dpsynth datasets`)")
    s.add_argument("--epsilon", type=float, required=True)
    s.add_argument("--delta", type=float, default=1e-5)
    s.add_argument("--out", required=True, help="model folder (release/ is written before training)")
    s.add_argument("--iterations", type=int, default=2000)
    s.add_argument("--batch-size", type=int, default=5000, help="generator batch per step")
    s.add_argument("--lr", type=float, default=0.01)
    s.add_argument("--ntk-width", type=int, default=800, help="dp-ntk: width of the NTK network")
    s.add_argument("--arch", default="fc_1l", choices=["fc_1l", "fc_2l", "cnn"], help="dp-ntk: NTK network")
    s.add_argument("--n-features", type=int, default=10000, help="dp-merf: number of random features")
    s.add_argument("--length-scale", type=float, default=None, help="dp-merf: kernel length scale")
    s.add_argument("--seed", type=int, default=0, help="generator initialisation and training (not privacy noise)")
    s.add_argument("--noise-seed", type=int, default=None, help="fix the privacy noise (testing only)")
    s.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    s.add_argument("--checkpoint-every", type=int, default=200)
    s.add_argument("--resume", action="store_true", help="continue from the folder's release and checkpoint "
                   "(spends no privacy budget)")
    s.add_argument("--budget", default=None, help="budget file to charge (created with --budget-epsilon)")
    s.add_argument("--budget-epsilon", type=float, default=None, help="total epsilon of a new budget file")
    s.add_argument("--data-dir", default=None)
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_fit)

    s = sub.add_parser("sample", help="draw synthetic records from a fitted model")
    s.add_argument("model", help="model folder written by `dpsynth fit`")
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--out", required=True, help="FILE.npz with arrays x and y")
    s.add_argument("--seed", type=int, default=None)
    s.set_defaults(func=cmd_sample)

    s = sub.add_parser("evaluate", help="classifiers trained on synthetic data, tested on the real test split")
    s.add_argument("model", help="model folder written by `dpsynth fit`")
    s.add_argument("--n", type=int, default=6000, help="synthetic training samples (balanced labels)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--frechet", action="store_true", help="also a Frechet distance on features of a CNN "
                   "classifier trained by dpsynth on the real training set (cached; not Inception FID)")
    s.add_argument("--data-dir", default=None)
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("demo", help="private release on scikit-learn digits (works offline)")
    s.add_argument("--out", default="runs/demo")
    s.add_argument("--epsilon", type=float, default=1.0)
    s.add_argument("--delta", type=float, default=1e-5)
    s.add_argument("--seed", type=int, default=None, help="fix the privacy noise (testing only)")
    s.set_defaults(func=cmd_demo)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except DpsynthError as exc:
        print(f"dpsynth: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
