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

    def __post_init__(self):
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

    def __post_init__(self):
        names = [c.name for c in self.columns]
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
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Schema":
        if not isinstance(d, dict) or "columns" not in d:
            raise SchemaError("a schema is a JSON object with a 'columns' list (see the README).")
        return cls([Column.from_dict(c) for c in d["columns"]], d.get("label"),
                   d.get("label_categories"), d.get("source", "user"), d.get("notes", {}))

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
        return out

    def label_codes(self, df: pd.DataFrame) -> np.ndarray:
        """Map the label column to integers 0..C-1 in ``label_categories`` order."""
        lookup = {str(c): i for i, c in enumerate(self.label_categories)}
        return df[self.label].astype(str).map(lookup).to_numpy(dtype=np.int64)


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
