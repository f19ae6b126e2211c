"""A schema drafted from a table with no codebook, paid for with privacy budget (`mmdsynth schema`).

Everything a schema says that the header does not (each column's type, whether it has missing values, numeric
bounds, categories, the label's classes) is a fact about the private rows. Here it is **released**, never read:

1. **Types** (one Gaussian release, :class:`ValueKinds`): each value is put in one of :data:`KINDS` by a pure
   function of that value alone (:func:`value_kind`: missing, a boolean word, an integer, a decimal number, an ISO
   date, other text), and every column's count of each kind is released at once. A record adds one count to one
   kind of every column, so replacing it moves two counts by 1 per column: L2 sensitivity sqrt(2 c) for c columns.
   A column's type is then read off its noisy counts (post-processing, :func:`column_type`).
2. **Bounds and categories** (one Gaussian release, thresholded): the schema inference of
   :mod:`mmdsynth.data.private_schema`, over the typed draft: geometric bins for numeric and datetime columns,
   thresholded value counts for categorical ones and the label (a value is kept only where its noisy count clears
   the threshold, whose delta is reserved before calibration). Its noise multiplier is fixed by the plan; which
   columns it covers follows from release 1 (adaptive composition, the cost fixed).

Both releases are one plan (:data:`TYPES_SHARE` and the rest), calibrated and checked against the budget file before
any row is read, charged once, and recorded in a ledger written beside the draft. The header's column names and the
record count (rows, or persons under a privacy unit) are public. Under a privacy unit each person's rows weigh 1 in all
in release 1, and each person adds one value per column in release 2.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .._io import LEDGER_SUFFIX, SCHEMA_LEDGER_FORMAT, atomic_write, sealed
from ..errors import SchemaError
from ..choice import default_delta
from ..engines.persons import unit_text
from ..privacy.calibration import compose_plan
from ..privacy.engine import Facts, GaussianRelease, Open, Sums, run_plan
from ..privacy.ledger import PRIVACY_UNIT
from ..statistics.tables import ValueKinds
from ..statistics.values import KINDS, category_texts, dates, marked_missing, numbers
from .private_schema import OTHER, SchemaInference, complete_schema, schema_stages
from .schema import Column, Schema

#: the share of the plan the types release gets (the rest: bounds and categories)
TYPES_SHARE = 0.3
#: a column takes a type when at least this share of its present values are of it (by the noisy counts)
TYPE_SHARE = 0.95
#: a column is nullable when its noisy count of missing values exceeds this many noise standard deviations
NULLABLE_SIGMAS = 1.0


def column_type(counts: np.ndarray, noise_std: float) -> dict:
    """A column's declaration (without bounds or categories) from its noisy kind counts (post-processing): numeric
    (integer unless its decimals clear the noise), datetime, boolean, where at least :data:`TYPE_SHARE` of the
    present values are of that kind; else categorical. Nullable where the missing count clears
    :data:`NULLABLE_SIGMAS` noise standard deviations."""
    c = np.clip(np.asarray(counts, dtype=np.float64), 0, None)
    missing, boolean, integer, decimal, date, _ = c
    present = max(float(c[1:].sum()), 1e-9)
    out: dict = {}
    if integer + decimal >= TYPE_SHARE * present:
        out = {"type": "numeric", "integer": bool(decimal <= NULLABLE_SIGMAS * noise_std)}
    elif date >= TYPE_SHARE * present:
        out = {"type": "datetime", "resolution": "s"}
    elif boolean >= TYPE_SHARE * present:
        out = {"type": "boolean"}
    else:
        out = {"type": "categorical"}
    if missing > NULLABLE_SIGMAS * noise_std:
        out["nullable"] = True
    return out


def _tolerant(df: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """The text cells read by the typed draft, each value by itself, a value that is not of its column's type read
    as missing (counted nowhere in release 2: the draft is for review, the fit refuses such values by count)."""
    out = {}
    for col in schema.columns:
        s = df[col.name]
        gone = s.isna().to_numpy() | marked_missing(s, schema.missing_values)
        if col.kind == "numeric":
            values = (dates(s)[0] if col.datetime else numbers(s)[0]).to_numpy(dtype=np.float64).copy()
            values[gone] = np.nan
            out[col.name] = values
        elif col.kind == "categorical" and not col.boolean:
            text = category_texts(s).astype(object)
            text[gone] = None
            out[col.name] = text.to_numpy()
        else:
            out[col.name] = s.to_numpy()
    if schema.label:
        text = category_texts(df[schema.label]).astype(object)
        text[df[schema.label].isna().to_numpy()] = None
        out[schema.label] = text.to_numpy()
    return pd.DataFrame(out, index=df.index)


def draft_schema(df: pd.DataFrame, *, epsilon: float, delta: float | None = 1e-5, label: str | None = None,
                 privacy_unit: str | None = None, missing_values=(), budget=None, noise_seed: int | None = None,
                 dataset: str = ""):
    """(the drafted :class:`~mmdsynth.data.schema.Schema`, its :class:`~mmdsynth.privacy.ledger.Ledger`) of a table
    of text cells (``pd.read_csv(..., dtype=str)``): see the module. ``label``: the label column (its classes are
    released as categories); ``privacy_unit``: the person column (an id column, never read beyond grouping rows);
    ``missing_values``: cell texts that mean missing. ``budget``: a :class:`~mmdsynth.privacy.BudgetFile`, checked
    before any row is read and charged once. ``delta`` None: :func:`~mmdsynth.choice.default_delta` of the public count
    (the rows, or the persons under a unit), settled in the draft's run. ``noise_seed``: tests only (the ledger says
    it voids the guarantee)."""

    names = [str(c) for c in df.columns]
    for given, what in ((label, "label"), (privacy_unit, "privacy unit")):
        if given is not None and given not in names:
            raise SchemaError(f"the {what} {given!r} is not a column of the table; its columns are {names[:20]}.")
    if label is not None and label == privacy_unit:
        raise SchemaError("the label cannot be the privacy unit.")
    typed = [n for n in names if n not in (label, privacy_unit)]
    if not typed:
        raise SchemaError("the table has no column to draft besides the label and the privacy unit.")
    plan, mults = compose_plan({"schema": 1.0}, {"types": TYPES_SHARE})
    unit = PRIVACY_UNIT if privacy_unit is None else unit_text(privacy_unit)
    # the source: rows, or persons (public: their number), read only by the run
    id_schema = Schema([Column(privacy_unit, "id")], privacy_unit=privacy_unit) if privacy_unit else None
    opening = dict(multipliers=mults, budget=budget, noise_seed=noise_seed, dataset=dataset, privacy_unit=unit)
    ledger, (learned, stats, std2, tau) = run_plan(df, _draft_run(epsilon, delta, plan, opening, (
        typed, label, privacy_unit, id_schema, missing_values)), schema=id_schema)
    done = complete_schema(learned, stats, std2, tau)
    cols = [c for c in done.columns if c.name != label]
    label_categories = None
    if label:
        cats = [c for c in done.column(label).categories if c != OTHER]
        if len(cats) < 2:
            raise SchemaError(f"the label {label!r}: fewer than two classes cleared the noise (kept {cats}); draft "
                              f"with more budget (--epsilon) or declare its classes.")
        label_categories = cats
    if privacy_unit:
        cols.append(Column(privacy_unit, "id"))
    # the columns whose bounds and categories were released: a fit clips their numbers to the bounds and reads a
    # category not listed (one held by too few records to clear the noise) as "(other)", per value
    notes = {"drafted": "released with budget by `mmdsynth schema` (its ledger is beside this file); review every "
                        "line before fitting: types, nullability, bounds and categories are noisy",
             "dp_inferred_columns": [c for c in done.notes.get("dp_inferred_columns", []) if c != label]}
    schema = Schema(cols, label, label_categories, "mmdsynth schema (dp draft)", notes,
                    missing_values=list(missing_values), privacy_unit=privacy_unit)
    return schema, ledger


def _draft_run(epsilon: float, delta: float | None, plan, opening: dict, parts: tuple):
    """The draft's whole run (:func:`~mmdsynth.privacy.engine.run_plan`): the rows' public facts, the delta left out
    settled from their count (rows, or persons), the engine opened (``opening``: its options; half the delta reserved
    for the categories' thresholds, whatever release 1 says), the two releases (:func:`_draft_stages` with
    ``parts``), the charge. Returns (the ledger, what the releases found)."""
    facts = yield Facts()
    d = default_delta(facts.n_records) if delta is None else float(delta)
    engine = yield Open(epsilon, d, plan, options=dict(opening, reserved_delta=0.5 * d))
    found = yield from _draft_stages(engine, facts, *parts)
    engine.charge(f"schema draft of {opening['dataset'] or 'a table'}")
    return engine.ledger, found


def _draft_stages(engine, facts, typed: list, label, privacy_unit, id_schema, missing_values):
    """The draft's two releases as stages (run by ``engine`` on the rows or persons, ``facts`` their public facts):
    the kinds of every column's values, then the bounds and categories of the typed draft, read from the rows as the
    typed draft reads them (:class:`_Tolerant`). Returns (the typed draft's columns to learn, their noisy statistics,
    their noise std, the categories' threshold)."""
    # -- release 1: the kinds of every column's values --------------------------------------------------------
    sens1 = math.sqrt(2 * len(typed))
    noisy, = yield Sums(ValueKinds(typed, missing_values), (GaussianRelease(
        "types", sens1, f"schema draft, types: counts of {list(KINDS)} among the values of {len(typed)} column(s)",
        {"m": int(facts.n_records), "sensitivity": f"sqrt(2 x {len(typed)} columns): replacing a record moves one "
                                                    f"count down and one up in each column's kind counts"},
        lambda totals: {n: torch.as_tensor(totals[n]) for n in typed}),))
    std1 = engine.sigma * engine.multiplier("types") * sens1
    columns = []
    for n in typed:
        d = column_type(noisy[n].numpy(), std1)
        kind = d.pop("type")
        if kind == "datetime":
            columns.append(Column(n, "numeric", nullable=d.get("nullable", False), datetime=d["resolution"]))
        elif kind == "boolean":
            columns.append(Column(n, "categorical", boolean=True, nullable=d.get("nullable", False)))
        else:
            columns.append(Column(n, kind, integer=d.get("integer", False), nullable=d.get("nullable", False)))
    if privacy_unit:
        columns.append(Column(privacy_unit, "id"))
    label_col = Column(label, "categorical", nullable=True) if label else None
    draft = Schema(columns + ([label_col] if label_col else []), None, None, "mmdsynth schema (dp draft)",
                   missing_values=list(missing_values), privacy_unit=privacy_unit)
    # -- release 2: bounds and categories of the typed draft ------------------------------------------------------
    learned = replace(draft, columns=[c for c in draft.columns if c.kind != "id"], privacy_unit=None)
    todo = SchemaInference.of(learned)
    std2 = engine.sigma * engine.multiplier("schema") * todo.sensitivity
    tau = todo.category_threshold(std2, engine.delta) if todo.categorical else None
    stats = yield from schema_stages(facts, todo, tau, todo.threshold_delta(engine.delta),
                                     ids=id_schema.person_ids if privacy_unit else None,
                                     validate=_Tolerant(draft, privacy_unit))
    return learned, stats, std2, tau


class _Tolerant:
    """The rows as the typed ``draft`` reads them (:func:`_tolerant`), the person column kept as it is: the view
    release 2 counts in (:meth:`~mmdsynth.engines.Source.validated`, each value read by itself)."""

    def __init__(self, draft: Schema, privacy_unit: str | None):
        self.draft, self.privacy_unit = draft, privacy_unit

    def validate(self, df: pd.DataFrame) -> pd.DataFrame:
        frame = _tolerant(df, self.draft)
        if self.privacy_unit:
            frame[self.privacy_unit] = df[self.privacy_unit].to_numpy()
        return frame


def write_draft(schema: Schema, ledger, out) -> tuple[Path, Path]:
    """Write the draft (``out``) and its ledger beside it (``STEM`` + :data:`~mmdsynth._io.LEDGER_SUFFIX`, as a
    distilled table's), both or neither."""
    out = Path(out)
    ledger_path = out.with_name(out.stem + LEDGER_SUFFIX)
    with atomic_write(ledger_path) as tmp_ledger, atomic_write(out) as tmp:
        tmp.write_text(json.dumps(schema.to_dict(), indent=2))
        tmp_ledger.write_text(json.dumps(sealed({"format": SCHEMA_LEDGER_FORMAT, "schema": out.name,
                                                 "ledger": ledger.to_list()}), indent=2))
    return out, ledger_path
