"""Table preparation shared by every method that takes tables: the releases a table needs before its
records can be encoded (private schema inference, the numeric sketch of the quantile encoding), and
the encoder rebuilt from a release.

A method declares the table's releases in its plan (:func:`table_shares`), lets its
:class:`~mmdsynth.privacy.engine.PrivacyEngine` calibrate the whole plan, then its planner yields from
:func:`table_stages` the table's stages (schema inference, :func:`~mmdsynth.data.private_schema.schema_stages`; the
numeric sketch, :func:`~mmdsynth.data.numeric_sketch.sketch_stages`; the rows per person), which the engine runs,
and gets back the encoder built from their noisy output (post-processing).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from ..data.encoding import TableEncoder
from ..data.numeric_sketch import DEFAULT_SHARE, SKETCH_PREFIX, NumericSketch, max_cells, sketch_stages
from ..data.private_schema import (NUMERIC_THRESHOLD_SIGMAS, SchemaInference, complete_schema, require_complete,
                                   schema_stages)
from ..data.schema import Schema
from ..errors import InvalidParameterError
from ..privacy.engine import GaussianRelease, Sums
from ..statistics.persons import ROWS_EDGES, RowsPerPerson
from ..validation import user_stacklevel

NUMERIC_ENCODINGS = ("quantile", "minmax")

#: with a privacy unit, the histogram of rows per person (how many rows each synthetic person gets) takes this
#: share of the plan's privacy (public constant)
ROWS_SHARE = 0.05
#: the release's tensor name
ROWS_TENSOR = "rows_per_person"


class TableOptions:
    """The options of a release-once method that takes tables (a mixin before
    :class:`~mmdsynth.methods.KernelGeneratorMethod` in the bases; methods that take images only leave it out,
    and their signatures do not list these):

    ``proportions_share``: the class proportions' share of the privacy (released, so that generated labels
    follow them; default 0.1). ``schema_share``: release the bounds and categories the schema leaves out from
    the data, with this share (None: refused, naming the columns). ``numeric_encoding``: numeric columns through
    their privately released CDF (``"quantile"``, default) or scaled by their declared bounds (``"minmax"``).
    ``numeric_share``: the quantile encoding's share (default 0.1). Shares of one (epsilon, delta), not extra
    charges.
    """

    param_help = {
        "proportions_share": "the class proportions' share of the privacy (released so generated labels follow them)",
        "schema_share": "release the bounds / categories the schema leaves out with this share (none: refused)",
        "numeric_encoding": '"quantile" (numeric columns through their released CDF) or "minmax" (declared bounds)',
        "numeric_share": "the quantile encoding's share of the privacy",
    }
    param_choices = {"numeric_encoding": NUMERIC_ENCODINGS}

    def __init__(self, *args, proportions_share: float = 0.1, schema_share: float | None = None,
                 numeric_encoding: str = "quantile", numeric_share: float = DEFAULT_SHARE, **kwargs):
        super().__init__(*args, **kwargs)
        self.proportions_share, self.schema_share = proportions_share, schema_share
        self.numeric_encoding, self.numeric_share = numeric_encoding, numeric_share


def table_shares(schema: Schema, *, schema_share: float | None, numeric_encoding: str,
                 numeric_share: float | None) -> dict[str, float]:
    """The Gaussian releases a table adds to a plan before its records can be encoded, by their share
    of the privacy: ``schema`` when the schema leaves out bounds or categories (refused without
    ``schema_share``, naming the columns), ``numeric_sketch`` for quantile-encoded numeric columns."""
    if numeric_encoding not in NUMERIC_ENCODINGS:
        raise InvalidParameterError(f"numeric_encoding must be one of {NUMERIC_ENCODINGS}; got {numeric_encoding!r}.")
    todo = SchemaInference.of(schema)
    if todo and schema_share is None:
        require_complete(schema)                 # raises, naming the columns and the fixes
    shares = {}
    if todo:
        shares["schema"] = float(schema_share)
    if numeric_encoding == "quantile" and schema.numeric and numeric_share:
        shares["numeric_sketch"] = float(numeric_share)
    shares.update(unit_shares(schema))
    return shares


def unit_shares(schema: Schema) -> dict[str, float]:
    """The release a declared privacy unit adds to a plan: the rows-per-person histogram (:data:`ROWS_SHARE`)."""
    return {ROWS_TENSOR: ROWS_SHARE} if schema.privacy_unit is not None else {}


#: cells of the rows-per-person histogram below this many noise std are read as empty (post-processing)
ROWS_THRESHOLD_SIGMAS = 3.0


def rows_per_person_stages(engine, facts):
    """The stage of the rows-per-person release when ``engine``'s plan holds one (a declared privacy unit; nothing
    otherwise), a planner's part: the noisy histogram of rows per person over the public cells ``ROWS_EDGES`` (one
    one-hot per person, summed on the run's person table, ``facts`` its public facts, sensitivity sqrt(2) under
    replacing one person), and its noise std, which sampling reads. Returns (tensors, public facts), ``({}, {})``
    without a unit."""
    if ROWS_TENSOR not in engine.multipliers:
        return {}, {}
    if not facts.persons:
        raise RuntimeError("the plan holds the rows per person but the source is not a person table; nothing of "
                           "this release was drawn.")
    tensor, = yield Sums(RowsPerPerson(), (GaussianRelease(
        ROWS_TENSOR, math.sqrt(2.0),
        f"rows per person: a histogram over {len(ROWS_EDGES) - 1} public cells of the {facts.n_records} persons' "
        f"row counts",
        {"m (persons)": int(facts.n_records), "cells (row counts from)": list(ROWS_EDGES[:-1]),
         "sensitivity": "sqrt(2) (one person's one-hot changes cell)"},
        lambda t: torch.as_tensor(t["rows_per_person"])),))
    std = float(engine.sigma * engine.multiplier(ROWS_TENSOR) * math.sqrt(2.0))
    return {ROWS_TENSOR: tensor}, {ROWS_TENSOR: {"noise_std": std}}


def rows_per_person(tensors: dict, facts: dict | None = None) -> np.ndarray | None:
    """The released histogram of rows per person as probabilities of its public cells (post-processing: cells
    below ``ROWS_THRESHOLD_SIGMAS`` noise std, when ``facts`` give it, read as empty, then the closest probability
    vector to the counts, :func:`~mmdsynth.data.discrete.simplex_projection`, which zeroes small cells instead
    of keeping their positive noise), or None when the release holds none."""
    from ..data.discrete import simplex_projection

    t = tensors.get(ROWS_TENSOR)
    if t is None:
        return None
    counts = np.asarray(t, dtype=np.float64)
    std = ((facts or {}).get(ROWS_TENSOR) or {}).get("noise_std")
    if std is not None:                        # cells the noise alone could have filled are read as empty
        keep = counts >= ROWS_THRESHOLD_SIGMAS * std
        keep[np.argmax(counts)] = True
        counts = np.where(keep, counts, 0.0)
    return simplex_projection(counts)


def check_shares(**shares) -> None:
    """Each named share of the privacy is a number in (0, 1) or None (not released)."""
    for name, v in shares.items():
        if v is not None and not (isinstance(v, (int, float)) and 0 < float(v) < 1):
            raise InvalidParameterError(f"{name} must be a number in (0, 1) (a share of the privacy) or None; "
                                        f"got {v!r} (try 0.1).")


def reserved_delta(schema: Schema, delta: float) -> float:
    """The part of delta that private schema inference's category thresholds use (0 without them)."""
    return SchemaInference.of(schema).threshold_delta(delta)


