"""Table schemas: which columns are numeric (with bounds), categorical (with
categories), and which is the label.

A schema is public information. mmdsynth never derives one from private data
behind the user's back: it comes from the user (a JSON file, see the schema section of
docs/tutorials/tables.md), or
for the built-in benchmark datasets from the complete published files, which
are public (``source`` says which).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataValidationError, SchemaError
from ..statistics.values import (category_text, category_texts, checked_columns, checked_ids,  # noqa: F401
                                 combinations_held, conformed, date_seconds, date_text, datetime_seconds,
                                 distinct_category_texts)


#: the resolutions a datetime column may declare (pandas frequency aliases)
RESOLUTIONS = ("D", "h", "min", "s", "ms", "us")
#: the length of each resolution in seconds
RESOLUTION_SECONDS = {"D": 86400.0, "h": 3600.0, "min": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
#: the widest numeric bounds declared (hi - lo): wider ones encode every real value into a sliver of [0, 1]
MAX_SPAN = 1e15
#: keys a column declaration may hold
COLUMN_KEYS = {"name", "type", "bounds", "categories", "integer", "nullable", "resolution", "format", "prefix"}


def _seconds(value, name: str, fmt: str | None = None) -> float:
    """A declared date (ISO text, or text in ``fmt``) as seconds since 1970-01-01 UTC, read exactly as a
    value of the column is (:func:`~mmdsynth.statistics.values.date_seconds`). Bounds are public: the message
    may quote them."""
    seconds = date_seconds(value, fmt) if isinstance(value, str) else None
    if seconds is None and fmt is not None and isinstance(value, str):
        seconds = date_seconds(value)          # ISO, as to_dict writes bounds back
    if seconds is None:
        raise SchemaError(f"datetime column {name!r}: bound {value!r} is not a date; write it as "
                          f"ISO text, e.g. \"2020-01-31\" or \"2020-01-31T12:00:00\".")
    return seconds


#: catch-all category of a column whose categories were released privately: a value whose noisy count did not clear
#: the threshold reads as this (:mod:`mmdsynth.data.private_schema`)
OTHER = "(other)"

#: integer IDs are read as float64: beyond 2^52 (with room for generated IDs above) two IDs could read as one
MAX_INTEGER_ID = 2.0 ** 52


@dataclass
class Column:
    """One declared column. ``kind`` is "numeric", "categorical" or "id"; a boolean column is a
    categorical one over [False, True], a datetime column a numeric one in seconds since 1970-01-01
    (its ``bounds`` too; declared and written as dates)."""

    name: str
    kind: str  # "numeric" | "categorical" | "id"
    bounds: tuple[float, float] | None = None
    categories: list | None = None
    integer: bool = False
    #: a boolean column: categorical over [False, True], generated as bool; accepts True/False,
    #: "true"/"false", "yes"/"no", "y"/"n", "t"/"f" (any case) and 1/0
    boolean: bool = False
    #: missing values (NaN, None, empty CSV cells) are allowed, modelled and generated at the released rate
    nullable: bool = False
    #: a datetime column: its resolution ("D", "h", "min", "s", "ms", "us"); None for other columns
    datetime: str | None = None
    #: datetime: the text format of its values (strftime); generated values are written in it. None: ISO
    #: text and pandas datetimes are read, pandas datetimes are generated
    format: str | None = None
    #: id (text): the prefix every generated ID starts with, which no real ID may start with
    prefix: str | None = None

    def __post_init__(self):
        if self.boolean:
            if self.kind != "categorical" or self.bounds is not None:
                raise SchemaError(f"boolean column {self.name!r} takes no bounds or categories.")
            self.categories = [False, True]
        if self.kind not in ("numeric", "categorical", "id"):
            raise SchemaError(
                f"column {self.name!r}: type must be 'numeric', 'categorical', 'boolean', 'datetime' or 'id'; "
                f"got {self.kind!r}."
            )
        if self.datetime is not None and (self.kind != "numeric" or self.datetime not in RESOLUTIONS):
            raise SchemaError(f"datetime column {self.name!r}: 'resolution' must be one of {list(RESOLUTIONS)}; "
                              f"got {self.datetime!r}.")
        if self.kind == "id":
            if self.nullable or self.categories is not None:
                raise SchemaError(f"id column {self.name!r} takes no categories and cannot be nullable "
                                  f"(an ID identifies its row).")
            if self.integer and self.bounds is None:
                raise SchemaError(f"integer id column {self.name!r} needs 'bounds': the public range of the real "
                                  f"IDs (e.g. [1, 99999]); generated IDs are drawn above it, so none equals a real one.")
            if self.integer and max(abs(float(b)) for b in self.bounds) > MAX_INTEGER_ID:
                raise SchemaError(f"integer id column {self.name!r}: bounds beyond +-2^52 cannot be read exactly "
                                  f"(IDs are read as float64, so two IDs there could read as one); declare the column "
                                  f"as a text id (leave out \"integer\" and \"bounds\").")
            if not self.integer:
                if self.bounds is not None:
                    raise SchemaError(f"text id column {self.name!r} takes no bounds (only integer IDs do).")
                self.prefix = "syn-" if self.prefix is None else str(self.prefix)
                if not self.prefix:
                    raise SchemaError(f"id column {self.name!r}: 'prefix' must not be empty; generated IDs start "
                                      f"with it and real ones must not.")
        elif self.prefix is not None:
            raise SchemaError(f"column {self.name!r}: 'prefix' is for id columns only.")
        if self.kind == "categorical" and self.categories is not None:
            if not self.categories:
                raise SchemaError(
                    f"categorical column {self.name!r}: 'categories' must be a non-empty list, or left "
                    f"out to have them inferred privately (schema_share=0.1)."
                )
            if len(set(map(category_text, self.categories))) != len(self.categories):
                raise SchemaError(f"categorical column {self.name!r} lists a category twice.")
            if any(c is None or (isinstance(c, float) and math.isnan(c)) for c in self.categories):
                raise SchemaError(f"categorical column {self.name!r} lists a missing value as a category; declare "
                                  f"\"nullable\": true instead.")
        if self.bounds is not None:
            lo, hi = (float(b) for b in self.bounds)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise SchemaError(
                    f"numeric column {self.name!r}: bounds must be two finite numbers lo < hi; "
                    f"got {list(self.bounds)}."
                )
            if self.kind == "numeric" and hi - lo > MAX_SPAN:
                raise SchemaError(
                    f"numeric column {self.name!r}: bounds {list(self.bounds)} span {hi - lo:.3g}, more than "
                    f"{MAX_SPAN:.0e}: values would be encoded as a sliver of that range and generated across all of "
                    f"it. Declare the range the values really take (it is public), or leave the bounds out and "
                    f"release them privately (schema_share / --infer-schema).")
            if self.datetime:           # whole microseconds: the ISO text to_dict writes reads back exactly
                lo, hi = round(lo, 6), round(hi, 6)
            self.bounds = (lo, hi)

    @property
    def type(self) -> str:
        """The declared type: numeric, categorical, boolean, datetime or id."""
        return "boolean" if self.boolean else "datetime" if self.datetime else self.kind

    def to_dict(self) -> dict:
        d = {"name": self.name, "type": self.type}
        if self.datetime:
            if self.bounds is not None:
                d["bounds"] = [date_text(b) for b in self.bounds]
            d["resolution"] = self.datetime
            if self.format:
                d["format"] = self.format
        elif self.kind in ("numeric", "id"):
            if self.bounds is not None:
                d["bounds"] = list(self.bounds)
            if self.integer:
                d["integer"] = True
            if self.prefix is not None:
                d["prefix"] = self.prefix
        elif self.categories is not None and not self.boolean:
            d["categories"] = list(self.categories)
        if self.nullable:
            d["nullable"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Column":
        if not isinstance(d, dict) or "name" not in d or "type" not in d:
            raise SchemaError(f"each column needs 'name' and 'type'; got {d!r}.")
        unknown = set(d) - COLUMN_KEYS
        if unknown:
            raise SchemaError(f"column {d['name']!r}: unknown key(s) {sorted(unknown)}.")
        kind, nullable = d["type"], bool(d.get("nullable", False))
        allowed = {"boolean": {"nullable"}, "datetime": {"bounds", "resolution", "format", "nullable"},
                   "id": {"bounds", "integer", "prefix"}, "numeric": {"bounds", "integer", "nullable"},
                   "categorical": {"categories", "nullable"}}.get(kind)
        if allowed is None:
            raise SchemaError(f"column {d['name']!r}: type must be 'numeric', 'categorical', 'boolean', 'datetime' "
                              f"or 'id'; got {kind!r}.")
        extra = set(d) - {"name", "type"} - allowed
        if extra:
            raise SchemaError(f"{kind} column {d['name']!r} takes no {sorted(extra)} (it takes {sorted(allowed)}).")
        if kind == "boolean":
            return cls(d["name"], "categorical", boolean=True, nullable=nullable)
        if kind == "datetime":
            fmt = d.get("format")
            bounds = tuple(_seconds(b, d["name"], fmt) for b in d["bounds"]) if d.get("bounds") is not None else None
            return cls(d["name"], "numeric", bounds, nullable=nullable, datetime=d.get("resolution", "s"), format=fmt)
        return cls(d["name"], kind, tuple(d["bounds"]) if d.get("bounds") is not None else None,
                   d.get("categories"), bool(d.get("integer", False)), nullable=nullable, prefix=d.get("prefix"))


@dataclass
class Schema:
    """Feature columns, the label column and its classes, and where they came from."""

    columns: list[Column]
    label: str | None = None
    label_categories: list | None = None
    source: str = "user"
    notes: dict = field(default_factory=dict)
    #: declared fixed combinations (public: the user's, never learned from data):
    #: [{"type": "fixed_combinations", "columns": [a, b, ...], "values": [[va, vb, ...], ...]}]
    constraints: list = field(default_factory=list)
    #: cell texts that mean "missing" in this table besides empty cells, NaN and None (public: declared, e.g.
    #: ["?"] for the UCI files): a cell equal to one of them is read as missing, each cell by itself
    missing_values: list = field(default_factory=list)
    #: the id column that names a person (user-level privacy): one person's rows, all rows with the same value
    #: there, are one record of the guarantee (:mod:`mmdsynth.engines.persons`). None: one row is one record
    privacy_unit: str | None = None

    def __post_init__(self):
        names = [c.name for c in self.columns]
        if self.privacy_unit is not None:
            unit = next((c for c in self.columns if c.name == self.privacy_unit), None)
            if unit is None:
                raise SchemaError(f"privacy_unit {self.privacy_unit!r} is not a column of the schema; declare it as "
                                  f"{{\"name\": \"{self.privacy_unit}\", \"type\": \"id\"}} (it is never learned).")
            if unit.kind != "id":
                raise SchemaError(f"privacy_unit {self.privacy_unit!r} must be an id column (it names a person and is "
                                  f"never learned); it is declared {unit.type}. Declare it with \"type\": \"id\".")
        if not isinstance(self.missing_values, (list, tuple)) or not all(
                isinstance(v, str) and v for v in self.missing_values):
            raise SchemaError("'missing_values' is a list of cell texts that mean missing, e.g. [\"?\", \"n/a\"].")
        self.missing_values = list(self.missing_values)
        self.constraints = [_checked_constraint(k, {c.name: c for c in self.columns}) for k in self.constraints]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SchemaError(f"column name(s) {dupes} appear more than once in the schema.")
        if self.label is not None:
            if self.label in names:
                raise SchemaError(f"label {self.label!r} must not also be listed as a feature column.")
            if not self.label_categories or len(self.label_categories) < 2:
                raise SchemaError(
                    f"label {self.label!r} needs 'label_categories' with at least 2 classes "
                    f"(public knowledge, e.g. [\"<=50K\", \">50K\"])."
                )

    # -- views -------------------------------------------------------------
    @property
    def numeric(self) -> list[str]:
        return [c.name for c in self.columns if c.kind == "numeric"]

    @property
    def categorical(self) -> dict[str, list]:
        return {c.name: list(c.categories) for c in self.columns if c.kind == "categorical"}

    @property
    def ids(self) -> list[str]:
        return [c.name for c in self.columns if c.kind == "id"]

    @property
    def n_classes(self) -> int | None:
        return len(self.label_categories) if self.label_categories else None

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise SchemaError(f"no column {name!r} in the schema; columns are {[c.name for c in self.columns]}.")

    # -- (de)serialisation ---------------------------------------------------
    def to_dict(self) -> dict:
        d = {"columns": [c.to_dict() for c in self.columns], "source": self.source}
        if self.label is not None:
            d["label"] = self.label
            d["label_categories"] = list(self.label_categories)
        if self.notes:
            d["notes"] = self.notes
        if self.constraints:
            d["constraints"] = [dict(k, values=[list(v) for v in k["values"]]) for k in self.constraints]
        if self.missing_values:
            d["missing_values"] = list(self.missing_values)
        if self.privacy_unit is not None:
            d["privacy_unit"] = self.privacy_unit
        return d

    def with_label(self, label: str, label_categories: list | None = None) -> "Schema":
        """The schema with feature column ``label`` made the label, its classes ``label_categories`` (public;
        a boolean column's are False and True). For schemas that name no label (SDV metadata)."""
        col = self.column(label)
        if col.kind != "categorical":
            raise SchemaError(f"the label {label!r} must be a categorical or boolean column; it is {col.type}.")
        classes = label_categories or (["False", "True"] if col.boolean else col.categories)
        if not classes:
            raise SchemaError(f"the classes of label {label!r} are not declared (SDV metadata lists none): give them "
                              f"(label_categories=[...], CLI --label-categories A,B); they are public.")
        return replace(self, columns=[c for c in self.columns if c.name != label], label=label,
                       label_categories=list(classes))

    def with_nullable(self, names) -> "Schema":
        """The schema with the columns ``names`` (or every non-id column for ``"all"``) declared nullable."""
        names = [c.name for c in self.columns if c.kind != "id"] if names == "all" else list(names)
        for name in names:
            if self.column(name).kind == "id":
                raise SchemaError(f"id column {name!r} cannot be nullable (an ID identifies its row).")
        return replace(self, columns=[replace(c, nullable=True) if c.name in names else c for c in self.columns])

    def with_privacy_unit(self, column: str) -> "Schema":
        """The schema with ``column`` (an id column, or a column of the data not yet declared, which becomes a
        text id column) as the privacy unit: one person is all rows with the same value there."""
        if column not in [c.name for c in self.columns]:
            if column == self.label:
                raise SchemaError(f"the label {column!r} cannot be the privacy unit.")
            return replace(self, columns=[*self.columns, Column(column, "id")], privacy_unit=column)
        return replace(self, privacy_unit=column)

    def without_ids(self) -> "Schema":
        """The schema of the learned columns: without its ID columns."""
        return replace(self, columns=[c for c in self.columns if c.kind != "id"], privacy_unit=None) if self.ids else self

    @classmethod
    def from_dict(cls, d: dict) -> "Schema":
        """An mmdsynth schema, or SDV metadata (see :func:`schema_from_sdv`; no label: :meth:`with_label`)."""
        if is_sdv_metadata(d):
            return schema_from_sdv(d)
        if not isinstance(d, dict) or "columns" not in d:
            raise SchemaError("a schema is a JSON object with a 'columns' list: see 'The schema' in "
                              "docs/tutorials/tables.md.")
        return cls([Column.from_dict(c) for c in d["columns"]], d.get("label"),
                   d.get("label_categories"), d.get("source", "user"), d.get("notes", {}), d.get("constraints", []),
                   d.get("missing_values", []), d.get("privacy_unit"))

    def allowed_rows(self, df: pd.DataFrame, constraint: dict) -> np.ndarray:
        """Boolean mask of the rows of ``df`` whose values in the constraint's columns form one of its
        declared combinations (numbers compared as numbers)."""
        return combinations_held(df, constraint["columns"], self._casts(constraint["columns"]), constraint["values"])

    def _casts(self, columns: list) -> list:
        """How a combination of ``columns`` is compared: numbers as floats, categories as their text."""
        return [float if self.column(name).kind == "numeric" else category_text for name in columns]

    @classmethod
    def from_json(cls, path) -> "Schema":
        from .._io import read_json

        return cls.from_dict(read_json(path, "schema file", SchemaError))

    def to_json(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))

    # -- validation ----------------------------------------------------------
    def validate(self, df: pd.DataFrame, *, require_label: bool = True) -> pd.DataFrame:
        """Check a DataFrame against the schema; return it with columns in schema order.

        Raises on missing columns, missing values, unknown categories and
        numbers outside the declared bounds. Reads nothing to *build* a schema.
        """
        if len(df) == 0:
            raise DataValidationError("the table is empty; pass at least one row.")
        inferred = [self.column(n) for n in self.notes.get("dp_inferred_columns", []) if n in
                    {c.name for c in self.columns}]
        if any(c.bounds is not None or c.categories is not None for c in inferred):
            # bounds and categories released with budget (private inference, `mmdsynth schema`): every value read
            # against the declared part, then numbers clipped to the released bounds and a category not released
            # read as "(other)", each value by itself
            read = declared_part(self).validate(df, require_label=require_label)
            return conformed(read, [self.column(n) for n in inferred_columns(self)], OTHER)
        wanted = [c.name for c in self.columns] + ([self.label] if self.label and require_label else [])
        missing = [c for c in wanted if c not in df.columns]
        if missing:
            raise SchemaError(
                f"column(s) {missing} declared in the schema are missing from the data "
                f"(data has {list(df.columns)[:20]}{'...' if df.shape[1] > 20 else ''})."
            )
        out = checked_columns(df, self.columns + (
            [Column(self.label, "categorical", categories=self.label_categories)] if self.label and require_label
            else []), self.missing_values)
        for k in self.constraints:
            bad = int((~combinations_held(out, k["columns"], self._casts(k["columns"]), k["values"])).sum())
            if bad:
                raise DataValidationError(
                    f"{bad} row(s) break the declared fixed combinations of {k['columns']}; fix the rows, or add "
                    f"the combinations to the schema's constraint.")
        return out

    def person_ids(self, df: pd.DataFrame) -> pd.Series:
        """The privacy unit's column of ``df`` read as the schema reads IDs, each value by itself
        (:func:`~mmdsynth.statistics.values.checked_ids`: text IDs by their text, so ``1`` and ``"1"`` are one person; integer IDs as
        integers in the declared range): rows are one person exactly when these values are equal."""
        if self.privacy_unit is None or self.privacy_unit not in df.columns:
            raise SchemaError(f"no privacy unit column {self.privacy_unit!r} to read in the data.")
        return checked_ids(self.column(self.privacy_unit), df[self.privacy_unit])

    def label_codes(self, df: pd.DataFrame) -> np.ndarray:
        """Map the label column to integers 0..C-1 in ``label_categories`` order."""
        lookup = {category_text(c): i for i, c in enumerate(self.label_categories)}
        return category_texts(df[self.label]).map(lookup).to_numpy(dtype=np.int64)


