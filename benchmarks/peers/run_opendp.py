"""OpenDP's AIM and MST (``dp.mbi``, OpenDP 0.16 on Private-PGM), run in their own virtualenv as a careful user would
configure them, for ``benchmarks/suite.py --methods opendp-aim opendp-mst``.

    python3 -m venv .venv-opendp && .venv-opendp/bin/pip install "opendp[mbi]==0.16.0" polars pandas
    .venv-opendp/bin/python benchmarks/peers/run_opendp.py --train train.csv --schema schema.json \
        --cuts cuts.json --algorithm aim --rho 0.0407 --rows 4181 --seed 0 --out synth.csv

The configuration, from the public schema only: every categorical column and the label with its declared categories
as ``keys``; every numeric column cut (``--cuts``, written by ``suite.opendp_cuts``) into the public cells mmdsynth's own
AIM and MST use (:class:`mmdsynth.data.discrete.Domain` of the schema: at most 32 cells from the declared bounds, the
bounds and 0 cells of their own), so that the two libraries' AIM are compared on the same cells; ``privacy_unit=dp.unit_of(contributions=1)`` (OpenDP's default: one row added
or removed), or with ``--unit changes`` ``dp.unit_of(changes=1)`` (one row replaced: the relation of mmdsynth's own
releases, as OpenDP accounts for it: a count's sensitivity 2 where one row changes, so its noise is twice the
add/remove one's, where mmdsynth's exact replace-one Gaussian pays sqrt(2)); the privacy loss as zCDP ``rho`` (all keys known, so OpenDP asks for delta 0; the caller converts
(epsilon, delta) to rho as mmdsynth's own zCDP plans do); the algorithm at its defaults. Synthetic rows:
``ContingencyTable.synthesize(rows, method="sample")``; a numeric cell is written as the value OpenDP gives it.
Prints one JSON line: the fit and synthesis times and the package version.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--cuts", required=True, help="JSON {numeric column: its cuts} (suite.opendp_cuts writes it)")
    ap.add_argument("--algorithm", choices=["aim", "mst"], required=True)
    ap.add_argument("--rho", type=float, required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--unit", choices=["contributions", "changes"], default="contributions",
                    help="contributions: one row added or removed (OpenDP's default); changes: one row replaced, the "
                         "relation mmdsynth's table releases use (OpenDP's own accounting of it)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from importlib.metadata import version

    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    schema = json.load(open(args.schema))
    label = schema["label"]
    numeric = [c for c in schema["columns"] if c["type"] == "numeric"]
    categorical = [c for c in schema["columns"] if c["type"] in ("categorical", "boolean")]
    frame = pl.read_csv(args.train, infer_schema_length=0)             # every column as text, then typed below
    frame = frame.with_columns([pl.col(c["name"]).cast(pl.Float64) for c in numeric])
    keys = {c["name"]: [str(v) for v in (c.get("categories") or ["False", "True"])] for c in categorical}
    keys[label] = [str(v) for v in schema["label_categories"]]
    cuts = json.load(open(args.cuts))
    columns = [c["name"] for c in schema["columns"]] + [label]
    np.random.seed(args.seed)                                # mbi's sampling draws from numpy's global generator

    t = time.perf_counter()
    context = dp.Context.compositor(data=frame.lazy(), privacy_unit=dp.unit_of(**{args.unit: 1}),
                                    privacy_loss=dp.loss_of(rho=args.rho), split_evenly_over=1)
    algorithm = dp.mbi.AIM() if args.algorithm == "aim" else dp.mbi.MST()
    table = context.query().select(columns).contingency_table(keys=keys, cuts=cuts, algorithm=algorithm).release()
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    synth = table.synthesize(args.rows, method="sample")
    synth.select(columns).write_csv(args.out)
    print(json.dumps({"fit_s": round(fit_s, 1), "sample_s": round(time.perf_counter() - t, 1),
                      "opendp": version("opendp")}))


if __name__ == "__main__":
    main()
