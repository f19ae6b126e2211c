"""``mmdsynth.fit_tables``: a database of a root table and one child table (patients and their visits, schools and
their students), one root with all its children as the unit of the guarantee (issue 84, the first model).

The database is fitted as one person-level table (:func:`~mmdsynth.data.relational.flatten`): each child row with its
parent's columns, each root without children as one row marked so, the root key the privacy unit. Every release of
that fit is a person-level release (the root count is its count of persons, public), so replacing one root with all
its descendants moves each release within its recorded sensitivity, whatever the number of children. The table
default (or ``method``) fits it; sampling is post-processing of the release: synthetic persons become roots, their
rows their children, with new keys.

What it does not capture yet: a root's children are drawn independently of each other and of the root row that
stands for them (the first of its person's rows); deeper chains and several child tables are refused.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from .._io import atomic_write, read_json
from ..data.encoding import fresh_ids
from ..data.relational import DatabaseSchema, Flat, as_database_schema, flat_schema, flatten, read_database
from ..errors import ArtifactError, InvalidParameterError
from .base import load
from .default import fit

logger = logging.getLogger(__name__)


#: the database schema beside a fitted database's model folder (what tells `mmdsynth sample` it is one)
DATABASE_FILE = "database.json"


class DatabaseModel:
    """A fitted database (:func:`fit_tables`): ``model_`` is the fitted person-level table model, ``release_`` its
    release; :meth:`sample` draws new tables with valid keys; :meth:`load` reads a folder ``fit_tables(out=...)`` (or
    ``mmdsynth fit --tables``) wrote."""

    def __init__(self, model, schema: DatabaseSchema, flat: Flat):
        self.model_, self.schema, self.flat = model, schema, flat

    @classmethod
    def load(cls, directory) -> "DatabaseModel":
        """The fitted database in ``directory``: its model folder and the database schema beside it."""
        directory = Path(directory)
        if not (directory / DATABASE_FILE).is_file():
            raise ArtifactError(f"{directory} holds no fitted database ({DATABASE_FILE} is missing): a table's model is "
                                f"read with mmdsynth.load.")
        db = DatabaseSchema.from_dict(read_json(directory / DATABASE_FILE, "database schema file", ArtifactError))
        return cls(load(directory), db, flat_schema(db))

    @property
    def release_(self):
        return self.model_.release_

    def sample(self, n_roots: int, *, seed: int | None = None) -> dict[str, pd.DataFrame]:
        """``n_roots`` synthetic roots with their children: {table: DataFrame}, every key new and every foreign key
        naming a synthetic root. Post-processing of the release."""
        if int(n_roots) != n_roots or n_roots < 1:
            raise InvalidParameterError(f"n_roots must be a positive integer; got {n_roots!r}.")
        n_roots = int(n_roots)
        rng = np.random.default_rng(seed)
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
        child_out = children.rename(columns={key: fk}).assign(
            **{child_spec.primary_key: fresh_ids(child_spec.schema.column(child_spec.primary_key), len(children), rng)})
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
        (the flattened table allows it, for roots without children) is replaced by another drawn child row that has
        them all, its root kept; the count is logged."""
        required = [c.name for c in self.schema.tables[self.flat.child].schema.columns
                    if c.kind != "id" and not c.nullable]
        if not required:
            return children
        bad = children[required].isna().any(axis=1).to_numpy()
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


def fit_tables(source, schema, *, epsilon: float, delta: float | None = None, method: str | None = None,
               dataset: str = "", out=None, **params) -> DatabaseModel:
    """Fit a database of a root table and one child table. ``source``: a folder of ``NAME.csv`` / ``.csv.gz`` /
    ``.parquet`` files, a database URL, or {table: DataFrame}; ``schema``: the database schema
    (:class:`~mmdsynth.data.relational.DatabaseSchema`, its dict or JSON path; the root declares the label). The
    schema is checked before anything is read; the tables are read, validated and their keys checked, flattened
    (one person a root) and fitted with ``method`` (None: the table default for the root count and epsilon) and its
    ``params``. ``out``: a folder for the model (its release, written before any post-processing, and the database
    schema; :meth:`DatabaseModel.load` reads it). Returns a :class:`DatabaseModel`::

        model = mmdsynth.fit_tables("hospital/", "database.json", epsilon=1.0)
        tables = model.sample(1000)          # {"patients": ..., "visits": ...}
    """
    db = as_database_schema(schema)
    flat_schema(db)                                      # refused before any read
    joined, flat = flatten(read_database(source, db), db)
    model = fit(joined, schema=flat.schema, epsilon=epsilon, delta=delta, method=method, dataset=dataset, out=out,
                **params)
    if out is not None:
        with atomic_write(Path(out) / DATABASE_FILE) as tmp:
            Path(tmp).write_text(json.dumps(db.to_dict(), indent=2))
    return DatabaseModel(model, db, flat)
