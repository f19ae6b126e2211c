"""Reading raw values, one at a time: record isolation from the first byte.

Every sensitivity proof in mmdsynth assumes that a record's features depend on that record alone.
pandas breaks that silently when it decides something for a whole column from its values: a date
format inferred from the first row (``to_datetime(format=None)``), a dtype that turns every ``1``
into ``1.0`` once one value is missing (``astype(str)`` on float64), one timezone for a column.
So every raw value is read here by a **pure function of (the column's public declaration, that
one value)**; a column is read by applying it to each value, never by a column-wide decision:

* :func:`category_text`: a category as text. Numbers are written by their value, whatever
  the column's dtype: ``1``, ``1.0``, ``np.int8(1)`` and the text ``"1.0"`` all read ``"1"``;
  booleans read ``"True"`` / ``"False"``; other text is kept as it is.
* :func:`boolean_text`: a boolean column's value: ``True`` / ``"true"``, ``"t"``, ``"yes"``, ``"y"`` (any case) /
  ``1`` read ``"True"``, and the same for ``False`` (``"false"``, ``"f"``, ``"no"``, ``"n"``, ``0``); anything else is
  left for the category check to refuse.
* :func:`number`: a number, from a number or decimal text; ``None`` when the value is not one.
* :func:`date_seconds`: a date as seconds since 1970-01-01 UTC: pandas / Python / NumPy
  datetimes, numbers (Unix seconds), or text: in the column's declared ``format`` (strftime)
  when it has one, else ISO 8601, value by value (an offset converts that value to UTC; a
  value without one is UTC). ``None`` when the value is not a date.

The column readers (:func:`category_texts`, :func:`numbers`, :func:`dates`) return the values
read and a mask of the values that could not be, so the caller can refuse them with a count
(never quoting a value). Vectorised paths are taken only where they are the same per-value
function (a numeric or datetime dtype holds one kind of value).
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from numbers import Integral, Real

import numpy as np
import pandas as pd

from ..errors import DataValidationError

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
#: decimal text of an integer written with a zero fraction: "12.0", "-3.00"
_INTEGRAL_TEXT = re.compile(r"^([+-]?\d+)\.0*$")
#: decimal numbers as text: "12", "-1.5", ".5", "1e3" (no "nan", "inf", "1_000")
_NUMBER_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_TRUE, _FALSE = {"true", "t", "yes", "y", "1", "1.0"}, {"false", "f", "no", "n", "0", "0.0"}


def is_missing(value) -> bool:
    """A missing value: None, NaN, NaT or pd.NA (as ``pd.isna`` of that one value)."""
    return value is None or value is pd.NA or value is pd.NaT or (
        isinstance(value, (float, np.floating)) and math.isnan(value)) or (
        isinstance(value, np.datetime64) and np.isnat(value))


def category_text(value) -> str:
    """A category as text, from this one value: numbers by their value (``1``, ``1.0``, ``"1.0"`` ->
    ``"1"``; ``0.5`` -> ``"0.5"``), booleans ``"True"`` / ``"False"``, other text unchanged."""
    if isinstance(value, str):
        m = _INTEGRAL_TEXT.match(value)
        if m is None:
            return value
        text = m.group(1).lstrip("+")
        return "0" if text.lstrip("-").strip("0") == "" and text.startswith("-") else text
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, Integral):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if math.isfinite(value) and float(value).is_integer():
            return str(int(value))
        # shortest text that reads back as this value at its own precision (float32 0.1 -> "0.1")
        return str(value) if isinstance(value, np.floating) and not isinstance(value, np.float64) else repr(float(value))
    return str(value)


def boolean_text(value) -> str:
    """A boolean column's value as ``"True"`` / ``"False"`` (True, "true", "t", "yes", "y" in any case, 1, 1.0; False,
    "false", "f", "no", "n", 0, 0.0); anything else as :func:`category_text` (the category check refuses it)."""
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    text = category_text(value).strip().lower()
    return "True" if text in _TRUE else "False" if text in _FALSE else category_text(value)


def number(value) -> float | None:
    """A number from this one value (a number, or decimal text such as ``"1.5"`` or ``" 2e3 "``);
    None when it is not one. Booleans read 1 and 0."""
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        return float(text) if _NUMBER_TEXT.match(text) else None
    if isinstance(value, Real) or isinstance(value, np.number):
        return float(value)
    return None


def date_seconds(value, fmt: str | None = None) -> float | None:
    """A date as seconds since 1970-01-01 UTC, from this one value; None when it is not a date.

    Datetimes (pandas, Python, NumPy) and dates are read as they are (naive ones as UTC, aware ones
    converted); numbers are Unix seconds; text is read in ``fmt`` (strftime) when the column declares
    one, else as ISO 8601 (``2020-01-31``, ``2020-01-31T12:00:00``, ``... +01:00``, ``...Z``)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, np.datetime64):
        value = pd.Timestamp(value)
    if isinstance(value, _dt.datetime):          # pd.Timestamp too: its nanoseconds kept as a fraction
        return _seconds_of(value)
    if isinstance(value, _dt.date):
        return _seconds_of(_dt.datetime(value.year, value.month, value.day))
    if isinstance(value, (Real, np.number)):
        v = float(value)
        return v if math.isfinite(v) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        t = _dt.datetime.strptime(text, fmt) if fmt else _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return _seconds_of(t)


