"""Completing a schema from the private table, paid for with privacy budget.

A schema should come from public knowledge. When the user cannot declare some numeric
bounds or category lists and asks mmdsynth to find them (``schema_share=...``, CLI
``--infer-schema SHARE``), they are released here with the Gaussian mechanism as one part
of the fit's privacy plan, and recorded in the ledger. Nothing is inferred silently.

The data-touching function is :func:`release_schema_statistics` (small, tested); the
rest is post-processing of its output.

* **Numeric bounds.** Each column's values are counted in a fixed, data-independent grid of
  geometric bins (edges 0 and +-2^(k/4), k = -40..160: about 1e-3 to 1e12, 19 % wide). The
  bounds are the outer edges of the lowest and highest bins whose noisy count clears
  ``NUMERIC_THRESHOLD_SIGMAS`` noise standard deviations (the bin of the largest noisy
  count when none does). Values outside them are clipped before encoding.
* **Categories.** Each observed value's count gets Gaussian noise and is kept if it clears
  the threshold ``tau = 1 + std * z``. A value held by one record can appear in one of two
  neighbouring tables only; it is released with probability ``P[1 + N(0, std^2) > tau]``,
  so the thresholding adds ``delta_threshold`` = (number of inferred categorical columns) x
  that probability to delta (a union bound), on top of the Gaussian plan's delta. Values
  that are not kept are mapped to the catch-all category ``OTHER``, which every inferred
  category list ends with.
* **Sensitivity.** A record adds one count to one bin (or value) of every inferred column,
  so replacing a record moves at most two counts per column by 1: L2 sensitivity
  sqrt(2 c) for c inferred columns, jointly.
* **Persons.** Under a privacy unit a record is a person: their rows' numeric bins weigh 1 in all,
  and each person adds **one** value per categorical column at weight 1 (the value most of their
  rows hold; :func:`~mmdsynth.statistics.tables.person_values`), so the threshold's delta holds per person as it
  does per row.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import norm

from ..engines import SourceFacts, as_source
from ..errors import SchemaError
from ..privacy.engine import GaussianRelease, Sums
from ..statistics.tables import SchemaCounts, SchemaTotals, bin_edges
from .schema import OTHER, RESOLUTION_SECONDS, Schema, conform, declared_part, inferred_columns  # noqa: F401

#: numeric bins: a bin bounds the data when its noisy count exceeds this many noise stds
#: (about 400 bins per column: the chance that any empty bin clears it is below 1e-4)
NUMERIC_THRESHOLD_SIGMAS = 5.0
#: share of delta that the category thresholds use when categories are inferred
THRESHOLD_DELTA_SHARE = 0.5


@dataclass(frozen=True)
class SchemaInference:
    """What will be inferred (public: decided from the schema alone, before any row is read)."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]

    @classmethod
    def of(cls, schema: Schema) -> "SchemaInference":
        return cls(tuple(c.name for c in schema.columns if c.kind == "numeric" and c.bounds is None),
                   tuple(c.name for c in schema.columns if c.kind == "categorical" and c.categories is None))

    def __bool__(self) -> bool:
        return bool(self.numeric or self.categorical)

    @property
    def sensitivity(self) -> float:
        return math.sqrt(2 * (len(self.numeric) + len(self.categorical)))

    def threshold_delta(self, delta: float) -> float:
        """The part of delta the category thresholds use (0 when no categories are inferred)."""
        return THRESHOLD_DELTA_SHARE * delta if self.categorical else 0.0

    def category_threshold(self, noise_std: float, delta: float) -> float:
        """tau with (number of inferred categorical columns) x P[1 + N(0, std^2) > tau] = threshold delta."""
        per_column = self.threshold_delta(delta) / len(self.categorical)
        return 1.0 + noise_std * float(norm.isf(per_column))


def schema_stages(facts, inference: SchemaInference, category_threshold: float | None = None,
                  threshold_delta: float = 0.0, ids=None, validate=None):
    """The stage of schema inference's release (a planner's part, run by
    :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run`, whose plan holds a ``"schema"`` release): noisy counts for the
    columns to infer, read from the run's rows (``facts``: their :class:`~mmdsynth.engines.SourceFacts`, public),
    checked first against ``validate`` (a schema still to complete, or another object with a ``validate(frame)``
    method: :meth:`~mmdsynth.engines.Source.validated`; shards are checked as they are read) where given.

    ``ids``: the schema's reading of the person column (:meth:`Schema.person_ids`) when the rows are a person table
    (each person then adds one value per categorical column, :func:`~mmdsynth.statistics.tables.person_values`).

    Returns ``{column: {"edges": ..., "counts": noisy per-bin counts}}`` for numeric
    columns and ``{column: {"values": [...], "counts": noisy counts}}`` for categorical
    ones (values sorted): one Gaussian release of all these counts at the joint sensitivity
    ``inference.sensitivity``. The observed values are private until thresholded: callers pass
    this only to :func:`complete_schema`.
    """
    exact = SchemaTotals(inference, persons=facts.persons)
    values = exact.values                  # the observed categories, private until thresholded (complete_schema)

    description, assumed = schema_release_description(inference, category_threshold, threshold_delta)
    noisy, = yield Sums(SchemaCounts(inference, ids), (GaussianRelease(
        "schema", inference.sensitivity, description, {"m": facts.n_records, **assumed}, exact),), validate)
    out: dict[str, dict] = {name: {"edges": bin_edges(), "counts": noisy[name]} for name in inference.numeric}
    out.update({name: {"values": values[name], "counts": noisy[name]} for name in inference.categorical})
    return out


