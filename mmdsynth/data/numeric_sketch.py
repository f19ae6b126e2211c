"""Numeric columns encoded through their privately released distribution (quantile encoding).

Min-max scaling with wide public bounds (a user knows "amounts lie between -1M and 2M", not where
the mass is) squeezes most values into a sliver of [0, 1]: the feature map cannot resolve them and
the generator places mass anywhere in the bounds. Instead, each numeric column's distribution is
released as one share of the fit's privacy plan, and the column is mapped through its noisy CDF
(piecewise linear, monotone) before the feature map and back after generation.

* **Public grid** (:class:`ColumnGrid`, from the declared bounds only): edges at the bounds, at
  0 when inside, at +-2^(k/4) (19 % apart) from 1e-4 x the width of the bounds outwards, and at 64
  equal steps; integer columns spanning at most ``INTEGER_UNIT_LIMIT`` values get one cell per
  value instead, other integer columns edges at half-integers. The bounds and 0 are *atoms*:
  cells of width zero, so exact zeros and values at the bounds (rates of 0 or 1, capped amounts)
  come back exactly. With little data or much noise (many columns share the sketch's budget) the
  grid is coarsened to :func:`max_cells` = m / (2 x noise std) cells, from public m and sigma.
* **Release** (:func:`release_numeric_sketch`, the data-touching function): each record adds one
  count to one cell of every sketched column, so replacing a record moves at most two counts per
  column by 1: L2 sensitivity sqrt(2 c) for c columns, jointly; one Gaussian release of all counts.
* **CDF** (:func:`noisy_cdf`, post-processing): counts below ``THRESHOLD_SIGMAS`` noise stds are
  set to 0 (noise on empty cells would otherwise spread mass over the whole range), a mass of
  ``FLOOR`` is spread over the intervals in proportion to their width (so the map is strictly
  increasing between atoms), and the cumulative masses give knots ``(x, u)``; an atom is two knots
  with the same x. Encoding maps x to u by linear interpolation (an atom to the middle of its u
  range); decoding maps u back, so generated values follow the released distribution.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..engines import as_source
from ..privacy.engine import GaussianRelease, Sums
from ..statistics.tables import SketchCounts
from .schema import Column, Schema

#: geometric edges: this many per doubling, from RELATIVE_FLOOR x (hi - lo) up to the bounds
STEPS_PER_OCTAVE = 4
RELATIVE_FLOOR = 1e-4
#: equal-width edges over the bounds, on top of the geometric ones
UNIFORM_CELLS = 64
#: integer columns with at most this many values get one cell per value
INTEGER_UNIT_LIMIT = 256
#: a cell's noisy count is kept when it clears this many noise standard deviations
THRESHOLD_SIGMAS = 1.0
#: probability mass spread over the intervals in proportion to their width
FLOOR = 1e-4
#: the default share of the plan's privacy for the sketch (measured: benchmarks/RESULTS.md)
DEFAULT_SHARE = 0.1
#: the grid is coarsened so that a cell holding 1/cells of the m records has this many noise stds
CELL_COUNT_SIGMAS = 2.0
#: release tensor names of the noisy counts: SKETCH_PREFIX + column
SKETCH_PREFIX = "numeric_sketch/"


@dataclass(frozen=True)
class ColumnGrid:
    """The public cells of one numeric column: intervals between ``edges`` and atoms at some edges."""

    edges: np.ndarray          # strictly increasing, edges[0] = lo, edges[-1] = hi
    atoms: np.ndarray          # bool per edge: the edge is a cell of width zero

    def coarsened(self, max_cells: int | None) -> "ColumnGrid":
        """At most ``max_cells`` cells (the grid itself when it has no more, or for None): atoms and
        bounds kept, every k-th other edge kept."""
        if max_cells is None or self.n_cells <= max_cells:
            return self
        n_atoms = int(self.atoms.sum())
        inner = np.nonzero(~self.atoms)[0]
        room = max(max_cells - 2 * n_atoms + 1, 0)             # intervals between the kept edges
        step = -(-len(inner) // max(room, 1)) if room < len(inner) + n_atoms - 1 else 1
        keep = np.zeros(len(self.edges), bool)
        keep[self.atoms] = True
        keep[inner[step // 2::step] if room else []] = True
        keep[[0, -1]] = True
        return ColumnGrid(self.edges[keep], self.atoms[keep])

    def by_mass(self, p_cells, max_cells: int) -> "ColumnGrid":
        """At most ``max_cells`` cells whose edges are edges of this grid, cut where the probabilities ``p_cells``
        (one per cell of this grid, e.g. a released 1-way marginal's) put equal mass (post-processing: a public
        function of ``p_cells``). Atoms and bounds are kept; each stretch between two of them gets intervals in
        proportion to its mass (at least one), cut at its mass's quantiles; stretches of no mass stay whole."""
        if self.n_cells <= max_cells:
            return self
        p = np.clip(np.asarray(p_cells, dtype=np.float64), 0, None)
        if p.shape != (self.n_cells,):
            raise ValueError(f"p_cells must hold one probability per cell ({self.n_cells}); got {p.shape}.")
        _, interval_slot = self._slots()
        mass = p[interval_slot]                                  # per interval between consecutive edges
        fixed = np.nonzero(self.atoms)[0].tolist() + [0, len(self.edges) - 1]
        fixed = sorted(set(fixed))
        stretches = [(a, b) for a, b in zip(fixed[:-1], fixed[1:]) if b > a]    # intervals a..b-1
        room = max_cells - int(self.atoms.sum())
        if room < len(stretches):
            return self.coarsened(max_cells)
        m = np.asarray([mass[a:b].sum() for a, b in stretches])
        width = np.asarray([b - a for a, b in stretches])
        share = m / m.sum() if m.sum() > 0 else width / width.sum()
        alloc = np.minimum(np.maximum(np.floor(share * room), 1), width).astype(int)
        order = np.argsort(-(share * room - np.floor(share * room)), kind="stable")
        while alloc.sum() < room and (alloc < width).any():      # largest remainders first, then any room left
            for i in order:
                if alloc.sum() < room and alloc[i] < width[i]:
                    alloc[i] += 1
        while alloc.sum() > room:                                # the floors of one made it too many
            alloc[np.argmax(np.where(alloc > 1, alloc, 0))] -= 1
        keep = np.zeros(len(self.edges), bool)
        keep[fixed] = True
        for (a, b), k, mi in zip(stretches, alloc, m):
            if k < 2 or mi <= 0:
                continue
            cum = np.cumsum(mass[a:b - 1]) / mi                  # mass left of each inner edge a+1..b-1
            for q in np.arange(1, k) / k:
                keep[a + 1 + int(np.clip(np.searchsorted(cum, q), 0, b - a - 2))] = True
        return ColumnGrid(self.edges[keep], self.atoms[keep])

    @classmethod
    def of(cls, col: Column) -> "ColumnGrid":
        lo, hi = col.bounds
        width = hi - lo
        if col.integer and width <= INTEGER_UNIT_LIMIT:   # one cell per value: edges between integers
            inner = np.arange(math.ceil(lo), math.floor(hi)) + 0.5
            edges = np.unique(np.concatenate([[lo, hi], inner[(inner > lo) & (inner < hi)]]))
            return cls(edges, np.isin(edges, [lo, hi]))
        k_lo = math.floor(STEPS_PER_OCTAVE * math.log2(RELATIVE_FLOOR * width))
        k_hi = math.ceil(STEPS_PER_OCTAVE * math.log2(max(abs(lo), abs(hi))))
        geo = 2.0 ** (np.arange(k_lo, k_hi + 1) / STEPS_PER_OCTAVE)
        cand = np.concatenate([geo, -geo, np.linspace(lo, hi, UNIFORM_CELLS + 1)])
        if col.integer:                       # cells at least one unit wide, edges between integers
            cand = np.floor(cand) + 0.5
        atoms = [lo, hi] + ([0.0] if lo < 0 < hi else [])
        edges = np.unique(np.concatenate([cand[(cand > lo) & (cand < hi)], atoms]))
        return cls(edges, np.isin(edges, atoms))

    @property
    def n_cells(self) -> int:
        return int(self.atoms.sum()) + len(self.edges) - 1

    def _slots(self) -> tuple[np.ndarray, np.ndarray]:
        """Cell index of each atom edge (-1 for non-atoms) and of each interval, in CDF order."""
        atom_slot = np.full(len(self.edges), -1)
        interval_slot = np.zeros(len(self.edges) - 1, dtype=np.int64)
        k = 0
        for i in range(len(self.edges)):
            if self.atoms[i]:
                atom_slot[i], k = k, k + 1
            if i < len(self.edges) - 1:
                interval_slot[i], k = k, k + 1
        return atom_slot, interval_slot

    def cells(self, values: np.ndarray) -> np.ndarray:
        """The cell of each value (values outside the bounds are clipped to them)."""
        v = np.clip(np.asarray(values, dtype=np.float64), self.edges[0], self.edges[-1])
        atom_slot, interval_slot = self._slots()
        i = np.clip(np.searchsorted(self.edges, v, side="right") - 1, 0, len(self.edges) - 2)
        out = interval_slot[i]
        on_edge = np.searchsorted(self.edges, v)            # index of the edge equal to v, if any
        on_edge = np.clip(on_edge, 0, len(self.edges) - 1)
        is_atom = (self.edges[on_edge] == v) & self.atoms[on_edge]
        out[is_atom] = atom_slot[on_edge[is_atom]]
        return out


