"""A marginal method's time estimate against its measured fits (issue 81, item 5): `fit` prints an estimate before it
reads a row, each term of the method's ``time_terms`` at its rate (its ``TIME_RATES``). This reads the suite's stored
lines, takes each cell (per table and epsilon: the median fit time of its lines) of the table default's hybrid (as the
rule chooses it today), of AIM or of MST, prints the estimate against it, and fits the rates anew (non-negative least
squares on the relative error), with each table left out of the fit in turn:

    python benchmarks/time_estimate.py benchmarks/out/suite.jsonl [--method aim] [--variant numpy-estimate]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402


def cells(paths, method: str = "default", variant: str | None = None) -> list[dict]:
    """Per table and epsilon, the fits of ``method`` (``default``: the hybrid cells, the default as the rule chooses it
    today; ``aim``, ``mst``: at their defaults): {table, epsilon, fits, seconds (median), terms} (``variant``: only
    the lines of that run)."""
    from mmdsynth.choice import PublicFacts, choose_table_default
    from mmdsynth.data.discrete import Domain
    from mmdsynth.methods import AIM, MST, Hybrid

    lines = [d for d in suite._lines(paths) if "@" not in d["table"] and d["method"] == method
             and (variant is None or d.get("variant") == variant)]
    out, schemas = [], {}
    for table, eps in sorted({(d["table"], d["epsilon"]) for d in lines}, key=lambda k: (suite._rank(k[0]), k[1])):
        here = [d for d in lines if d["table"] == table and d["epsilon"] == eps]
        n = here[0]["rows"]
        if method == "default":
            rule = choose_table_default(PublicFacts(n, None, eps, 1e-5))
            if rule.method != "hybrid":
                continue
            mine, model = [d for d in here if d["chose"] == "hybrid" and suite._params(d) == rule.params], \
                Hybrid(epsilon=eps, **rule.params)
        else:
            mine, model = [d for d in here if not suite._params(d)], {"aim": AIM, "mst": MST}[method](epsilon=eps)
        if not mine:
            continue
        if table not in schemas:
            schemas[table] = suite.split(table)[0]
        schema = schemas[table]
        model.plan_outline(schema, PublicFacts(n, None, eps, 1e-5))          # the settings a fit would take
        terms = model.time_terms(schema, n, Domain.of(schema, model._s.max_cells))
        out.append({"table": table, "epsilon": eps, "fits": len(mine),
                    "seconds": statistics.median(d["fit_s"] for d in mine), "terms": terms, "rates": model.TIME_RATES})
    return out


def fit_rates(rows: list[dict]) -> dict:
    """Non-negative rates minimising the squared relative error of the estimate over ``rows``."""
    names = list(rows[0]["terms"])
    A = np.array([[r["terms"][k] / r["seconds"] for k in names] for r in rows])
    rates, _ = nnls(A, np.ones(len(rows)))
    return dict(zip(names, rates))


def estimate(rates: dict, terms: dict) -> float:
    return sum(rates[k] * v for k, v in terms.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lines", nargs="+", type=Path, help="the suite's stored lines (JSON lines)")
    ap.add_argument("--variant", help="only the lines of this run (their 'variant'), e.g. those of one code version")
    ap.add_argument("--method", default="default", choices=["default", "aim", "mst"],
                    help="whose estimate: the table default's hybrid cells (default), AIM's or MST's")
    args = ap.parse_args()
    rows = cells(args.lines, args.method, args.variant)
    rates = fit_rates(rows)
    held = {}
    for table in {r["table"] for r in rows}:
        others = fit_rates([r for r in rows if r["table"] != table])
        held.update({(r["table"], r["epsilon"]): estimate(others, r["terms"]) for r in rows if r["table"] == table})
    print("| table, eps | fits | measured (median) s | estimate now s | ratio | refitted s | ratio | "
          "refitted without the table s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    logs = {"now": [], "refit": [], "held": []}
    for r in rows:
        t, now, new, out = r["seconds"], estimate(r["rates"], r["terms"]), estimate(rates, r["terms"]), \
            held[(r["table"], r["epsilon"])]
        logs["now"].append(now / t)
        logs["refit"].append(new / t)
        logs["held"].append(out / t)
        print(f"| {r['table']}, {r['epsilon']:g} | {r['fits']} | {t:.1f} | {now:.1f} | {now / t:.2f} | {new:.1f} | "
              f"{new / t:.2f} | {out:.1f} | {out / t:.2f} |")
    for name, ratios in logs.items():
        print(f"{name}: ratios {min(ratios):.2f}-{max(ratios):.2f}, median |log ratio| "
              f"{statistics.median(abs(math.log(x)) for x in ratios):.2f}")
    print("refitted rates: TIME_RATES = {" + ", ".join(f'"{k}": {v:.3g}' for k, v in rates.items()) + "}")


if __name__ == "__main__":
    main()
