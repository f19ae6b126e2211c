"""User tables from CSV, Parquet or NumPy files, with a schema the user declares.

Nothing about the data is inferred: column types, categories, bounds and the
label's classes all come from the schema. The file is only checked against it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataValidationError, InvalidParameterError, SchemaError
from .schema import Schema

SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".npy": "npy", ".npz": "npz"}


def read_table(path, schema: Schema | str | Path, *, label: str | None = None,
               drop_unlisted: bool = False, encoding: str = "utf-8") -> pd.DataFrame:
    """Read a user table and validate it against a declared schema.

    A column of the file that the schema does not list is refused, naming it (it would otherwise
    be dropped without a word); ``drop_unlisted=True`` drops such columns on purpose.

    NumPy arrays have no column names: their columns are taken in schema order
    (feature columns, then the label if the schema has one). ``.npz`` files must
    hold a single array. ``encoding``: the text encoding of a CSV file (e.g. "latin-1", "cp1252").
    Returns the validated DataFrame.
    """
    path = Path(path)
    if not isinstance(schema, Schema):
        schema = Schema.from_json(schema)
    if label is not None and label != schema.label:
        raise SchemaError(
            f"label {label!r} was given but the schema's label is {schema.label!r}; they must agree."
        )
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise InvalidParameterError(
            f"unsupported file type {path.suffix!r} for {path}; use one of {sorted(SUFFIXES)}."
        )
    if not path.is_file():
        raise DataValidationError(f"data file {path} does not exist.")
    if kind == "csv":
        df = read_csv_text(path, encoding)
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


def check_listed(df: pd.DataFrame, schema: Schema, path, drop_unlisted: bool) -> None:
    """Refuse columns of ``df`` (read from ``path``) that the schema does not list, naming them,
    unless ``drop_unlisted`` (then :meth:`Schema.validate` drops them)."""
    listed = {c.name for c in schema.columns} | ({schema.label} if schema.label else set())
    unlisted = [str(c) for c in df.columns if c not in listed]
    if unlisted and not drop_unlisted:
        raise SchemaError(
            f"{path} has column(s) {unlisted[:10]}{' ...' if len(unlisted) > 10 else ''} that the schema does not "
            f"list; they would not be modelled. Declare them in the schema, or pass drop_unlisted=True to drop them.")


def read_csv_text(path, encoding: str = "utf-8", **kwargs):
    """A CSV file as text cells (every value read later by itself), with the errors a file can give as one
    typed line each: an empty file, a file that is not in ``encoding``, an unknown encoding."""
    import codecs

    try:
        codecs.lookup(encoding)
    except LookupError:
        raise InvalidParameterError(f"unknown text encoding {encoding!r}; give one Python knows, e.g. utf-8, "
                                    f"latin-1, cp1252.") from None
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=True, encoding=encoding, **kwargs)
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
