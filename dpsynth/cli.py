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
