"""The twelve-table suite (issue 81): each method fitted on each table of ``../shared/datasets/tables/`` as a user runs
it, scored by one evaluator, one JSON line per (table, method, epsilon, seed) appended to ``--out``.

Per table: the suite's 80/20 split (``df.sample(frac=0.2, random_state=0)`` is the test part, as the tables' README
says), the method fitted on the rest with ``mmdsynth.fit`` (``default``: no method named, the table default the
library chooses; otherwise the registry name, ``mst`` / ``aim`` / ``dp-merf`` / ``hybrid``, at its defaults unless
``--set`` says otherwise), as many synthetic rows as training rows, then

* **ML efficacy**: the mean of the 12 classifiers of :func:`mmdsynth.evaluation.tabular.table_classifier_scores`
  trained on the synthetic rows and tested on the real test part (ROC AUC for two classes, weighted F1 for more);
* **1-, 2- and 3-way TVD** against the real training part (``peers/marginal_tvd.py``: numeric columns cut at the
  real deciles; 3-way over 50 column triples chosen from the column names alone);
* the fit time (wall, this process, the library's imports done before) and the share of synthetic rows repeating
  an earlier one (the real part's beside it).

    python benchmarks/suite.py --methods default mst --epsilon 1 --seeds 0 --out benchmarks/out/suite.jsonl
    python benchmarks/suite.py --tables males spam7 --methods hybrid --set max_cells=16 --variant mc16 --out ...

``summarize`` mode prints the table of stored lines (means over seeds) without fitting anything:

    python benchmarks/suite.py --summarize benchmarks/out/suite.jsonl

``--goal-table`` prints issue 81's table (the default as the current rule chooses it beside AIM, MST and DP-MERF, with
each cell's verdict; ``--tried`` lines of the hybrid's variants, named where a cell misses), ``--write
benchmarks/RESULTS.md`` replaces its block there (the command RESULTS.md's table is built with):

    python benchmarks/suite.py --goal-table benchmarks/out/suite.jsonl benchmarks/out/suite_opendp_authors_grid.jsonl \
        benchmarks/out/suite_opendp_cells.jsonl benchmarks/out/suite_opendp_replace_one.jsonl \
        --tried benchmarks/out/suite_released_grid.jsonl \
        benchmarks/out/suite_small_hybrid.jsonl benchmarks/out/suite_pairs_all.jsonl benchmarks/out/suite_share.jsonl \
        benchmarks/out/suite_hybrid_aim_inside.jsonl benchmarks/out/suite_stall_off.jsonl \
        benchmarks/out/suite_unstratified.jsonl benchmarks/out/suite_jax_estimate.jsonl \
        benchmarks/out/suite_public_grid.jsonl benchmarks/out/suite_pairs_all_released.jsonl \
        --write benchmarks/RESULTS.md

OpenDP's lines with one row replaced (the relation of mmdsynth's releases): ``--methods opendp-aim --opendp-unit
changes``. A peer that may not finish: ``--peer-timeout SECONDS`` stops its fit after that much of its own CPU time
(OpenDP's process, or mmdsynth's own AIM, MST or DP-MERF in this one: fair to the peer whatever else shares the cores)
and writes a line with ``failed`` ("no model within ..."), which the goal table's cell states where the peer has no
scored line.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
from _rows import replace_block

ROOT = Path(os.environ.get("MMDSYNTH_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "datasets")) / "tables"
TABLES = ["cps1988", "arrests", "fertility2", "college", "males", "spam7", "wvs", "nmes", "resume", "benefits",
          "doctorcontacts", "flights"]
#: the papers' tables (``mmdsynth.data.load_preset``: the papers' preprocessing and split, seed 0), scored here by the
#: same evaluator as the twelve
PAPERS = ["adult", "census", "cervical", "epileptic", "intrusion"]
TRIPLES = 50


def split(name: str):
    """The table's schema and its suite split (train, test), read as the schema says (a paper's table: its preset's
    split, seed 0)."""
    from mmdsynth.data import Schema
    if name in PAPERS:
        from mmdsynth.data import load_preset
        d = load_preset(name, seed=0)
        return d.schema, d.train.reset_index(drop=True), d.test.reset_index(drop=True)
    schema = Schema.from_json(ROOT / name / "schema.json")
    df = schema.validate(pd.read_csv(ROOT / name / "data.csv.gz", dtype=str, keep_default_na=False))
    test = df.sample(frac=0.2, random_state=0)
    return schema, df.drop(test.index).reset_index(drop=True), test.reset_index(drop=True)


def score(train: pd.DataFrame, test: pd.DataFrame, synth: pd.DataFrame, schema) -> dict:
    """The evaluator: ML efficacy on the real test part, k-way TVD against the real training part."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
    from marginal_tvd import marginal_tvd
    from mmdsynth.data.encoding import TableEncoder
    from mmdsynth.evaluation.tabular import table_classifier_scores

    scores = table_classifier_scores(synth, test, TableEncoder(schema), seed=0)
    tvd = marginal_tvd(train, synth, schema, "deciles", TRIPLES, 0)
    return {"ml_efficacy": round(scores["mean"]["roc_auc" if scores["binary"] else "f1"], 4),
            "metric": "roc_auc" if scores["binary"] else "f1",
            "tvd_1way": round(tvd["tvd_1way"], 4), "tvd_2way": round(tvd["tvd_2way"], 4),
            "tvd_3way": round(tvd["tvd_3way"], 4) if tvd.get("tvd_3way") is not None else None,
            "repeated_real": round(float(train.astype(str).duplicated().mean()), 4),
            "repeated_synthetic": round(float(synth.astype(str).duplicated().mean()), 4)}