@dataclass(frozen=True)
class NumericSketch:
    """What will be released (public: the columns and their grids, from the schema alone)."""

    grids: dict

    @classmethod
    def of(cls, schema: Schema) -> "NumericSketch":
        return cls({c.name: ColumnGrid.of(c) for c in schema.columns if c.kind == "numeric"})

    def limited(self, max_cells: int | None) -> "NumericSketch":
        """The same columns with every grid coarsened to at most ``max_cells`` cells (None: as is)."""
        return NumericSketch({name: g.coarsened(max_cells) for name, g in self.grids.items()})

    @property
    def sensitivity(self) -> float:
        return math.sqrt(2 * len(self.grids))

    def cdfs(self, counts: dict, noise_std: float) -> dict[str, dict]:
        """Post-processing: every column's CDF knots from its released noisy counts."""
        return {name: noisy_cdf(grid, np.asarray(counts[name], dtype=np.float64), noise_std)
                for name, grid in self.grids.items()}


def max_cells(n_records: int, noise_std: float) -> int:
    """How many cells the noise allows (public: m and the calibrated noise std), at least 8."""
    return max(8, int(n_records / (CELL_COUNT_SIGMAS * noise_std)))


def sketch_stages(sketch: NumericSketch, m: int, encoder=None):
    """The stage of the numeric sketch's release (a planner's part, run by
    :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run` on the table's source, whose batches ``encoder`` cleans):
    noisy cell counts of every sketched column of the ``m`` (public) records, one Gaussian release at the joint
    sensitivity ``sketch.sensitivity`` (the plan's ``"numeric_sketch"`` release). Returns {column: noisy counts}."""
    cells = {name: g.n_cells for name, g in sketch.grids.items()}
    noisy, = yield Sums(SketchCounts(sketch, encoder), (GaussianRelease(
        "numeric_sketch", sketch.sensitivity,
        f"numeric-column distributions (quantile encoding): noisy counts of {list(sketch.grids)} in public cells "
        f"inside their declared bounds ({sum(cells.values())} cells)",
        {"m": m, "cells per column (public grid from the bounds)": cells,
         "sensitivity": "sqrt(2 x numeric columns): replacing a record takes 1 from one cell and adds 1 to another in "
                        "each column's counts"},
        lambda totals: {name: torch.as_tensor(totals[name]) for name in sketch.grids}),))
    return noisy


