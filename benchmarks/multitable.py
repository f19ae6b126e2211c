"""Issue 84: `mmdsynth.fit_tables` on the relational datasets (`../shared/datasets/relational/`) in each layout (the
cascade, and the two baselines: the tables fitted apart with children attached at random, and the join flattened),
scored against the real tables (`mmdsynth.evaluation.database`): key integrity, the children-per-parent TVD, each
table's 1- and 2-way TVD, the cross-table 2-way TVD (each parent column against each child column over the join), the
downstream task (the root's label from the root and aggregates of its children, tested on 20 % of the roots held out)
and fit time. The schemas are `tests/support.py`'s, written from
the datasets' codebook (never from the data), with a root column made the label (class-conditional models need one).

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/multitable.py --datasets pbcseq mathach \
        --epsilon 1 10 --seeds 0 1 2 --layouts cascade independent flat --out benchmarks/out/multitable.jsonl

The synthetic database has as many roots as the training part.
"""
from __future__ import annotations

import argparse
import copy
import itertools
import os
import platform
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import MATHACH, NYCFLIGHTS, PBCSEQ  # noqa: E402

from _rows import emit  # noqa: E402

import mmdsynth  # noqa: E402
from mmdsynth.data.relational import DatabaseSchema, read_database  # noqa: E402
from mmdsynth.evaluation.database import database_scores, split_roots  # noqa: E402
from mmdsynth.methods.database import LAYOUTS  # noqa: E402

#: dataset -> (schema, the root column made the label, its classes)
DATASETS = {"pbcseq": (PBCSEQ, "status", ["0", "1", "2"]), "mathach": (MATHACH, "Sector", ["Public", "Catholic"]),
            "nycflights13": (NYCFLIGHTS, "engine", ["Turbo-fan", "Turbo-jet", "Turbo-prop", "Reciprocating",
                                                    "Turbo-shaft", "4 Cycle"])}
#: a parent's children learned up to this many (public: relational/README.md gives nycflights13's planes 1 to about
#: 500 flights)
MAX_CHILDREN = {"nycflights13": 600}


def read(name: str, db: DatabaseSchema, data_dir: Path) -> dict:
    """The dataset's tables as the schema declares them; nycflights13's flights without a known plane dropped (the
    data holder's preparation: their unit is unknown), its planes' and flights' undeclared columns left out."""
    if name != "nycflights13":
        return read_database(data_dir / name, db)
    frames = {t: pd.read_csv(data_dir / name / f"{t}.csv.gz", low_memory=False) for t in db.tables}
    frames = {t: f[[c.name for c in db.tables[t].schema.columns] + ([db.tables[t].schema.label]
                                                                   if db.tables[t].schema.label else [])]
              for t, f in frames.items()}
    frames["flights"] = frames["flights"][frames["flights"]["tailnum"].isin(set(frames["planes"]["tailnum"]))]
    return read_database(frames, db)


def labelled(schema: dict, label: str, classes: list) -> dict:
    """The schema with the root's column ``label`` made its label."""
    s = copy.deepcopy(schema)
    root = s["tables"][s["privacy_unit"]]
    root.update(label=label, label_categories=classes, columns=[c for c in root["columns"] if c["name"] != label])
    return s


def run(name: str, epsilon: float, seed: int, layout: str, data_dir: Path) -> dict:
    """One fit of ``name``'s training roots (80 %, split by root with seed 0) in ``layout``, sampled with as many
    roots as it holds and scored (:func:`mmdsynth.evaluation.database.database_scores`), the held-out roots the
    downstream task's test set."""
    schema, label, classes = DATASETS[name]
    d = labelled(schema, label, classes)
    db = DatabaseSchema.from_dict(d)
    train, test = split_roots(read(name, db, data_dir), db, 0.2, seed=0)
    start = time.perf_counter()
    bound = {} if layout == "flat" else {"max_children": MAX_CHILDREN.get(name, 100)}   # the flat join has none
    model = mmdsynth.fit_tables(train, d, epsilon=epsilon, dataset=name, layout=layout, **bound)
    fit_s = time.perf_counter() - start
    synth = model.sample(len(train[db.privacy_unit]), seed=seed)
    scores = database_scores(train, synth, db, test=test, seed=seed)
    rounded = lambda d: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}  # noqa: E731
    row = {"dataset": name, "epsilon": epsilon, "seed": seed, "layout": layout,
           "methods": {t: type(m).__name__ for t, m in model.models_.items()}, "placement": model.placement_,
           "roots": len(train[db.privacy_unit]), **rounded(scores), "fit_s": round(fit_s, 1)}
    if layout == "cascade":             # the other placement, on the same release (sampling is post-processing)
        other = "random" if set(model.placement_.values()) == {"match"} else "match"
        synth = model.sample(len(train[db.privacy_unit]), seed=seed, placement=other)
        row["other_placement"] = {"placement": other, **rounded(database_scores(train, synth, db, test=test,
                                                                                seed=seed))}
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    p.add_argument("--epsilon", nargs="+", type=float, default=[1.0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=list(LAYOUTS))
    p.add_argument("--out", default="benchmarks/out/multitable.jsonl")
    args = p.parse_args()
    data_dir = Path(os.environ.get("MMDSYNTH_DATA_DIR", "../shared/datasets")) / "relational"
    for name, eps, seed, layout in itertools.product(args.datasets, args.epsilon, args.seeds, args.layouts):
        emit({**run(name, eps, seed, layout, data_dir), "date": time.strftime("%Y-%m-%d"), "machine": platform.node()},
             args.out)


if __name__ == "__main__":
    main()
