"""A database's training tables in bounded memory (issue 84, item 5): the tables with child tables are read whole
(their rows are their children's context), every table without child tables (a leaf: nycflights13's flights, a
hospital's lab results) is read in batches, never whole, and each fitted table's training rows
(:class:`~mmdsynth.data.relational.LevelRows`, the same rows :func:`~mmdsynth.data.relational.level_frames` builds)
are written batch by batch as Parquet shards, which the fit reads as a :class:`~mmdsynth.data.ShardedTable` with the
root key as its privacy unit (a root's rows may sit in several shards: the person-level reduction counts each root's
rows across them exactly, :class:`~mmdsynth.engines.persons.PersonShards`).

Memory grows with the tables that have child tables and with one batch, not with the leaves. A leaf is read twice:
once for its keys (its primary keys unique, each foreign key naming a parent row, its rows per parent), once for its
rows. Every value is read by itself as the whole table's reading reads it (:meth:`~mmdsynth.data.schema.Schema.
validate` on each batch), so the shards hold the same rows. The shards are private rows: written in a folder only this
user can read (``tempfile.mkdtemp``), removed by the caller once the fit has read them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .relational import (DatabaseSchema, Level, LevelRows, check_given, check_keys, child_counts, given_frame,
                         is_url, orphan_rows, read_one, repeated_keys, table_file)
from .shards import BATCH_ROWS, ShardedTable, table_batches
from .sql import sql_batches
from .user import check_listed


def level_shards(source, db: DatabaseSchema, lv: dict[str, Level], fitted: list, folder,
                 *, batch_rows: int = BATCH_ROWS) -> tuple[dict[str, ShardedTable], int]:
    """({table: its training table as Parquet shards under ``folder``} for each of ``fitted``, the count of roots):
    ``source`` a folder, a database URL or a dict of DataFrames (as :func:`~mmdsynth.data.relational.read_database`
    takes it), its tables without child tables read ``batch_rows`` rows at a time; the keys checked as
    :func:`~mmdsynth.data.relational.check_keys` checks them, before any shard is written."""
    check_given(source, db)
    parents = [t for t in db.order() if db.children(t)]
    whole = {t: read_one(source, db.tables[t]) for t in parents}
    check_keys(whole, db)
    counts = child_counts(whole, db)
    for leaf in (t for t in db.order() if t not in whole):
        counts[leaf] = _leaf_keys(source, db, leaf, whole, batch_rows)
    build = LevelRows(whole, db, lv, counts)
    n_roots = len(whole[db.privacy_unit])
    folder = Path(folder)
    out = {}
    for name in fitted:
        batches = [whole[name]] if name in whole else batches_of(source, db.tables[name], batch_rows)
        files, seen = [], []
        for batch in batches:
            rows, roots = build.rows(name, batch)
            seen.append(np.unique(roots))
            files += _written(rows, folder / name / f"part-{len(seen):06d}.parquet")
        if name != db.privacy_unit:             # the roots without a row here, in the last shard (shards read by name)
            files += _written(build.marks(name, np.concatenate(seen) if seen else []),
                              folder / name / f"part-{len(seen) + 1:06d}.parquet")
        out[name] = ShardedTable(files, lv[name].schema, n_records=n_roots, batch_rows=batch_rows)
    return out, n_roots


def batches_of(source, spec, batch_rows: int):
    """Table ``spec`` of ``source`` in validated batches of ``batch_rows`` rows."""
    if isinstance(source, dict):
        frame = given_frame(source, spec)
        check_listed(frame, spec.schema, f"table {spec.name!r}", drop_unlisted=False)
        return (spec.schema.validate(frame.iloc[i:i + batch_rows].reset_index(drop=True))
                for i in range(0, len(frame), batch_rows))
    if is_url(source):
        return sql_batches(source, f"SELECT * FROM {spec.name}", spec.schema, batch_rows=batch_rows)
    return table_batches(table_file(source, spec.name), spec.schema, batch_rows=batch_rows)


def _leaf_keys(source, db: DatabaseSchema, leaf: str, whole: dict, batch_rows: int) -> pd.Series:
    """A leaf table's rows per parent key, from a pass over its batches that refuses repeated primary keys and rows
    without a parent (counts, never a key)."""
    fk, parent = db.parent(leaf)
    pk = db.tables[leaf].primary_key
    known = pd.Index(whole[parent][db.tables[parent].primary_key])
    counts, keys, orphans = None, [], 0
    for batch in batches_of(source, db.tables[leaf], batch_rows):
        orphans += int((~batch[fk].isin(known)).sum())
        n = batch[fk].value_counts()
        counts = n if counts is None else counts.add(n, fill_value=0)
        if pk is not None:
            keys.append(batch[pk].to_numpy())
    if keys:
        repeated_keys(leaf, pk, int(pd.Series(np.concatenate(keys)).duplicated().sum()))
    orphan_rows(leaf, fk, parent, orphans)
    return pd.Series(dtype="int64") if counts is None else counts.astype("int64")


def _written(rows: pd.DataFrame, path: Path) -> list[Path]:
    """``rows`` written to ``path`` as Parquet ([path]; [] for no rows: a shard holds at least one)."""
    if rows.empty:
        return []
    path.parent.mkdir(parents=True, exist_ok=True)
    rows.to_parquet(path, index=False)
    return [path]