def release_numeric_sketch(data, sketch: NumericSketch, engine, encoder=None) -> dict[str, torch.Tensor]:
    """Noisy cell counts of every sketched column (data-touching: reads ``data``, a DataFrame already
    checked against the schema, or a table :class:`~mmdsynth.engines.Source` whose batches ``encoder``
    cleans; the counts are summed on its engine): :func:`sketch_stages` run alone by ``engine`` (a
    :class:`~mmdsynth.privacy.engine.PrivacyEngine` whose plan holds a ``"numeric_sketch"`` release)."""
    source = as_source(data)
    return engine.run(source, sketch_stages(sketch, source.n_records, encoder))


def noisy_cdf(grid: ColumnGrid, counts, noise_std: float) -> dict:
    """Post-processing: the knots ``{"x": [...], "u": [...]}`` of the piecewise-linear CDF."""
    c = np.asarray(counts, dtype=np.float64)
    c = np.where(c > THRESHOLD_SIGMAS * noise_std, c, 0.0)
    atom_slot, interval_slot = grid._slots()
    widths = np.diff(grid.edges)
    floor = np.zeros(grid.n_cells)
    floor[interval_slot] = widths / widths.sum()
    p = c / c.sum() if c.sum() > 0 else floor
    p = (1 - FLOOR) * p + FLOOR * floor
    xs, us, u = [], [], 0.0
    for i, e in enumerate(grid.edges):
        xs.append(float(e)), us.append(u)
        if grid.atoms[i]:
            u += p[atom_slot[i]]
            xs.append(float(e)), us.append(u)
        if i < len(grid.edges) - 1:
            u += p[interval_slot[i]]
    us = np.minimum(np.asarray(us) / u, 1.0)
    return {"x": xs, "u": us.tolist()}


class QuantileMap:
    """x <-> u through released knots (an atom: two knots with the same x)."""

    def __init__(self, knots: dict):
        self.x = np.asarray(knots["x"], dtype=np.float64)
        self.u = np.asarray(knots["u"], dtype=np.float64)
        dup = np.nonzero(np.diff(self.x) == 0)[0]
        self.atom_x, self.atom_u = self.x[dup], (self.u[dup] + self.u[dup + 1]) / 2

    def encode(self, values) -> np.ndarray:
        v = np.clip(np.asarray(values, dtype=np.float64), self.x[0], self.x[-1])
        out = np.interp(v, self.x, self.u)
        for ax, au in zip(self.atom_x, self.atom_u):
            out[v == ax] = au
        return out

    def decode(self, u) -> np.ndarray:
        return np.interp(np.clip(np.asarray(u, dtype=np.float64), 0.0, 1.0), self.u, self.x)
