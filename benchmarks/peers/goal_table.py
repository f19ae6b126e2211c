"""Issue 47's current table: per table and epsilon, the table default beside AIM, MST and DP-MERF, read from the
JSON lines the runs wrote (``evaluate_peers.py`` scores, ``run_mmdsynth.py`` fit times; the cars' lines carry both),
with each cell's verdict against the goal (2-way TVD <= the best peer's, ML efficacy >= max(AIM, DP-MERF), fit <= a
tenth of AIM's). Nothing here is typed in: every number is a mean, median or range of stored lines.

    python benchmarks/peers/goal_table.py                               # prints it
    python benchmarks/peers/goal_table.py --write benchmarks/RESULTS.md  # replaces its block there

Which lines make each row is declared in ``ROWS`` below (file, method, tag): the default's newest settings, the
peers as measured. Where AIM has no model, the better MST stands in on 2-way TVD (and no time is asked).
"""
from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "out"

#: roles in print order: the default, AIM (public grid / released grid), MST (the same), DP-MERF
ROLE_NAMES = {"default": "**default**", "aim": "AIM", "aim_rel": "AIM, released grid", "mst": "MST",
              "mst_rel": "MST, released grid", "merf": "DP-MERF"}

#: the cars (nulls and a date): each line of these files carries its scores and fit time; the same at eps 1 and 10
CARS = {"default_is": "dp-merf, 250 iterations",
        "default": [("nulls_dates_stops", None, "default_it250", "")],
        "aim": [("nulls_dates", None, "aim", "")],
        "aim_rel": [("nulls_dates", None, "aim_gridrel", "")],
        "mst": [("nulls_dates", None, "mst", "")],
        "mst_rel": [("nulls_dates", None, "mst_gridrel", "")],
        "merf": [("nulls_dates_stops", None, "default_it2000", "")]}

# (dataset, eps): {role: [(scores file, fit file or None, method, tag), ...], "default_is": text}
ROWS = {
    ("adult", 1): {"default_is": "hybrid",
                   "default": [("fidelity_new_tables", "new_tables_fit", "hybrid", "_tsdep")],
                   "aim": [("fidelity_aim_lib", "aim_lib_fit", "mmdsynth-aim", "")],
                   "aim_rel": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-aim", "gridrel")],
                   "mst": [("fidelity_mmdsynth_mst", "mmdsynth_mst_fit", "mmdsynth-mst", "")],
                   "mst_rel": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-mst", "gridrel")],
                   "merf": [("fidelity_mbi2", "mmdsynth_mbi2ctx_fit", "dp-merf", "")]},
    ("adult", 10): {"default_is": "hybrid",
                    "default": [("fidelity_new_tables", "new_tables_fit", "hybrid", "_tsdep")],
                    "aim": [("fidelity_aim_lib", "aim_lib_fit", "mmdsynth-aim", "")],
                    "mst": [("fidelity_mmdsynth_mst", "mmdsynth_mst_fit", "mmdsynth-mst", "")],
                    "merf": [("fidelity_hybrid_lib", None, "dp-merf", "")]},
    ("census", 1): {"default_is": "hybrid",
                    "default": [("fidelity_new_tables", "new_tables_fit", "hybrid", "_tsdep")],
                    "aim": [("fidelity_aim_lib", "aim_lib_fit", "mmdsynth-aim", "")],
                    "mst": [("fidelity_mmdsynth_mst", "mmdsynth_mst_fit", "mmdsynth-mst", ""),
                            ("fidelity_new_tables", "new_tables_fit", "mmdsynth-mst", "pub")],
                    "mst_rel": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-mst", "gridrel")],
                    "merf": [("fidelity_hybrid", None, "dp-merf", ""),
                             ("fidelity_new_tables", "new_tables_fit", "dp-merf", "_m1202")]},
    ("census", 10): {"default_is": "hybrid",
                     "default": [("fidelity_new_tables", "new_tables_fit", "hybrid", "_tsdep10")],
                     "mst": [("fidelity_mmdsynth_mst", "mmdsynth_mst_fit", "mmdsynth-mst", "")],
                     "merf": [("fidelity_issue32", None, "dp-merf", "")]},
    ("cervical", 1): {"default_is": "dp-merf, 250 iterations",
                      "default": [("fidelity_issue32", "mmdsynth_issue32_fit", "dp-merf", "_d250"),
                                  ("fidelity_dpmerf_stops", "dpmerf_stops", "dp-merf", "_it250")],
                      "aim": [("fidelity_aim_lib", "aim_lib_fit", "mmdsynth-aim", "")],
                      "mst": [("fidelity_hybrid_lib", None, "mmdsynth-mst", "")],
                      "mst_rel": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-mst", "gridrel")],
                      "merf": [("fidelity_dpmerf_stops", "dpmerf_stops", "dp-merf", "_it2000")]},
    ("cervical", 10): {"default_is": "dp-merf, 250 iterations",
                       "default": [("fidelity_issue32", "mmdsynth_issue32_fit", "dp-merf", "_d250"),
                                   ("fidelity_dpmerf_stops", "dpmerf_stops", "dp-merf", "_it250")],
                       "aim": [("fidelity_aim_lib", "aim_lib_fit", "mmdsynth-aim", "")],
                       "aim_rel": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-aim", "gridrel")],
                       "mst": [("fidelity_mmdsynth_mst", "mmdsynth_mst_fit", "mmdsynth-mst", "")],
                       "merf": [("fidelity_dpmerf_stops", "dpmerf_stops", "dp-merf", "_it2000")]},
    ("epileptic", 1): {"default_is": "hybrid, 16 cells cut at the released mass",
                       "default": [("fidelity_new_tables", "new_tables_fit", "hybrid", "_tsdrel"),
                                   ("fidelity_new_tables", "new_tables_fit", "hybrid", "_tsdrelb")],
                       "mst": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-mst", "")],
                       "mst_rel": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-mst", "gridrel")],
                       "merf": [("fidelity_new_tables", "new_tables_fit", "dp-merf", "")]},
    ("epileptic", 10): {"default_is": "hybrid",
                        "default": [("fidelity_new_tables", "new_tables_fit", "hybrid", "_tsdep10")],
                        "mst": [("fidelity_mmdsynth_mst", "mmdsynth_mst_fit", "mmdsynth-mst", "")],
                        "merf": [("fidelity_issue32", None, "dp-merf", "")]},
    ("intrusion", 1): {"default_is": "hybrid",
                       "default": [("fidelity_new_tables", "new_tables_fit", "hybrid", "_tsdep")],
                       "aim": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-aim", ""),
                               ("fidelity_new_tables", "new_tables_fit", "mmdsynth-aim", "paired1128")],
                       "mst": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-mst", "")],
                       "mst_rel": [("fidelity_new_tables", "new_tables_fit", "mmdsynth-mst", "gridrel")],
                       "merf": [("fidelity_new_tables", "new_tables_fit", "dp-merf", "")]},
    ("intrusion", 10): {"default_is": "hybrid",
                        "default": [("fidelity_new_tables", "new_tables_fit", "hybrid", "_tsdep10")],
                        "mst": [("fidelity_mmdsynth_mst", "mmdsynth_mst_fit", "mmdsynth-mst", "")],
                        "merf": [("fidelity_issue32", None, "dp-merf", "")]},
    ("cars", 1): CARS,
    ("cars", 10): CARS,
}

