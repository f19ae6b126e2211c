"""MST and AIM on mbi 2.0 (the maintained private-pgm library) on the exported splits: run in the peers venv.

The peers are the reference mechanism scripts of the mbi repository (``mechanisms/mst.py``, ``mechanisms/aim.py``,
``mechanism.py``, ``cdp2adp.py``), imported from ``--mechanisms`` (a copy outside this repository) and called as
their own ``__main__`` does: ``MST(data, epsilon, delta)``; ``AIM(epsilon, delta, max_model_size=80,
max_iters=1000).run(data, workload)`` with the script's default workload (every 2-way marginal of at most 10,000
cells, weight 1). Their randomness is numpy's global generator (``np.random.seed(seed)`` here). The scripts were last
updated for mbi 1.3; two renames in 2.0 are shimmed here: ``Domain.attrs`` (removed) is ``Domain.attributes``, and
``Estimator.estimate(potentials=...)`` (aim.py's warm start) is ``warm_start=``; and JAX's compiled programs are
dropped before each estimate (see ``_shim_api``: without it AIM dies of too many memory mappings). Nothing else.

**Discretisation: public, from the schema alone** (``schema.json`` of ``export_splits.py``; nothing is read from
the private rows except through the mechanism). Categorical columns and the label: one cell per declared category
(a value outside them is an error). Numeric column with declared bounds ``[lo, hi]``:

1. ``integer`` and at most 32 integers in ``[lo, hi]``: one cell per integer (exact).
2. otherwise at most 32 cells, equal width on a transformed axis:
   * **heavy-tailed** when ``lo >= 0`` and ``hi >= 1000 * max(lo, 1)`` (the upper bound is three orders of
     magnitude above the lower bound, or above 1 when the bound is 0; e.g. adult's capital-gain [0, 99999] and
     capital-loss [0, 4356], not fnlwgt [12285, 1490400] or hours-per-week [1, 99]): the axis is
     ``log(1 + (x - lo))``, so the first cells are narrow near ``lo`` (the point mass at 0 gets its own cell) and
     the last ones wide;
   * else the axis is ``x`` itself (equal-width cells).
   Integer columns use the axis over ``[lo, hi + 1)`` and edges rounded up to integers, so every cell is a set of
   consecutive integers; cells left with no integer are dropped (fewer than 32 cells then).

Decoding: a cell is decoded to a value drawn **uniformly inside the cell** (an integer uniformly among the cell's
integers; a real uniformly in ``[a, b)``), with numpy's generator seeded by ``--seed``.

**Neighbouring relation.** The scripts are add/remove DP (``Mechanism(bounded=False)``: marginals of L2
sensitivity 1, selection scores of sensitivity max weight), the relation their users get by default
(``--neighbouring add-remove``). mmdsynth's relation is replace-one, under which the marginals' L2 sensitivity is
sqrt(2) (zCDP x 2) and the scores' sensitivity doubles (exponential mechanism's zCDP x 4). ``--neighbouring
replace-one`` calls the unchanged script with the smaller epsilon whose rho is the target's rho / f, f = 8/3 for
MST (1/3 Gaussian 1-way, 1/3 selection, 1/3 Gaussian 2-way: 2/3 + 4/3 + 2/3) and f = 2.2 for AIM (at most 0.9 of
its rho is Gaussian and 0.1 selection: 1.8 + 0.4, an upper bound), so that the run is (epsilon, delta)-DP under
replace-one; its files get the tag ``_r1`` unless ``--tag`` is given.

Writes ``synth_{method}_eps{epsilon:g}{tag}.csv`` next to train.csv (the format ``evaluate_peers.py`` reads) and
prints one JSON line per fit (fit time = the mechanism call, from the discretised data to its synthetic
``mbi.Dataset``: selection, measurement, estimation and mbi's sampling; decoding excluded), appended to ``--out``.

    OMP_NUM_THREADS=1 JAX_PLATFORMS=cpu \\
    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
    /work/peers-mbi2/bin/python benchmarks/peers/run_mbi2.py benchmarks/out/splits/adult_s0 --method mst \\
        --epsilon 1 --seed 0 --mechanisms /work/peers-mbi2/mechanisms --out benchmarks/out/peers_mbi2_fit.jsonl
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import inspect
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

GRID = 32
HEAVY_RATIO = 1000.0
MAX_MAPPINGS = 30_000   # of the kernel's 65,530 (vm.max_map_count) per process


def numeric_cells(lo: float, hi: float, integer: bool) -> np.ndarray:
    """Inner-and-outer edges of a numeric column's public cells (``len(edges) - 1`` cells), from the schema only."""
    heavy = lo >= 0 and hi >= HEAVY_RATIO * max(lo, 1.0)
    top = hi + 1 if integer else hi
    if integer and hi - lo + 1 <= GRID:
        return np.arange(lo, hi + 2, dtype=float)          # one cell per integer: [k, k + 1)
    if heavy:
        edges = lo + np.expm1(np.linspace(0.0, np.log1p(top - lo), GRID + 1))
    else:
        edges = np.linspace(lo, top, GRID + 1)
    edges[0], edges[-1] = lo, top
    if integer:
        edges = np.unique(np.ceil(edges - 1e-9)) + 0.0        # cells [a, b) of integers, empty cells dropped
    return edges