def _checked_constraint(k, columns: dict) -> dict:
    """A declared constraint, checked against the columns: only fixed combinations, of declared feature
    columns, each combination within the columns' bounds and categories."""
    if not isinstance(k, dict) or k.get("type") != "fixed_combinations":
        raise SchemaError(f"a constraint is {{\"type\": \"fixed_combinations\", \"columns\": [...], \"values\": "
                          f"[[...], ...]}}; got {k!r}.")
    cols, values = list(k.get("columns") or []), [list(v) for v in k.get("values") or []]
    unknown = [c for c in cols if c not in columns]
    if any(columns[c].nullable or columns[c].kind == "id" for c in cols if c in columns):
        raise SchemaError(f"fixed_combinations of {cols}: nullable and id columns cannot be in a fixed combination.")
    if len(cols) < 2 or unknown:
        raise SchemaError(f"fixed_combinations needs two or more declared feature columns; got {cols} "
                          f"(not in the schema: {unknown}).")
    if not values or any(len(v) != len(cols) for v in values):
        raise SchemaError(f"fixed_combinations of {cols}: 'values' must list combinations of {len(cols)} values each.")
    for v in values:
        for value, name in zip(v, cols):
            col = columns[name]
            if col.kind == "categorical" and col.categories is not None and category_text(value) not in map(category_text, col.categories):
                raise SchemaError(f"fixed_combinations of {cols}: {value!r} is not a category of {name!r}.")
            if col.kind == "numeric" and col.bounds is not None and not col.bounds[0] <= float(value) <= col.bounds[1]:
                raise SchemaError(f"fixed_combinations of {cols}: {value!r} is outside the bounds of {name!r}.")
    return {"type": "fixed_combinations", "columns": cols, "values": values}


