"""`mmdsynth schema`: draft a schema from a CSV with no codebook, its types, bounds and categories released with
budget (:mod:`mmdsynth.data.draft`), for the user to review before `fit`."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InvalidParameterError


def cmd_schema(args) -> int:
    from ..data.draft import draft_schema, write_draft
    from ..data.user import COMPRESSIONS, csv_delimiter, read_csv_text, table_suffix
    from ..privacy.calibration import check_calibrated_epsilon

    check_calibrated_epsilon(args.epsilon)                       # before the file is read
    out = Path(args.out)
    if not out.name.endswith(".json"):
        raise InvalidParameterError(f"--out must be a .json file (the draft schema); got {out.name!r}.")
    if out.exists() and not args.force:
        raise InvalidParameterError(f"{out} exists; pass --force to replace it (its ledger too).")
    path = Path(args.csv)
    if table_suffix(path) != ".csv":
        raise InvalidParameterError(f"--csv takes a CSV file (also {', '.join('.csv' + c for c in COMPRESSIONS)}); "
                                    f"got {path.name!r}.")
    if not path.is_file():
        raise InvalidParameterError(f"no file {path}.")
    sep = args.sep or csv_delimiter(path, encoding=args.encoding)      # no schema yet: the header's widest split
    df = read_csv_text(path, args.encoding, sep=sep)
    budget, fit_room = None, None
    if args.budget:
        from ..privacy import BudgetFile
        new = not Path(args.budget).exists()
        total = args.budget_epsilon or args.epsilon + FIT_EPSILON
        total_delta = args.budget_delta or (2 * args.delta if args.delta is not None else None)
        # no delta given: a new file holds twice the draft's, settled in its run from the public count (rows or persons)
        budget = BudgetFile.new_for_fit(args.budget, f"user:{path.name}", total, delta_times=2) if total_delta is None \
            else BudgetFile.open(args.budget, f"user:{path.name}", total, total_delta)
        if new:
            fit_room = total - args.epsilon
    markers = args.missing_values.split(",") if args.missing_values else []
    schema, ledger = draft_schema(df, epsilon=args.epsilon, delta=args.delta, label=args.label,
                                  privacy_unit=args.privacy_unit, missing_values=markers, budget=budget,
                                  noise_seed=args.noise_seed, dataset=f"user:{path.name}")
    written, ledger_path = write_draft(schema, ledger, out)
    kinds = {}
    for c in schema.columns:
        kinds[c.type] = kinds.get(c.type, 0) + 1
    eps, delta = ledger.total()
    print(f"drafted {written}: {len(schema.columns)} column(s) ({', '.join(f'{n} {k}' for k, n in kinds.items())})"
          + (f", label {schema.label!r} with {len(schema.label_categories)} classes" if schema.label else "")
          + f"; spent epsilon={eps:g}, delta={delta:g} (ledger: {ledger_path})")
    print(f"review it (types, nullable, bounds, categories), then: mmdsynth fit --csv {path} --schema {written} "
          + (f"--label {schema.label} " if schema.label else "")
          + (f"--epsilon {fit_room:g} " if fit_room and fit_room > 0 else "--epsilon E ")
          + (f"--budget {args.budget} " if args.budget else "") + "--out DIR")
    return 0


#: a new budget file made by `schema` leaves room for one fit at a table's default epsilon
FIT_EPSILON = 1.0


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("schema", help="draft a schema from a CSV with no codebook: types, bounds and categories "
                       "released with budget, written for you to review")
    s.add_argument("--csv", required=True, help="the table (a CSV file; also .csv.gz etc.)")
    s.add_argument("--label", help="the label column: its classes are released as categories")
    s.add_argument("--epsilon", type=float, required=True, help="the privacy budget this draft spends (both "
                   "releases together); it adds to what a fit on the same rows spends (use one --budget file)")
    s.add_argument("--delta", type=float, default=None, help="(default: 1e-5 up to 10,000 records, then the largest "
                   "power of ten at most 1 / (10 x records), as a fit's)")
    s.add_argument("--out", required=True, help="the draft schema's .json file; its ledger is written beside it "
                   "(NAME.ledger.json)")
    s.add_argument("--privacy-unit", metavar="COLUMN", help="protect a person, not a row (the person column)")
    s.add_argument("--missing-values", metavar="TEXTS", help="comma-separated cell texts that mean missing")
    s.add_argument("--sep", metavar="TEXT", help="the delimiter (default: of , ; tab |, the one splitting the header "
                   "into the most names)")
    s.add_argument("--encoding", default="utf-8", help="the file's text encoding (default utf-8)")
    s.add_argument("--budget", help="a budget file: checked before any row is read, charged once")
    s.add_argument("--budget-epsilon", type=float, help="--budget: the total epsilon of a new budget file "
                   f"(default --epsilon + {FIT_EPSILON:g}: room for one fit at a table's default epsilon)")
    s.add_argument("--budget-delta", type=float, help="--budget: the total delta of a new budget file (default 2 x "
                   "--delta: room for one fit at the same delta)")
    s.add_argument("--noise-seed", type=int, help="fixed noise, for tests only: voids the guarantee (the ledger "
                   "says so)")
    s.add_argument("--force", action="store_true", help="replace an existing --out")
    s.set_defaults(func=cmd_schema)
    return s