def discretiser(schema: dict) -> dict:
    """{column: ("numeric", edges, integer) | ("categorical", categories)} for the columns and the label."""
    spec = {}
    for col in schema["columns"]:
        if col["type"] == "numeric":
            lo, hi = (float(b) for b in col["bounds"])
            spec[col["name"]] = ("numeric", numeric_cells(lo, hi, bool(col.get("integer"))), bool(col.get("integer")))
        elif col["type"] == "categorical":
            spec[col["name"]] = ("categorical", [str(c) for c in col["categories"]])
        else:
            raise SystemExit(f"column {col['name']!r}: type {col['type']!r} is not handled by this runner")
    spec[schema["label"]] = ("categorical", [str(c) for c in schema["label_categories"]])
    return spec


def encode(df: pd.DataFrame, spec: dict) -> dict:
    codes = {}
    for name, s in spec.items():
        if s[0] == "numeric":
            x = pd.to_numeric(df[name]).to_numpy(dtype=float)
            edges = s[1]
            x = np.clip(x, edges[0], np.nextafter(edges[-1], -np.inf))
            codes[name] = np.searchsorted(edges, x, side="right") - 1
        else:
            index = {c: i for i, c in enumerate(s[1])}
            c = df[name].astype(str).map(index)
            if c.isna().any():
                raise SystemExit(f"column {name!r}: {int(c.isna().sum())} values outside the declared categories")
            codes[name] = c.to_numpy(dtype=np.int64)
    return codes


def decode(codes: dict, spec: dict, rng: np.random.Generator) -> pd.DataFrame:
    out = {}
    for name, s in spec.items():
        k = np.asarray(codes[name], dtype=np.int64)
        if s[0] == "numeric":
            edges, integer = s[1], s[2]
            a, b = edges[k], edges[k + 1]
            if integer:
                out[name] = (a + np.floor(rng.random(len(k)) * (b - a))).astype(np.int64)
            else:
                out[name] = a + rng.random(len(k)) * (b - a)
        else:
            out[name] = np.asarray(s[1], dtype=object)[k]
    return pd.DataFrame(out)


def _maps() -> int:
    try:
        return sum(1 for _ in open("/proc/self/maps"))
    except OSError:
        return -1