def table_stages(engine, facts, schema: Schema):
    """The stages of what the plan of ``engine`` declared for this table (``"schema"``, ``"numeric_sketch"``, the rows
    per person), a planner's part (run on the table's rows by :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run`),
    and the encoder built from their noisy results: returns (encoder, tensors to save in the release, public facts).
    ``engine``: its plan's public facts (sigma, multipliers, delta); ``facts``: the rows'
    :class:`~mmdsynth.engines.SourceFacts` (their count and column names are public)."""
    todo = SchemaInference.of(schema)
    if todo:
        std = engine.sigma * engine.multiplier("schema") * todo.sensitivity
        tau = todo.category_threshold(std, engine.delta) if todo.categorical else None
        warn_if_noise_swamps(facts.n_records, std, tau, bool(todo.numeric))
        stats = yield from schema_stages(facts, todo, tau, todo.threshold_delta(engine.delta),
                                         ids=schema.person_ids if schema.privacy_unit is not None else None,
                                         validate=schema)     # the rows checked against the schema as declared
        schema = complete_schema(schema, stats, std, tau)
        del stats
    counts, out, maps = {}, {}, None
    if "numeric_sketch" in engine.multipliers:
        sketch = NumericSketch.of(schema)        # public cells from the (declared or inferred) bounds
        std = engine.sigma * engine.multiplier("numeric_sketch") * sketch.sensitivity
        cells = max_cells(facts.n_records, std)  # public: m and sigma
        sketch = sketch.limited(cells)
        counts = yield from sketch_stages(sketch, facts.n_records, encoder=TableEncoder(schema))
        out["numeric_sketch"] = {"noise_std": std, "max_cells": cells}
        maps = sketch.cdfs(counts, std)
    persons, persons_facts = yield from rows_per_person_stages(engine, facts)
    out.update(persons_facts)
    encoder = TableEncoder(schema, list(facts.columns), maps)   # public: names and order, never values
    out.update({"table": encoder.to_dict(), "numeric_encoding": encoder.numeric_encoding})
    return encoder, {**{SKETCH_PREFIX + name: c for name, c in counts.items()}, **persons}, out