def chosen_params(train: pd.DataFrame, schema, epsilon: float) -> dict:
    """The settings the table default chose for this table (public facts: the rows, epsilon)."""
    from mmdsynth.choice import PublicFacts, choose_table_default
    return choose_table_default(PublicFacts(len(train), None, epsilon, 1e-5)).params     # the suite's: one row a unit


#: OpenDP's peers run in their own virtualenv (``peers/run_opendp.py`` says how to make it)
OPENDP_PYTHON = os.environ.get("OPENDP_PYTHON", str(Path(__file__).resolve().parents[1] / ".venv-opendp/bin/python"))


class PeerFailed(RuntimeError):
    """A peer's run ended in its own error (recorded in the suite's line, not scored)."""


def opendp_cuts(schema) -> dict:
    """{numeric column: cuts} for OpenDP's ``contingency_table``, whose cells are left-open, ``(c[i-1], c[i]]``, and
    whose two open end cells it decodes one unit wide beside the first and last cut: the public cells mmdsynth's own
    AIM and MST use (``Domain.of(schema)``, from the declared bounds alone), each an OpenDP cell. An atom (a cell of
    width zero at a bound or at 0) is ``(v - d, v]`` (d: 0.5 on an integer column, else a billionth of the span); an
    interval ends at its upper edge. The first cut is below the lower bound, so OpenDP's end cells hold nothing.
    Found on 2026-12-05 (benchmarks/log/2026-12-05.md#opendp-cuts): given the authors' 32-cell grid without the
    bounds, OpenDP decoded spam7's first cell of ``bang``, ``[0, 1.09)``, as ``(0.09, 1.09]`` (1-way TVD 0.60 on the
    column, where 51 % of the real values are 0), and on any grid without atoms its cell ``[0, 2)`` of fertility2's
    weeks worked spreads the real zeros over 0 and 1 (0.24)."""
    from mmdsynth.data.discrete import Domain, _cell_ranges

    out = {}
    for name, grid in Domain.of(schema).grids.items():
        col = schema.column(name)
        d = 0.5 if col.integer else 1e-9 * max(1.0, float(grid.edges[-1] - grid.edges[0]))
        lo, hi = _cell_ranges(grid)
        cuts = []
        for a, b in zip(lo, hi):
            cuts += [a - d, a] if a == b else [b]
        out[name] = sorted({float(c) for c in [lo[0] - d] + cuts})
    return out


