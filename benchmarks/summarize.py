"""Markdown tables (mean +- standard deviation over seeds) from the benchmark JSON lines.

    .venv/bin/python benchmarks/summarize.py [--image benchmarks/out/image.jsonl]
        [--tables benchmarks/out/tables.jsonl] [--peers benchmarks/out/peers.jsonl]
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np


def _rows(path):
    p = Path(path)
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.exists() else []


def _fmt(values) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.3f}" if len(v) == 1 else f"{v.mean():.3f} +- {v.std(ddof=1):.3f} (n={len(v)})"


def _setup(r) -> str:
    """Generator variant and learning-rate schedule of an image run (rows written before these
    were recorded used the nearest-upsampling generator with a ReLU after the FC block and
    lr_step 100)."""
    g = r.get("generator") or {"upsample": "nearest", "relu_after_fc": True}
    arch = g.get("upsample", "nearest") + ("+relu" if g.get("relu_after_fc", True) else "")
    return f"{arch}, lr step {r.get('lr_step', 100)}"


def image_table(rows) -> str:
    groups = defaultdict(list)
    for r in rows:
        groups[(r["dataset"], r["method"], r["epsilon"], r["iterations"], r["batch_size"], _setup(r))].append(r)
    out = ["| dataset | method | epsilon | iterations x batch | generator, schedule | LogReg acc | MLP acc | LogReg F1 "
           "| MLP F1 | fit s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (ds, m, eps, it, b, setup), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], -kv[0][2])):
        out.append(f"| {ds} | {m} | {eps:g} | {it} x {b} | {setup} | {_fmt([r['logreg_acc'] for r in rs])} | "
                   f"{_fmt([r['mlp_acc'] for r in rs])} | {_fmt([r['logreg_f1'] for r in rs])} | "
                   f"{_fmt([r['mlp_f1'] for r in rs])} | {np.mean([r['fit_s'] for r in rs]):.0f} |")
    return "\n".join(out)


def table_table(rows, key="method", name_key="dataset") -> str:
    groups = defaultdict(list)
    for r in rows:
        groups[(r[name_key], r[key])].append(r)
    out = ["| dataset | method | ROC-AUC | PR-AUC | F1 (multi-class) | fit s | seeds |", "|---|---|---|---|---|---|---|"]
    for (ds, m), rs in sorted(groups.items()):
        def col(k):
            vals = [r["mean"][k] for r in rs if k in r["mean"]]
            return _fmt(vals) if vals else "-"
        fits = [r["fit_s"] for r in rs if "fit_s" in r]
        fit = f"{np.mean(fits):.0f}" if fits else "-"
        out.append(f"| {ds} | {m} | {col('roc_auc')} | {col('pr_auc')} | {col('f1')} | {fit} | {len(rs)} |")
    return "\n".join(out)


#: DP-NTK paper, Table 4 (5 seeds): DP-NTK, DP-MERF and real rows; ROC / PRC, or F1 (intrusion)
PAPER_TABLE4 = {
    "adult": {"dp-ntk": (0.695, 0.557), "dp-merf": (0.642, 0.524), "real": (0.786, 0.683)},
    "census": {"dp-ntk": (0.71, 0.424), "dp-merf": (0.685, 0.236), "real": (0.776, 0.433)},
    "cervical": {"dp-ntk": (0.631, 0.335), "dp-merf": (0.531, 0.176), "real": (0.959, 0.858)},
    "epileptic": {"dp-ntk": (0.648, 0.326), "dp-merf": (0.605, 0.316), "real": (0.808, 0.636)},
    "intrusion": {"dp-ntk": (0.717,), "dp-merf": (0.892,), "real": (0.971,)},
}


def comparison_table(ours, peers) -> str:
    """One row per dataset: the paper's DP-NTK next to ours, DP-MERF and the peers (mean +- sd, n)."""
    def cell(rows, method, ds):
        rs = [r for r in rows if r["dataset"] == ds and r["method"] == method]
        if not rs:
            return "not run"
        keys = ["f1"] if "f1" in rs[0]["mean"] else ["roc_auc", "pr_auc"]
        parts = []
        for k in keys:
            v = np.array([r["mean"][k] for r in rs])
            parts.append(f"{v.mean():.3f}" + (f" +- {v.std(ddof=1):.3f}" if len(v) > 1 else ""))
        return " / ".join(parts) + f" (n={len(rs)})"
    out = ["| dataset (metric) | paper DP-NTK | dpsynth DP-NTK | dpsynth DP-MERF | MST | AIM | real (ours) |",
           "|---|---|---|---|---|---|---|"]
    for ds, paper in PAPER_TABLE4.items():
        metric = "F1" if len(paper["dp-ntk"]) == 1 else "ROC / PR"
        out.append(f"| {ds} ({metric}) | {' / '.join(f'{v:g}' for v in paper['dp-ntk'])} | "
                   f"{cell(ours, 'dp-ntk', ds)} | {cell(ours, 'dp-merf', ds)} | {cell(peers, 'mst', ds)} | "
                   f"{cell(peers, 'aim', ds)} | {cell(ours, 'real', ds)} |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--image", nargs="+", default=["benchmarks/out/image.jsonl", "benchmarks/out/paper_settings.jsonl",
                                                  "benchmarks/out/lr_schedule.jsonl", "benchmarks/out/generator_arch.jsonl"])
    p.add_argument("--tables", default="benchmarks/out/tables.jsonl")
    p.add_argument("--peers", default="benchmarks/out/peers.jsonl")
    args = p.parse_args()
    image = [r for path in args.image for r in _rows(path)]
    if image:
        print(image_table(image), "\n")
    if _rows(args.tables):
        print(table_table(_rows(args.tables)), "\n")
    peers = _rows(args.peers)
    for r in peers:
        r["dataset"] = r["folder"].rsplit("_s", 1)[0]
    if peers:
        print(table_table(peers), "\n")
    if _rows(args.tables):
        print(comparison_table(_rows(args.tables), peers))


if __name__ == "__main__":
    main()
