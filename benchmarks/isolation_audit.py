"""Record isolation, end to end (issue 45 item 1): can a fixed-threshold test tell two neighbouring
tables apart from DP-MERF releases at a claimed epsilon 1, when they differ only in how row 0's date
is written?

Every pair is two tables of 400 rows (a datetime column given as text, a numeric and a categorical
column, a binary label; the public schema declares every bound and category) that differ in row 0
only. Each side is released ``--releases`` times through the library's public release path
(``DPMERF(...).release(df, label=..., schema=...)``: step 1 of ``fit`` without generator training),
claimed (epsilon 1, delta 1e-5), replace-one, SECURE noise (the default source). The pairs:

* ``dayfirst_undeclared``: day-first text dates (``%d/%m/%Y``; in every other row the day and the
  month are drawn uniformly in 1..12, so either reading parses them), no ``format`` declared; row 0
  ``01/02/2020`` vs ``13/02/2020``. The old code let pandas infer one format from row 0 (month-first
  for ``01/02``, day-first for ``13/02``) and so re-dated the other rows. Swapping day and month
  maps this date distribution to itself, so the damage is the re-dated rows' sampling noise.
* ``dayfirst_early_undeclared``: the same with every other row's day in 1..3 (dates early in the
  month: billing, payroll): the month-first reading moves them all into January-March.
* ``dayfirst_declared``, ``dayfirst_early_declared``: the same tables with ``"format": "%d/%m/%Y"``.
* ``iso_time_part``: ISO dates without a time part; row 0 ``2020-02-01`` vs ``2020-02-13T10:30:00``.
* ``iso_offset``: ISO date-times at ``+01:00``; row 0 ``2020-02-01T12:00:00+01:00`` vs
  ``2020-02-13T12:00:00+02:00``.

Per pair it reports: how the two sides ended (released / refused, the message); for released sides the
exact (noise-free) embeddings, computed by the release's own statistic
(:class:`~mmdsynth.statistics.embedding.ClassSums` with the release's encoder and feature map), their distance
over the ledger's recorded sensitivity (``sensitivity_ratio``: <= 1 for a correct release), and how many
of the other 399 rows encode differently; the distinguisher: project every released embedding on the
direction (exact B - exact A), flag "B" above the midpoint of the two exact projections (direction and
threshold come from the exact embeddings alone, never from a release), count TP (B releases flagged) and
FP (A releases flagged), and turn them into the Clopper-Pearson epsilon lower bound at 95 % (each rate at
97.5 %, as ``mmdsynth audit``): :func:`mmdsynth.audit.epsilon_bounds`. ``detectable_ratio`` is the test's
power: the smallest exact move (in sensitivities) whose expected counts would prove epsilon > 1 with these
many releases. A pair whose sides are both refused with the same message releases nothing, so there is
nothing to distinguish; one refused and one released is a leak by itself (the test "was it refused" then
gives the bound). ``message_quotes_a_date``: whether a refusal quotes any date of the two tables.

``numeric_encoding="minmax"`` keeps the exact embedding a function of the table (the quantile encoding
adds a noisy numeric sketch whose CDFs the encoder then uses). Run on the code before the fix by putting
its worktree first on the path (the script prints which ``mmdsynth`` it imported)::

    git worktree add /tmp/before fe83c28
    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/isolation_audit.py --label before
    .venv/bin/python benchmarks/isolation_audit.py --label after     # (or a clean worktree of HEAD)

Rows are appended to ``benchmarks/out/isolation_audit.jsonl``; ``tests/integration/test_record_isolation_e2e.py``
runs the same measurement at 100 releases per side.
"""
from __future__ import annotations

import argparse
import logging
import math
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import mmdsynth
from mmdsynth import DPMERF, Schema
from mmdsynth.audit import epsilon_bounds, smallest_provable_shift, threshold_test
from mmdsynth.features.base import build_feature_map
from mmdsynth.statistics.embedding import ClassSums

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rows import emit  # noqa: E402

EPSILON, DELTA = 1.0, 1e-5
CONFIDENCE = 0.95
N_ROWS = 400
DAY_FIRST = "%d/%m/%Y"
#: per pair: the table's date layout, the largest day of the month in rows 1..n-1 (day-first tables), the
#: declared ``format`` (None: not declared), row 0 of side A and of side B; the rest is the same on both sides
PAIRS = {
    "dayfirst_undeclared": ("dayfirst", 12, None, "01/02/2020", "13/02/2020"),
    "dayfirst_declared": ("dayfirst", 12, DAY_FIRST, "01/02/2020", "13/02/2020"),
    "dayfirst_early_undeclared": ("dayfirst", 3, None, "01/02/2020", "13/02/2020"),
    "dayfirst_early_declared": ("dayfirst", 3, DAY_FIRST, "01/02/2020", "13/02/2020"),
    "iso_time_part": ("iso_date", None, None, "2020-02-01", "2020-02-13T10:30:00"),
    "iso_offset": ("iso_offset", None, None, "2020-02-01T12:00:00+01:00", "2020-02-13T12:00:00+02:00"),
}