def run_opendp(name: str, algorithm: str, train: pd.DataFrame, schema, epsilon: float, seed: int,
               unit: str = "contributions", timeout: float | None = None):
    """OpenDP's AIM or MST on ``train`` in its own virtualenv: (synthetic rows, fit seconds, version, delta, rows
    dropped, rho used). The privacy loss is the zCDP rho that mmdsynth's own zCDP plans convert (epsilon, delta) to,
    delta as the table default sets it for this count. OpenDP 0.16's MST can refuse its own plan by a rounding error
    ("insufficient budget for query: 0.0015278297598811717 > 0.001527829759881171" on college, nmes and benefits at
    eps 1); a careful user then asks for a hair less, as this does: rho rounded down to 3, then 2 significant digits
    (0.2 % and 2 % less on college), the one used recorded in the line. ``timeout``: CPU seconds after which the peer's
    fit is stopped and the run recorded as "no model within ..." (a failed line the goal table states in its cell).
    The schema the peer reads is the suite's own public schema object, written out (a paper's table has no file)."""
    import subprocess
    import tempfile

    from mmdsynth.choice import default_delta
    from mmdsynth.privacy.zcdp import rho_for_epsilon

    delta = default_delta(len(train))
    full = rho_for_epsilon(epsilon, delta)
    top = math.floor(math.log10(full))
    # the full rho, then rounded down to 3 and to 2 significant digits, each written as short decimal text
    tries = [full] + [float(f"{math.floor(full / 10 ** (top - k)) * 10 ** (top - k):.{k + 1}g}") for k in (2, 1)]
    with tempfile.TemporaryDirectory() as tmp:
        train.to_csv(f"{tmp}/train.csv", index=False)
        schema.to_json(f"{tmp}/schema.json")
        with open(f"{tmp}/cuts.json", "w") as f:
            json.dump(opendp_cuts(schema), f)
        for attempt, rho in enumerate(tries):
            run = subprocess.run([OPENDP_PYTHON, str(Path(__file__).resolve().parent / "peers" / "run_opendp.py"),
                                  "--train", f"{tmp}/train.csv", "--schema", f"{tmp}/schema.json", "--cuts",
                                  f"{tmp}/cuts.json", "--algorithm", algorithm, "--rho", repr(rho), "--rows",
                                  str(len(train)), "--seed", str(seed), "--unit", unit, "--out", f"{tmp}/synth.csv"],
                                 capture_output=True, text=True, preexec_fn=cpu_limit(timeout))
            if timeout and run.returncode == -signal.SIGXCPU:
                raise PeerFailed(stopped_words(timeout))
            if run.returncode == 0:
                break
            # the peer's own failure, recorded in the line (its last words)
            said = [ln.strip() for ln in run.stderr.splitlines() if ln.strip() and ln.strip() not in ('")',)]
            words = said[-1] if said else f"exit status {run.returncode}"
            if attempt == len(tries) - 1 or "insufficient budget for query" not in words:
                raise PeerFailed(words + (f" (also at rho {', '.join(f'{r:.6g}' for r in tries[:attempt])})"
                                          if attempt else ""))
        facts = json.loads(run.stdout.strip().splitlines()[-1])
        raw = pd.read_csv(f"{tmp}/synth.csv", dtype=str, keep_default_na=False)
    # OpenDP adds a null key to every keyset, synthesizes a numeric cell as a float and its end cells past the bounds
    # (they are open: "(-inf, edge]"): rows holding a null are dropped (counted in the line), numeric values clipped to
    # the declared bounds and integer columns rounded, as a user would before using the rows
    empty = (raw == "").any(axis=1)
    raw = raw.loc[~empty].reset_index(drop=True)
    for col in schema.columns:
        if col.kind == "numeric":
            values = pd.to_numeric(raw[col.name]).clip(*col.bounds)
            raw[col.name] = (values.round().astype("int64") if col.integer else values).astype(str)
    return schema.validate(raw), facts["fit_s"], facts["opendp"], delta, int(empty.sum()), rho


def stopped_words(seconds: float) -> str:
    """A stopped peer's failed line: its cap in CPU seconds (what a fit gets whatever else runs beside it)."""
    return f"no model within {seconds:,.0f} CPU s on one thread (stopped)"


def cpu_limit(seconds: float | None):
    """For ``subprocess.run(preexec_fn=...)``: the child killed by SIGXCPU after ``seconds`` of its own CPU time (a
    cap fair to the peer when other jobs share the cores, as a wall-clock one is not); None: no cap."""
    if not seconds:
        return None
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_CPU, (math.ceil(seconds), math.ceil(seconds) + 30))
    return limit


@contextlib.contextmanager
def stopped_after(seconds: float | None):
    """A peer's fit in this process stopped after ``seconds`` of the process's CPU time (SIGPROF; None: no cap):
    :class:`PeerFailed` with the words a stopped OpenDP run gets, so the goal table states the cell the same way. A
    stop can leave JAX's worker threads mid-work: once (2026-12-07, AIM on census at eps 10) the process crashed at its
    exit after its lines were written. Run a capped peer one table and seed per process, so a crash loses no cell
    after it."""
    if not seconds:
        yield
        return

    def stop(*_):
        raise PeerFailed(stopped_words(seconds))

    before = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, before)


def no_model(table: str, method: str, epsilon: float, seed: int, rows: int, failed: PeerFailed, **extra) -> dict:
    """The line of a peer's run that gave no model (its own error, or stopped at ``--peer-timeout``): not scored,
    its words kept (:func:`failures` reads them back)."""
    return {"table": table, "method": method, "chose": method, "epsilon": epsilon, "seed": seed, "rows": rows,
            "failed": str(failed), "date": time.strftime("%Y-%m-%d"), **extra}


