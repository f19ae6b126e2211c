"""Issue 82's before/after check: the same fits, with the noise and the samples fixed, at this checkout and at an
earlier revision, must release the same bits.

A refactor of the release protocol (who builds the engine, who draws a step's records, who adds the noise) must not
change a release. With the secret randomness fixed (``noise_seed``, ``sampler_seed``: tests and this check only; the
ledger says they void the guarantee) every release below is a deterministic function of the data, so the SHA-256 of
its tensors (every tensor's name, dtype, shape and bytes, in name order) and of its ledger's noise multipliers is the
same at both revisions, or the protocol changed what is released. Each case runs in a fresh process importing
``mmdsynth`` from this checkout or from ``--base`` (checked out once into a temporary worktree), one thread:

- ``hybrid-adult``: the table default's plan on adult's preset split (seed 0), eps 1, its release and the
  reweighting's first fit (``stall_stop=False`` at both revisions, the setting the base had by default);
- ``dpntk-digits``: DP-NTK's release on digits, eps 10;
- ``dpkip-digits``: a DP-KIP fit (DP-SGD: every step's Poisson sample and noise) on 500 digits, eps 1, one epoch;
- ``randconv-digits``: the subsampled release DP-RandConv's ``sample_rate`` makes (a Poisson sample per network, 20
  random conv networks), digits, eps 10.;
- ``persons-inferred``: DP-MERF on a made-up table of 400 patients' 1,200 rows with a person unit and the schema
  inferred (numeric bounds, categories: the schema release read per person), the numeric sketch, the rows-per-person
  histogram, eps 1; its release, ledger and facts (the inferred schema included);
- ``default-persons``: the same table through ``mmdsynth.fit`` with no method named (the table default chosen from the
  count of persons: DP-MERF);
- ``mst-persons``: MST on the same table with its schema complete (the rows checked once, per person).

    MMDSYNTH_DATA_DIR=../shared/datasets .venv/bin/python benchmarks/protocol_identity.py --base b347bae^ \\
        --out benchmarks/out/protocol_identity.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _rows import emit

ROOT = Path(__file__).resolve().parents[1]
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
CASES = ("hybrid-adult", "dpntk-digits", "dpkip-digits", "randconv-digits", "persons-inferred", "default-persons",
         "mst-persons")
FIT = """
import hashlib, json, sys, time
import numpy as np, torch
import mmdsynth
from mmdsynth.data import load_dataset, load_preset
from mmdsynth.methods import DPKIP, DPNTK, Hybrid
case = sys.argv[1]
t = time.perf_counter()
if case == "hybrid-adult":
    d = load_preset("adult", seed=0)
    m = Hybrid(seed=0, epsilon=1.0, noise_seed=0, stall_stop=False).fit(
        d.train, label=d.schema.label, schema=d.schema, dataset=d.name)
    release = m.release_
    extra = {"rows": m.sample(2000, seed=0).to_csv(index=False)}
elif case in ("persons-inferred", "default-persons", "mst-persons"):   # a person unit, schema inference, the sketch, rows per person
    import pandas as pd
    from mmdsynth.data.schema import Schema
    from mmdsynth.methods import DPMERF
    rng = np.random.default_rng(0)
    n = 1200
    df = pd.DataFrame({"patient": [f"p{i % 400}" for i in range(n)], "age": rng.normal(50, 12, n).round(1),
                       "city": rng.choice(["a", "b", "c", "d"], n, p=[.4, .3, .2, .1]),
                       "y": rng.choice(["no", "yes"], n)})
    spec = {"columns": [{"name": "patient", "type": "id"}, {"name": "age", "type": "numeric"},
                        {"name": "city", "type": "categorical"}], "label": "y", "label_categories": ["no", "yes"]}
    if case == "mst-persons":             # the schema complete: the rows checked once by the run, per person
        spec["columns"][1]["bounds"], spec["columns"][2]["categories"] = [0, 120], ["a", "b", "c", "d"]
        df["age"] = df["age"].clip(0, 120)
    schema = Schema.from_dict(spec).with_privacy_unit("patient")
    if case == "mst-persons":
        from mmdsynth.methods import MST
        m = MST(epsilon=1.0, noise_seed=0).fit(df, label="y", schema=schema)
    elif case == "default-persons":         # mmdsynth.fit: the table default chosen from the 400 persons (dp-merf)
        m = mmdsynth.fit(df, label="y", schema=schema, epsilon=1.0, noise_seed=0, iterations=20, n_features=50,
                         schema_share=0.2)
    else:
        m = DPMERF(epsilon=1.0, noise_seed=0, iterations=20, n_features=50, schema_share=0.2).fit(
            df, label="y", schema=schema)
    release = m.release_
    extra = {"facts": json.dumps(release.dataset, sort_keys=True, default=str)}
