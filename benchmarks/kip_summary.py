"""Summarise benchmarks/out/kip.jsonl: mean +- standard deviation over seeds per cell.

    python benchmarks/kip_summary.py [benchmarks/out/kip.jsonl]
"""
import json
import statistics as st
import sys
from collections import defaultdict


def pct(values):
    return f"{100 * st.mean(values):.1f} ± {100 * st.pstdev(values):.1f}" if values else "-"


def main(path="benchmarks/out/kip.jsonl"):
    cells = defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        if r.get("epochs") != 10:
            continue
        key = (r["dataset"], r["ipc"], r["epsilon"], r.get("init", "N(0, I)"), r.get("cnn_input", "-"))
        cells[key].append(r)
    print("| dataset | ipc | eps | start | n | KRR | ConvNet | LogReg | MLP | step s | device |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key, rs in sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0]))):
        cnn = [r["cnn_acc"] for r in rs if "cnn_acc" in r]
        cnn_txt = pct(cnn) + (" (input clipped)" if key[4].startswith("clipped") else "")
        print(f"| {key[0]} | {key[1]} | {key[2]:g} | {key[3]} | {len(rs)} | {pct([r['krr_acc'] for r in rs])} | "
              f"{cnn_txt} | {pct([r['logreg_acc'] for r in rs])} | {pct([r['mlp_acc'] for r in rs])} | "
              f"{st.median(r['step_s'] for r in rs):.3f} | {rs[0].get('device', 'cpu')} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
