"""`mmdsynth report`: one self-contained HTML report of a fitted model."""
from __future__ import annotations

import argparse

from ..errors import InvalidParameterError
from ._types import existing_path


def cmd_report(args) -> int:
    from ..data import read_table
    from ..data.private_schema import declared_part
    from ..evaluation.report import build_report
    from ..methods import load

    from pathlib import Path

    from ..methods.database import DATABASE_FILE
    if (Path(args.model) / DATABASE_FILE).is_file():
        return _report_database(args)
    test = None
    if args.test:
        schema = load(args.model).encoder_
        if schema is None:
            raise InvalidParameterError("--test applies to table models; an image model's report needs no data.")
        test = read_table(args.test, declared_part(schema.schema), label=schema.schema.label, drop_unlisted=True)
    out = build_report(load(args.model), args.model, test=test, out=args.out, seed=args.seed,
                       data_dir=args.data_dir)
    print(f"wrote {out}")
    return 0


def _report_database(args) -> int:
    from ..data.relational import read_database
    from ..evaluation.report import build_database_report
    from ..methods.database import DatabaseModel

    if not args.test:
        raise InvalidParameterError("a fitted database's report compares it with real tables: pass --test FOLDER|URL "
                                    "(the tables the fit read, or others of the same schema).")
    model = DatabaseModel.load(args.model)
    out = build_database_report(model, args.model, read_database(args.test, model.schema), out=args.out,
                                seed=args.seed)
    print(f"wrote {out}")
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("report", help="one self-contained HTML file: marginals, dependence heatmaps, utility, "
                       "the privacy ledger in words (tables), or the sample grid (images)")
    s.add_argument("model", type=existing_path, help="model folder written by `mmdsynth fit` (run `mmdsynth evaluate` first for the "
                   "utility table)")
    s.add_argument("--test", help="tables fitted with --csv: real rows to compare against (same schema); a database "
                   "(fit --tables): the real tables to compare against (folder or URL)")
    s.add_argument("--out", default=None, help="HTML file (default MODEL/report.html)")
    s.add_argument("--seed", type=int, default=0, help="seed of the synthetic rows drawn for the plots")
    s.add_argument("--data-dir", default=None, help="extra folder holding the dataset's files (besides "
                   "MMDSYNTH_DATA_DIR)")
    s.set_defaults(func=cmd_report)
    return s
