"""`mmdsynth datasets`: the registered datasets and whether each is on disk."""
from __future__ import annotations

import argparse



def cmd_datasets(args) -> int:
    from ..data import DATASETS, is_available

    print(f"{'name':<14} {'kind':<6} {'rows (train / test)':<44} local copy")
    for name, info in DATASETS.items():
        where = is_available(name, args.data_dir)
        print(f"{name:<14} {info.kind:<6} {info.rows:<44} {where or 'not found: see docs/datasets.md'}")
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("datasets", help="list datasets and whether each is available locally")
    s.add_argument("--data-dir", default=None, help="extra folder to search (besides MMDSYNTH_DATA_DIR)")
    s.set_defaults(func=cmd_datasets)
    return s
