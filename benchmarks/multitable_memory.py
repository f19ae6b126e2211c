"""Issue 84, item 5: a database fitted in bounded memory. nycflights13's training roots (80 % of the planes, split
as `multitable.py` splits them) written as Parquet files, then `mmdsynth.fit_tables` on that folder in a fresh process
each, whole (`stream=False`) and streamed (`stream=True`: the flights read in batches, the fit reading Parquet
shards), recording the fit's wall time and the process's peak resident memory; at ``--scale 1`` each model is then
sampled and scored as `multitable.py` scores it (the held-out roots the downstream task's test set). ``--scale K``
repeats every training flight K times (a database of the same planes with K times the flights, for the memory's
growth with the rows of a table without child tables; not scored).

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/multitable_memory.py --epsilon 10 --seeds 0 \
        --scale 1 4 --out benchmarks/out/multitable_memory.jsonl
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multitable import DATASETS, MAX_CHILDREN, labelled, read  # noqa: E402

from _rows import emit  # noqa: E402

from mmdsynth.data.relational import DatabaseSchema  # noqa: E402
from mmdsynth.evaluation.database import database_scores, split_roots  # noqa: E402
from mmdsynth.methods.database import DatabaseModel  # noqa: E402

#: the fit, in a process of its own (its peak memory is the fit's, not this script's tables')
FIT = """
import json, sys, time
import mmdsynth
folder, schema, eps, stream, out, max_children = sys.argv[1:7]
start = time.perf_counter()
mmdsynth.fit_tables(folder, json.loads(open(schema).read()), epsilon=float(eps), stream=stream == "1", out=out,
                    max_children=int(max_children), dataset="nycflights13")
# the process's own peak (VmHWM, reset at exec; ru_maxrss would keep the forking parent's)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"fit_s": round(time.perf_counter() - start, 1), "peak_rss_mb": round(peak / 1024)}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epsilon", nargs="+", type=float, default=[10.0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--scale", nargs="+", type=int, default=[1])
    p.add_argument("--out", default="benchmarks/out/multitable_memory.jsonl")
    args = p.parse_args()
    name = "nycflights13"
    schema, label, classes = DATASETS[name]
    d = labelled(schema, label, classes)
    db = DatabaseSchema.from_dict(d)
    data_dir = Path(os.environ.get("MMDSYNTH_DATA_DIR", "../shared/datasets")) / "relational"
    train, test = split_roots(read(name, db, data_dir), db, 0.2, seed=0)
    for scale in args.scale:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "train"
            folder.mkdir()
            tables = {**train, "flights": pd.concat([train["flights"]] * scale, ignore_index=True)}
            for t, frame in tables.items():
                frame.to_parquet(folder / f"{t}.parquet", index=False)
            (Path(tmp) / "schema.json").write_text(json.dumps(d))
            for eps, seed, stream in itertools.product(args.epsilon, args.seeds, (False, True)):
                run = Path(tmp) / f"run_{eps}_{seed}_{int(stream)}"
                done = subprocess.run([sys.executable, "-c", FIT, str(folder), str(Path(tmp) / "schema.json"), str(eps),
                                       str(int(stream)), str(run), str(MAX_CHILDREN[name])],
                                      check=True, capture_output=True, text=True)
                row = {"dataset": name, "epsilon": eps, "seed": seed, "stream": stream, "scale": scale,
                       "rows": {t: len(f) for t, f in tables.items()},
                       **json.loads(done.stdout.strip().splitlines()[-1])}
                model = DatabaseModel.load(run)
                row["methods"] = {t: type(m).__name__ for t, m in model.models_.items()}
                if scale == 1:
                    synth = model.sample(len(train[db.privacy_unit]), seed=seed)
                    row.update({k: (round(v, 4) if isinstance(v, float) else v)
                                for k, v in database_scores(train, synth, db, test=test, seed=seed).items()})
                emit({**row, "date": time.strftime("%Y-%m-%d"), "machine": platform.node()}, args.out)


if __name__ == "__main__":
    main()
