"""`mmdsynth sample`: draw synthetic records from a fitted model."""
from __future__ import annotations

import argparse
from pathlib import Path

from .._io import atomic_write
from ..errors import InvalidParameterError
from ._types import existing_path, positive_int


def cmd_sample(args) -> int:
    import numpy as np

    from ..methods import load
    from ..methods.database import DATABASE_FILE

    if (Path(args.model) / DATABASE_FILE).is_file():
        return _sample_database(args)
    if args.placement is not None:
        raise InvalidParameterError("--placement applies to a fitted database (fit --tables); this model is one table.")
    if args.db or args.table:
        return _sample_to_db(args)
    if args.out is None:
        raise InvalidParameterError("give --out FILE (.npz, .csv, .parquet) or --db URL --table NAME.")
    out = Path(args.out)
    if out.suffix not in (".npz", ".csv", ".parquet"):
        raise InvalidParameterError(f"--out must end in .npz (images) or .csv/.parquet (tables); got {out.name!r}.")
    if out.exists() and not args.force:
        raise InvalidParameterError(f"--out {out} exists; give a new file name, or --force to overwrite it.")
    model = load(args.model)
    if model.encoder_ is not None:
        if out.suffix not in (".csv", ".parquet"):
            raise InvalidParameterError(f"a table model writes .csv or .parquet; got --out {out.name!r}.")
        df = model.sample(args.n, seed=args.seed)
        with atomic_write(out) as tmp:
            df.to_csv(tmp, index=False) if out.suffix == ".csv" else df.to_parquet(tmp, index=False)
        print(f"wrote {len(df)} rows x {df.shape[1]} columns to {out}")
        return 0
    if out.suffix != ".npz":
        raise InvalidParameterError(f"--out must end in .npz (arrays x and y); got {out.name!r}.")
    x, y = model.sample(args.n, seed=args.seed, checkpoint=args.checkpoint)
    with atomic_write(out) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, x=x, **({"y": y} if y is not None else {}))
    print(f"wrote {len(x)} samples to {out} (x {tuple(x.shape)}" + (", y)" if y is not None else ")")
          + (f"; the model holds a fixed set of {len(x)}, not {args.n}" if len(x) != args.n else ""))
    return 0


def _sample_database(args) -> int:
    """A fitted database (``fit --tables``): ``--n`` roots with their children, one CSV a table in the folder
    ``--out``, written whole or not at all."""
    import shutil
    import tempfile

    from ..methods.database import DatabaseModel

    if args.db or args.table or args.out is None:
        raise InvalidParameterError("a fitted database writes one CSV a table: give --out FOLDER (not --db).")
    out = Path(args.out)
    if out.exists() and not (args.force and out.is_dir()):
        raise InvalidParameterError(f"--out {out} exists; give a new folder, or --force to replace it.")
    tables = DatabaseModel.load(args.model).sample(args.n, seed=args.seed, placement=args.placement)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, df in tables.items():
            df.to_csv(tmp / f"{name}.csv", index=False)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {', '.join(f'{name} ({len(df)} rows)' for name, df in tables.items())} to {out}")
    return 0


def _sample_to_db(args) -> int:
    """Synthetic rows of a table model written to a database table, in one transaction."""
    from ..data import write_sql
    from ..methods import load

    if not (args.db and args.table) or args.out:
        raise InvalidParameterError("writing to a database needs --db URL and --table NAME (instead of --out).")
    model = load(args.model)
    if model.encoder_ is None:
        raise InvalidParameterError("only table models write to a database; an image model writes --out FILE.npz.")
    df = model.sample(args.n, seed=args.seed)
    n = write_sql(df, args.db, args.table, replace=args.replace)
    from ..data.sql import shown
    print(f"wrote {n} rows x {df.shape[1]} columns to table {args.table} in {shown(args.db)}")
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("sample", help="draw synthetic records from a fitted model")
    s.add_argument("model", type=existing_path, help="model folder written by `mmdsynth fit`")
    s.add_argument("--n", type=positive_int, required=True, help="how many records (a fitted database: roots, each with "
                   "its children; a DP-KIP support set has a fixed size "
                   "and writes all of its points)")
    s.add_argument("--out", help="FILE.npz with arrays x and y (images), FILE.csv or FILE.parquet (tables), a FOLDER "
                   "(a fitted database: one CSV a table)")
    s.add_argument("--db", metavar="URL", help="tables: write the rows to a SQL database instead (SQLAlchemy URL; "
                   "needs mmdsynth[sql]), with --table")
    s.add_argument("--table", help="--db: the table to create (refused if it exists, unless --replace)")
    s.add_argument("--replace", action="store_true", help="--db: replace an existing --table")
    s.add_argument("--seed", type=int, default=None, help="fix the generator's codes and labels (public randomness; "
                   "the release is already private)")
    s.add_argument("--checkpoint", default="selected", choices=["selected", "final"], help="with DP early "
                   "stopping: the checkpoint closest to the proxy (default) or the last one")
    s.add_argument("--placement", choices=["random", "match"], default=None, help="a fitted database: a parent's "
                   "children drawn at random among the child rows drawn, or matched to the parent by its columns "
                   "(default: each table's as the fit chose it from the roots' count and epsilon)")
    s.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    s.set_defaults(func=cmd_sample)
    return s
