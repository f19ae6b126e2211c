"""Not a measurement: issue 47's peer table, mean +- sample sd over split seeds per (dataset, method, epsilon, tag).

Joins the fit lines of ``run_mbi2.py`` / ``run_mmdsynth.py`` (``fit_s``; lines without it, runs that did not finish,
are skipped) with ``evaluate_peers.py``'s scores (run with ``--triples``) on (split folder, synthetic CSV name); the
last score line wins when a file was scored twice. Columns: ML efficacy (the evaluator's ``mean``: ROC AUC / PR AUC
for a binary label), 1-, 2- and 3-way TVD on the real test split's deciles, 2-way TVD on the 32-bin grid, fit s.

    python3 benchmarks/peers/mbi2_table.py --fits benchmarks/out/peers_mbi2_fit.jsonl \\
        benchmarks/out/mmdsynth_mbi2ctx_fit.jsonl --scores benchmarks/out/fidelity_mbi2.jsonl
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def _lines(paths):
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def _cell(values, digits=3):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    m = f"{statistics.mean(values):.{digits}f}"
    return m + (f" +- {statistics.stdev(values):.{digits}f}" if len(values) > 1 else "") + f" ({len(values)})"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fits", nargs="+", default=[])
    p.add_argument("--scores", nargs="+", required=True)
    args = p.parse_args()
    fits = {(Path(r["folder"]).name, r["synth_csv"]): r["fit_s"] for r in _lines(args.fits) if "fit_s" in r}
    scores = {}
    for r in _lines(args.scores):
        scores[(r["folder"], r["synth_csv"])] = r
    groups = defaultdict(list)
    for (folder, csv), r in scores.items():
        dataset = folder.rpartition("_s")[0]
        method = "real (train split)" if r["method"] == "real" else r["method"]
        tag = csv.rpartition(f"eps{r['epsilon']:g}")[2].removesuffix(".csv") if r["epsilon"] is not None else ""
        groups[(dataset, r["epsilon"] if r["epsilon"] is not None else -1, method, tag)].append(
            (r, fits.get((folder, csv))))
    metric = None
    print("| dataset | eps | method | ML efficacy (mean of 12 clf.) | 1-way TVD | 2-way TVD | 3-way TVD (50 triples) "
          "| 2-way TVD, grid32 | fit s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(groups):
        dataset, eps, method, tag = key
        rows = groups[key]
        metric = list(rows[0][0]["mean"])
        eff = " / ".join(_cell([r["mean"].get(k) for r, _ in rows]) for k in metric)
        dec = [r["marginal_tvd"]["deciles"] for r, _ in rows]
        grid = [r["marginal_tvd"]["grid32"] for r, _ in rows]
        print(f"| {dataset} | {'-' if eps == -1 else f'{eps:g}'} | {method}{tag} | {eff} ({'/'.join(metric)}) | "
              f"{_cell([d['tvd_1way'] for d in dec])} | {_cell([d['tvd_2way'] for d in dec])} | "
              f"{_cell([d.get('tvd_3way') for d in dec])} | {_cell([g['tvd_2way'] for g in grid])} | "
              f"{_cell([f for _, f in rows], 0)} |")


if __name__ == "__main__":
    main()