else:
    digits = load_dataset("digits")
    X, y = digits.x_train.numpy(), digits.y_train.numpy()
    extra = {}
    if case == "dpntk-digits":
        release = DPNTK(epsilon=10.0, n_classes=10, seed=0, noise_seed=0).release(X, y)
    elif case == "dpkip-digits":
        m = DPKIP(1.0, 1e-5, n_classes=10, images_per_class=1, epochs=1, batch_size=50, seed=0, noise_seed=0,
                  sampler_seed=0, progress=False).fit(X[:500], y[:500])
        release = m.release_
    else:
        from mmdsynth.embedding import release_sampled_embedding
        from mmdsynth.features import RandomConvFeatures
        fmap = RandomConvFeatures(tuple(X.shape[1:]), n_networks=20, width=8)
        release = release_sampled_embedding(fmap, X, y, epsilon=10.0, delta=1e-5, sample_rate=0.1, n_classes=10,
                                            seed=0, sampler_seed=0)
h, parts = hashlib.sha256(), {}
for name in sorted(release.tensors):
    v = release.tensors[name].detach().cpu().contiguous()
    one = f"{name}|{v.dtype}|{tuple(v.shape)}|".encode() + v.numpy().tobytes()
    h.update(one); parts[name] = hashlib.sha256(one).hexdigest()[:12]
for i, e in enumerate(release.ledger.entries):
    one = f"{e.mechanism}|{e.noise_multiplier!r}|{e.sensitivity!r}|{e.epsilon!r}".encode()
    h.update(one); parts[f"ledger {i}"] = hashlib.sha256(one).hexdigest()[:12]
for k, v in sorted(extra.items()):
    h.update(k.encode()); h.update(v.encode()); parts[k] = hashlib.sha256(v.encode()).hexdigest()[:12]
print(json.dumps({"sha256": h.hexdigest(), "parts": parts, "entries": len(release.ledger.entries),
                  "fit_s": round(time.perf_counter() - t, 1), "from": mmdsynth.__file__}))
"""


def run(code_root: Path, case: str) -> dict:
    """One fresh process running ``case`` with ``mmdsynth`` imported from ``code_root``."""
    env = {**os.environ, **THREADS, "PYTHONPATH": str(code_root)}
    out = subprocess.run([sys.executable, "-c", FIT, case], env=env, cwd=tempfile.gettempdir(),
                         capture_output=True, text=True)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if not row.pop("from").startswith(str(code_root)):
        raise SystemExit(f"the process did not import mmdsynth from {code_root}")
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the git revision to compare against")
    p.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    p.add_argument("--out", default=None)
    args = p.parse_args()
    base_rev = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), base_rev], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            for case in args.cases:
                before, after = run(tree, case), run(ROOT, case)
                same = "error" not in before and "error" not in after and before["sha256"] == after["sha256"]
                differ = sorted(k for k in set(before.get("parts", {})) | set(after.get("parts", {}))
                                if before.get("parts", {}).get(k) != after.get("parts", {}).get(k))
                emit({"case": case, "base": base_rev, "head": head, "identical": same, "differ": differ,
                      "before": before, "after": after, "date": time.strftime("%Y-%m-%d"), "threads": "1"}, args.out)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