def base_table(layout: str, max_day: int | None = None, n: int = N_ROWS, seed: int = 0) -> pd.DataFrame:
    """``n`` rows: ``when`` (dates in 2020 as text in ``layout``), ``age``, ``colour``, label ``y``.
    Day-first dates have their day in 1..``max_day`` (<= 12: either reading of every row parses) and
    their month in 1..12."""
    rng = np.random.default_rng(seed)
    if layout == "dayfirst":
        when = [f"{d:02d}/{m:02d}/2020" for d, m in zip(rng.integers(1, max_day + 1, n), rng.integers(1, 13, n))]
    else:
        days = pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 366, n), unit="D")
        when = [d.strftime("%Y-%m-%d") + ("T12:00:00+01:00" if layout == "iso_offset" else "") for d in days]
    return pd.DataFrame({"when": when, "age": rng.integers(18, 91, n),
                         "colour": rng.choice(["red", "green", "blue"], n), "y": rng.choice(["no", "yes"], n)})


def schema_for(fmt: str | None) -> dict:
    when = {"name": "when", "type": "datetime", "bounds": ["2020-01-01", "2020-12-31"], "resolution": "s"}
    if fmt:
        when["format"] = fmt
    return {"label": "y", "label_categories": ["no", "yes"],
            "columns": [when, {"name": "age", "type": "numeric", "bounds": [18, 90], "integer": True},
                        {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"]}]}


def make_pair(name: str, n: int = N_ROWS, seed: int = 0) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(public schema, side A, side B): the two tables differ in row 0's date only."""
    layout, max_day, fmt, row0_a, row0_b = PAIRS[name]
    a = base_table(layout, max_day, n, seed)
    b = a.copy()
    a.loc[0, "when"], b.loc[0, "when"] = row0_a, row0_b
    return schema_for(fmt), a, b


def _model(n_features: int) -> DPMERF:
    return DPMERF(epsilon=EPSILON, delta=DELTA, n_features=n_features, numeric_encoding="minmax")


def attempt(df: pd.DataFrame, schema: dict, n_features: int):
    """One release through the public path: ("released", model, release) or ("refused", message)."""
    m = _model(n_features)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rel = m.release(df, label="y", schema=Schema.from_dict(schema))
    except Exception as exc:  # noqa: BLE001 - what a user sees, recorded
        return "refused", f"{type(exc).__name__}: {exc}"
    return "released", m, rel


def embedding_entry(release) -> dict:
    """The ledger entry of the embedding's Gaussian release (its recorded sensitivity and noise)."""
    entries = [e for e in release.ledger.to_list() if "mean embedding" in e.get("description", "")]
    assert len(entries) == 1, [e.get("description") for e in release.ledger.to_list()]
    return entries[0]


def exact_embedding(model, release, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(noise-free embedding (D, C) float64, encoded rows): the release's own statistic on ``df``."""
    encoder = model.encoder_
    fmap = build_feature_map(release.feature_spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sums = ClassSums(fmap, encoder.schema.n_classes, encoder=encoder)(df)["sums"]
        X, _ = encoder.encode(df)
    return (sums.T.double() / len(df)).numpy(), np.asarray(X)


def detectable_ratio(noise_multiplier: float, releases: int, claim: float = EPSILON) -> float:
    """The power of the fixed-midpoint projection test: the smallest exact move of the embedding, in
    units of its sensitivity, at which the test's expected counts over ``releases`` per side give a
    lower bound above ``claim`` (inf: none could, with this many releases). With Gaussian noise of
    ``noise_multiplier`` x the sensitivity and a gap of ``r`` sensitivities, TPR = Phi(mu / 2) and
    FPR = Phi(-mu / 2), mu = r / noise_multiplier: :func:`mmdsynth.audit.smallest_provable_shift` with the
    midpoint as its one threshold."""
    alpha = (1 - CONFIDENCE) / 2
    mu = smallest_provable_shift(claim, DELTA, releases, alpha, thresholds=lambda mu: [mu / 2], steps=40)
    return math.inf if math.isinf(mu) else mu * noise_multiplier


def measure_pair(name: str, releases: int = 200, n_features: int = 10000, seed: int = 0, n: int = N_ROWS,
                 log=None) -> dict:
    schema, a, b = make_pair(name, n, seed)
    alpha = (1 - CONFIDENCE) / 2
    t0 = time.perf_counter()
    _, max_day, fmt, row0_a, row0_b = PAIRS[name]
    out = {"pair": name, "row0": [row0_a, row0_b], "format": fmt, "max_day_other_rows": max_day, "releases": releases}
    refused = {"A": [], "B": []}        # refusal messages
    released = {"A": [], "B": []}       # released embeddings, flattened
    first = {}                          # the first release of each side: its encoder, feature map, ledger
    for side, df in (("A", a), ("B", b)):
        for _ in range(releases):
            o = attempt(df, schema, n_features)
            if o[0] == "refused":
                refused[side].append(o[1])
            else:
                first.setdefault(side, o[1:])
                released[side].append(o[2].tensors["embedding"].double().numpy().ravel())
    out["refused"] = {s: len(refused[s]) for s in refused}
    out["messages"] = {s: sorted(set(refused[s])) for s in refused}
    raw = set(a["when"]) | set(b["when"])             # does a refusal quote any date of either table?
    out["message_quotes_a_date"] = {s: any(v in msg for msg in out["messages"][s] for v in raw) for s in refused}
    if refused["A"] and refused["B"] and len(refused["A"]) == len(refused["B"]) == releases:
        same = out["messages"]["A"] == out["messages"]["B"] and len(out["messages"]["A"]) == 1
        out["verdict"] = "both refused, same message" if same else "LEAK: both refused, different messages"
        tp, fp = (0, 0) if same else (releases, 0)     # the message test, when it differs
        out.update(test="message" if not same else None, tp=tp, fp=fp)
    elif refused["A"] or refused["B"]:
        pos, neg = ("A", "B") if len(refused["A"]) >= len(refused["B"]) else ("B", "A")
        out["verdict"] = f"LEAK: side {pos} refused in {len(refused[pos])} of {releases}, side {neg} in " \
                         f"{len(refused[neg])}"
        out.update(test=f"refused (positive: side {pos})", tp=len(refused[pos]), fp=len(refused[neg]))
    else:
        out["verdict"] = "both released"
        (ma, ra), (mb, rb) = first["A"], first["B"]
        ea, xa = exact_embedding(ma, ra, a)
        eb, xb = exact_embedding(mb, rb, b)
        entry = embedding_entry(ra)
        sens, std = float(entry["sensitivity"]), float(entry["noise_multiplier"]) * float(entry["sensitivity"])
        diff = (eb - ea).ravel()
        gap = float(np.linalg.norm(diff))
        out.update(sensitivity=sens, noise_std=std, exact_distance=gap, sensitivity_ratio=gap / sens,
                   gap_over_noise_std=gap / std,
                   detectable_ratio=detectable_ratio(float(entry["noise_multiplier"]), releases),
                   other_rows_changed=int((xa[1:] != xb[1:]).any(axis=1).sum()))
        if gap == 0:
            out.update(test=None, tp=0, fp=0)
        else:
            v = diff / gap                                     # unit direction, fixed before any release is read
            pa, pb = float(ea.ravel() @ v), float(eb.ravel() @ v)
            threshold = (pa + pb) / 2
            score = {s: np.array([e @ v for e in released[s]]) for s in released}
            test = threshold_test(score["A"], score["B"], threshold, DELTA, alpha)     # "B" above the midpoint
            out.update(test="projection > midpoint", tp=test["tp"], fp=test["fp"], threshold=threshold,
                       exact_projection={"A": pa, "B": pb},
                       mean_projection={s: float(score[s].mean()) for s in score},
                       std_projection={s: float(score[s].std()) for s in score})
    if out.get("test"):
        lower, upper, point = epsilon_bounds(out["tp"], out["fp"], releases, DELTA, alpha)
        out.update(epsilon_lower=lower, epsilon_upper=upper, epsilon_point=point)
    else:
        out.update(epsilon_lower=0.0 if out["verdict"] != "both refused, same message" else None)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    if log:
        log(f"{name}: {out['verdict']}; ratio {out.get('sensitivity_ratio')}; TP {out.get('tp')} FP {out.get('fp')}; "
            f"eps >= {out.get('epsilon_lower')} ({out['seconds']} s)")
    return out


def measure(pairs=tuple(PAIRS), releases: int = 200, n_features: int = 10000, seed: int = 0, log=None) -> dict:
    return {name: measure_pair(name, releases, n_features, seed, log=log) for name in pairs}


def _commit() -> str:
    """The commit of the imported mmdsynth's tree, with "+dirty" when its mmdsynth/ has uncommitted changes."""
    root = Path(mmdsynth.__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "mmdsynth"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="e.g. before / after")
    ap.add_argument("--releases", type=int, default=200, help="releases per side of each pair")
    ap.add_argument("--n-features", type=int, default=10000, help="DP-MERF random features (its default)")
    ap.add_argument("--pairs", default=",".join(PAIRS), help=f"comma-separated, of {list(PAIRS)}")
    ap.add_argument("--seed", type=int, default=0, help="public seed of the tables")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / "isolation_audit.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("mmdsynth").setLevel(logging.ERROR)
    commit = _commit()
    print(f"mmdsynth imported from {mmdsynth.__file__} (commit {commit})", file=sys.stderr, flush=True)
    t = time.perf_counter()
    results = measure(args.pairs.split(","), args.releases, args.n_features, args.seed,
                      log=lambda s: print(s, file=sys.stderr, flush=True))
    emit({"label": args.label, "commit": commit, "mmdsynth_file": mmdsynth.__file__, "date": time.strftime("%Y-%m-%d"),
          "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)", "epsilon": EPSILON,
          "delta": DELTA, "confidence": CONFIDENCE, "releases": args.releases, "n_features": args.n_features,
          "rows": N_ROWS, "seed": args.seed, "seconds": round(time.perf_counter() - t, 1), "pairs": results}, args.out)


if __name__ == "__main__":
    main()
