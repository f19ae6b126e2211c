"""A synthetic database scored against the real one (issue 84): key integrity, the children-per-parent TVD, each
table's 1- and 2-way TVD, the cross-table 2-way TVD (a parent column against a child column over the join) and a
downstream task on the join (the root's label predicted from the root's columns and aggregates of its children:
their count, the mean of each numeric column, the share of each category), trained on the synthetic database and
tested on real roots the fit never saw.

Numeric columns are cut at the real table's deciles (a missing value its own cell), categorical ones by their
declared categories (and missing); children counts on 14 cells (``COUNT_EDGES``: exact up to 4, then wider). Wide tables'
2-way TVD is the mean over at most ``MAX_PAIRS`` pairs drawn with a fixed seed. Nothing here is private: it reads the
real tables to score, as any evaluation does, and releases nothing.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from ..data.relational import DatabaseSchema
from ..data.schema import datetime_seconds
from ..statistics.values import category_text, category_texts
from .fidelity import _tv

#: a table's 2-way TVD is the mean over at most this many column pairs (drawn with a fixed seed when there are more)
MAX_PAIRS = 300
#: children counts are compared on these cells: [0], [1], [2], [3], [4], [5, 6], [7, 9], ..., [200, 499], [500, ...)
COUNT_EDGES = (0, 1, 2, 3, 4, 5, 7, 10, 15, 25, 50, 100, 200, 500)


def _numeric(values: pd.Series, col) -> np.ndarray:
    """A numeric column's values as floats, a datetime column's as seconds (:func:`datetime_seconds`)."""
    if col.datetime:
        return np.asarray(datetime_seconds(col, values), dtype=float)
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)


def _texts(values: pd.Series) -> pd.Series:
    """Each value as its category text (:func:`category_texts`: a declared "0", a read 0 and a sampled 0.0 are one)."""
    return category_texts(values).where(values.notna(), None)


def codes(real: pd.Series, synth: pd.Series, col=None, categories=None) -> tuple[np.ndarray, np.ndarray, int]:
    """Cell codes of a column's real and synthetic values, and the number of cells: numeric (``col.kind``) at the
    real deciles, a missing value in the last cell; else the declared ``categories`` (``col``'s or given), anything
    else and missing in the last cell."""
    if col is not None and col.kind == "numeric":
        r, s = _numeric(real, col), _numeric(synth, col)
        inner = np.unique(np.nanquantile(r, np.linspace(0, 1, 11)[1:-1])) if np.isfinite(r).any() else np.zeros(0)
        cells = len(inner) + 1
        code = lambda v: np.where(np.isnan(v), cells, np.searchsorted(inner, v, side="left"))  # noqa: E731
        return code(r), code(s), cells + 1
    cats = [category_text(c) for c in (categories if categories is not None else col.categories)]
    index = {c: i for i, c in enumerate(cats)}
    code = lambda v: _texts(v).map(index).fillna(len(cats)).to_numpy(np.int64)  # noqa: E731
    return code(real), code(synth), len(cats) + 1


def tv(a: np.ndarray, b: np.ndarray, cells: int) -> float:
    """Total variation distance between the histograms of two code arrays."""
    return _tv(np.bincount(a, minlength=cells).astype(float), np.bincount(b, minlength=cells).astype(float))


def _table_codes(real: pd.DataFrame, synth: pd.DataFrame, schema) -> dict:
    out = {c.name: codes(real[c.name], synth[c.name], c) for c in schema.columns if c.kind != "id"}
    if schema.label:
        out[schema.label] = codes(real[schema.label], synth[schema.label], categories=schema.label_categories)
    return out


def _at_most(pairs, limit: int = MAX_PAIRS) -> list:
    """The pairs, or ``limit`` of them drawn with a fixed seed where there are more."""
    every = list(pairs)
    if len(every) <= limit:
        return every
    return [every[i] for i in sorted(np.random.default_rng(0).choice(len(every), limit, replace=False))]


def _two_way(c: dict, pairs) -> float:
    return float(np.mean([tv(c[a][0] * c[b][2] + c[b][0], c[a][1] * c[b][2] + c[b][1], c[a][2] * c[b][2])
                          for a, b in pairs])) if pairs else float("nan")


def table_tvd(real: pd.DataFrame, synth: pd.DataFrame, schema) -> dict:
    """One table's mean 1-way and 2-way TVD over its learned columns and label."""
    c = _table_codes(real, synth, schema)
    return {"tvd_1way": float(np.mean([tv(*v) for v in c.values()])),
            "tvd_2way": _two_way(c, _at_most(itertools.combinations(c, 2)))}


def keys_hold(tables: dict, db: DatabaseSchema) -> bool:
    """Every primary key unique and every foreign key naming a row of its parent."""
    for name, spec in db.tables.items():
        t = tables[name]
        if spec.primary_key is not None and not t[spec.primary_key].is_unique:
            return False
        up = db.parent(name)
        if up is not None and not t[up[0]].isin(set(tables[up[1]][db.tables[up[1]].primary_key])).all():
            return False
    return True


def children_counts(tables: dict, db: DatabaseSchema, child: str) -> np.ndarray:
    """Each parent row's number of rows in ``child`` (0 included) as its cell of ``COUNT_EDGES``."""
    fk, parent = db.parent(child)
    n = tables[child][fk].value_counts()
    counts = n.reindex(tables[parent][db.tables[parent].primary_key].to_numpy(), fill_value=0).to_numpy()
    return np.searchsorted(COUNT_EDGES, counts, side="right") - 1


def joined(tables: dict, db: DatabaseSchema, child: str) -> pd.DataFrame:
    """The child's rows each with its parent row's columns (prefixed ``parent.``)."""
    fk, parent = db.parent(child)
    up = tables[parent].add_prefix(f"{parent}.")
    return tables[child].merge(up, left_on=fk, right_on=f"{parent}.{db.tables[parent].primary_key}", how="inner")


def cross_tvd(real: dict, synth: dict, db: DatabaseSchema, child: str) -> float:
    """The mean 2-way TVD over the pairs (a parent column or the root's label, a child column) of the join."""
    parent = db.parent(child)[1]
    ps, cs = db.tables[parent].schema, db.tables[child].schema
    r, s = joined(real, db, child), joined(synth, db, child)
    left = {f"{parent}.{c.name}": codes(r[f"{parent}.{c.name}"], s[f"{parent}.{c.name}"], c)
            for c in ps.columns if c.kind != "id"}
    if ps.label:
        left[ps.label] = codes(r[f"{parent}.{ps.label}"], s[f"{parent}.{ps.label}"], categories=ps.label_categories)
    right = {c.name: codes(r[c.name], s[c.name], c) for c in cs.columns if c.kind != "id"}
    both = {**left, **right}
    return _two_way(both, _at_most(itertools.product(left, right)))


def root_features(tables: dict, db: DatabaseSchema) -> tuple[pd.DataFrame, pd.Series]:
    """The downstream task's rows: each root's learned columns and, for each child table of the root, its number of
    children, the mean of each numeric column and the share of each category of each categorical one; and the root's
    label."""
    root = db.privacy_unit
    spec = db.tables[root]
    t = tables[root].set_index(spec.primary_key)
    x = pd.DataFrame(index=t.index)
    for c in spec.schema.columns:
        if c.kind == "numeric":
            x[c.name] = _numeric(t[c.name], c)
        elif c.kind == "categorical":
            for v in c.categories:
                x[f"{c.name}={v}"] = (_texts(t[c.name]) == category_text(v)).astype(float)
    for child in db.children(root):
        fk = db.parent(child)[0]
        rows = tables[child]
        g = rows.groupby(fk)
        x[f"{child}.n"] = g.size().reindex(x.index, fill_value=0).astype(float)
        for c in db.tables[child].schema.columns:
            if c.kind == "numeric":
                x[f"{child}.{c.name}.mean"] = pd.Series(_numeric(rows[c.name], c), index=rows.index).groupby(
                    rows[fk]).mean().reindex(x.index)
            elif c.kind == "categorical":
                for v in c.categories:
                    x[f"{child}.{c.name}={v}"] = (_texts(rows[c.name]) == category_text(v)).groupby(
                        rows[fk]).mean().reindex(x.index)
    return x.astype(float), _texts(t[spec.schema.label])


def downstream(train: dict, test: dict, db: DatabaseSchema, seed: int = 0) -> float | None:
    """ROC AUC (macro one-vs-rest with more than two classes) on the real ``test`` roots of classifiers trained on
    ``train``'s roots (:func:`root_features`): the mean of a logistic regression and gradient-boosted trees, missing
    aggregates (a root without children) imputed by the training mean. None when the training roots hold one class
    only, or the test roots do."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    classes = [category_text(c) for c in db.tables[db.privacy_unit].schema.label_categories]
    xa, ya = root_features(train, db)
    xb, yb = root_features(test, db)
    if ya.nunique() < 2:
        return None
    scores = []
    impute = lambda: SimpleImputer(keep_empty_features=True)      # noqa: E731  (a synthetic column may be all missing)
    for clf in (make_pipeline(impute(), StandardScaler(), LogisticRegression(max_iter=2000)),
                make_pipeline(impute(), HistGradientBoostingClassifier(random_state=seed))):
        with threadpool_limits(1):          # a few hundred roots: OpenMP's threads only wait on each other (300x)
            clf.fit(xa.to_numpy(), ya.to_numpy())
        p = np.zeros((len(xb), len(classes)))
        p[:, [classes.index(c) for c in clf[-1].classes_]] = clf.predict_proba(xb.to_numpy())
        present = [i for i, c in enumerate(classes) if (yb == c).any()]
        if len(present) < 2:
            return None
        if len(classes) == 2:
            scores.append(roc_auc_score((yb == classes[1]).to_numpy(), p[:, 1]))
        else:
            scores.append(np.mean([roc_auc_score((yb == classes[i]).to_numpy(), p[:, i]) for i in present]))
    return float(np.mean(scores))


def database_scores(real: dict, synth: dict, db: DatabaseSchema, *, test: dict | None = None, seed: int = 0) -> dict:
    """Every score of the module's docstring, of the synthetic database ``synth`` against the real ``real`` (the
    fit's tables); ``test``: real tables of other roots, for the downstream task (left out without)."""
    out = {"keys_hold": keys_hold(synth, db)}
    for name in db.order():
        out.update({f"{name}.{k}": v for k, v in table_tvd(real[name], synth[name], db.tables[name].schema).items()})
        out[f"{name}.rows"] = len(synth[name])
        if db.parent(name) is not None:
            a, b = children_counts(real, db, name), children_counts(synth, db, name)
            out[f"{name}.children_tvd"] = tv(a, b, len(COUNT_EDGES))
            out[f"{name}.cross_tvd_2way"] = cross_tvd(real, synth, db, name)
    children = db.order()[1:]
    for k in ("children_tvd", "cross_tvd_2way"):
        out[k] = float(np.mean([out[f"{n}.{k}"] for n in children])) if children else float("nan")
    out["tvd_2way"] = float(np.mean([out[f"{n}.tvd_2way"] for n in db.order()]))
    if test is not None:
        out["downstream_auc"] = downstream(synth, test, db, seed)
        out["downstream_auc_real"] = downstream(real, test, db, seed)
    return out


def split_roots(tables: dict, db: DatabaseSchema, test_share: float = 0.2, seed: int = 0) -> tuple[dict, dict]:
    """The database split by root: a ``test_share`` of the roots (seeded) with all their descendants, and the rest."""
    from ..data.relational import root_ids

    rid = root_ids(tables, db)
    roots = tables[db.privacy_unit][db.tables[db.privacy_unit].primary_key].to_numpy()
    held = set(np.random.default_rng(seed).permutation(roots)[:int(round(test_share * len(roots)))].tolist())
    train = {n: t[~rid[n].isin(held).to_numpy()].reset_index(drop=True) for n, t in tables.items()}
    test = {n: t[rid[n].isin(held).to_numpy()].reset_index(drop=True) for n, t in tables.items()}
    return train, test
