"""`mmdsynth distill`: a small labelled set learned from a release (post-processing, no budget)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InvalidParameterError
from ._common import release_folder
from ._types import existing_path


def cmd_distill(args) -> int:
    from ..methods.distill import LEDGER_SUFFIX, distill_release
    from ..release import Release

    out = Path(args.out)
    if out.suffix not in (".npz", ".csv", ".parquet"):
        raise InvalidParameterError(f"--out must end in .npz (images) or .csv/.parquet (table rows); got {out.name!r}.")
    if out.exists() and not args.force:          # before any work: nothing is computed for a refused output
        raise InvalidParameterError(f"--out {out} exists; give a new file name, or --force to overwrite it.")
    folder = release_folder(args.run)
    release = Release.load(folder)
    table = release.dataset.get("table") is not None
    if table != (out.suffix != ".npz"):
        raise InvalidParameterError(f"this release is of {'a table' if table else 'images'}: write --out "
                                    f"{'FILE.csv or FILE.parquet' if table else 'FILE.npz'}.")
    dset = distill_release(release, args.per_class, iterations=args.iterations, lr=args.lr, seed=args.seed,
                           blocks_per_step=args.blocks_per_step, device=args.device, progress=args.progress,
                           smooth=args.smooth)
    dset.save(out, force=args.force)
    eps, delta = release.ledger.total()
    info = dset.info
    what = "rows" if table else "images"
    subset = f" ({info['blocks_per_step']} of the map's blocks per step)" if info.get("blocks_per_step") else ""
    subset += ", smoothed images" if info.get("smooth") else ""
    print(f"distilled {info['per_class']} {what} per class ({len(dset.y)} in all) from the {info['method'] or ''} "
          f"release in {folder}: loss {info['loss_start']:.4g} -> {info['loss_final']:.4g} in {info['iterations']} "
          f"steps{subset}")
    print(f"no privacy spent: the set carries the release's ledger (epsilon={eps:g}, delta={delta:g})")
    print(f"wrote {out}" + (f" and {out.with_name(out.stem + LEDGER_SUFFIX)}" if table else "")
          + ("; score it with `mmdsynth evaluate " + str(out) + " --cnn`" if not table else ""))
    return 0


#: distill_release's defaults, repeated so that building the parser imports no torch (a test keeps them equal)
ITERATIONS, LR = 2000, 0.05


def _blocks(text: str):
    """--blocks-per-step: a whole number, "all" (every block every step), or "auto" (the default)."""
    if text in ("all", "auto"):
        return None if text == "all" else text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--blocks-per-step takes a whole number or 'all'; got {text!r}") from None


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("distill", help="learn K records per class from a release (no privacy spent)",
                       description="Learn K images (or table rows) per class whose class-conditional feature means "
                                   "match a release that `mmdsynth fit` already made. Post-processing: no private data "
                                   "is read and no budget is spent; re-run it with other K or settings for free.")
    s.add_argument("run", type=existing_path, help="a model folder written by `mmdsynth fit` (or its release/ folder)")
    s.add_argument("--images-per-class", "--rows-per-class", dest="per_class", type=int, required=True, metavar="K",
                   help="records learned per class (e.g. 10)")
    s.add_argument("--out", required=True, help="FILE.npz (images: x in [0, 1], y, and the ledger) or FILE.csv / "
                   "FILE.parquet (table rows, the ledger beside as FILE.ledger.json)")
    s.add_argument("--iterations", type=int, default=ITERATIONS, help=f"optimisation steps (default {ITERATIONS})")
    s.add_argument("--lr", type=float, default=LR, help=f"Adam learning rate, x0.1 for the last quarter "
                   f"(default {LR})")
    s.add_argument("--seed", type=int, default=0, help="draws the starting points (public randomness)")
    s.add_argument("--blocks-per-step", type=_blocks, default="auto", metavar="B",
                   help="match only B of the feature map's independent blocks per step, drawn afresh from --seed "
                        "(dp-randconv: B of its networks; DM's stochastic steps, n_networks / B times cheaper); "
                        "'all': every block, every step. Default: 2 for dp-randconv (the measured recipe), every "
                        "block for other releases")
    s.add_argument("--smooth", action=argparse.BooleanOptionalAction, default="auto",
                   help="images: learn each image through a fixed [1, 2, 1] blur (no pixel-level noise; CIFAR-10 eps "
                        "1: dc protocol 39.6 over 3 seeds, 36.0 without). Default: on for colour images (three "
                        "channels), off for grey ones, where it lowered the score")
    s.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    s.add_argument("--progress", action="store_true", help="show a progress bar")
    s.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    s.set_defaults(func=cmd_distill)
    return s