#: where AIM has no cell, why (measured: see benchmarks/RESULTS.md's logs)
NO_AIM = {("census", 10): "AIM not run: about 8x its eps-1 time (3,006-3,814 s) a seed",
          ("epileptic", 1): "AIM: no model within 60 minutes (2,864 rounds, 15,753 candidate pairs)",
          ("epileptic", 10): "AIM: no model at eps 1 within 60 minutes",
          ("intrusion", 10): "AIM not run: 5-6 h a seed"}


@functools.lru_cache(maxsize=None)
def _lines(name: str) -> tuple[dict, ...]:
    """The JSON lines of ``benchmarks/out/NAME.jsonl``, read once per run (several rows read the same file)."""
    path = OUT / f"{name}.jsonl"
    return tuple(json.loads(line) for line in open(path) if line.strip()) if path.exists() else ()


def _folder(x: dict) -> str:
    return Path(x["folder"]).name


def _tag(x: dict) -> str:
    return x.get("tag") or ""


def _scored(score_file: str, fit_file: str | None, method: str, tag: str, dataset: str, eps: float) -> list[dict]:
    """One dict per scored release: ml, tvd1/2/3, fit (s or None), folder. For the evaluator's lines the last one for a
    (folder, CSV) wins; each of the cars' lines is its own release."""
    lines = _lines(score_file)
    if score_file.startswith("nulls_dates"):            # the cars' lines carry scores and fit time together
        return [{"ml": x["mean"]["f1"], "tvd1": x["tvd_1way"], "tvd2": x["tvd_2way"], "tvd3": x["tvd_3way"],
                 "fit": x.get("fit_s"), "folder": _folder(x)} for x in lines
                if x.get("method") == method and float(x["epsilon"]) == eps and _folder(x).startswith(dataset + "_s")]
    out = {}
    fits: dict = {}
    for f in _lines(fit_file) if fit_file else []:
        if "fit_s" in f and f.get("method") == method and float(f.get("epsilon", -1)) == eps:
            fits.setdefault((_folder(f), f.get("synth_csv")), []).append(float(f["fit_s"]))
    for x in lines:
        if x.get("epsilon") is None or float(x["epsilon"]) != eps or x.get("method") != method or _tag(x) != tag:
            continue
        if not _folder(x).startswith(dataset + "_s"):
            continue
        d = x["marginal_tvd"]["deciles"]
        ml = x["mean"].get("roc_auc", x["mean"].get("f1"))
        out[(_folder(x), x["synth_csv"])] = {"ml": ml, "tvd1": d["tvd_1way"], "tvd2": d["tvd_2way"],
                                             "tvd3": d.get("tvd_3way"), "folder": _folder(x),
                                             "fit": (fits.get((_folder(x), x["synth_csv"])) or [None])[-1]}
    return list(out.values())


