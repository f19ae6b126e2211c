"""User tables from CSV, Parquet or NumPy files, with a schema the user declares.

Nothing about the data is inferred: column types, categories, bounds and the
label's classes all come from the schema. The file is only checked against it.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataValidationError, InvalidParameterError, SchemaError
from .schema import Schema

SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".npy": "npy", ".npz": "npz"}
#: compressions a CSV file may come in (``data.csv.gz``): pandas reads them by the file's last suffix
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".zip")
#: the delimiters a CSV's header line is split by when none is given (the one giving the most declared columns wins)
DELIMITERS = (",", ";", "\t", "|")


def table_suffix(path) -> str:
    """A table file's format suffix, lower case: ``.csv`` for ``data.csv`` and for ``data.csv.gz`` (any of
    :data:`COMPRESSIONS`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in COMPRESSIONS and Path(path.stem).suffix.lower() == ".csv":
        return ".csv"
    return suffix


def csv_delimiter(path, names=None, encoding: str = "utf-8") -> str:
    """The delimiter of a CSV file: of :data:`DELIMITERS`, the one whose split of the header line gives the most of
    the declared column ``names`` (None, no schema yet: the most names; the first of equals: a comma). A function of
    the header (the column names, which the schema declares) and the schema alone: no data row is read."""
    wanted, best, hits = (None if names is None else set(map(str, names))), ",", 0
    head = _header_text(path, encoding)
    if head is None:                         # unreadable here: read_csv_text says why, typed
        return best
    for sep in DELIMITERS:
        header = next(csv.reader(io.StringIO(head), delimiter=sep), [])
        n = len(header) if wanted is None else len(set(header) & wanted)
        if n > hits:
            best, hits = sep, n
    return best


def _header_text(path, encoding: str) -> str | None:
    """The text of a CSV file's header record (decompressed by the file's suffix, as pandas reads it; a UTF-8 byte
    order mark dropped): its first line, and the next ones while a quoted column name spans lines. None when the
    file cannot be opened or decoded."""
    from pandas.io.common import get_handle

    try:
        with get_handle(path, "r", encoding=encoding, compression="infer") as handle:
            text = ""
            while True:
                line = handle.handle.readline()
                if not text and line and not line.strip():
                    continue                  # blank lines before the header: pandas skips them too
                text += line
                if not line or text.count('"') % 2 == 0:
                    return text.lstrip("\ufeff")
    except Exception:                        # noqa: BLE001 - read_csv_text gives the typed error
        return None


def read_table(path, schema: Schema | str | Path, *, label: str | None = None,
               drop_unlisted: bool = False, encoding: str = "utf-8", sep: str | None = None) -> pd.DataFrame:
    """Read a user table and validate it against a declared schema.

    A column of the file that the schema does not list is refused, naming it (it would otherwise
    be dropped without a word); ``drop_unlisted=True`` drops such columns on purpose.

    NumPy arrays have no column names: their columns are taken in schema order
    (feature columns, then the label if the schema has one). ``.npz`` files must
    hold a single array. ``encoding``: the text encoding of a CSV file (e.g. "latin-1", "cp1252"); ``sep`` its
    delimiter (None: the one of ``, ; tab |`` whose split of the header line gives the most declared columns). A CSV
    may be compressed (``.csv.gz``, ``.csv.bz2``, ``.csv.xz``, ``.csv.zst``, ``.csv.zip``).
    Returns the validated DataFrame.
    """
    path = Path(path)
    if not isinstance(schema, Schema):
        schema = Schema.from_json(schema)
    if label is not None and label != schema.label:
        raise SchemaError(
            f"label {label!r} was given but the schema's label is {schema.label!r}; they must agree."
        )
    kind = SUFFIXES.get(table_suffix(path))
    if kind is None:
        raise InvalidParameterError(
            f"unsupported file type {path.suffix!r} for {path}; use one of {sorted(SUFFIXES)} (CSV also compressed: "
            f"{', '.join('.csv' + c for c in COMPRESSIONS)})."
        )
    if not path.is_file():
        raise DataValidationError(f"data file {path} does not exist.")
    if kind == "csv":
        names = [c.name for c in schema.columns] + ([schema.label] if schema.label else [])
        df = read_csv_text(path, encoding, sep=sep or csv_delimiter(path, names, encoding))
    elif kind == "parquet":
        try:
            df = pd.read_parquet(path)
        except ImportError as exc:  # pragma: no cover - pyarrow missing
            raise InvalidParameterError("reading Parquet needs pyarrow: pip install 'mmdsynth[parquet]'") from exc
    else:
        if kind == "npz":
            with np.load(path, allow_pickle=False) as z:
                if len(z.files) != 1:
                    raise DataValidationError(f"{path} holds {len(z.files)} arrays; save exactly one.")
                arr = z[z.files[0]]
        else:
            arr = np.load(path, allow_pickle=False)
        names = [c.name for c in schema.columns] + ([schema.label] if schema.label else [])
        if arr.ndim != 2 or arr.shape[1] != len(names):
            raise DataValidationError(
                f"{path} holds an array of shape {arr.shape}; the schema needs 2-D with {len(names)} "
                f"columns ({names[:5]}...) in schema order."
            )
        df = pd.DataFrame(arr, columns=names)     # categories read value by value: 1.0 -> "1" (Schema.validate)
    check_listed(df, schema, path, drop_unlisted)
    return schema.validate(df)