def emit(line: dict, out: Path) -> None:
    """One result line: printed, and appended to ``out`` (JSON lines)."""
    print(json.dumps(line), flush=True)
    with open(out, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def paired(description: str, fill) -> None:
    """The scaffold of a paired post-processing measurement (``stall_paired.py``, ``draw_paired.py``): its command
    line (``--tables --epsilon --seeds --out``), one table-default fit per (table, epsilon, seed) on the suite's split
    (tables the default fits with another method are skipped), and one line per fit that ``fill(model, train, test,
    schema, seed, line)`` completes with each variant's scores (the same release, post-processed each way)."""
    import mmdsynth

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--tables", nargs="+", default=[t for t in TABLES if t not in ("males", "flights")])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    for name in args.tables:
        schema, train, test = split(name)
        for seed in args.seeds:
            model = mmdsynth.fit(train, label=schema.label, schema=schema, epsilon=args.epsilon, seed=seed)
            if model.method != "hybrid":
                continue
            line = {"table": name, "epsilon": args.epsilon, "seed": seed,
                    "params": chosen_params(train, schema, args.epsilon), "date": time.strftime("%Y-%m-%d")}
            fill(model, train, test, schema, seed, line)
            emit(line, args.out)


def run(args) -> None:
    import mmdsynth
    import mmdsynth.methods
    from mmdsynth.generators.graphical import mbi

    # the process's one-time imports (the methods, mbi and JAX: about 4-5 s here) before any fit is timed, so a fit's
    # time does not depend on its place in the run (lines before 2026-12-05's numpy estimate: the first fit of each
    # run paid them)
    mbi()
    params = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    # OpenDP's neighbour relation, kept in its lines when it is not its default (add/remove one row)
    unit = {"unit": ODP_REPLACE_ONE} if args.opendp_unit == "changes" else {}
    for name in args.tables:
        schema, train, test = split(name)
        if args.rows:                           # a smaller table: a fixed sample of the training part, the test kept
            train = train.sample(n=min(args.rows, len(train)), random_state=0).reset_index(drop=True)
            name = f"{name}@{len(train)}"
        for method in args.methods:
            for seed in args.seeds:
                if method.startswith("opendp-"):
                    try:
                        synth, fit_s, version, delta, dropped, rho = run_opendp(
                            name, method.split("-", 1)[1], train, schema, args.epsilon, seed, args.opendp_unit,
                            args.peer_timeout)
                    except PeerFailed as failed:
                        emit(no_model(name, method, args.epsilon, seed, len(train), failed, **unit), args.out)
                        continue
                    line = {"table": name, "method": method, "chose": method, "variant": f"opendp {version}",
                            "set": {}, "params": {}, "epsilon": args.epsilon, "delta": delta, "seed": seed,
                            "dropped_null_rows": dropped, "rho": rho, **unit,
                            "rows": len(train), "fit_s": fit_s, **score(train, test, synth, schema),
                            "date": time.strftime("%Y-%m-%d"), "threads": os.environ.get("OMP_NUM_THREADS")}
                    emit(line, args.out)
                    continue
                t = time.perf_counter()
                try:
                    with stopped_after(args.peer_timeout if method != "default" else None):
                        model = mmdsynth.fit(train, label=schema.label, schema=schema, epsilon=args.epsilon,
                                             seed=seed, method=None if method == "default" else method, **params)
                except PeerFailed as failed:
                    emit(no_model(name, method, args.epsilon, seed, len(train), failed), args.out)
                    continue
                fit_s = time.perf_counter() - t
                synth = model.sample(len(train), seed=seed)
                line = {"table": name, "method": method, "chose": model.method, "variant": args.variant,
                        "set": params, "params": {**chosen_params(train, schema, args.epsilon), **params}
                        if method == "default" else params, "epsilon": args.epsilon, "delta": model.release_.ledger.total()[1], "seed": seed, "rows": len(train),
                        "fit_s": round(fit_s, 1), **score(train, test, synth, schema),
                        "date": time.strftime("%Y-%m-%d"), "threads": os.environ.get("OMP_NUM_THREADS")}
                emit(line, args.out)


def _rank(table: str) -> int:
    """A table's place in the printed tables: the twelve, then the papers', then any other (a --rows sample)."""
    order = TABLES + PAPERS
    return order.index(table) if table in order else len(order)


def summarize(paths) -> None:
    groups: dict = {}
    for d in _lines(paths):
        key = (d["table"], d["epsilon"], d["method"] + (f" [{d['variant']}]" if d.get("variant") else ""))
        groups.setdefault(key, []).append(d)
    print("| table | eps | method (chose) | n | ML efficacy | 1-way | 2-way | 3-way | fit s | repeats (real) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (table, eps, method), ds in sorted(groups.items(), key=lambda kv: (_rank(kv[0][0]), kv[0][1], kv[0][2])):
        mean = lambda k: statistics.mean(d[k] for d in ds if d.get(k) is not None)  # noqa: E731
        print(f"| {table} | {eps:g} | {method} ({ds[0]['chose']}) | {len(ds)} | {mean('ml_efficacy'):.3f} | "
              f"{mean('tvd_1way'):.3f} | {mean('tvd_2way'):.3f} | {mean('tvd_3way'):.3f} | {mean('fit_s'):.0f} | "
              f"{mean('repeated_synthetic'):.3f} ({ds[0]['repeated_real']:.3f}) |")


#: where the goal table lives in RESULTS.md (replaced whole by ``--write``)
BLOCK = ("<!-- suite-goal-table: generated by benchmarks/suite.py --goal-table; do not edit by hand -->",
         "<!-- /suite-goal-table -->")


def _stored(paths) -> list[dict]:
    return [json.loads(raw) for path in paths for raw in open(path) if raw.strip()]


def _lines(paths) -> list[dict]:
    """The stored lines with scores (a peer's failed run is a line without them: counted apart by :func:`failures`)."""
    return [d for d in _stored(paths) if "failed" not in d]


def _run_key(d: dict) -> tuple:
    """One run's place: (table, method, epsilon, seed)."""
    return d["table"], d["method"], d["epsilon"], d["seed"]


def failures(paths) -> list[dict]:
    """The failed peer runs no line of the same cell and seed replaces (a rerun that ran, e.g. OpenDP's MST at a
    hair less rho), the latest of each."""
    lines = _stored(paths)
    ran = {_run_key(d) for d in lines if "failed" not in d}
    last = {_run_key(d): d for d in lines if "failed" in d and _run_key(d) not in ran}     # a cell's latest failure
    return list(last.values())


def _params(d: dict) -> dict:
    """The settings a line's fit ran with beyond the method's defaults (a default run: what the rule chose)."""
    return d.get("params", d.get("set", {})) or {}


def _stats(ds: list[dict], key: str):
    vals = [d[key] for d in ds if d.get(key) is not None]
    if not vals:
        return None
    return statistics.mean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0), len(vals)


#: the goal table's roles for OpenDP's earlier lines, run on the authors' 32-cell grid without the bounds as cuts
#: (benchmarks/log/2026-12-05.md#opendp-cuts: spam7's zeros lost; kept as a configuration a user may choose)
ODP_AUTHORS_AIM, ODP_AUTHORS_MST = "opendp-aim (authors' grid)", "opendp-mst (authors' grid)"
#: the roles of OpenDP's lines with one row replaced (``--opendp-unit changes``): the neighbours of mmdsynth's own
#: releases, so the same guarantee at the same epsilon; its add/remove lines (the roles above and "opendp-aim" /
#: "opendp-mst") protect a weaker relation at the same epsilon (a count's noise 1/sqrt(2) of the replace-one one's)
ODP_R1_AIM, ODP_R1_MST = "opendp-aim (replace-one)", "opendp-mst (replace-one)"
#: the "unit" field of those lines (``--opendp-unit changes``: ``dp.unit_of(changes=1)``)
ODP_REPLACE_ONE = "changes=1"
#: the peers that give the guarantee mmdsynth's releases give (one record replaced, at the same epsilon and delta):
#: the verdict; the add/remove peers' verdict is said beside it where it differs
SAME_GUARANTEE = ("aim", "mst", ODP_R1_AIM, ODP_R1_MST)
ADD_REMOVE = ("opendp-aim", "opendp-mst", ODP_AUTHORS_AIM, ODP_AUTHORS_MST)


def goal_rows(lines: list[dict], failed: list[dict] = ()) -> list[dict]:
    """Per (table, epsilon): the table default as the current rule chooses it (its lines: that method with those
    settings), mmdsynth's AIM and MST, OpenDP's AIM and MST and DP-MERF at their defaults, and the verdicts of issue
    81's goal: the default's 2-way TVD <= the best AIM or MST and its ML efficacy >= the best peer, each within the
    seeds' spread (the larger of the two standard deviations), in <= 1/10 of (mmdsynth's) AIM's time. ``failed``
    (:func:`failures`): a peer's runs that gave no model in the cell (stopped at ``--peer-timeout``, or its own
    error), kept as ``row["failed"]`` {method: the latest one's words} so the cell can say why it has no line."""
    from mmdsynth.choice import PublicFacts, choose_table_default

    rows = []
    lines = [d for d in lines if "@" not in d["table"]]      # a --rows sample is not the suite's table
    keys = sorted({(d["table"], d["epsilon"]) for d in lines},
                  key=lambda k: (_rank(k[0]), k[1]))
    for table, eps in keys:
        here = [d for d in lines if d["table"] == table and d["epsilon"] == eps]
        n = here[0]["rows"]
        rule = choose_table_default(PublicFacts(n, None, eps, 1e-5))
        pick = lambda method, params: [d for d in here if d["chose"] == method and _params(d) == params]  # noqa: E731
        # OpenDP's lines on mmdsynth's public cells (opendp_cuts), and its earlier lines on the authors' grid without
        # the bounds (marked "cuts"): both real configurations of the peer, each a role; the verdict takes the best
        # (add/remove neighbours, OpenDP's default), and its lines with one row replaced ("unit": the relation of
        # mmdsynth's releases, the same guarantee)
        odp = lambda method, earlier, unit=None: [d for d in pick(method, {})  # noqa: E731
                                                  if bool(d.get("cuts")) == earlier and d.get("unit") == unit]
        roles = {"default": pick(rule.method, rule.params), "aim": pick("aim", {}), "mst": pick("mst", {}),
                 ODP_R1_AIM: odp("opendp-aim", False, ODP_REPLACE_ONE),
                 ODP_R1_MST: odp("opendp-mst", False, ODP_REPLACE_ONE),
                 "opendp-aim": odp("opendp-aim", False), "opendp-mst": odp("opendp-mst", False),
                 ODP_AUTHORS_AIM: odp("opendp-aim", True), ODP_AUTHORS_MST: odp("opendp-mst", True),
                 "dp-merf": pick("dp-merf", {})}
        row = {"table": table, "epsilon": eps, "rows": n, "default_is": rule.method + (
            " (" + ", ".join(f"{k}={v}" for k, v in rule.params.items()) + ")" if rule.params else ""), "roles": {},
            "failed": {d["method"]: f"{d['failed']}, seed {d['seed']}, {d['date']}" for d in failed
                       if d["table"] == table and d["epsilon"] == eps}}
        for role, ds in roles.items():
            row["roles"][role] = {k: _stats(ds, k) for k in ("ml_efficacy", "tvd_1way", "tvd_2way", "tvd_3way", "fit_s")}
        rows.append(row)
    return rows


def _fmt(stat, digits=3) -> str:
    if stat is None:
        return "-"
    mean, sd, n = stat
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if n > 1 else "")


