"""1-way and 2-way marginal total variation distance between a real and a synthetic table.

Every column (the label included) is discretised the same way for every method, then

* 1-way TVD: the mean over columns of ``0.5 sum |p - q|`` of the column's histogram;
* 2-way TVD: the mean over all pairs of columns of the TVD of their joint histogram; also over the pairs
  of two categorical columns only (label included), which no numeric discretisation touches;
* 3-way TVD (only when ``triples > 0`` is asked for): the mean TVD of the joint histogram over a fixed random
  sample of ``triples`` column triples (all of them when there are fewer), drawn by
  ``numpy.random.default_rng(triple_seed)`` from the sorted list of all triples of column names: a public choice
  that depends on the schema's column names alone, the same for every method.

Two discretisations of the numeric columns (categorical columns: their declared categories, anything
else one extra "other" cell):

* ``deciles``: 10 bins at the deciles of the *real* table passed in (repeated deciles merge), the bins of
  :func:`mmdsynth.evaluation.fidelity.numeric_marginal`, so the 1-way numeric part equals its TV;
* ``grid32``: 32 equal-width bins over the schema's declared (public) bounds, the grid the peers
  (MST / AIM in ``run_smartnoise.py``) are fitted on, values outside the bounds in the end bins.

Neither depends on the synthetic table, so all methods are scored on the same cells. A datetime column is read as
seconds since 1970 (a numeric column on the clock), and a nullable column has one more cell, "missing", in both
schemes (missing values are compared, not dropped).
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from mmdsynth.data import Schema

DECILES = 10
GRID = 32


def _numeric_codes(real: np.ndarray, synth: np.ndarray, bounds, scheme: str, nullable: bool = False):
    if scheme == "deciles":
        inner = np.unique(np.nanquantile(real, np.linspace(0, 1, DECILES + 1)[1:-1]))
        codes = (np.searchsorted(inner, real, side="left"), np.searchsorted(inner, synth, side="left"))
        cells = len(inner) + 1
    else:
        lo, hi = bounds
        edges = np.linspace(lo, hi, GRID + 1)[1:-1]
        codes, cells = (np.searchsorted(edges, real, side="right"), np.searchsorted(edges, synth, side="right")), GRID
    if not nullable:
        return (*codes, cells)
    # a missing value: the extra cell `cells` (searchsorted puts NaN past every edge, so it is set here)
    return (*(np.where(np.isnan(v), cells, c) for v, c in zip((real, synth), codes)), cells + 1)


def _as_float(values: pd.Series, col) -> np.ndarray:
    """A numeric column's values as floats, a datetime column's as seconds since 1970 (the unit of its declared
    bounds in the schema); missing: NaN."""
    if col.datetime:
        t = pd.to_datetime(values, format="ISO8601") if values.dtype == object else pd.to_datetime(values)
        return np.where(t.isna(), np.nan, t.to_numpy(dtype="datetime64[ns]").astype(np.int64) / 1e9)
    return pd.to_numeric(values).to_numpy(dtype=float)


def _categorical_codes(real: pd.Series, synth: pd.Series, categories):
    cats = [str(c) for c in categories]
    index = {c: i for i, c in enumerate(cats)}
    code = lambda s: s.astype(str).map(index).fillna(len(cats)).to_numpy(dtype=np.int64)  # noqa: E731
    return code(real), code(synth), len(cats) + 1


def discretise(real: pd.DataFrame, synth: pd.DataFrame, schema: Schema, scheme: str = "deciles"):
    """{column: (real codes, synthetic codes, number of cells)} over the schema's columns and the label."""
    out = {}
    for col in schema.columns:
        if col.kind == "numeric":
            out[col.name] = _numeric_codes(_as_float(real[col.name], col), _as_float(synth[col.name], col),
                                           col.bounds, scheme, bool(col.nullable))
        else:
            out[col.name] = _categorical_codes(real[col.name], synth[col.name], col.categories)
    if schema.label:
        out[schema.label] = _categorical_codes(real[schema.label], synth[schema.label], schema.label_categories)
    return out


def _tv(a: np.ndarray, b: np.ndarray, cells: int) -> float:
    p = np.bincount(a, minlength=cells) / max(len(a), 1)
    q = np.bincount(b, minlength=cells) / max(len(b), 1)
    return float(0.5 * np.abs(p - q).sum())


def sample_triples(columns, triples: int, triple_seed: int = 0) -> list[tuple[str, str, str]]:
    """``triples`` column triples drawn without replacement from all triples of the sorted names (all if fewer)."""
    every = list(itertools.combinations(sorted(columns), 3))
    if len(every) <= triples:
        return every
    pick = np.random.default_rng(triple_seed).choice(len(every), size=triples, replace=False)
    return [every[i] for i in sorted(pick)]


def marginal_tvd(real: pd.DataFrame, synth: pd.DataFrame, schema: Schema, scheme: str = "deciles",
                 triples: int = 0, triple_seed: int = 0) -> dict:
    codes = discretise(real, synth, schema, scheme)
    numeric = set(schema.numeric)
    one = {c: _tv(r, s, k) for c, (r, s, k) in codes.items()}
    two, cat_cat = [], []
    for (a, (ra, sa, ka)), (b, (rb, sb, kb)) in itertools.combinations(codes.items(), 2):
        two.append(_tv(ra * kb + rb, sa * kb + sb, ka * kb))
        if a not in numeric and b not in numeric:
            cat_cat.append(two[-1])
    out = {"scheme": scheme, "columns": len(codes), "pairs": len(two),
           "tvd_1way": float(np.mean(list(one.values()))), "tvd_2way": float(np.mean(two)),
           "tvd_2way_max": float(np.max(two)), "categorical_pairs": len(cat_cat),
           "tvd_2way_categorical": float(np.mean(cat_cat)) if cat_cat else None, "per_column_1way": one}
    if triples > 0:
        three = []
        for a, b, c in sample_triples(codes, triples, triple_seed):
            (ra, sa, ka), (rb, sb, kb), (rc, sc, kc) = codes[a], codes[b], codes[c]
            three.append(_tv((ra * kb + rb) * kc + rc, (sa * kb + sb) * kc + sc, ka * kb * kc))
        out |= {"triples": len(three), "triple_seed": triple_seed, "tvd_3way": float(np.mean(three)) if three else None}
    return out
