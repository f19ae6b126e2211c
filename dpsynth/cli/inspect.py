"""`dpsynth inspect`: a release's ledger (refusing a model folder whose release was replaced)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path



def cmd_inspect(args) -> int:
    from ..release import META_FILE, Release

    path = Path(args.path)
    if path.is_file() and path.name == META_FILE:
        path = path.parent
    if not (path / META_FILE).exists() and (path / "release" / META_FILE).exists():
        path = path / "release"
    model_json = path.parent / "model.json"
    if path.name == "release" and model_json.exists():     # a model folder: its release must be the pinned one
        from .._io import read_sealed_json
        from ..release import check_release_pin

        check_release_pin(path, read_sealed_json(model_json, "model").get("release"), f"model in {path.parent}")
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


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("inspect", help="print a release's privacy ledger")
    s.add_argument("path", help="a release folder (or a folder holding release/)")
    s.add_argument("--json", action="store_true", help="print the dataset facts, feature spec, ledger and tensor "
                   "shapes as one JSON object")
    s.set_defaults(func=cmd_inspect)
    return s