def _combination_key(schema: "Schema", columns: list):
    """A function turning a combination of ``columns`` into comparable values: numbers as floats,
    categories as strings (the columns' kinds looked up once)."""
    casts = schema._casts(columns)
    return lambda values: tuple(cast(v) for cast, v in zip(casts, values))


def enforce_constraints(df: pd.DataFrame, schema: "Schema", rng: np.random.Generator) -> pd.DataFrame:
    """Post-processing of synthetic rows: every row keeps the declared combinations. A row whose values
    in a constraint's columns are not a declared combination takes the declared combination that agrees
    with it in the most columns, the first column first (so a generated education keeps its education
    number); ties are broken by ``rng``."""
    for k in schema.constraints:
        ok = schema.allowed_rows(df, k)
        if ok.all():
            continue
        cols = k["columns"]
        key = _combination_key(schema, cols)
        combos = [key(v) for v in k["values"]]
        for i in np.nonzero(~ok)[0]:
            row = key([df.iloc[i][c] for c in cols])
            score = [sum((a == b) * (len(cols) - j) for j, (a, b) in enumerate(zip(row, combo))) for combo in combos]
            best = np.flatnonzero(np.asarray(score) == max(score))
            combo = k["values"][int(rng.choice(best))]
            for c, v in zip(cols, combo):
                df.iat[i, df.columns.get_loc(c)] = v if schema.column(c).kind == "categorical" else float(v)
    return df


