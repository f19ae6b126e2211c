"""Worst-case-neighbour audit of the release path (issue 18): one number per defect.

Each check builds two neighbouring inputs D, D' and compares what mmdsynth releases for them,
through the public API only, so the same script runs on the code before and after a fix:

* ``dtype``: does the release metadata differ when one age is 30.5 instead of 30?
* ``huge``: one record 1e39 (finite in float64): fraction of NaN releases over ``--trials``
  fresh-noise releases, and the empirical epsilon lower bound of the "is it NaN" test
  (Clopper-Pearson at 95 %, delta 1e-5);
* ``one_class``: 9 records of class 0 + 1 of class 1 vs 10 of class 0: released / raised;
* ``drift``: e-NTK fc_1l class sums of 10k and 60k records of one class: relative error of the
  neighbour difference (noise-free) against the same difference computed in float64;
* ``preset``: one raw adult record's label flipped: training rows that change, and how far the
  noise-free embedding moves in units of the claimed sensitivity 2/m; cervical: one raw
  value raised to its bound where that moves an imputation median most;
* ``ledger``: does every ledger entry name the neighbouring relation and the noise source?

    .venv/bin/python benchmarks/privacy_audit.py --label before --out benchmarks/out/privacy_audit.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import time
import warnings

import numpy as np
import pandas as pd
import torch
from scipy.stats import beta

import mmdsynth
from mmdsynth import DPMERF, release_mean_embedding
from mmdsynth.data import registry
from mmdsynth.data.encoding import TableEncoder
from mmdsynth.embedding import mean_embedding
from mmdsynth.features import ENTKFeatures, MixedRFF, RandomFourierFeatures

warnings.filterwarnings("ignore")


def eps_lower_bound(hits_d1: int, hits_d0: int, n: int, delta: float = 1e-5, conf: float = 0.95) -> float:
    """Clopper-Pearson lower bound on epsilon of the test 'output is flagged' (Bonferroni over 2)."""
    a = (1 - conf) / 2
    tpr_lo = beta.ppf(a, hits_d1, n - hits_d1 + 1) if hits_d1 > 0 else 0.0
    fpr_hi = beta.ppf(1 - a, hits_d0 + 1, n - hits_d0) if hits_d0 < n else 1.0
    return max(0.0, math.log(max(tpr_lo - delta, 1e-300) / fpr_hi)) if tpr_lo > delta else 0.0


def check_dtype() -> dict:
    schema = {"label": "y", "label_categories": ["a", "b"],
              "columns": [{"name": "age", "type": "numeric", "bounds": [0, 120], "integer": True},
                          {"name": "c", "type": "categorical", "categories": ["u", "v"]}]}
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"age": rng.integers(18, 90, 200), "c": rng.choice(["u", "v"], 200),
                       "y": rng.choice(["a", "b"], 200)})
    df2 = df.copy()
    df2["age"] = df2["age"].astype(float)
    df2.loc[0, "age"] = 30.5
    metas, dtypes = [], []
    for frame in (df, df2):
        m = DPMERF(epsilon=1, delta=1e-5, iterations=1, batch_size=20, n_features=20, noise_seed=0)
        m.fit(frame, label="y", schema=mmdsynth.Schema.from_dict(schema))
        metas.append(json.dumps(m.release_.dataset, sort_keys=True))
        dtypes.append(str(m.sample(5, seed=0)["age"].dtype))
    return {"metadata_identical": metas[0] == metas[1], "sample_age_dtype": dtypes}


def check_huge(trials: int) -> dict:
    out = {}
    rng = np.random.default_rng(0)
    X = rng.random((100, 4))
    y = np.arange(100) % 2
    X2 = X.copy()
    X2[0, 0] = 1e39
    maps = {"rff": lambda: RandomFourierFeatures(4, 20), "entk_fc_1l": lambda: ENTKFeatures(4, "fc_1l", (16,), 2)}
    for name, make in maps.items():
        flags = []
        for data in (X, X2):
            hits = 0
            for _ in range(trials):
                try:
                    rel = release_mean_embedding(make(), data, y, epsilon=1, delta=1e-5, n_classes=2)
                    hits += int(not torch.isfinite(rel.tensors["embedding"]).all())
                except Exception as exc:  # noqa: BLE001 - what the user would see
                    out.setdefault(f"{name}_error", type(exc).__name__ + ": " + str(exc)[:100])
                    hits += 0
                    break
            flags.append(hits)
        out[name] = {"nan_releases_D": flags[0], "nan_releases_Dprime": flags[1], "trials": trials,
                     "eps_lower_bound": eps_lower_bound(flags[1], flags[0], trials)}
    return out


def check_one_class() -> dict:
    X = np.random.default_rng(0).random((10, 4))
    res = {}
    for name, y in {"D (9 x 0, 1 x 1)": np.array([0] * 9 + [1]), "D' (10 x 0)": np.zeros(10, int)}.items():
        try:
            release_mean_embedding(RandomFourierFeatures(4, 20), X, y, epsilon=1, delta=1e-5, n_classes=2)
            res[name] = "released"
        except Exception as exc:  # noqa: BLE001
            res[name] = f"raised {type(exc).__name__}"
    return res


def check_drift(sizes=(10_000, 60_000)) -> dict:
    fmap = ENTKFeatures(784, "fc_1l", (800,), 10, seed=0)
    g = torch.Generator().manual_seed(0)
    out = {}
    for n in sizes:
        X = torch.rand(n, 784, generator=g)
        y = torch.zeros(n, dtype=torch.long)
        X2 = X.clone()
        X2[0] = torch.rand(784, generator=g)
        mu1 = mean_embedding(fmap, X, y, 10)
        mu2 = mean_embedding(fmap, X2, y, 10)
        exact = (fmap(X[:1]).double() - fmap(X2[:1]).double())[0] / n      # the two records' rows, in float64
        diff = (mu1 - mu2)[:, 0]
        out[n] = {"relative_error": float((diff - exact).norm() / exact.norm()),
                  "norm_vs_exact": float(diff.norm() / exact.norm() - 1)}
    return out


def _preset_pair(name: str, mutate, seed: int = 0):
    """The preset's training split on the raw file and on the raw file changed by ``mutate``."""
    real = registry.load_dataset
    raw = real(mmdsynth.data.presets.PRESETS[name].dataset)
    mutated = mutate(raw)
    splits = []
    for data in (raw, mutated):
        registry.load_dataset = lambda *a, _d=data, **k: _d   # noqa: E731
        try:
            splits.append(mmdsynth.load_preset(name, seed=seed))
        finally:
            registry.load_dataset = real
    return splits