def _seconds_of(t: _dt.datetime) -> float:
    """Whole seconds plus the exact fraction (the same float for the same instant whatever the unit it
    came in: see :func:`_from_ticks`)."""
    if isinstance(t, pd.Timestamp):
        ns = t.tz_convert("UTC").value if t.tzinfo is not None else t.tz_localize("UTC").value
        return float(_from_ticks(np.asarray([ns], dtype=np.int64), 10 ** 9)[0])
    t = t.replace(tzinfo=_dt.timezone.utc) if t.tzinfo is None else t.astimezone(_dt.timezone.utc)
    delta = t - _EPOCH
    whole = np.asarray([delta.days * 86400 + delta.seconds], dtype=np.int64)
    return float(whole[0] + delta.microseconds / 1e6) if delta.microseconds else float(whole[0])


def _from_ticks(ticks: np.ndarray, per_second: int) -> np.ndarray:
    """Seconds from integer ticks (``per_second`` of them a second): whole seconds plus the remainder's
    fraction, so 1.5 s reads the same from microsecond and from nanosecond ticks."""
    whole, rest = np.divmod(ticks, per_second)
    return whole.astype(np.float64) + rest / per_second


# -- columns: the per-value functions applied to every value ---------------------------------------

def _each(s: pd.Series, read) -> list:
    """``read`` applied to every value of ``s`` (text values read once per distinct text: a str's
    hash is its content, so the cache cannot mix two values). NumPy scalars keep their type
    (a float32 stays a float32)."""
    if isinstance(s.dtype, np.dtype) and s.dtype.kind in "fc" and s.dtype.itemsize < 8:
        values = list(s.to_numpy())
    else:
        values = s.astype(object).tolist() if isinstance(s.dtype, pd.CategoricalDtype) else s.tolist()
    if values and pd.api.types.infer_dtype(values, skipna=False) == "string":
        # every value a str: each distinct text read once (pd.factorize groups equal texts only), spread back
        codes, texts = pd.factorize(np.asarray(values, dtype=object))
        read_texts = np.empty(len(texts), dtype=object)
        for k, t in enumerate(texts):
            read_texts[k] = read(t)
        return read_texts[codes].tolist()
    cache: dict = {}
    out = []
    for v in values:
        if isinstance(v, str):
            r = cache.get(v, cache)
            if r is cache:
                r = cache[v] = read(v)
            out.append(r)
        else:
            out.append(read(v))
    return out


def _plain_numbers(s: pd.Series) -> bool:
    """A column whose dtype holds numbers of one kind only (numpy or nullable ints / floats): reading it
    as float64 is :func:`number` of each value."""
    return (pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype)
            and not isinstance(s.dtype, pd.CategoricalDtype))


def category_texts(s: pd.Series, boolean: bool = False) -> pd.Series:
    """Every (non-missing) value of ``s`` as its category text (:func:`category_text`, or
    :func:`boolean_text` for a boolean column), as an object Series with ``s``'s index."""
    return pd.Series(_each(s, boolean_text if boolean else category_text), index=s.index, dtype=object)


