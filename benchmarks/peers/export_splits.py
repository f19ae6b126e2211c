"""Write the preset splits (train.csv, test.csv, schema.json) for peers run in their own venv.

    .venv/bin/python benchmarks/peers/export_splits.py --dataset adult cervical --seeds 0 1 2 [--bounds wide]

``--bounds wide`` writes the wide user bounds of ``benchmarks/wide_bounds.json`` into schema.json
(folders named ``NAME_wide_sSEED``).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import sys

from mmdsynth.data import load_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from table_utility import with_bounds  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", nargs="+", default=["adult"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--bounds", default="preset", choices=["preset", "wide"])
    p.add_argument("--out", default="benchmarks/out/splits")
    args = p.parse_args()
    for name in args.dataset:
        for seed in args.seeds:
            d = with_bounds(load_preset(name, seed=seed), args.bounds)
            tag = "_wide" if args.bounds == "wide" else ""
            folder = Path(args.out) / f"{name}{tag}_s{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            d.train.to_csv(folder / "train.csv", index=False)
            d.test.to_csv(folder / "test.csv", index=False)
            d.schema.to_json(folder / "schema.json")
            print(folder, len(d.train), len(d.test))


if __name__ == "__main__":
    main()