def _shim_api(jax, estimation, marginal_oracles, Domain) -> list[str]:
    """Two renames between mbi 1.3 (the scripts) and 2.0, and JAX's compilation cache emptied before each estimate.

    ``Domain.attrs`` (deprecated in 1.3, removed in 2.0) is ``Domain.attributes``; ``Estimator.estimate``'s warm
    start ``potentials=`` is ``warm_start=``. ``jax.clear_caches()`` before every ``estimate`` call (once per AIM
    round): mbi compiles a variable-elimination program per (model cliques, projected clique), so every AIM round
    compiles new programs (the model's cliques changed) and keeps the old ones; each compiled CPU program holds
    memory mappings, and without the clearing the process reached the kernel's 65,530-mapping limit and died in
    round 7 ("LLVM ERROR: Unable to allocate section memory"). MST's selection projects every pair of one model
    (820 on census), which died the same way inside one call, so the caches are also cleared whenever a projection
    starts with more than 30,000 mappings. Programs of earlier rounds are never reused and a cleared program is
    recompiled when needed, so clearing changes no result. Each estimate is logged to stderr (time, mappings).
    """
    done = []
    if not hasattr(Domain, "attrs"):
        Domain.attrs = property(lambda self: self.attributes)
        done.append("Domain.attrs -> attributes")
    est = estimation.Estimator.estimate
    rename = "potentials" not in inspect.signature(est).parameters
    start, calls = time.perf_counter(), [0]

    def estimate(self, *args, potentials=None, **kwargs):
        if potentials is not None:
            kwargs["warm_start"] = potentials
        jax.clear_caches()
        calls[0] += 1
        print(f"[run_mbi2] estimate call {calls[0]} at {time.perf_counter() - start:.0f} s, {_maps()} mappings",
              file=sys.stderr, flush=True)
        return est(self, *args, **kwargs)

    estimation.Estimator.estimate = estimate
    ve = marginal_oracles.variable_elimination

    def variable_elimination(*args, **kwargs):   # MarkovRandomField.project of an unmeasured clique
        if _maps() > MAX_MAPPINGS:
            jax.clear_caches()
        return ve(*args, **kwargs)

    marginal_oracles.variable_elimination = variable_elimination
    return done + (["estimate(potentials=) -> warm_start="] if rename else []) + [
        "jax.clear_caches() per estimate and when over 30,000 mappings"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folders", nargs="+")
    p.add_argument("--method", nargs="+", default=["mst"], choices=["mst", "aim"])
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0, help="numpy's global seed (the mechanisms' noise and sampling)")
    p.add_argument("--mechanisms", default=os.environ.get("MBI_MECHANISMS", "/work/peers-mbi2/mechanisms"),
                   help="folder holding the mbi repository's mechanisms/ scripts")
    p.add_argument("--max-model-size", type=float, default=80.0, help="AIM (the script's default 80)")
    p.add_argument("--max-iters", type=int, default=1000, help="AIM (the script's default 1000)")
    p.add_argument("--degree", type=int, default=2, help="AIM workload (the script's default 2)")
    p.add_argument("--max-cells", type=int, default=10000, help="AIM workload (the script's default 10000)")
    p.add_argument("--neighbouring", default="add-remove", choices=["add-remove", "replace-one"],
                   help="add-remove: the scripts' own relation; replace-one: epsilon is met under replace-one")
    p.add_argument("--tag", default=None, help="appended to the CSV name (default: '' or '_r1' for replace-one)")
    p.add_argument("--out", default=None, help="append the JSON line of each fit to this file")
    args = p.parse_args()

    sys.path.insert(0, str(Path(args.mechanisms).resolve()))
    import jax
    jax.config.update("jax_enable_compilation_cache", False)   # as mbi's import-time warning advises
    from mbi import Dataset, Domain, estimation, marginal_oracles
    import mst as mst_script
    import aim as aim_script
    from cdp2adp import cdp_eps, cdp_rho
    tag = args.tag if args.tag is not None else ("_r1" if args.neighbouring == "replace-one" else "")
    factor = {"mst": 8.0 / 3.0, "aim": 2.2}
    shimmed = _shim_api(jax, estimation, marginal_oracles, Domain)
    select = aim_script.AIM.worst_approximated

    def worst_approximated(self, candidates, *a, **k):   # AIM's selection, timed (logging only)
        t0 = time.perf_counter()
        cl = select(self, candidates, *a, **k)
        print(f"[run_mbi2] selection among {len(candidates)} candidates: {time.perf_counter() - t0:.1f} s",
              file=sys.stderr, flush=True)
        return cl

    aim_script.AIM.worst_approximated = worst_approximated

    for folder in map(Path, args.folders):
        schema = json.loads((folder / "schema.json").read_text())
        train = pd.read_csv(folder / "train.csv", dtype=str, keep_default_na=False)
        spec = discretiser(schema)
        codes = encode(train, spec)
        domain = Domain.fromdict({name: len(s[1]) - 1 if s[0] == "numeric" else len(s[1]) for name, s in spec.items()})
        data = Dataset(codes, domain)
        for method in args.method:
            eps_script = args.epsilon
            if args.neighbouring == "replace-one":
                eps_script = cdp_eps(cdp_rho(args.epsilon, args.delta) / factor[method] * (1 - 1e-9), args.delta)
            np.random.seed(args.seed)
            t = time.perf_counter()
            if method == "mst":
                synth = mst_script.MST(data, eps_script, args.delta)
                extra = {}
            else:
                workload = list(itertools.combinations(data.domain, args.degree))
                workload = [(cl, 1.0) for cl in workload if data.domain.size(cl) <= args.max_cells]
                mech = aim_script.AIM(eps_script, args.delta, max_model_size=args.max_model_size,
                                      max_iters=args.max_iters)
                model, synth = mech.run(data, workload)
                extra = {"workload": len(workload), "measured_cliques": len(model.cliques),
                         "max_model_size": args.max_model_size, "max_iters": args.max_iters}
            fit_s = time.perf_counter() - t
            t = time.perf_counter()
            df = decode(synth.to_dict(), spec, np.random.default_rng(args.seed))
            name = f"synth_{method}_eps{args.epsilon:g}{tag}.csv"
            df.to_csv(folder / name, index=False)
            row = {"folder": str(folder), "method": method, "library": "mbi", "fit_s": round(fit_s, 1),
                   "decode_s": round(time.perf_counter() - t, 1), "epsilon": args.epsilon, "delta": args.delta,
                   "seed": args.seed, "neighbouring": args.neighbouring, "epsilon_script": eps_script,
                   "rho_script": cdp_rho(eps_script, args.delta),
                   "cells": {k: (len(s[1]) - 1 if s[0] == "numeric" else len(s[1])) for k, s in spec.items()},
                   "synth_csv": name, "n_rows": len(train), "n_synth": len(df), **extra,
                   "versions": {k: md.version(k) for k in ("mbi", "jax", "jaxlib", "numpy", "scipy", "networkx")},
                   "x64": bool(jax.config.jax_enable_x64), "api_shims": shimmed,
                   "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "XLA_FLAGS", "JAX_PLATFORMS")},
                   "host_cpus": os.cpu_count(), "python": platform.python_version()}
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