def _embedding_move(p1, p2) -> dict:
    enc = TableEncoder(p1.schema)
    fmap = MixedRFF(enc.n_numeric, len(enc.category_sizes), sum(enc.category_sizes), 2000)
    m = len(p1.train)
    X1, y1 = enc.encode(p1.train)
    X2, y2 = enc.encode(p2.train)
    mu1 = mean_embedding(fmap, torch.as_tensor(X1), torch.as_tensor(y1), p1.schema.n_classes)
    mu2 = mean_embedding(fmap, torch.as_tensor(X2), torch.as_tensor(y2), p1.schema.n_classes)
    key = lambda df: df.astype(str).agg("|".join, axis=1)  # noqa: E731
    a, b = key(p1.train).value_counts(), key(p2.train).value_counts()
    changed = int((a.sub(b, fill_value=0)).abs().sum())
    return {"m": m, "m_prime": len(p2.train), "train_rows_changed": changed,
            "move_over_sensitivity": float((mu1 - mu2).norm() / (2.0 / m))}


def check_presets() -> dict:
    out = {}

    def flip_adult(raw):
        train = raw.train.copy()
        i = int(np.flatnonzero(train["income"].to_numpy() == "<=50K")[0])
        train.loc[i, "income"] = ">50K"
        return type(raw)(**{**raw.__dict__, "train": train})

    out["adult_label_flip"] = _embedding_move(*_preset_pair("adult", flip_adult))

    def shift_cervical_median(raw):
        """One record's value raised to its bound where that moves a median the most (x missing rows)."""
        df = raw.train.copy()
        kept = df.isna().sum(axis=1) < 10
        best = None
        for col in raw.schema.numeric:
            v = pd.to_numeric(df.loc[kept, col])
            n_missing = int(v.isna().sum())
            if not n_missing or v.notna().sum() < 3:
                continue
            lo, hi = raw.schema.column(col).bounds
            i = v.idxmin()
            shifted = v.copy()
            shifted[i] = hi
            gain = abs(shifted.median() - v.median()) / (hi - lo) * n_missing
            if best is None or gain > best[0]:
                best = (gain, col, i, hi)
        _, col, i, hi = best
        df.loc[i, col] = hi
        return type(raw)(**{**raw.__dict__, "train": df})

    out["cervical_median_shift"] = _embedding_move(*_preset_pair("cervical", shift_cervical_median))
    return out


def check_ledger() -> dict:
    X = np.random.default_rng(0).random((50, 4))
    rel = release_mean_embedding(RandomFourierFeatures(4, 20), X, np.arange(50) % 2, epsilon=1, delta=1e-5,
                                 n_classes=2)
    entry = rel.ledger.to_list()[0]
    return {"neighbouring": entry.get("neighbouring"), "privacy_unit": entry.get("privacy_unit"),
            "noise_source": entry.get("noise_source", entry.get("seed_policy"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="e.g. before / after")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--out", default=None, help="append one JSON line here")
    ap.add_argument("--skip", default="", help="comma-separated checks to skip")
    args = ap.parse_args()
    torch.set_num_threads(2)
    checks = {"dtype": check_dtype, "huge": lambda: check_huge(args.trials), "one_class": check_one_class,
              "drift": check_drift, "preset": check_presets, "ledger": check_ledger}
    row = {"label": args.label, "date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
           "mmdsynth": mmdsynth.__version__}
    for name, fn in checks.items():
        if name in args.skip.split(","):
            continue
        t = time.perf_counter()
        try:
            row[name] = fn()
        except Exception as exc:  # noqa: BLE001 - recorded, the audit goes on
            row[name] = {"audit_error": f"{type(exc).__name__}: {exc}"[:300]}
        print(f"{name} ({time.perf_counter() - t:.1f} s): {json.dumps(row[name])}", flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
