"""How many generated neighbour pairs the record-isolation fuzz (tests/contract/test_record_isolation.py) needs to
catch a planted reader bug: a bug of the class issue 45 fixed (a value read by its column's dtype, not by itself) is
put into mmdsynth's per-value readers from outside, and the test's own generator and check run on one input path
until the first pair that fails; the number of that pair is printed. It tells whether the fast tier (25 pairs a
path, 8 a dtype) or the slow one (300, 150) is the one that sees it, and so whether the slow tier earns its minutes.

    .venv/bin/python benchmarks/fuzz_power.py --bug float-category-text --path dataframe csv --examples 300
    .venv/bin/python benchmarks/fuzz_power.py --bug float-category-text --path dataframe --dtype "float64 (NaN)"

Bugs: ``float-category-text`` (a float64 column's categories read as ``str(v)``: "1.0", so a missing value that turns
an int column into float64 re-reads every other row), ``dates-columnwide`` (text dates parsed by pandas for the whole
column, its format inferred from the values), ``none`` (the readers as they are: nothing may fail). The SQL paths
need their servers (PostgreSQL) and are left out. One JSON line per path on stdout.
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "contract")]

import mmdsynth.statistics.values as values  # noqa: E402

BUGS = ("float-category-text", "dates-columnwide", "none")
PATHS = ("dataframe", "csv", "parquet", "csv-shards", "parquet-shards", "sqlite")


def plant(bug: str) -> None:
    """Replace a reader of mmdsynth.statistics.values by a column-wide one (the module's own callers look it up
    there: checked_values reads ``category_texts`` and ``dates`` as globals of that module)."""
    if bug == "float-category-text":
        texts, indices = values.category_texts, values.category_indices

        def category_texts(s, boolean=False):
            if not boolean and s.dtype == np.float64:
                return pd.Series([None if pd.isna(v) else str(v) for v in s], index=s.index, dtype=object)
            return texts(s, boolean)

        def category_indices(s, lookup, default):
            if s.dtype == np.float64:
                return np.asarray([default if pd.isna(v) else lookup.get(str(v), default) for v in s], dtype=np.int64)
            return indices(s, lookup, default)
        values.category_texts, values.category_indices = category_texts, category_indices
    elif bug == "dates-columnwide":
        dates = values.dates

        def columnwide(s, fmt=None):
            text = s.dtype == object or pd.api.types.is_string_dtype(s.dtype)     # pandas 3 infers "str"
            if fmt is None and text and all(isinstance(v, str) or pd.isna(v) for v in s):
                t = pd.to_datetime(s, errors="coerce", utc=True)
                read = np.where(t.isna(), np.nan, (t - pd.Timestamp(0, tz="UTC")).dt.total_seconds())
                return pd.Series(read, index=s.index, dtype="float64"), ~np.isfinite(read)
            return dates(s, fmt)
        values.dates = columnwide


def first_failure(path: str, examples: int, dtype: str | None) -> dict:
    import test_record_isolation as t

    seen = {"pairs": 0, "first": None}
    check = t.assert_isolated

    def counted(case, a, b, where):
        seen["pairs"] += 1
        try:
            check(case, a, b, where)
        except AssertionError:
            if seen["first"] is None:
                seen["first"] = seen["pairs"]
            raise
    t.assert_isolated = counted
    try:
        t.check(path, Path(tempfile.mkdtemp()), examples, dtype)
    except AssertionError:
        pass
    finally:
        t.assert_isolated = check
    return {"path": path, "dtype": dtype, "examples": examples, "pairs_run": seen["pairs"],
            "first_failing_pair": seen["first"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bug", choices=BUGS, required=True)
    ap.add_argument("--path", nargs="+", choices=PATHS, default=["dataframe"])
    ap.add_argument("--examples", type=int, default=300, help="generated pairs at most (the slow tier: 300 a path)")
    ap.add_argument("--dtype", default=None, help="the DataFrame dtype tier's column dtype (with --path dataframe)")
    args = ap.parse_args(argv)
    plant(args.bug)
    for path in args.path:
        print(json.dumps({"bug": args.bug, **first_failure(path, args.examples, args.dtype)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
