"""Issue 32's peer table: fit times (run_smartnoise.py / run_mmdsynth.py JSON lines) joined with the scores
of evaluate_peers.py, one row per (dataset, epsilon, method), as Markdown.

    python3 benchmarks/peers/issue32_table.py --fits benchmarks/out/peers_issue32_fit.jsonl \
        benchmarks/out/mmdsynth_issue32_fit.jsonl --scores benchmarks/out/fidelity_issue32.jsonl
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = {"dp-merf": 0, "dp-hp": 1, "mst": 2, "aim": 3, "real": 4}
NAMES = {"dp-merf": "mmdsynth DP-MERF", "dp-hp": "mmdsynth DP-HP", "mst": "MST", "aim": "AIM",
         "real": "real train split (floor)"}


def _load(paths):
    rows = []
    for p in paths:
        if Path(p).exists():
            rows += [json.loads(line) for line in open(p) if line.strip()]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fits", nargs="+", required=True)
    ap.add_argument("--scores", nargs="+", required=True)
    ap.add_argument("--tvd", nargs="*", default=[], help="evaluate_peers.py --tvd-only lines: their marginal_tvd "
                    "replaces the one in --scores (adds the categorical-pairs column)")
    ap.add_argument("--reference", default="dp-merf", help="the mmdsynth method the speed ratio divides by")
    args = ap.parse_args()
    fits = {}
    for r in _load(args.fits):
        key = (Path(r["folder"]).name, r["method"], float(r["epsilon"]))
        fits.setdefault(key, []).append(r)
    scores = {}
    for r in _load(args.scores):
        eps = None if r.get("epsilon") is None else float(r["epsilon"])
        scores[(r["folder"], r["method"], eps)] = r       # the last line for a key wins
    for r in _load(args.tvd):
        eps = None if r.get("epsilon") is None else float(r["epsilon"])
        if (r["folder"], r["method"], eps) in scores and not r.get("tag"):
            scores[(r["folder"], r["method"], eps)]["marginal_tvd"] = r["marginal_tvd"]
    keys = set(fits) | set(scores)
    print("| dataset | eps | method | 1-way TVD (deciles / grid32) | 2-way TVD (deciles / grid32) | "
          "2-way TVD, categorical pairs only | ML efficacy ROC / PR (12 clf.) | fit s | peer / mmdsynth time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for folder, method, eps in sorted(keys, key=lambda k: (k[0], k[2] if k[2] is not None else 1e9, ORDER.get(k[1], 9))):
        fit = fits.get((folder, method, eps), [])
        done = [f for f in fit if "fit_s" in f]
        if done:
            fit_txt = " / ".join(f"{f['fit_s']:.1f}" for f in done)
        elif fit and fit[-1]["status"] == "not started":
            fit_txt = "not started"
        elif fit:
            fit_txt = f"did not finish within {fit[-1]['wall_s'] // 60} min ({fit[-1]['status']})"
        else:
            fit_txt = "-"
        ref = [f["fit_s"] for f in fits.get((folder, args.reference, eps), []) if "fit_s" in f]
        ratio = "-"
        if done and ref and method in ("mst", "aim"):
            ratio = f"{done[-1]['fit_s'] / ref[-1]:.1f}x"
        elif fit and not done and fit[-1]["wall_s"] and ref and method in ("mst", "aim"):
            ratio = f"> {fit[-1]['wall_s'] / ref[-1]:.0f}x"
        s = scores.get((folder, method, eps))
        if s:
            d, g = s["marginal_tvd"]["deciles"], s["marginal_tvd"]["grid32"]
            m = s["mean"]
            util = f"{m['roc_auc']:.3f} / {m['pr_auc']:.3f}"
            if s["skipped"] or s["failures"]:
                util += f" (skipped {list(s['skipped'])}, failed {list(s['failures'])})"
            one, two = f"{d['tvd_1way']:.3f} / {g['tvd_1way']:.3f}", f"{d['tvd_2way']:.3f} / {g['tvd_2way']:.3f}"
            cat = "-" if d.get("tvd_2way_categorical") is None else f"{d['tvd_2way_categorical']:.3f}"
        else:
            one = two = util = cat = "-"
        dataset = folder.rpartition("_s")[0]
        print(f"| {dataset} | {'-' if eps is None else f'{eps:g}'} | {NAMES.get(method, method)} | {one} | {two} | {cat} | "
              f"{util} | {fit_txt} | {ratio} |")


if __name__ == "__main__":
    main()
