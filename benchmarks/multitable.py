"""Issue 84: `mmdsynth.fit_tables` on the relational datasets (`../shared/datasets/relational/`), scored against the
real tables: key integrity, the children-per-root TVD, each table's 1- and 2-way TVD, the cross-table 2-way TVD (each
root column against each child column over the join) and fit time. The schemas are `tests/support.py`'s, written from
the datasets' codebook (never from the data), with a root column made the label (class-conditional models need one).

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/multitable.py --datasets pbcseq mathach \
        --epsilon 1 10 --seeds 0 1 2 --out benchmarks/out/multitable.jsonl

Numeric columns are cut at the real table's deciles (as the suite's evaluator cuts them); the children counts are
compared exactly up to 100 (more in one cell). The synthetic database has as many roots as the real one.
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

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from marginal_tvd import _tv, discretise, marginal_tvd  # noqa: E402
from support import MATHACH, PBCSEQ  # noqa: E402

from _rows import emit  # noqa: E402

import mmdsynth  # noqa: E402
from mmdsynth.data.relational import DatabaseSchema, read_database  # noqa: E402
from mmdsynth.data.schema import Schema  # noqa: E402

#: dataset -> (schema, the root column made the label, its classes)
DATASETS = {"pbcseq": (PBCSEQ, "status", ["0", "1", "2"]), "mathach": (MATHACH, "Sector", ["Public", "Catholic"])}


def labelled(schema: dict, label: str, classes: list) -> dict:
    """The schema with the root's column ``label`` made its label."""
    s = copy.deepcopy(schema)
    root = s["tables"][s["privacy_unit"]]
    root.update(label=label, label_categories=classes, columns=[c for c in root["columns"] if c["name"] != label])
    return s


def children_tvd(real_fk: pd.Series, real_roots: pd.Series, synth_fk: pd.Series, synth_roots: pd.Series) -> float:
    """TVD of the number of children per root (0 included), counts over 100 in one cell."""
    def counts(fk, roots):
        return np.minimum(fk.value_counts().reindex(roots, fill_value=0).to_numpy(), 100)
    return _tv(counts(real_fk, real_roots), counts(synth_fk, synth_roots), 101)


def joined(tables: dict, db: DatabaseSchema) -> pd.DataFrame:
    root, child = db.order()
    fk = db.parent(child)[0]
    return tables[root].merge(tables[child], left_on=db.tables[root].primary_key, right_on=fk, how="inner",
                              suffixes=("", "_child"))


def cross_tvd(real: pd.DataFrame, synth: pd.DataFrame, db: DatabaseSchema) -> float:
    """The mean 2-way TVD over the pairs (a root column or the label, a child column) of the joined tables."""
    root, child = db.order()
    rs, cs = db.tables[root].schema.without_ids(), db.tables[child].schema.without_ids()
    both = Schema(rs.columns + cs.columns, rs.label, rs.label_categories)
    codes = discretise(real, synth, both)
    left = [c.name for c in rs.columns] + [rs.label]
    pairs = itertools.product(left, [c.name for c in cs.columns])
    return float(np.mean([_tv(codes[a][0] * codes[b][2] + codes[b][0], codes[a][1] * codes[b][2] + codes[b][1],
                              codes[a][2] * codes[b][2]) for a, b in pairs]))


def run(name: str, epsilon: float, seed: int, data_dir: Path) -> dict:
    schema, label, classes = DATASETS[name]
    d = labelled(schema, label, classes)
    db = DatabaseSchema.from_dict(d)
    real = read_database(data_dir / name, db)
    start = time.perf_counter()
    model = mmdsynth.fit_tables(data_dir / name, d, epsilon=epsilon, dataset=name)
    fit_s = time.perf_counter() - start
    root, child = db.order()
    fk, pk = db.parent(child)[0], db.tables[root].primary_key
    synth = model.sample(len(real[root]), seed=seed)
    row = {"dataset": name, "epsilon": epsilon, "seed": seed, "method": type(model.model_).__name__,
           "roots": len(real[root]), "children_real": len(real[child]), "children_synth": len(synth[child]),
           "keys_hold": bool(synth[root][pk].is_unique and synth[child][fk].isin(set(synth[root][pk])).all()
                             and synth[child][db.tables[child].primary_key].is_unique),
           "children_tvd": round(children_tvd(real[child][fk], real[root][pk], synth[child][fk], synth[root][pk]), 4),
           "cross_tvd_2way": round(cross_tvd(joined(real, db), joined(synth, db), db), 4), "fit_s": round(fit_s, 1)}
    for t in (root, child):
        m = marginal_tvd(real[t], synth[t], db.tables[t].schema.without_ids())
        row[f"{t}_tvd_1way"], row[f"{t}_tvd_2way"] = round(m["tvd_1way"], 4), round(m["tvd_2way"], 4)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    p.add_argument("--epsilon", nargs="+", type=float, default=[1.0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--out", default="benchmarks/out/multitable.jsonl")
    args = p.parse_args()
    data_dir = Path(os.environ.get("MMDSYNTH_DATA_DIR", "../shared/datasets")) / "relational"
    for name, eps, seed in itertools.product(args.datasets, args.epsilon, args.seeds):
        emit({**run(name, eps, seed, data_dir), "date": time.strftime("%Y-%m-%d"), "machine": platform.node()},
             args.out)


if __name__ == "__main__":
    main()