def summarise(dataset: str, eps: float) -> dict:
    """{role: {"n", "seeds", "ml", "tvd1", "tvd2", "tvd3", "fit": (min, median, max) or None}}."""
    spec = ROWS[(dataset, eps)]
    out = {}
    for role in ROLE_NAMES:
        runs = [r for entry in spec.get(role, []) for r in _scored(*entry, dataset, float(eps))]
        if not runs:
            continue
        mean = {k: statistics.fmean(r[k] for r in runs) if all(r[k] is not None for r in runs) else None
                for k in ("ml", "tvd1", "tvd2", "tvd3")}
        fit = sorted(r["fit"] for r in runs if r["fit"] is not None)
        out[role] = {**mean, "n": len(runs), "seeds": len({r["folder"] for r in runs}),
                     "fit": (fit[0], statistics.median(fit), fit[-1]) if fit else None}
    return out


def verdict(dataset: str, eps: float, s: dict) -> str:
    """The goal, axis by axis, from the means of the rows (a gap inside the seeds' spread still counts: the text says
    by how much)."""
    d = s["default"]
    parts = []
    ml_peers = {r: s[r]["ml"] for r in ("aim", "aim_rel", "merf") if r in s}
    best_ml = max(ml_peers.values())
    gap = d["ml"] - best_ml
    parts.append(f"ML {'met' if gap >= 0 else 'missed'} ({gap:+.3f})")
    aims = [r for r in ("aim", "aim_rel") if r in s]
    peers2 = aims or [r for r in ("mst", "mst_rel") if r in s]
    best2 = min(s[r]["tvd2"] for r in peers2)
    gap2 = d["tvd2"] - best2
    parts.append(f"2-way {'met' if gap2 <= 0 else 'missed'} ({gap2:+.4f} against "
                 f"{'AIM' if aims else 'the better MST'})")
    if d["fit"] and s.get("aim", {}).get("fit"):
        ratio = s["aim"]["fit"][1] / d["fit"][1]
        parts.append(f"time: AIM's median / the default's = {ratio:.1f} (unpaired runs)")
    elif not aims:
        parts.append(NO_AIM.get((dataset, eps), "no AIM cell"))
    return "; ".join(parts)


def _fmt(v, digits):
    return "-" if v is None else f"{v:.{digits}f}"


BEGIN, END = "<!-- goal_table.py: begin -->", "<!-- goal_table.py: end -->"


def render() -> str:
    lines = ["| table, eps | method | n (seeds) | ML efficacy | 1-way TVD | 2-way TVD | 3-way TVD | "
             "fit s (min / median / max) |", "|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for dataset, eps in ROWS:
        s = summarise(dataset, eps)
        for role, name in ROLE_NAMES.items():
            if role not in s:
                continue
            r = s[role]
            label = f"{name} ({ROWS[(dataset, eps)]['default_is']})" if role == "default" else name
            fit = "-" if r["fit"] is None else " / ".join(f"{t:,.0f}" for t in r["fit"])
            lines.append(f"| {dataset}, {eps} | {label} | {r['n']} ({r['seeds']}) | {_fmt(r['ml'], 3)} | "
                         f"{_fmt(r['tvd1'], 3)} | {_fmt(r['tvd2'], 4)} | {_fmt(r['tvd3'], 3)} | {fit} |")
        verdicts.append(f"- {dataset}, eps {eps}: {verdict(dataset, eps, s)}")
    return "\n".join(lines + [""] + verdicts)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", metavar="MARKDOWN", help="replace the text between the file's goal_table.py markers "
                    "with the table instead of printing it (benchmarks/RESULTS.md)")
    args = ap.parse_args()
    text = render()
    if not args.write:
        print(text)
        return
    doc = Path(args.write).read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{args.write} has no {BEGIN} ... {END} block to replace")
    head, rest = doc.split(BEGIN, 1)
    Path(args.write).write_text(head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1])


if __name__ == "__main__":
    main()