def public_schema(frames: list[pd.DataFrame], numeric: list[str], categorical: list[str],
                  label: str, label_categories: list, source: str,
                  integer: list[str] | None = None) -> Schema:
    """Schema of a *public* benchmark dataset from its complete published files.

    Never call this on private data: categories and ranges would leak.
    """
    full = pd.concat(frames, ignore_index=True)
    integer = set(integer or [])
    cols = []
    for name in full.columns:
        if name == label:
            continue
        if name in numeric:
            v = pd.to_numeric(full[name]).dropna()
            lo, hi = float(v.min()), float(v.max())
            if lo == hi:
                hi = lo + 1.0
            cols.append(Column(name, "numeric", (lo, hi), integer=name in integer))
        elif name in categorical:
            cols.append(Column(name, "categorical", categories=distinct_category_texts(full[name])))
    return Schema(cols, label, list(label_categories), source)


# -- SDV metadata ---------------------------------------------------------------------------------
# SDV's metadata JSON as an mmdsynth schema (issue 32): the format people already have.
# 
# SDV single-table metadata (``"METADATA_SPEC_VERSION": "SINGLE_TABLE_V1"``, or one table of a
# multi-table file) lists each column's ``sdtype``: numerical, categorical, boolean, datetime and id
# map to mmdsynth's numeric (integer when ``computer_representation`` is an integer type), categorical,
# boolean, datetime (``datetime_format`` kept, its finest field the resolution) and id columns. SDV
# metadata holds no bounds or categories (SDV reads them from the data): mmdsynth leaves them out, so
# a fit releases them privately with a share of the budget (``schema_share``, CLI ``--infer-schema``)
# or refuses; declare them in an mmdsynth schema to spend nothing on them. SDV metadata does not say
# which columns may be missing either: name them (``nullable``). PII sdtypes (email, address, ...)
# are refused: mmdsynth does not generate them.
SDTYPES = ("numerical", "categorical", "boolean", "datetime", "id")
#: strftime fields, finest first, and the resolution they imply
_FIELDS = (("%f", "us"), ("%S", "s"), ("%M", "min"), ("%H", "h"), ("%I", "h"))


