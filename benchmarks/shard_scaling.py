"""Wall time and peak memory of a table release (DP-MERF, every release of its plan: numeric sketch,
class proportions, embedding; or, with ``--method hybrid``, the table default's whole fit: its marginal stages and
kernel release over the shards, then the model and the reweighted pool, whose size is capped by ``max_pool`` and not
by the rows) computed four ways, each in a fresh process, in one run:

  memory   the whole table read into one DataFrame, then released (today's single-machine path)
  stream   one process, Parquet shards read batch by batch (peak memory should not grow with rows)
  ray-1    a local Ray cluster of 1 CPU, one task per shard
  ray-2    a local Ray cluster of 2 CPUs

Tables: intrusion (494,021 rows, 8 shards), the census half (99,762 rows, 4 shards) and
``replicated``: the intrusion table written --copies times (40 -> 19,760,840 rows, 40 shards of
494,021), a scaling test, not a utility one. Shards are written once under --shards-dir (not timed).

    python benchmarks/shard_scaling.py --tables census intrusion replicated --out benchmarks/out/scaling.jsonl
    # the table default on 10.4 M rows, streamed
    python benchmarks/shard_scaling.py --method hybrid --tables replicated --copies 21 --configs stream
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CONFIGS = ("memory", "stream", "ray-1", "ray-2")
SHARDS = {"intrusion": 8, "census": 4}


def write_shards(name: str, root: Path, copies: int) -> tuple[Path, int, dict]:
    """(folder of Parquet shards, row count, schema dict) of a table; written once."""
    from mmdsynth.data.tabular import load_census, load_intrusion

    folder = root / (f"replicated-{copies}" if name == "replicated" else name)
    meta = folder / "meta.json"
    if meta.exists():
        m = json.loads(meta.read_text())
        return folder, m["n"], m["schema"]
    data = (load_census if name == "census" else load_intrusion)()
    df, schema = data.train, data.schema
    folder.mkdir(parents=True, exist_ok=True)
    if name == "replicated":
        first = folder / "part-000.parquet"
        df.to_parquet(first, index=False)
        for i in range(1, copies):
            shutil.copyfile(first, folder / f"part-{i:03d}.parquet")
        n = len(df) * copies
    else:
        for i, idx in enumerate(np.array_split(np.arange(len(df)), SHARDS[name])):
            df.iloc[idx].to_parquet(folder / f"part-{i:03d}.parquet", index=False)
        n = len(df)
    meta.write_text(json.dumps({"n": n, "schema": schema.to_dict()}))
    return folder, n, schema.to_dict()


def model_for(table: str, method: str = "dp-merf"):
    from mmdsynth import DPMERF
    from mmdsynth.methods import Hybrid
    from mmdsynth.methods.presets import method_preset

    if method == "hybrid":                  # the table default as `fit` runs it with no --method, eps 1
        return Hybrid(epsilon=1.0, delta=1e-5, noise_seed=0)

    preset = method_preset("dp-merf", "census" if table == "census" else "intrusion")
    keep = {k: preset[k] for k in ("n_features", "epsilon", "delta")}
    return DPMERF(noise_seed=0, **keep)


def one(config: str, table: str, folder: Path, n: int, method: str = "dp-merf") -> dict:
    """Runs in its own process: the release of ``table`` by ``config`` (the hybrid: its whole fit); prints one JSON
    line."""
    import pandas as pd

    from mmdsynth.data import Schema, ShardedTable

    meta = json.loads((folder / "meta.json").read_text())
    schema = Schema.from_dict(meta["schema"])
    model, row = model_for(table, method), {}
    if config == "memory":
        t = time.perf_counter()
        data = pd.concat([pd.read_parquet(p) for p in sorted(folder.glob("*.parquet"))], ignore_index=True)
        row["read_s"] = round(time.perf_counter() - t, 2)
    else:
        engine = "stream"
        if config.startswith("ray"):
            import ray

            from mmdsynth.engines.ray_engine import RayEngine

            t = time.perf_counter()
            ray.init(num_cpus=int(config.split("-")[1]), include_dashboard=False, log_to_driver=False)
            row["ray_init_s"] = round(time.perf_counter() - t, 2)
            engine = RayEngine()
        data = ShardedTable(folder, schema, n_records=n, engine=engine)
    t = time.perf_counter()
    if method == "hybrid":
        post = model._fitted                # the post-processing (model, pool, reweighting), timed apart

        def timed_post():
            row["release_s"] = round(time.perf_counter() - t, 2)
            post()

        model._fitted = timed_post
        model.fit(data, label=schema.label, schema=None if config != "memory" else schema, dataset=table)
        release = model.release_
        row["fit_s"] = round(time.perf_counter() - t, 2)
        row["post_s"] = round(row["fit_s"] - row["release_s"], 2)
        row["pool"] = model.reweighting_["pool"]
    else:
        release = model.release(data, schema=None if config != "memory" else schema, dataset=table)
        row["release_s"] = round(time.perf_counter() - t, 2)
    row["driver_peak_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if config.startswith("ray"):
        row.update({"worker_peak_mib": engine.last_run["peak_worker_rss_mib"], "workers": engine.last_run["workers"]})
    row["computation"] = release.ledger.entries[-1].computation
    row["embedding_norm"] = float(release.tensors["embedding"].norm())
    row["ledger_epsilon"] = release.ledger.total()[0]
    return row


def summary(path: str) -> None:
    """The markdown table of a run, the targets, and an extrapolation to 1e9 rows (marked as such)."""
    rows = [{"method": "dp-merf", **json.loads(line)} for line in open(path)]      # rows before --method: DP-MERF's
    print("| method | table | rows | shards | config | release s | rows/s | then fit s | driver peak MiB | worker peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    by = {}
    for r in rows:
        if r["method"] == "dp-merf":       # the scaling targets are DP-MERF's release
            by[(r["table"], r["config"])] = r
        if "release_s" not in r:
            print(f"| {r['method']} | {r['table']} | {r['rows']:,} | {r['shards']} | {r['config']} | "
                  f"{r.get('skipped', r.get('error'))} | | | | |")
            continue
        print(f"| {r['method']} | {r['table']} | {r['rows']:,} | {r['shards']} | {r['config']} | "
              f"{r['release_s']:.1f} | {r['rows'] / r['release_s']:,.0f} | {r.get('fit_s', '-')} | "
              f"{r['driver_peak_mib']:,.0f} | {r.get('worker_peak_mib') or '-'} |")
    for table in dict.fromkeys(r["table"] for r in rows):
        get = {c: by.get((table, c), {}).get("release_s") for c in CONFIGS}
        if get["ray-1"] and get["ray-2"]:
            print(f"{table}: ray-2 / ray-1 speed-up {get['ray-1'] / get['ray-2']:.2f}x (target >= 1.7x)", end="; ")
        if get["stream"] and get["ray-2"]:
            print(f"ray-2 against stream: {100 * (get['ray-2'] / get['stream'] - 1):+.0f} % (target < +20 %)")
    big = max((r for r in rows if r["config"] == "ray-2" and "release_s" in r and r["method"] == "dp-merf"),
              key=lambda r: r["rows"], default=None)
    if big:
        per_worker = big["rows"] / big["release_s"] / big["workers"]
        print(f"EXTRAPOLATION (not measured): at {per_worker:,.0f} rows/s per worker (ray-2 on {big['table']}), "
              f"1e9 rows take " + ", ".join(f"{1e9 / (per_worker * n) / 60:,.1f} min on {n} workers"
                                            for n in (2, 16, 64, 256)) + " (perfect scaling assumed)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", nargs="+", default=["census", "intrusion", "replicated"])
    p.add_argument("--method", default="dp-merf", choices=("dp-merf", "hybrid"),
                   help="dp-merf: its release; hybrid: the table default's whole fit")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    p.add_argument("--copies", type=int, default=40, help="replicated: copies of the intrusion table")
    p.add_argument("--skip-memory-above", type=int, default=5_000_000,
                   help="rows above which the in-memory config is not run (it would not fit in RAM)")
    p.add_argument("--shards-dir", default="/tmp/mmdsynth-shards")
    p.add_argument("--out", default="benchmarks/out/scaling.jsonl")
    p.add_argument("--summary", action="store_true", help="print the table of --out and stop")
    p.add_argument("--one", nargs=5, metavar=("CONFIG", "TABLE", "FOLDER", "N", "METHOD"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.summary:
        summary(args.out)
        return
    if args.one:
        config, table, folder, n, method = args.one
        print(json.dumps(one(config, table, Path(folder), int(n), method)))
        return
    for table in args.tables:
        folder, n, _ = write_shards(table, Path(args.shards_dir), args.copies)
        for config in args.configs:
            base = {"date": time.strftime("%Y-%m-%d"), "method": args.method, "table": table, "rows": n, "config": config,
                    "shards": len(list(folder.glob("*.parquet"))), "cpus": os.cpu_count()}
            if config == "memory" and n > args.skip_memory_above:
                row = {**base, "skipped": f"in memory above {args.skip_memory_above} rows"}
            else:
                t = time.perf_counter()
                proc = subprocess.run([sys.executable, __file__, "--one", config, table, str(folder), str(n),
                                       args.method],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    row = {**base, "error": proc.stderr.strip().splitlines()[-1:]}
                else:
                    row = {**base, **json.loads(proc.stdout.strip().splitlines()[-1]),
                           "process_s": round(time.perf_counter() - t, 2)}
            print(json.dumps(row), flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