#: why (mmdsynth's) AIM has no line in a cell of the goal table: its time here, measured where it was run
#: (a stopped run's failed line, ``--peer-timeout``, says it where there is one)
AIM_NOT_RUN = {
    ("flights", 1.0): "261,877 rows, not attempted: AIM took 430-677 s a fit on census (20,097 rows) at eps 1",
    ("flights", 10.0): "261,877 rows, not attempted: no model within 1,200 CPU s on census or doctorcontacts at eps 10 "
                       "(2026-12-07)",
    ("epileptic", 1.0): "178 numeric columns: no model within an hour (the tables tutorial; before the numpy estimate, "
                        "not rerun)",
    ("epileptic", 10.0): "178 numeric columns: no model within an hour at eps 1, not attempted",
    ("intrusion", 10.0): "80,089 rows, not attempted: no model within 1,200 CPU s on census (20,097 rows) or "
                         "doctorcontacts at eps 10 (2026-12-07); 18-43 minutes a fit at eps 1",
}


#: why OpenDP's AIM has no line in a cell where no run of it was stopped or failed: what was measured nearest to it
_ODP_EPS10 = ("not attempted for time: its eps-1 fit here took {} s, and its eps-10 fits took 2-4 times their eps-1 "
              "time where both ran (arrests, spam7, males, college)")