def distinct_category_texts(s: pd.Series) -> list:
    """The sorted distinct category texts of the non-missing values of ``s`` (:func:`category_text` of each). A
    column of texts only is read once per distinct text (equal texts are one category); a mix of types value by
    value (1, 1.0 and True compare equal but may be other texts)."""
    values = s.dropna()
    if pd.api.types.infer_dtype(values, skipna=False) == "string":
        values = pd.Series(pd.unique(values.to_numpy(dtype=object)), dtype=object)
    return sorted(category_texts(values).unique().tolist())


def category_indices(s: pd.Series, lookup: dict, default: int) -> np.ndarray:
    """``lookup.get(category_text(v), default)`` of every value v of ``s`` as int64: each value's index among
    categories given by their texts (``default``: not one of them, or missing), read value by value as
    :func:`category_texts` reads them (a text column's distinct texts once each), without a Series of texts between."""
    return np.asarray(_each(s, lambda v: lookup.get(category_text(v), default)), dtype=np.int64)


def _floats(read: list) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in read], dtype=np.float64)


def marked_missing(s: pd.Series, markers) -> np.ndarray:
    """Which values of ``s`` are declared missing-value markers: a value is one iff its own
    :func:`category_text` is the text of a marker (``-1``, ``-1.0`` and ``"-1"`` all match the marker
    ``"-1"``), whatever the column's dtype. A pure function of (the markers, each value): one record's
    marker never changes how another is read. Missing values (NaN, None) are not markers (they are missing
    anyway). Numeric columns are read once per distinct number (the same function, value by value)."""
    wanted = {category_text(m) for m in markers}
    if not wanted or len(s) == 0:
        return np.zeros(len(s), dtype=bool)
    if _plain_numbers(s) and isinstance(s.dtype, np.dtype) and s.dtype.itemsize == 8:
        # int64 / float64: one text per distinct number (pd.factorize groups equal numbers; -0.0 and 0.0
        # read "0" alike), the same per-value function spread back
        codes, uniques = pd.factorize(s, use_na_sentinel=True)
        hit = np.asarray([category_text(u) in wanted for u in uniques.tolist()] + [False], dtype=bool)
        return hit[codes]
    present = ~s.isna().to_numpy()
    out = np.zeros(len(s), dtype=bool)
    if present.any():
        out[present] = np.asarray([t in wanted for t in _each(s[present], category_text)], dtype=bool)
    return out