def warn_if_noise_swamps(m: int, std: float, tau: float | None, numeric: bool) -> None:
    """Say, with the numbers, when schema inference's noise is too large for the table (public facts
    only: m, the noise std and the threshold, before any row is read): a numeric bin must hold
    NUMERIC_THRESHOLD_SIGMAS std, a category ``tau`` rows, to be told from the noise; when that is
    more than a quarter of the rows, the inferred bounds and categories are mostly noise."""
    need = max(NUMERIC_THRESHOLD_SIGMAS * std if numeric else 0.0, tau or 0.0)
    if need > m / 4:
        warnings.warn(
            f"schema inference on {m} records with noise std {std:.3g} per count: a numeric bin or a category needs "
            f"about {need:.0f} records to be told from the noise, more than a quarter of them, so the inferred "
            f"bounds and categories will mostly be noise. Declare them in the schema, give the inference a larger "
            f"share (schema_share / --infer-schema), or use more rows.", UserWarning, stacklevel=user_stacklevel())


def encoder_of(release) -> TableEncoder | None:
    """The table encoder of a release (see :func:`encoder_from`)."""
    return encoder_from(release.dataset, release.tensors)


def encoder_from(facts: dict, tensors: dict) -> TableEncoder | None:
    """The table encoder from a release's public facts and tensors: its schema and column order, and
    with quantile encoding the numeric columns' CDFs, rebuilt from the released noisy counts
    (post-processing). None for images."""
    table = facts.get("table")
    if not table:
        return None
    encoder = TableEncoder.from_dict(table)
    sketch = facts.get("numeric_sketch")
    if sketch is not None:
        counts = {k[len(SKETCH_PREFIX):]: v for k, v in tensors.items() if k.startswith(SKETCH_PREFIX)}
        encoder = TableEncoder(encoder.schema, encoder.columns, NumericSketch.of(encoder.schema).limited(
            sketch.get("max_cells")).cdfs(counts, sketch["noise_std"]))
    encoder.rows_per_person = rows_per_person(tensors, facts)
    return encoder