_ODP_LARGE = "not attempted: no model within 900 CPU s on {} (2026-12-07)"
_ODP_LARGE_1 = _ODP_LARGE.format("adult (23,790 rows, 14 columns) nor on cervical (192 rows, 35 columns) at eps 1")
_ODP_LARGE_10 = _ODP_LARGE.format("cps1988 at eps 10 (22,524 rows, 6 columns) nor on adult at eps 1")
ODP_AIM_NOT_RUN = {
    ("cervical", 10.0): "not attempted: no model within 900 CPU s at eps 1, where its rounds are fewer (2026-12-07)",
    ("resume", 1.0): "no model within 30 minutes (2026-12-05, wall clock beside other jobs)",
    ("resume", 10.0): "not attempted: no model within 30 minutes at eps 1 (2026-12-05)",
    ("benefits", 10.0): _ODP_EPS10.format(428), ("nmes", 10.0): _ODP_EPS10.format(836),
    **{(table, 1.0): _ODP_LARGE_1 for table in ("doctorcontacts", "census", "intrusion", "epileptic", "flights")},
    **{(table, 10.0): _ODP_LARGE_10 for table in ("doctorcontacts", "census", "adult", "intrusion", "epileptic",
                                                  "flights")},
}


def tried(lines: list[dict]) -> dict:
    """The hybrid's variants measured apart from the default (``--tried`` files: other settings, or the default's
    code before a change), per (table, epsilon): {variant: {metric: (mean, sd, n)}}."""
    out: dict = {}
    for d in lines:
        if d.get("chose") != "hybrid" or "@" in d["table"]:
            continue
        # "tried_as": the name a default's lines take once a rule change makes them a variant (the code ran as the
        # default then; its other fields as they were written)
        name = d.get("tried_as") or d.get("variant") or ",".join(
            f"{k}={v}" for k, v in (d.get("set") or {}).items()) or "hybrid"
        out.setdefault((d["table"], d["epsilon"]), {}).setdefault(name, []).append(d)
    return {key: {name: {k: _stats(ds, k) for k in ("ml_efficacy", "tvd_2way")} for name, ds in variants.items()}
            for key, variants in out.items()}


