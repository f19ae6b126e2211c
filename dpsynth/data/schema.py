"""Table schemas: which columns are numeric (with bounds), categorical (with
categories), and which is the label.

A schema is public information. dpsynth never derives one from private data
behind the user's back: it comes from the user (a JSON file, see README), or
for the built-in benchmark datasets from the complete published files, which
are public (``source`` says which).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataValidationError, SchemaError


@dataclass
class Column:
    name: str
    kind: str  # "numeric" | "categorical"
    bounds: tuple[float, float] | None = None
    categories: list | None = None
    integer: bool = False
    #: a boolean column: categorical over [False, True], generated as bool; accepts True/False,
    #: "true"/"false" (any case) and 1/0
    boolean: bool = False

    def __post_init__(self):
        if self.boolean:
            if self.kind != "categorical" or self.bounds is not None:
                raise SchemaError(f"boolean column {self.name!r} takes no bounds or categories.")
            self.categories = [False, True]
        if self.kind not in ("numeric", "categorical"):
            raise SchemaError(
                f"column {self.name!r}: type must be 'numeric' or 'categorical'; got {self.kind!r}."
            )
        if self.kind == "categorical" and self.categories is not None:
            if not self.categories:
                raise SchemaError(
                    f"categorical column {self.name!r}: 'categories' must be a non-empty list, or left "
                    f"out to have them inferred privately (schema_share=0.1)."
                )
            if len(set(map(str, self.categories))) != len(self.categories):
                raise SchemaError(f"categorical column {self.name!r} lists a category twice.")
        if self.bounds is not None:
            lo, hi = (float(b) for b in self.bounds)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise SchemaError(
                    f"numeric column {self.name!r}: bounds must be two finite numbers lo < hi; "
                    f"got {list(self.bounds)}."
                )
            self.bounds = (lo, hi)

    def to_dict(self) -> dict:
        if self.boolean:
            return {"name": self.name, "type": "boolean"}
        d = {"name": self.name, "type": self.kind}
        if self.kind == "numeric":
            if self.bounds is not None:
                d["bounds"] = list(self.bounds)
            if self.integer:
                d["integer"] = True
        elif self.categories is not None:
            d["categories"] = list(self.categories)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Column":
        if not isinstance(d, dict) or "name" not in d or "type" not in d:
            raise SchemaError(f"each column needs 'name' and 'type'; got {d!r}.")
        unknown = set(d) - {"name", "type", "bounds", "categories", "integer"}
        if unknown:
            raise SchemaError(f"column {d['name']!r}: unknown key(s) {sorted(unknown)}.")
        if d["type"] == "boolean":
            if set(d) - {"name", "type"}:
                raise SchemaError(f"boolean column {d['name']!r} takes no bounds, categories or integer.")
            return cls(d["name"], "categorical", boolean=True)
        return cls(d["name"], d["type"], tuple(d["bounds"]) if d.get("bounds") is not None else None,
                   d.get("categories"), bool(d.get("integer", False)))


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

    def __post_init__(self):
        names = [c.name for c in self.columns]
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
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Schema":
        if not isinstance(d, dict) or "columns" not in d:
            raise SchemaError("a schema is a JSON object with a 'columns' list (see the README).")
        return cls([Column.from_dict(c) for c in d["columns"]], d.get("label"),
                   d.get("label_categories"), d.get("source", "user"), d.get("notes", {}), d.get("constraints", []))

    def allowed_rows(self, df: pd.DataFrame, constraint: dict) -> np.ndarray:
        """Boolean mask of the rows of ``df`` whose values in the constraint's columns form one of its
        declared combinations (numbers compared as numbers)."""
        key = _combination_key(self, constraint["columns"])
        keys = {key(v) for v in constraint["values"]}
        rows = zip(*(df[c].tolist() for c in constraint["columns"]))
        return np.fromiter((key(r) in keys for r in rows), bool, len(df))

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
        wanted = [c.name for c in self.columns] + ([self.label] if self.label and require_label else [])
        missing = [c for c in wanted if c not in df.columns]
        if missing:
            raise SchemaError(
                f"column(s) {missing} declared in the schema are missing from the data "
                f"(data has {list(df.columns)[:20]}{'...' if df.shape[1] > 20 else ''})."
            )
        out = df[wanted].copy()
        for col in self.columns + ([Column(self.label, "categorical", categories=self.label_categories)]
                                   if self.label and require_label else []):
            s = out[col.name]
            if s.isna().any():
                raise DataValidationError(
                    f"column {col.name!r} has {int(s.isna().sum())} missing value(s); impute or drop "
                    f"them first, or declare a category for missing values."
                )
            if col.boolean:              # True / "true" / 1 -> "True", False / "false" / 0 -> "False"
                s = s.map(lambda v: {"true": "True", "1": "True", "1.0": "True", "false": "False", "0": "False",
                                     "0.0": "False"}.get(str(v).strip().lower(), v))
            if col.kind == "categorical":
                # checks on distinct values, not per row (big shards), of an object column of str
                text = s if s.dtype == object else s.astype(str).astype(object)
                distinct = pd.unique(text)
                if not all(isinstance(v, str) for v in distinct):
                    text = text.astype(str).astype(object)
                    distinct = pd.unique(text)
                if col.categories is not None:          # (None: categories to be inferred privately)
                    bad = sorted(set(distinct) - {str(c) for c in col.categories})
                    if bad:
                        raise DataValidationError(
                            f"column {col.name!r} holds value(s) {bad[:5]} not among its declared categories "
                            f"{list(col.categories)[:10]}; add them to the schema or clean the data."
                        )
                out[col.name] = text
            else:
                try:
                    values = pd.to_numeric(s)
                except (ValueError, TypeError) as exc:
                    raise DataValidationError(f"numeric column {col.name!r} holds non-numbers: {exc}") from exc
                if not np.all(np.isfinite(values.to_numpy(dtype=float))):
                    raise DataValidationError(f"numeric column {col.name!r} holds infinite values.")
                if col.bounds is not None:
                    lo, hi = col.bounds
                    n_out = int(((values < lo) | (values > hi)).sum())
                    if n_out:
                        raise DataValidationError(
                            f"numeric column {col.name!r} has {n_out} value(s) outside its declared "
                            f"bounds [{lo:g}, {hi:g}]; widen the bounds or clip the data."
                        )
                out[col.name] = values
        for k in self.constraints:
            bad = int((~self.allowed_rows(out, k)).sum())
            if bad:
                raise DataValidationError(
                    f"{bad} row(s) break the declared fixed combinations of {k['columns']}; fix the rows, or add "
                    f"the combinations to the schema's constraint.")
        return out

    def label_codes(self, df: pd.DataFrame) -> np.ndarray:
        """Map the label column to integers 0..C-1 in ``label_categories`` order."""
        lookup = {str(c): i for i, c in enumerate(self.label_categories)}
        return df[self.label].astype(str).map(lookup).to_numpy(dtype=np.int64)


def _combination_key(schema: "Schema", columns: list):
    """A function turning a combination of ``columns`` into comparable values: numbers as floats,
    categories as strings (the columns' kinds looked up once)."""
    casts = [float if schema.column(name).kind == "numeric" else str for name in columns]
    return lambda values: tuple(cast(v) for cast, v in zip(casts, values))


def _checked_constraint(k, columns: dict) -> dict:
    """A declared constraint, checked against the columns: only fixed combinations, of declared feature
    columns, each combination within the columns' bounds and categories."""
    if not isinstance(k, dict) or k.get("type") != "fixed_combinations":
        raise SchemaError(f"a constraint is {{\"type\": \"fixed_combinations\", \"columns\": [...], \"values\": "
                          f"[[...], ...]}}; got {k!r}.")
    cols, values = list(k.get("columns") or []), [list(v) for v in k.get("values") or []]
    unknown = [c for c in cols if c not in columns]
    if len(cols) < 2 or unknown:
        raise SchemaError(f"fixed_combinations needs two or more declared feature columns; got {cols} "
                          f"(not in the schema: {unknown}).")
    if not values or any(len(v) != len(cols) for v in values):
        raise SchemaError(f"fixed_combinations of {cols}: 'values' must list combinations of {len(cols)} values each.")
    for v in values:
        for value, name in zip(v, cols):
            col = columns[name]
            if col.kind == "categorical" and col.categories is not None and str(value) not in map(str, col.categories):
                raise SchemaError(f"fixed_combinations of {cols}: {value!r} is not a category of {name!r}.")
            if col.kind == "numeric" and col.bounds is not None and not col.bounds[0] <= float(value) <= col.bounds[1]:
                raise SchemaError(f"fixed_combinations of {cols}: {value!r} is outside the bounds of {name!r}.")
    return {"type": "fixed_combinations", "columns": cols, "values": values}


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
            cats = sorted(full[name].dropna().astype(str).unique().tolist())
            cols.append(Column(name, "categorical", categories=cats))
    return Schema(cols, label, list(label_categories), source)