def numbers(s: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """(every non-missing value of ``s`` as a float64 :func:`number`, mask of those that are not
    finite numbers)."""
    values = s.to_numpy(dtype=np.float64, na_value=np.nan) if _plain_numbers(s) else _floats(_each(s, number))
    return pd.Series(values, index=s.index, dtype="float64"), ~np.isfinite(values)


def dates(s: pd.Series, fmt: str | None = None) -> tuple[pd.Series, np.ndarray]:
    """(every non-missing value of ``s`` as :func:`date_seconds`, mask of those that are not dates)."""
    if _plain_numbers(s):
        values = s.to_numpy(dtype=np.float64, na_value=np.nan)
    elif pd.api.types.is_datetime64_any_dtype(s.dtype):        # ticks of the dtype's unit, UTC
        t = s.dt.tz_convert("UTC").dt.tz_localize(None) if s.dt.tz is not None else s
        unit = np.datetime_data(t.to_numpy().dtype)[0]
        ticks = t.to_numpy().view(np.int64)
        per_second = {"s": 1, "ms": 10 ** 3, "us": 10 ** 6, "ns": 10 ** 9}[unit]
        values = np.where(t.isna().to_numpy(), np.nan, _from_ticks(ticks, per_second))
    else:
        values = _floats(_each(s, lambda v: date_seconds(v, fmt)))
    return pd.Series(values, index=s.index, dtype="float64"), ~np.isfinite(values)


#: the kinds a value is read as, in the order of the released counts
KINDS = ("missing", "boolean", "integer", "decimal", "date", "text")


#: words read as booleans in the draft (integers 0 / 1 stay integers: a column of them is drafted numeric)
BOOLEAN_WORDS = (_TRUE | _FALSE) - {"1", "0", "1.0", "0.0"}


def value_kind(value) -> int:
    """The index in :data:`KINDS` of one value, read by itself (a pure function of that value)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 0
    text = str(value).strip()
    if text == "":
        return 0
    if text.lower() in BOOLEAN_WORDS:
        return 1
    x = number(text)
    if x is not None and math.isfinite(x):
        return 2 if float(x).is_integer() else 3
    if date_seconds(text) is not None:
        return 4
    return 5


# -- a table's columns checked against their declaration, each value read by itself -------------------------------
# (``col``: a column's public declaration, :class:`~mmdsynth.data.schema.Column`: its name, kind, bounds, categories,
# format, nullability; a refusal names the column, the rule and a count, never a value)

def date_text(seconds: float) -> str:
    """Seconds since 1970-01-01 as ISO 8601 text (a declared bound in a message or a schema file)."""
    return (pd.Timestamp(0) + pd.Timedelta(seconds=float(seconds))).isoformat()


def checked_columns(df: pd.DataFrame, columns: list, missing_values=()) -> pd.DataFrame:
    """A new frame of ``df``'s declared ``columns``, in order, on its index, each column's values read and checked
    (:func:`checked_values`): a cell is missing iff it is NaN / None or its own canonical text is a declared marker
    (``missing_values``): per value, never by the column's dtype (an int64 -1 and a text "-1" are one marker); a
    column that is not nullable is refused with the count of its missing cells. ``df`` is not changed."""
    out = {}
    for col in columns:
        s = df[col.name]
        missing = s.isna() | marked_missing(s, missing_values) if missing_values else s.isna()
        if missing.any():
            if not col.nullable:
                raise DataValidationError(
                    f"column {col.name!r} has {int(missing.sum())} missing value(s); declare it "
                    f"\"nullable\": true to model them (missingness is learned and generated), or impute "
                    f"or drop them first.")
            s = s.mask(missing)
            present = checked_values(col, s[~missing])
            full = pd.Series(np.nan if col.kind == "numeric" else None, index=s.index,
                             dtype="float64" if col.kind == "numeric" else object)
            full[~missing] = present
            out[col.name] = full
        else:
            out[col.name] = checked_values(col, s)
    # built once from the checked columns (each on df's index, its dtype kept), not set one by one on a copy of the
    # frame's selection (three quarters of a small batch's check)
    return pd.DataFrame(out, index=df.index) if out else df.iloc[:, :0].copy()


def checked_values(col, s: pd.Series) -> pd.Series:
    """The non-missing values of one column, each read by itself (nothing is decided from the column) and checked against the declaration: categories as their text, numbers
    and dates (as seconds) as floats in bounds, IDs in their range or without the synthetic prefix.
    A refusal names the column, the rule and a count, never a value."""
    if col.kind == "id":
        return checked_ids(col, s)
    if col.kind == "categorical":
        text = category_texts(s, boolean=col.boolean)
        if col.categories is not None:          # (None: categories to be inferred privately)
            bad = ~text.isin({category_text(c) for c in col.categories})
            if bad.any() and col.boolean:
                raise DataValidationError(
                    f"boolean column {col.name!r} has {int(bad.sum())} value(s) ({int(text[bad].nunique())} distinct) "
                    f"that are not booleans (true/false, yes/no, y/n, t/f, 1/0, in any case); clean them, or declare "
                    f"the column \"categorical\" with its categories.")
            if bad.any():
                n_bad, n_distinct = int(bad.sum()), int(text[bad].nunique())
                raise DataValidationError(
                    f"{col.type} column {col.name!r} has {n_bad} value(s) ({n_distinct} distinct) not among its "
                    f"declared categories {list(col.categories)[:10]}{' ...' if len(col.categories) > 10 else ''}; "
                    f"add them to the schema or clean the data.")
        return text
    if col.datetime:
        values = datetime_seconds(col, s)
    else:
        values, bad = numbers(s)
        if bad.any():
            raise DataValidationError(
                f"numeric column {col.name!r} has {int(bad.sum())} value(s) that are not finite numbers; numbers "
                f"are read value by value (digits, a decimal point, an exponent); fix or remove them, or if they "
                f"mark missing values (e.g. \"?\"), declare the marker (schema \"missing_values\", CLI --missing-values) "
                f"and the column \"nullable\": true.")
    if col.bounds is not None:
        lo, hi = col.bounds
        n_out = int(((values < lo) | (values > hi)).sum())
        if n_out:
            shown = f"[{date_text(lo)}, {date_text(hi)}]" if col.datetime else f"[{lo:g}, {hi:g}]"
            raise DataValidationError(
                f"{col.type} column {col.name!r} has {n_out} value(s) outside its declared "
                f"bounds {shown}; widen the bounds or clip the data."
            )
    return values


def datetime_seconds(col, s: pd.Series) -> pd.Series:
    """Dates as seconds since 1970-01-01 UTC, each read by itself (:func:`date_seconds`):
    pandas datetimes, numbers (Unix seconds: a validated table holds them), or text in the column's
    declared ``format``, else ISO 8601 (an offset converts its value to UTC; none means UTC). A value that
    is not a date is refused with a count, never quoted."""
    values, bad = dates(s, col.format)
    if bad.any():
        rule = (f"in its declared format {col.format!r}" if col.format else
                "as ISO 8601 text (e.g. 2020-01-31, 2020-01-31T12:00:00, 2020-01-31T12:00:00+01:00); for another "
                "text layout declare the column's \"format\" (e.g. \"%d/%m/%Y\"): mmdsynth never guesses one "
                "from the values")
        raise DataValidationError(f"datetime column {col.name!r} has {int(bad.sum())} value(s) that are not dates "
                                  f"{rule}.")
    return values


def checked_ids(col, s: pd.Series) -> pd.Series:
    """Real IDs are never learned; they are checked so that no generated ID can equal one: integer IDs
    lie in the declared range (generated ones are drawn above it), text IDs do not start with the
    prefix every generated one starts with. Each ID is read by itself."""
    if col.integer:
        values, bad = numbers(s)
        if bad.any() or not np.all(np.mod(values.to_numpy(dtype=float), 1) == 0):
            raise DataValidationError(f"integer id column {col.name!r} holds values that are not integers.")
        lo, hi = col.bounds
        n_out = int(((values < lo) | (values > hi)).sum())
        if n_out:
            raise DataValidationError(f"id column {col.name!r} has {n_out} ID(s) outside its declared range "
                                      f"[{lo:g}, {hi:g}]; widen the range (generated IDs are drawn above it).")
        return values.astype("int64")
    text = category_texts(s)
    clash = int(text.str.startswith(col.prefix).sum())
    if clash:
        raise DataValidationError(f"id column {col.name!r} has {clash} real ID(s) starting with {col.prefix!r}, the "
                                  f"prefix of generated IDs; declare another \"prefix\" for the column.")
    return text


def combinations_held(df: pd.DataFrame, columns: list, casts: list, combinations: list) -> np.ndarray:
    """Boolean mask of the rows of ``df`` whose values in ``columns``, each read by its cast (numbers as floats,
    categories as their text), form one of the declared ``combinations``."""
    key = (lambda values: tuple(cast(v) for cast, v in zip(casts, values)))
    keys = {key(v) for v in combinations}
    rows = zip(*(df[c].tolist() for c in columns))
    return np.fromiter((key(r) in keys for r in rows), bool, len(df))


def conformed(df: pd.DataFrame, columns: list, other: str) -> pd.DataFrame:
    """A table already read against its declared columns fitted to their released bounds and categories
    (``columns``: those whose bounds or categories were released): numbers clipped to the bounds, a category not
    released read as ``other``, each value by itself."""
    df = df.copy()
    for col in columns:
        name = col.name
        if col.kind == "numeric":
            df[name] = df[name].astype("float64").clip(*col.bounds)
        else:
            present = df[name].notna()
            df[name] = df[name].where(df[name].isin(set(col.categories)) | ~present, other).where(present, None)
    return df