def _best_tried(variants: dict, key: str, lower: bool) -> str:
    """The best of the variants tried on one metric, as the verdict's note (empty when none was tried)."""
    measured = [(name, v[key]) for name, v in variants.items() if v[key]]
    if not measured:
        return ""
    name, (mean, _, n) = (min if lower else max)(measured, key=lambda p: p[1][0])
    return f"; best tried: {name} {mean:.3f} ({n} seed{'s' if n > 1 else ''})"


def _gap(r: dict, metric: str, names, lower: bool):
    """The default's gap to the best of ``names`` on ``metric``: (gap, peer, spread), the gap positive where the
    default is behind, the spread the larger of the two seeds' standard deviations (it misses where gap > spread);
    None where none of them has a line."""
    d = r["default"][metric]
    peers = [(name, r[name][metric]) for name in names if r[name][metric]]
    if not peers:
        return None
    name, best = (min if lower else max)(peers, key=lambda p: p[1][0])
    gap = (d[0] - best[0]) if lower else (best[0] - d[0])
    return gap, name, max(d[1], best[1])


def _missed(gap) -> bool:
    return gap is not None and gap[0] > gap[2]


def _why_none(row: dict, method: str, known: dict) -> str | None:
    """Why ``method`` has no line in the cell: its latest stopped or failed run there, else the nearest measurement
    ``known`` keeps for the cell."""
    return row.get("failed", {}).get(method) or known.get((row["table"], row["epsilon"]))


def _verdict(row: dict, variants: dict | None = None) -> str:
    """The cell's verdict against the peers of the same guarantee (:data:`SAME_GUARANTEE`, DP-MERF for the
    classifiers), and beside it, where it differs, against OpenDP's add/remove lines (a weaker relation)."""
    variants = variants or {}
    r = row["roles"]
    if r["default"]["tvd_2way"] is None:
        return "the default not measured"
    out = []
    for metric, word, lower, extra in (("tvd_2way", "2-way", True, ()), ("ml_efficacy", "ML", False, ("dp-merf",))):
        same = _gap(r, metric, SAME_GUARANTEE + extra, lower)
        every = _gap(r, metric, SAME_GUARANTEE + extra + ADD_REMOVE, lower)
        if same is None and every is None:
            continue
        if _missed(same):
            text = f"{word} misses by {same[0]:.3f} ({same[1]})" + _best_tried(variants, metric, lower=lower)
        else:           # met; a gap inside the seeds' spread is said, not hidden
            text = f"{word} met" + (f" inside the seeds' spread ({same[0]:.3f} behind {same[1]}, sd {same[2]:.3f})"
                                    if same is not None and round(same[0], 3) > 0 else "")
        if _missed(every) and not (_missed(same) and every[:2] == same[:2]):
            text += f" (against OpenDP's add/remove lines: misses by {every[0]:.3f}, {every[1]})"
        out.append(text)
    if r["aim"]["fit_s"] and r["default"]["fit_s"]:
        ratio = r["default"]["fit_s"][0] / r["aim"]["fit_s"][0]
        out.append(f"time {ratio:.2f} of AIM's" + (" met" if ratio <= 0.1 else " (goal 0.1)"))
    else:
        why = _why_none(row, "aim", AIM_NOT_RUN)
        out.append("AIM not run" + (f": {why}" if why else ""))
    # beside it, the AIM a user installs (OpenDP's; its same-guarantee line where there is one), or why it has none
    odp_aim = next((r[name]["fit_s"] for name in (ODP_R1_AIM, "opendp-aim", ODP_AUTHORS_AIM) if r[name]["fit_s"]), None)
    if odp_aim and r["default"]["fit_s"]:
        out[-1] += f" ({r['default']['fit_s'][0] / odp_aim[0]:.2f} of OpenDP's)"
    elif not odp_aim:
        out.append("OpenDP's AIM: " + (_why_none(row, "opendp-aim", ODP_AIM_NOT_RUN) or "not run"))
    return "; ".join(out)