def release_schema_statistics(data, inference: SchemaInference, engine, category_threshold: float | None = None,
                              threshold_delta: float = 0.0, ids=None) -> dict[str, dict]:
    """:func:`schema_stages` run alone by ``engine`` (a :class:`~mmdsynth.privacy.engine.PrivacyEngine` whose plan
    holds a ``"schema"`` release) on ``data``."""
    source = as_source(data)
    return engine.run(source, schema_stages(SourceFacts.of(source), inference, category_threshold, threshold_delta,
                                            ids))


def complete_schema(schema: Schema, stats: dict[str, dict], noise_std: float,
                    category_threshold: float | None) -> Schema:
    """Post-processing: the schema with the noisy statistics turned into bounds and categories
    (bounds of integer columns rounded outwards to integers, of datetime columns to their resolution)."""
    columns = []
    for col in schema.columns:
        s = stats.get(col.name)
        if s is None:
            columns.append(col)
        elif col.kind == "numeric":
            counts, edges = s["counts"].numpy(), s["edges"]
            kept = np.nonzero(counts > NUMERIC_THRESHOLD_SIGMAS * noise_std)[0]
            lo_bin, hi_bin = (kept[0], kept[-1]) if len(kept) else (int(np.argmax(counts)),) * 2
            lo, hi = float(edges[lo_bin]), float(edges[hi_bin + 1])
            unit = RESOLUTION_SECONDS[col.datetime] if col.datetime else 1.0 if col.integer else None
            if unit is not None:         # integer and datetime bounds: outwards to whole units
                lo, hi = math.floor(lo / unit) * unit, math.ceil(hi / unit) * unit
                hi = hi if hi > lo else lo + unit
            columns.append(replace(col, bounds=(lo, hi)))
        else:
            kept = sorted(v for v, c in zip(s["values"], s["counts"].tolist()) if c > category_threshold)
            columns.append(replace(col, categories=[v for v in kept if v != OTHER] + [OTHER]))
    inferred = sorted(stats)
    notes = {**schema.notes, "dp_inferred_columns": inferred}
    kinds = {c.name: c for c in columns}
    constraints = []                    # declared combinations whose values survived the released categories
    for k in schema.constraints:
        values = [v for v in k["values"] if all(kinds[c].kind != "categorical" or str(x) in map(str, kinds[c].categories)
                                                for c, x in zip(k["columns"], v))]
        if values:
            constraints.append({**k, "values": values})
    return Schema(columns, schema.label, schema.label_categories, f"{schema.source}+dp-inferred", notes, constraints)


def schema_release_description(inference: SchemaInference, threshold: float | None,
                               threshold_delta: float) -> tuple[str, dict]:
    """What the schema release's ledger entry says it released, and what it assumed."""
    parts = []
    if inference.numeric:
        parts.append(f"numeric bounds of {list(inference.numeric)} (noisy counts in {len(bin_edges()) - 1} "
                     f"geometric bins)")
    if inference.categorical:
        kept = f"noisy counts kept above {threshold:.4g}" if threshold is not None else "noisy counts"
        parts.append(f"categories of {list(inference.categorical)} ({kept}; "
                     f"the thresholds use delta {threshold_delta:.3g} of the plan's delta)")
    assumed = {"sensitivity": "sqrt(2 x inferred columns): replacing a record takes 1 "
               "from one bin and adds 1 to another in each inferred column's counts"}
    return "schema inference: " + "; ".join(parts), assumed


def require_complete(schema: Schema) -> None:
    """Refuse a schema with missing bounds or categories, naming them and the two fixes."""
    todo = SchemaInference.of(schema)
    if todo:
        raise SchemaError(
            f"the schema leaves out bounds of numeric column(s) {list(todo.numeric)} and categories of "
            f"categorical column(s) {list(todo.categorical)}. mmdsynth never reads them from the private "
            f"data silently: declare them in the schema, or let mmdsynth infer them privately with a share "
            f"of the budget (schema_share=0.1)."
        )
