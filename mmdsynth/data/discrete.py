"""A table as a discrete domain, for marginal-based methods (MST, AIM): one attribute per learned column.

Everything here is public, from the schema alone (:class:`Domain`): a categorical column's values are its declared
categories, a numeric (or datetime) column's are the cells of its public grid
(:class:`~mmdsynth.data.numeric_sketch.ColumnGrid`, from the declared bounds: atoms at the bounds and at 0, edges
log-spaced from 1e-4 of the width outwards and evenly spaced, so heavy-tailed columns keep resolution near 0),
coarsened to at most ``max_cells`` cells; a nullable column has one more value, "missing", last; the label is an
attribute like the others. ID columns are not learned.

* :meth:`Domain.codes` reads a table already checked against the schema into integer codes, each value by itself
  (a category's text, a number's cell): one record's codes depend on that record alone.
* :meth:`Domain.encoded` turns codes back into the rows a min-max :class:`~mmdsynth.data.encoding.TableEncoder`
  decodes (post-processing: a cell's value drawn uniformly inside it, an atom exactly), so generated tables get
  the same dtypes, dates, IDs and constraints as every other method's.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ..errors import InvalidParameterError
from .encoding import TableEncoder
from .numeric_sketch import ColumnGrid
from .schema import Schema
from ..statistics.values import category_indices, category_text

#: numeric columns get at most this many cells by default (the peers' public grid: issue 47)
DEFAULT_CELLS = 32


@dataclass(frozen=True)
class Domain:
    """The discrete domain of a table: attribute names (learned columns in the encoder's order, then the label)
    and their sizes, with the grid of every numeric attribute."""

    schema: Schema
    max_cells: int
    grids: dict
    #: "public": every numeric grid from the schema alone; "released": cut by released 1-way marginals (:meth:`adapted`)
    grid: str = "public"

    @classmethod
    def of(cls, schema: Schema, max_cells: int | None = DEFAULT_CELLS) -> "Domain":
        """The domain with numeric columns on their public grid coarsened to ``max_cells`` cells (None: the fine
        grid itself, :meth:`fine`)."""
        if max_cells is not None and (not isinstance(max_cells, int) or max_cells < 2):
            raise InvalidParameterError(f"max_cells must be a whole number >= 2; got {max_cells!r}.")
        grids = {c.name: ColumnGrid.of(c).coarsened(max_cells) for c in schema.columns if c.kind == "numeric"}
        return cls(schema, max_cells, grids)

    def adapted(self, fine_counts: dict) -> "Domain":
        """The same columns with each numeric one's cells cut where its released 1-way marginal on :meth:`fine`
        (``fine_counts``: {column: noisy counts}) puts equal mass (:meth:`ColumnGrid.by_mass`): post-processing of
        a release, so public once it is made. At most ``max_cells`` cells each; a nullable column's "missing"
        count is not part of the cut."""
        grids = dict(self.grids)
        for name in grids:
            fine = ColumnGrid.of(self.schema.column(name))
            if name in fine_counts and self.max_cells is not None:
                p = simplex_projection(np.asarray(fine_counts[name], dtype=np.float64)[:fine.n_cells])
                grids[name] = fine.by_mass(p, self.max_cells)
        return Domain(self.schema, self.max_cells, grids, "released")

    @classmethod
    def from_dict(cls, schema: Schema, d: dict) -> "Domain":
        """The domain :meth:`to_dict` wrote (a release's): the public grids, or the released cuts it lists."""
        domain = cls.of(schema, d.get("max_cells"))
        if d.get("grid", "public") == "public":
            return domain
        grids = {name: ColumnGrid(np.asarray(g["edges"], dtype=np.float64), np.asarray(g["atoms"], dtype=bool))
                 for name, g in d["edges"].items()}
        return cls(schema, domain.max_cells, {**domain.grids, **grids}, d["grid"])

    def fine(self) -> "Domain":
        """The same columns with numeric ones on their full public grid (one cell per integer up to 256 values,
        log-spaced and even edges otherwise): every cell of this domain lies in one cell of its coarsening."""
        return Domain.of(self.schema, None)

    def coarse_of_fine(self, name: str) -> np.ndarray:
        """For attribute ``name``: the cell of this domain holding each cell of :meth:`fine`'s (missing: missing)."""
        if name not in self.grids:
            return np.arange(self.size(name))
        fine = ColumnGrid.of(self.schema.column(name))
        lo, hi = _cell_ranges(fine)
        out = self.grids[name].cells((lo + hi) / 2)
        if self.size(name) > self.grids[name].n_cells:               # nullable: missing maps to missing
            out = np.append(out, self.grids[name].n_cells)
        return out

    @cached_property
    def attributes(self) -> list[str]:
        enc = TableEncoder(self.schema)
        return [c.name for c in enc.numeric + enc.categorical] + ([self.schema.label] if self.schema.label else [])

    def size(self, name: str) -> int:
        """How many values attribute ``name`` takes (cells or categories, plus "missing" when nullable)."""
        if name == self.schema.label:
            return len(self.schema.label_categories)
        col = self.schema.column(name)
        base = self.grids[name].n_cells if col.kind == "numeric" else len(col.categories)
        return base + bool(col.nullable)

    @property
    def sizes(self) -> dict[str, int]:
        return {a: self.size(a) for a in self.attributes}

    def to_dict(self) -> dict:
        out = {"kind": "discrete-domain", "max_cells": self.max_cells, "sizes": self.sizes}
        if self.grid != "public":
            out.update(grid=self.grid, edges={name: {"edges": g.edges.tolist(), "atoms": g.atoms.tolist()}
                                              for name, g in self.grids.items()})
        return out

    def codes(self, clean: pd.DataFrame) -> np.ndarray:
        """(n, attributes) int64 codes of a table checked against the schema (``TableEncoder.clean``), each value
        read by itself: a numeric value's cell, a category's index among the declared ones, "missing" last."""
        out = np.empty((len(clean), len(self.attributes)), dtype=np.int64)
        for j, name in enumerate(self.attributes):
            s = clean[name]
            if name in self.grids:
                v = s.to_numpy(dtype=np.float64)
                missing = np.isnan(v)
                cells = np.full(len(v), self.grids[name].n_cells, dtype=np.int64)
                cells[~missing] = self.grids[name].cells(v[~missing])
                out[:, j] = cells
            else:
                cats = self.schema.label_categories if name == self.schema.label else \
                    self.schema.column(name).categories
                lookup = {category_text(c): i for i, c in enumerate(cats)}
                out[:, j] = category_indices(s, lookup, len(cats))
        return out

    def _fine_cells(self, name: str, coarse: np.ndarray, p_fine: np.ndarray, rng) -> np.ndarray:
        """A fine cell for each coarse cell code, drawn in proportion to ``p_fine`` among the fine cells inside
        it (uniformly when they all have probability 0)."""
        n_fine = ColumnGrid.of(self.schema.column(name)).n_cells
        parent = self.coarse_of_fine(name)[:n_fine]
        p = np.clip(np.asarray(p_fine, dtype=np.float64)[:n_fine], 0, None)
        out = np.empty(len(coarse), dtype=np.int64)
        for cell in np.unique(coarse):
            members = np.nonzero(parent == cell)[0]
            w = p[members]
            w = w / w.sum() if w.sum() > 0 else np.full(len(members), 1 / len(members))
            rows = np.nonzero(coarse == cell)[0]
            out[rows] = rng.choice(members, size=len(rows), p=w)
        return out

    def encoded(self, codes: np.ndarray, rng: np.random.Generator,
                within: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(X, y) for a min-max :class:`TableEncoder` of the schema, from codes (post-processing): a numeric
        cell's value drawn uniformly inside it (an atom: its value), categories one-hot, missing flags.
        ``within`` ({numeric column: probabilities of its :meth:`fine` cells}, e.g. from a released fine 1-way
        marginal): a cell's value is drawn from its fine cells in those proportions first, then uniformly inside
        the fine cell, so a spike (40 hours a week) inside a wide cell comes back as the spike."""
        enc = TableEncoder(self.schema)
        index = {a: j for j, a in enumerate(self.attributes)}
        n = len(codes)
        parts = []
        for c in enc.numeric:
            grid, k = self.grids[c.name], codes[:, index[c.name]]
            present = k < grid.n_cells
            kk = np.where(present, k, 0)
            if within and c.name in within:
                grid, kk = ColumnGrid.of(c), self._fine_cells(c.name, kk, np.asarray(within[c.name]), rng)
            lo, hi = _cell_ranges(grid)
            v = lo[kk] + rng.random(n) * (hi[kk] - lo[kk])
            b_lo, b_hi = c.bounds
            parts.append(np.where(present, (v - b_lo) / (b_hi - b_lo), 0.5)[:, None])
        for c in enc.categorical:
            parts.append(np.eye(len(c.categories) + c.nullable)[codes[:, index[c.name]]])
        for c in enc.missing_blocks:
            parts.append(np.eye(2)[(codes[:, index[c.name]] == self.grids[c.name].n_cells).astype(np.int64)])
        X = np.concatenate(parts, 1) if parts else np.zeros((n, 0))
        y = codes[:, index[self.schema.label]] if self.schema.label else None
        return X, y


def _cell_ranges(grid: ColumnGrid) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of every cell of ``grid`` in cell order: an atom is [edge, edge], an interval its two edges."""
    lo, hi = np.zeros(grid.n_cells), np.zeros(grid.n_cells)
    k = 0
    for i, edge in enumerate(grid.edges):
        if grid.atoms[i]:
            lo[k] = hi[k] = edge
            k += 1
        if i < len(grid.edges) - 1:
            lo[k], hi[k] = edge, grid.edges[i + 1]
            k += 1
    return lo, hi


def simplex_projection(y) -> np.ndarray:
    """The probability vector closest (L2) to ``y`` divided by its sum's scale: the maximum-likelihood model of one
    noisy marginal alone under Gaussian noise (what mirror descent converges to on 1-way measurements), computed
    exactly (sort and threshold: Duchi et al. 2008). Post-processing."""
    y = np.asarray(y, dtype=np.float64)
    total = max(float(y.sum()), 1.0)
    v = y / total
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.nonzero(u - css / np.arange(1, len(u) + 1) > 0)[0][-1]
    return np.maximum(v - css[k] / (k + 1), 0.0)