def goal_table(lines: list[dict], variants: dict | None = None, failed: list[dict] = ()) -> str:
    """Issue 81's goal table of ``lines``; ``variants`` (:func:`tried`) name the best variant tried where a cell
    misses; ``failed`` (:func:`failures`) say why a peer has no line where it gave no model."""
    variants = variants or {}
    head = ("| table (training rows), eps | the default | role | seeds | ML efficacy | 1-way TVD | 2-way TVD | 3-way TVD "
            "| fit s | verdict |\n|---|---|---|---|---|---|---|---|---|---|")
    out = [head]
    for row in goal_rows(lines, failed):
        first = True
        for role, stats in row["roles"].items():
            if all(v is None for v in stats.values()):
                continue
            label = f"{row['table']} ({row['rows']:,}), {row['epsilon']:g}" if first else ""
            out.append(f"| {label} | {row['default_is'] if first else ''} | {'**default**' if role == 'default' else role} | "
                       f"{stats['ml_efficacy'][2] if stats['ml_efficacy'] else 0} | {_fmt(stats['ml_efficacy'])} | {_fmt(stats['tvd_1way'])} | {_fmt(stats['tvd_2way'])} | "
                       f"{_fmt(stats['tvd_3way'])} | {_fmt(stats['fit_s'], 0)} | "
                       f"{_verdict(row, variants.get((row['table'], row['epsilon']))) if first else ''} |")
            first = False
    return "\n".join(out)


def _full_rho(d: dict) -> float:
    """The rho a peer's line would have run at without the rounding-down retries (:func:`run_opendp`)."""
    from mmdsynth.privacy.zcdp import rho_for_epsilon
    return rho_for_epsilon(d["epsilon"], d["delta"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", nargs="+", default=TABLES)
    ap.add_argument("--methods", nargs="+", default=["default"])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--set", nargs="*", default=[], help="KEY=JSON parameters for every method named")
    ap.add_argument("--rows", type=int, help="fit on a fixed sample of this many training rows (the line's table is "
                                             "NAME@ROWS; keep such lines out of suite.jsonl's goal table)")
    ap.add_argument("--opendp-unit", choices=["contributions", "changes"], default="contributions",
                    help="OpenDP's neighbours (peers/run_opendp.py --unit): one row added or removed (its default), "
                         "or one row replaced, the relation of mmdsynth's releases")
    ap.add_argument("--peer-timeout", type=float, help="CPU seconds after which a peer's fit (any method but the "
                                                         "default; OpenDP's in its process) is stopped and recorded as "
                                                         "a failed line (\"no model within ...\")")
    ap.add_argument("--variant", default="", help="a name for this code's or setting's variant in the lines")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--summarize", nargs="+", type=Path, help="print the table of these stored lines and stop")
    ap.add_argument("--goal-table", nargs="+", type=Path, help="print issue 81's goal table of these stored lines")
    ap.add_argument("--tried", nargs="+", type=Path, default=[],
                    help="with --goal-table: lines of the hybrid's variants; a missed cell names the best of them")
    ap.add_argument("--write", type=Path, help="with --goal-table: replace its block in this file (RESULTS.md)")
    args = ap.parse_args()
    if args.goal_table:
        failed = failures(args.goal_table)
        text = goal_table(_lines(args.goal_table), tried(_lines(args.tried)) if args.tried else None, failed)
        if failed:
            text += ("\n\nPeer runs that gave no model (the peer's own error, or stopped at the run's cap; not "
                     "scored): ") + "; ".join(
                f"{d['method']} on {d['table']} at eps {d['epsilon']:g}, seed {d['seed']} ({d['failed']})" for d in failed)
        refused = {_run_key(f) for f in _stored(args.goal_table) if "failed" in f}
        shaved = [d for d in _lines(args.goal_table) if d.get("rho") and d["method"] == "opendp-mst"
                  and _run_key(d) in refused and d["rho"] < _full_rho(d) * (1 - 1e-9)]
        if shaved:
            text += ("\n\nRun again at a hair less privacy loss after OpenDP 0.16's MST refused its own plan by a "
                     "rounding error (\"insufficient budget for query\"), as a careful user would: " + "; ".join(
                         dict.fromkeys(f"{d['table']} at eps {d['epsilon']:g}, seed {d['seed']} (rho {d['rho']:.4g}"
                                       f"{', ' + ODP_AUTHORS_MST if d.get('cuts') else ''})" for d in shaved)))
        if args.write:
            replace_block(args.write, *BLOCK, text)
        print(text)
    elif args.summarize:
        summarize(args.summarize)
    elif args.out is None:
        ap.error("--out is required to fit (the lines are appended there)")
    else:
        run(args)


if __name__ == "__main__":
    main()
