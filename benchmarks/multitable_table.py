"""The "Databases" table of RESULTS.md from `benchmarks/out/multitable.jsonl` (`multitable.py`'s lines): per dataset,
epsilon and layout, the mean +- sd over seeds of each score and the fit time.

    .venv/bin/python benchmarks/multitable_table.py benchmarks/out/multitable.jsonl [--write benchmarks/RESULTS.md]

``--write`` replaces the table between RESULTS.md's ``multitable-table`` markers instead of printing it.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np

COLUMNS = [("keys_hold", "keys hold"), ("children_tvd", "children TVD"), ("root_2way", "root table 2-way"),
           ("child_2way", "child table(s) 2-way"), ("cross_tvd_2way", "cross-table 2-way"),
           ("downstream_auc", "downstream ROC AUC (real data)"), ("fit_s", "fit s")]
ROOTS = {"pbcseq": "patients", "mathach": "schools", "nycflights13": "planes"}
LAYOUTS = {"cascade": "**cascade** (the model)", "independent": "tables apart, children at random",
           "flat": "the join flattened (first model)"}


def cell(values, digits=3):
    v = np.asarray([x for x in values if x is not None], float)
    if not len(v):
        return "-"
    return f"{v.mean():.{digits}f}" + (f" ± {v.std(ddof=1):.{digits}f}" if len(v) > 1 else "")


def table(path: str) -> list[str]:
    groups = defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        groups[(r["dataset"], r["epsilon"], r["layout"])].append(r)
    out = ["| database, eps | layout | seeds | " + " | ".join(name for _, name in COLUMNS) + " |",
           "|---" * (len(COLUMNS) + 3) + "|"]
    for (name, eps, layout), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                             list(LAYOUTS).index(kv[0][2]))):
        root = ROOTS[name]
        child = [k[:-len(".tvd_2way")] for k in rows[0] if k.endswith(".tvd_2way") and not k.startswith(root)]
        vals = {"keys_hold": f"{sum(r['keys_hold'] for r in rows)}/{len(rows)}",
                "root_2way": cell([r[f"{root}.tvd_2way"] for r in rows]),
                "child_2way": cell([np.mean([r[f"{c}.tvd_2way"] for c in child]) for r in rows]),
                "fit_s": cell([r["fit_s"] for r in rows], 0)}
        for k in ("children_tvd", "cross_tvd_2way"):
            vals[k] = cell([r[k] for r in rows])
        vals["downstream_auc"] = (cell([r["downstream_auc"] for r in rows]) +
                                  f" ({cell([rows[0]['downstream_auc_real']])})")
        what = LAYOUTS[layout]
        if layout == "cascade":
            placed = sorted({p for r in rows for p in (r.get("placement") or {"?": "match"}).values()})
            what += f", children {'/'.join(placed)}"
            others = [r["other_placement"] for r in rows if "other_placement" in r]
            if others:
                vals["cross_tvd_2way"] += (f" ({others[0]['placement']}: "
                                           f"{cell([o['cross_tvd_2way'] for o in others])})")
        out.append(f"| {name}, {eps:g} | {what} | {len(rows)} | " + " | ".join(vals[k] for k, _ in COLUMNS) + " |")
    return out


def main() -> None:
    lines = table(sys.argv[1])
    if len(sys.argv) < 4 or sys.argv[2] != "--write":
        print("\n".join(lines))
        return
    path = sys.argv[3]
    s = open(path).read()
    a = s.index("\n", s.index("<!-- multitable-table: generated")) + 1
    b = s.index("<!-- /multitable-table -->")
    open(path, "w").write(s[:a] + "\n".join(lines) + "\n" + s[b:])


if __name__ == "__main__":
    main()
