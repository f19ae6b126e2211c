"""The statistics of a table: rows checked against the schema, clique cell counts (MST, AIM, the hybrid), the
numeric sketch's cell counts, schema inference's bins and category counts, the types release's value kinds. Each
reads one batch, every record's part read from its own values."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from .rows import checked_rows, unweighted
from .values import KINDS, _each, marked_missing, value_kind


class CheckedRows:
    """A statistic for :meth:`~mmdsynth.engines.Source.total`: each batch checked against the schema (the table
    encoder's ``clean``), counted. Run before the charge, so a bad shard is refused at no cost."""

    def __init__(self, encoder):
        self.encoder = encoder

    def __call__(self, batch) -> dict:
        return {"rows": len(checked_rows(batch, self.encoder)[0])}


def clique_key(clique) -> str:
    """The name of a clique's counts in a release (attributes joined by ``|``)."""
    return "|".join(clique)


class CliqueCounts:
    """The statistic of :func:`clique_counts` for :meth:`~mmdsynth.engines.Source.total`: each clique's cell
    counts over one batch of a table, after ``encoder.clean`` (the rows checked against the schema), every record's
    cell read from its own values (:meth:`~mmdsynth.data.discrete.Domain.codes`)."""

    def __init__(self, domain, encoder, cliques):
        self.domain, self.encoder, self.cliques = domain, encoder, [tuple(c) for c in cliques]

    def __call__(self, batch) -> dict:
        df, weights = checked_rows(batch, self.encoder)   # a person table: each row weighs 1 / its person's rows
        codes = self.domain.codes(df)
        index = {a: j for j, a in enumerate(self.domain.attributes)}
        sizes = self.domain.sizes
        out = {}
        for clique in self.cliques:
            shape = [sizes[a] for a in clique]
            flat = np.ravel_multi_index([codes[:, index[a]] for a in clique], shape)
            out[clique_key(clique)] = np.bincount(flat, weights=weights, minlength=math.prod(shape)).astype(np.float64)
        return out


class SketchCounts:
    """The statistic the numeric sketch sums, for :meth:`~mmdsynth.engines.Source.total`: each
    sketched column's cell counts over one batch of a table, after ``encoder.clean`` (the table
    checked against, and conformed to, the complete schema) when an encoder is given."""

    def __init__(self, sketch, encoder=None):
        self.sketch, self.encoder = sketch, encoder

    def __call__(self, batch) -> dict:
        # a person table: each row weighs 1 / its person's rows
        df, weights = unweighted(batch) if self.encoder is None else checked_rows(batch, self.encoder)
        out = {}
        for name, grid in self.sketch.grids.items():     # missing values (nullable columns) count nowhere
            values = df[name].to_numpy(dtype=np.float64)
            keep = ~np.isnan(values)
            out[name] = np.bincount(grid.cells(values[keep]), weights=None if weights is None else weights[keep],
                                    minlength=grid.n_cells).astype(np.float64)
        return out


def bin_edges() -> np.ndarray:
    """The public grid: 0 and +-2^(k/4) for k = -40..160, ascending (403 edges, 402 bins)."""
    pos = 2.0 ** (np.arange(-40, 161) / 4.0)
    return np.concatenate([-pos[::-1], [0.0], pos])


class SchemaCounts:
    """The statistic schema inference sums, for :meth:`~mmdsynth.engines.Source.total`: of one batch
    of a table checked by :meth:`Schema.validate` (numbers finite, missing values only in nullable
    columns, where they are not counted), the per-bin
    counts of each numeric column to infer and the count of every value of each categorical one.

    Under a privacy unit (a batch of :class:`~mmdsynth.statistics.rows.Weighted` rows, ``ids`` the schema's reading of the
    person column): numeric bins sum the rows' weights (each person's rows weigh 1 in all), and a categorical
    column's counts are kept per person, ``{person: {value: rows}}`` (integers: exact across shards, added key by
    key), so that :func:`person_values` can give each person **one** value at weight 1. Weighting a person's K
    distinct values by 1/K each would let a heavy person propose K candidate values, each clearing the keep-threshold
    with about the delta meant for one record (issue 80)."""

    def __init__(self, inference, ids=None):
        self.inference, self.ids = inference, ids

    def __call__(self, batch) -> dict:
        df, weights = unweighted(batch)             # a person table: each row weighs 1 / its person's rows
        edges = bin_edges()
        out: dict = {}
        for name in self.inference.numeric:                 # missing values (nullable columns) count nowhere
            values = df[name].to_numpy(dtype=float)
            keep = ~np.isnan(values)
            idx = np.clip(np.searchsorted(edges, values[keep], side="right") - 1, 0, len(edges) - 2)
            out[name] = np.bincount(idx, weights=None if weights is None else weights[keep],
                                    minlength=len(edges) - 1).astype(np.float64)
        if self.inference.categorical and weights is not None and self.ids is None:
            raise RuntimeError("category inference over persons needs the person column's reader (ids); nothing "
                               "was released.")
        persons = self.ids(df) if weights is not None and self.inference.categorical else None
        for name in self.inference.categorical:
            col = df[name]
            keep = col.notna().to_numpy()
            if persons is None:
                out[name] = {str(k): float(v) for k, v in col[keep].map(str).value_counts(sort=False).items()}
            else:                                   # rows per (person, value): each person's value chosen later
                rows = pd.Series(1, index=pd.MultiIndex.from_arrays(
                    [persons[keep].to_numpy(), col[keep].map(str).to_numpy()])).groupby(level=[0, 1]).sum()
                nested: dict = {}
                for (person, value), n in rows.items():
                    nested.setdefault(person, {})[str(value)] = int(n)
                out[name] = nested
        return out


def person_values(rows: dict) -> dict[str, float]:
    """Category counts with each person counted once: ``rows`` is ``{person: {value: rows}}`` (summed over every
    shard); each person adds 1 to the value most of their rows hold (ties: the first in text order), a function of
    that person's rows alone. Replacing a person moves two counts by 1: the sensitivity of one record, and a value
    held by one person only is a candidate with count 1, whatever their number of rows."""
    counts: dict[str, float] = {}
    for values in rows.values():
        top = min(values.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        counts[top] = counts.get(top, 0.0) + 1.0
    return counts


class ValueKinds:
    """The statistic of the types release, for :meth:`~mmdsynth.engines.Source.total`: every column's count of
    each of :data:`KINDS` over one batch of text cells (declared missing-value markers count as missing); under a
    privacy unit each row weighs 1 / its person's rows."""

    def __init__(self, columns, markers=()):
        self.columns, self.markers = list(columns), list(markers)

    def __call__(self, batch) -> dict:
        df, weights = unweighted(batch)
        out = {}
        for name in self.columns:
            s = df[name]
            kinds = np.asarray(_each(s, value_kind), dtype=np.int64)      # each distinct text read once
            kinds[marked_missing(s, self.markers)] = 0
            out[name] = np.bincount(kinds, weights=weights, minlength=len(KINDS)).astype(np.float64)
        return out


class SchemaTotals:
    """The schema release's exact values from :class:`SchemaCounts`' totals (the ``exact`` of its Gaussian release):
    numeric bins as they are; each categorical column's counts in the sorted order of its observed values, kept in
    ``values`` (private until thresholded: :func:`~mmdsynth.data.private_schema.complete_schema`); with ``persons``
    (a person table) each person first reduced to one value per column (:func:`person_values`)."""

    def __init__(self, inference, *, persons: bool):
        self.inference, self.persons = inference, persons
        self.values: dict[str, list] = {}

    def __call__(self, totals: dict) -> dict:
        if self.persons:                   # a person table: each person one value per column, at weight 1
            totals.update({name: person_values(totals[name]) for name in self.inference.categorical})
        out = {name: torch.as_tensor(totals[name], dtype=torch.float64) for name in self.inference.numeric}
        for name in self.inference.categorical:
            self.values[name] = sorted(totals[name])
            out[name] = torch.as_tensor([totals[name][v] for v in self.values[name]], dtype=torch.float64)
        return out