def check_listed(df: pd.DataFrame, schema: Schema, path, drop_unlisted: bool,
                 drop_hint: str = "pass drop_unlisted=True to drop them") -> None:
    """Refuse columns of ``df`` (read from ``path``) that the schema does not list, naming them,
    unless ``drop_unlisted`` (then :meth:`Schema.validate` drops them); ``drop_hint``: how the caller drops them."""
    listed = {c.name for c in schema.columns} | ({schema.label} if schema.label else set())
    unlisted = [str(c) for c in df.columns if c not in listed]
    absent = [c.name for c in schema.columns if c.name not in df.columns]
    absent += [schema.label] if schema.label and schema.label not in df.columns else []
    if unlisted and absent:                     # say what is missing first: dropping the others would not help
        what = "label" if absent == [schema.label] else "column(s)"
        raise SchemaError(
            f"{path} lacks the declared {what} {absent[:10]}{' ...' if len(absent) > 10 else ''} and has column(s) "
            f"{unlisted[:10]}{' ...' if len(unlisted) > 10 else ''} that the schema does not list: is one of them the "
            f"same column under another name (its case, spaces)? Use the file's name in the schema (and --label), or "
            f"add the missing column(s) to the file.")
    if unlisted and not drop_unlisted:
        raise SchemaError(
            f"{path} has column(s) {unlisted[:10]}{' ...' if len(unlisted) > 10 else ''} that the schema does not "
            f"list; they would not be modelled. Declare them in the schema, or {drop_hint}.")


def read_csv_text(path, encoding: str = "utf-8", sep: str = ",", **kwargs):
    """A CSV file as text cells (every value read later by itself), with the errors a file can give as one
    typed line each: an empty file, a file that is not in ``encoding``, an unknown encoding."""
    import codecs

    try:
        codecs.lookup(encoding)
    except LookupError:
        raise InvalidParameterError(f"unknown text encoding {encoding!r}; give one Python knows, e.g. utf-8, "
                                    f"latin-1, cp1252.") from None
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=True, encoding=encoding, sep=sep, **kwargs)
    except pd.errors.EmptyDataError:
        raise DataValidationError(f"{path} is empty (no header, no rows); give a CSV file with a header line and "
                                  f"at least one row.") from None
    except (UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise csv_read_error(path, exc, encoding) from None


def csv_read_error(path, exc: Exception, encoding: str = "utf-8") -> DataValidationError:
    """The typed error for a CSV file that cannot be read as text cells, naming the file and the rule, never a
    byte, a value or a line number (the decoder's and the parser's own messages quote them)."""
    if isinstance(exc, UnicodeDecodeError):
        return DataValidationError(f"{path} is not {encoding} text (some bytes cannot be decoded); give its encoding "
                                   f"(CLI --encoding, e.g. --encoding latin-1; Python encoding=...).")
    return DataValidationError(f"{path} is not a well-formed CSV file: a line has more fields than the header, or a "
                               f"quote is not closed; fix the file (every line as many comma-separated cells as the "
                               f"header, text with commas in double quotes).")
