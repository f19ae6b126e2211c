"""`mmdsynth demo`: the first private release, on scikit-learn's digits."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ArtifactError, InvalidParameterError


def cmd_demo(args) -> int:
    from ..demo import run_demo

    out = Path(args.out)
    if (out / "budget.json").exists():
        raise InvalidParameterError(
            f"{out} already holds a demo release and its budget file; pass a new --out folder "
            f"(or delete {out}): the budget would refuse a second release."
        )
    if (out / "release").exists() or (out / "model.json").exists():
        raise ArtifactError(
            f"{out} already holds a release or a fitted model (e.g. from `make demo`); the demo would replace "
            f"that release and mislabel the model's privacy. Pass a new --out folder, e.g. --out runs/demo-release."
        )
    run_demo(out, args.epsilon, args.delta, seed=args.seed)
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("demo", help="private release on scikit-learn digits (works offline)")
    s.add_argument("--out", default="runs/demo-release", help="new folder for the release and its budget file "
                   "(default runs/demo-release; refused if it already holds a release or a model)")
    s.add_argument("--epsilon", type=float, default=1.0, help="privacy budget of the release (default 1)")
    s.add_argument("--delta", type=float, default=1e-5, help="its delta (default 1e-5)")
    s.add_argument("--seed", type=int, default=None, help="fix the privacy noise (testing only)")
    s.set_defaults(func=cmd_demo)
    return s