def is_sdv_metadata(d) -> bool:
    return isinstance(d, dict) and ("METADATA_SPEC_VERSION" in d or "tables" in d or
                                    isinstance(d.get("columns"), dict))


def resolution_of(fmt: str | None) -> str:
    """The resolution a strftime format carries (seconds when there is none: SDV's default parsing)."""
    if fmt is None:
        return "s"
    return next((res for field, res in _FIELDS if field in fmt), "D")


def schema_from_sdv(metadata: dict, *, table: str | None = None, nullable=(), label: str | None = None,
                    label_categories: list | None = None) -> Schema:
    """A :class:`Schema` from SDV metadata. ``table`` picks one table of a multi-table file (needed when it
    has several); ``nullable`` names the columns that may be missing (or True: all but IDs); ``label``
    with ``label_categories`` (public classes, required unless the label is boolean) makes a column the
    label."""
    if not is_sdv_metadata(metadata):
        raise SchemaError("not SDV metadata: expected {\"METADATA_SPEC_VERSION\": ..., \"columns\": {name: "
                          "{\"sdtype\": ...}}} (or a multi-table file with \"tables\").")
    if "tables" in metadata:
        tables = metadata["tables"]
        if table is None and len(tables) != 1:
            raise SchemaError(f"the SDV metadata describes tables {sorted(tables)}; name the one to use (table=...).")
        name = table if table is not None else next(iter(tables))
        if name not in tables:
            raise SchemaError(f"no table {name!r} in the SDV metadata; it has {sorted(tables)}.")
        metadata = tables[name]
    cols = metadata.get("columns") or {}
    other = sorted(n for n, c in cols.items() if c.get("sdtype") not in SDTYPES)
    if other:
        raise SchemaError(f"column(s) {other} have sdtypes {sorted({cols[n].get('sdtype') for n in other})} that "
                          f"mmdsynth does not generate (it models {list(SDTYPES)}); remove them from the metadata and "
                          f"drop them from the table (drop_unlisted=True, CLI --drop-unlisted).")
    missing_ok = set(cols) if nullable is True else set(nullable or ())
    unknown = sorted(missing_ok - set(cols))
    if unknown:
        raise SchemaError(f"nullable column(s) {unknown} are not in the SDV metadata.")
    columns = []
    for name, c in cols.items():
        kind, null = c["sdtype"], name in missing_ok and c["sdtype"] != "id"
        if kind == "numerical":
            integer = str(c.get("computer_representation", "Float")).lower().lstrip("u").startswith("int")
            columns.append(Column(name, "numeric", integer=integer, nullable=null))
        elif kind == "categorical":
            columns.append(Column(name, "categorical", nullable=null))
        elif kind == "boolean":
            columns.append(Column(name, "categorical", boolean=True, nullable=null))
        elif kind == "datetime":
            fmt = c.get("datetime_format")
            columns.append(Column(name, "numeric", nullable=null, datetime=resolution_of(fmt), format=fmt))
        else:
            columns.append(Column(name, "id"))
    schema = Schema(columns, source="sdv-metadata")
    return schema.with_label(label, label_categories) if label is not None else schema


# -- columns whose bounds and categories were released privately (private_schema, `mmdsynth schema`) --------
def inferred_columns(schema: Schema) -> list[str]:
    """Columns whose bounds or categories were released privately (empty for a public schema)."""
    return list(schema.notes.get("dp_inferred_columns", []))


def conform(df: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """A table already read against the declared part of ``schema`` (:func:`declared_part`, so every
    value is parsed by itself: numbers and dates as floats, categories as text) fitted to the inferred
    schema: numbers clipped to the inferred bounds and categories that were not kept mapped to
    ``OTHER``. Applied to the private rows inside the fit (a per-record transformation, so the
    sensitivity of later releases holds) and to real test rows before evaluation. Columns with
    declared bounds and categories are left as is."""
    return conformed(df, [schema.column(n) for n in inferred_columns(schema)], OTHER)


def declared_part(schema: Schema) -> Schema:
    """The schema as the user declared it, before inference (to read raw tables against)."""
    names = set(inferred_columns(schema))
    if not names:
        return schema
    cols = [replace(c, bounds=None) if c.name in names and c.kind == "numeric"
            else replace(c, categories=None) if c.name in names else c for c in schema.columns]
    return replace(schema, columns=cols)
