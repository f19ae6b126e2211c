"""A database of several tables joined by keys, one root entity (a patient, a school, a plane) as the privacy unit
(issue 84, item 1): its declared schema, and its tables read from a folder of files, from DataFrames or from a
database, each validated as one table is (:meth:`~mmdsynth.data.schema.Schema.validate`: every value by itself), then
its keys checked.

The schema is public and declared, never inferred from the data::

    {"privacy_unit": "patients",
     "tables": {"patients": {"primary_key": "patient_id",
                             "columns": [{"name": "patient_id", "type": "id", "integer": true, "bounds": [1, 99999]},
                                         {"name": "age", "type": "numeric", "bounds": [18, 90]}, ...]},
                "visits": {"primary_key": "visit_id", "foreign_keys": {"patient_id": "patients"},
                           "columns": [{"name": "visit_id", "type": "id", ...},
                                       {"name": "patient_id", "type": "id", "integer": true, "bounds": [1, 99999]},
                                       ...]}}}

Keys are ``id`` columns: never learned, never released. The tables form one tree under the root: every other table
has exactly one foreign key, to its parent, in chains of any depth, and a parent may have several child tables. The
root with all its descendants is one unit of the guarantee: :func:`root_ids` gives each row's root key, which the
person-level reduction reads as a person (:mod:`mmdsynth.engines.persons`). Rows whose foreign key names no parent
row, and primary keys repeated, are refused with a count, never a value.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataValidationError, InvalidParameterError, SchemaError
from .schema import Column, Schema, schema_from_sdv
from .sql import read_sql
from .user import COMPRESSIONS, SUFFIXES, check_listed, read_table, table_suffix

#: the file suffixes a table of a folder may have (its name is the table's: ``visits.csv.gz``)
FOLDER_KINDS = ("csv", "parquet")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TableSpec:
    """One table of a :class:`DatabaseSchema`: its columns (the keys among them, as ``id`` columns), its primary key
    and its foreign keys (column -> parent table)."""

    name: str
    schema: Schema
    primary_key: str | None = None
    foreign_keys: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = self.schema.to_dict()
        d.pop("source", None)
        if self.primary_key is not None:
            d["primary_key"] = self.primary_key
        if self.foreign_keys:
            d["foreign_keys"] = dict(self.foreign_keys)
        return d


@dataclass(frozen=True)
class DatabaseSchema:
    """The declared tables of a database and its privacy unit, the root table (see the module's docstring)."""

    tables: dict
    privacy_unit: str

    def __post_init__(self):
        if not self.tables:
            raise SchemaError("a database schema needs at least one table under \"tables\".")
        if self.privacy_unit not in self.tables:
            raise SchemaError(f"privacy_unit {self.privacy_unit!r} is not one of the tables {sorted(self.tables)}; "
                              f"name the root table: one of its rows with all their descendants is one unit.")
        for spec in self.tables.values():
            _check_keys_declared(spec, self.tables)
        root = self.tables[self.privacy_unit]
        if root.primary_key is None:
            raise SchemaError(f"the root table {root.name!r} needs a \"primary_key\": it names the unit of privacy.")
        if root.foreign_keys:
            raise SchemaError(f"the root table {root.name!r} has foreign keys {sorted(root.foreign_keys)}; the root has "
                              f"no parent. Make their table the privacy_unit, or drop the keys.")
        for spec in self.tables.values():
            if spec.name != root.name and len(spec.foreign_keys) != 1:
                raise SchemaError(f"table {spec.name!r} has {len(spec.foreign_keys)} foreign keys; every table but the "
                                  f"root has exactly one, to its parent (a table under two parents, or a public "
                                  f"reference table, is not supported yet: drop that key column).")
        for name in self.tables:                     # every table reaches the root: no cycle, nothing apart
            seen = [name]
            while seen[-1] != self.privacy_unit:
                parent = self.parent(seen[-1])[1]
                if parent in seen:
                    raise SchemaError(f"the foreign keys run in a circle: {' -> '.join(seen + [parent])}.")
                seen.append(parent)

    def parent(self, table: str) -> tuple[str, str] | None:
        """(the foreign key column, the parent table) of ``table``; None for the root."""
        fks = self.tables[table].foreign_keys
        return next(iter(fks.items())) if fks else None

    def children(self, table: str) -> list[str]:
        """The tables whose foreign key names ``table``, in declaration order."""
        return [t for t in self.tables if (self.parent(t) or (None, None))[1] == table]

    def order(self) -> list[str]:
        """The tables from the root down: every parent before its children (children in declaration order)."""
        out = [self.privacy_unit]
        for name in out:
            out += [t for t in self.children(name) if t not in out]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "DatabaseSchema":
        """A database schema (the module's docstring) from its JSON object, or SDV's multi-table metadata with a
        ``"privacy_unit"`` added (:meth:`from_sdv`)."""
        if isinstance(d, dict) and "relationships" in d:
            return cls.from_sdv({k: v for k, v in d.items() if k != "privacy_unit"}, d.get("privacy_unit"))
        if not isinstance(d, dict) or not isinstance(d.get("tables"), dict) or "privacy_unit" not in d:
            raise SchemaError("a database schema is a JSON object with \"tables\" ({name: a table's schema with its "
                              "\"primary_key\" and \"foreign_keys\"}) and \"privacy_unit\" (the root table).")
        tables = {}
        for name, t in d["tables"].items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise SchemaError(f"table name {name!r}: use letters, digits and underscores, starting with a letter "
                                  f"(it names the table's file and its database table).")
            if not isinstance(t, dict):
                raise SchemaError(f"table {name!r}: its schema is a JSON object with \"columns\".")
            keys = {k: t[k] for k in ("primary_key", "foreign_keys") if k in t}
            fks = keys.get("foreign_keys", {})
            if not isinstance(fks, dict):
                raise SchemaError(f"table {name!r}: \"foreign_keys\" maps a column to its parent table, e.g. "
                                  f"{{\"patient_id\": \"patients\"}}.")
            schema = Schema.from_dict({k: v for k, v in t.items() if k not in ("primary_key", "foreign_keys")})
            tables[name] = TableSpec(name, schema, keys.get("primary_key"), dict(fks))
        return cls(tables, d["privacy_unit"])

    @classmethod
    def from_sdv(cls, metadata: dict, privacy_unit: str | None, *, nullable: dict | None = None) -> "DatabaseSchema":
        """A database schema from SDV's multi-table metadata (``"tables"`` with each table's ``"columns"`` by sdtype
        and ``"primary_key"``, ``"relationships"`` from parent to child keys) and the root table ``privacy_unit``,
        which SDV does not declare. Each table's columns as :func:`~mmdsynth.data.schema.schema_from_sdv` maps them
        (``nullable``: {table: its nullable columns}); SDV gives no bounds nor categories, so those are left to
        private inference."""
        if privacy_unit is None:
            raise SchemaError("SDV's metadata names no root: add \"privacy_unit\": ROOT_TABLE (one of its rows with all "
                              "their descendants is one unit of the guarantee).")
        if not isinstance(metadata.get("tables"), dict):
            raise SchemaError("SDV's multi-table metadata has a \"tables\" object; this one has none.")
        nullable = nullable or {}
        tables = {}
        for name, t in metadata["tables"].items():
            fks = {}
            for rel in metadata.get("relationships", []):
                if rel.get("child_table_name") != name:
                    continue
                parent = rel.get("parent_table_name")
                parent_pk = metadata["tables"].get(parent, {}).get("primary_key")
                if rel.get("parent_primary_key") != parent_pk:
                    raise SchemaError(f"SDV relationship {parent}.{rel.get('parent_primary_key')} -> "
                                      f"{name}.{rel.get('child_foreign_key')}: the parent's key is not the primary key "
                                      f"of {parent!r} ({parent_pk!r}); mmdsynth joins a child to its parent's primary key.")
                fks[rel.get("child_foreign_key")] = parent
            schema = schema_from_sdv(metadata, table=name, nullable=nullable.get(name, ()))
            tables[name] = TableSpec(name, schema, t.get("primary_key"), fks)
        return cls(tables, privacy_unit)

    @classmethod
    def from_json(cls, path) -> "DatabaseSchema":
        from .._io import read_json

        return cls.from_dict(read_json(path, "database schema file", SchemaError))

    def to_dict(self) -> dict:
        return {"privacy_unit": self.privacy_unit, "tables": {n: t.to_dict() for n, t in self.tables.items()}}


def _check_keys_declared(spec: TableSpec, tables: dict) -> None:
    """The key columns of ``spec`` are declared id columns; each foreign key names a table with a primary key,
    declared as that key is (integer or text IDs: the values are compared)."""
    for key, what in [(spec.primary_key, "primary_key")] + [(c, "foreign key") for c in spec.foreign_keys]:
        if key is None:
            continue
        col = next((c for c in spec.schema.columns if c.name == key), None)
        if col is None or col.kind != "id":
            raise SchemaError(f"table {spec.name!r}: {what} {key!r} must be declared among its columns as "
                              f"{{\"name\": \"{key}\", \"type\": \"id\"}} (keys are never learned nor released).")
    for column, parent in spec.foreign_keys.items():
        if parent not in tables:
            raise SchemaError(f"table {spec.name!r}: foreign key {column!r} names table {parent!r}, which the schema "
                              f"does not declare (it has {sorted(tables)}).")
        pk = tables[parent].primary_key
        if pk is None:
            raise SchemaError(f"table {spec.name!r}: foreign key {column!r} points at {parent!r}, which has no "
                              f"\"primary_key\".")
        mine, theirs = spec.schema.column(column), tables[parent].schema.column(pk)
        if bool(mine.integer) != bool(theirs.integer):
            raise SchemaError(f"{spec.name}.{column} is declared with {'integer' if mine.integer else 'text'} IDs and "
                              f"{parent}.{pk} with {'integer' if theirs.integer else 'text'} IDs; declare both alike "
                              f"(\"integer\": true, or not), so that the keys compare.")


def read_database(source, schema: DatabaseSchema | dict | str | Path) -> dict[str, pd.DataFrame]:
    """Every table of ``schema`` read from ``source`` and validated, then the keys checked (:func:`check_keys`).
    ``source``: a folder holding one file a table (``NAME.csv``, ``NAME.csv.gz`` and the other compressions, or
    ``NAME.parquet``), a database URL (SQLite, DuckDB, PostgreSQL: ``SELECT`` of the declared columns of table
    ``NAME``), or a dict of DataFrames by table name. Returns {table: the validated DataFrame}."""
    schema = as_database_schema(schema)
    check_given(source, schema)
    tables = {name: read_one(source, spec) for name, spec in schema.tables.items()}
    check_keys(tables, schema)
    return tables


def check_given(source, schema: DatabaseSchema) -> None:
    """A dict of DataFrames holds exactly the schema's tables (a folder's or a database's are looked up by name)."""
    if isinstance(source, dict):
        missing = sorted(set(schema.tables) - set(source))
        extra = sorted(set(source) - set(schema.tables))
        if missing or extra:
            raise SchemaError(f"the tables given {sorted(source)} differ from the schema's {sorted(schema.tables)}"
                              f"{f': missing {missing}' if missing else ''}{f', not declared {extra}' if extra else ''}.")


def read_one(source, spec: TableSpec) -> pd.DataFrame:
    """Table ``spec`` of ``source`` (as :func:`read_database` takes it), read and validated whole."""
    if isinstance(source, dict):
        frame = given_frame(source, spec)
        check_listed(frame, spec.schema, f"table {spec.name!r}", drop_unlisted=False)
        return spec.schema.validate(frame)                            # as read_table validates a file
    if is_url(source):
        return read_sql(source, f"SELECT * FROM {spec.name}", spec.schema)
    return read_table(table_file(source, spec.name), spec.schema)


def is_url(source) -> bool:
    """Whether a database's ``source`` is a database URL (else a folder, or a dict of DataFrames)."""
    return isinstance(source, str) and "://" in source


def given_frame(source: dict, spec: TableSpec) -> pd.DataFrame:
    if not isinstance(source[spec.name], pd.DataFrame):
        raise InvalidParameterError(f"table {spec.name!r} must be a pandas DataFrame.")
    return source[spec.name]


def as_database_schema(schema) -> DatabaseSchema:
    """A :class:`DatabaseSchema` from itself, its dict or the path to its JSON."""
    if isinstance(schema, DatabaseSchema):
        return schema
    if isinstance(schema, dict):
        return DatabaseSchema.from_dict(schema)
    return DatabaseSchema.from_json(schema)


def table_file(folder, name: str) -> Path:
    """The one file of table ``name`` in ``folder`` (``NAME.<csv or parquet suffix>``); refused when there is none or
    several."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataValidationError(f"{folder} is not a folder; give the folder that holds one file a table (NAME.csv, "
                                  f"NAME.csv.gz, NAME.parquet), or a database URL.")
    found = sorted(p for p in folder.iterdir() if p.is_file() and _table_of(p) == name)
    if len(found) != 1:
        raise DataValidationError(
            f"table {name!r}: {folder} holds {'no file' if not found else f'{len(found)} files'} for it "
            f"({', '.join(p.name for p in found) if found else f'expected {name}.csv, {name}.csv.gz or {name}.parquet'})"
            f"; keep exactly one.")
    return found[0]


def _table_of(path: Path) -> str | None:
    """The table a file of a folder holds: its name without the table suffix (and a CSV's compression); None for a
    file of another kind."""
    suffix = table_suffix(path)
    if SUFFIXES.get(suffix) not in FOLDER_KINDS:
        return None
    for tail in (suffix,) + tuple(suffix + c for c in COMPRESSIONS):
        if path.name.lower().endswith(tail):
            return path.name[:-len(tail)]
    return None


def check_keys(tables: dict[str, pd.DataFrame], schema: DatabaseSchema) -> None:
    """Refuse the database unless every primary key is unique and every foreign key names a row of its parent: each
    refusal names the table, the column and a count, never a key. ``tables`` are validated (IDs read by
    themselves: integers as integers, text by its text); a table's parent among them (the tables from the root down
    to those with child tables, for a database whose other tables are read in batches: :mod:`~mmdsynth.data.
    relational_shards`)."""
    for name, spec in schema.tables.items():
        if spec.primary_key is not None and name in tables:
            repeated_keys(name, spec.primary_key, int(tables[name][spec.primary_key].duplicated().sum()))
    for name in schema.order()[1:]:
        if name in tables:
            column, parent = schema.parent(name)
            known = tables[parent][schema.tables[parent].primary_key]
            orphan_rows(name, column, parent, int((~tables[name][column].isin(known)).sum()))


def repeated_keys(name: str, key: str, repeated: int) -> None:
    """Refuse table ``name`` where ``repeated`` of its rows repeat a primary key ``key`` (a count, never a key)."""
    if repeated:
        raise DataValidationError(f"table {name!r}: {repeated} row(s) repeat a primary key {key!r} of an earlier row; "
                                  f"a primary key names one row. Fix or drop those rows.")


def orphan_rows(name: str, column: str, parent: str, orphans: int) -> None:
    """Refuse table ``name`` where ``orphans`` of its rows have a foreign key ``column`` naming no row of ``parent``."""
    if orphans:
        raise DataValidationError(f"table {name!r}: {orphans} row(s) have a {column!r} that no row of {parent!r} "
                                  f"holds; every row belongs to a parent. Drop those rows (or add their parents).")


def root_ids(tables: dict[str, pd.DataFrame], schema: DatabaseSchema) -> dict[str, pd.Series]:
    """Each table's rows' root key (the privacy unit: the root row they descend from), aligned with the table's
    index, through the chain of foreign keys. ``tables`` as :func:`read_database` returns them (keys checked)."""
    root = schema.privacy_unit
    out = {root: tables[root][schema.tables[root].primary_key]}
    for name in schema.order()[1:]:
        column, parent = schema.parent(name)
        up = pd.Series(out[parent].to_numpy(), index=tables[parent][schema.tables[parent].primary_key].to_numpy())
        out[name] = pd.Series(up.reindex(tables[name][column].to_numpy()).to_numpy(), index=tables[name].index)
    return out


#: the column of a flattened database that says whether a row is a child (1) or a root without children (0)
PRESENT = "{child}__present"


@dataclass(frozen=True)
class Flat:
    """A database of a root and one child table as one table (:func:`flatten`): each child row with its parent's
    columns, each root without children as one row with ``present`` 0 and its child columns missing, the root key the
    privacy unit. ``root_columns`` / ``child_columns``: the learned columns of each table (``present`` aside)."""

    schema: Schema
    root: str
    child: str
    present: str
    root_columns: tuple
    child_columns: tuple


def flat_schema(db: DatabaseSchema) -> Flat:
    """The flattened table's schema, from the database's (public): the root's label, the root key as an id column and
    the privacy unit, the root's other learned columns, the child's learned columns declared nullable (a root without
    children has none), and ``present``. Refused where one table cannot hold the database: other than one root with
    one child table, the root without a label, or a column name in both tables."""
    if len(db.tables) != 2:
        raise SchemaError(f"the database has {len(db.tables)} tables; flattening takes a root and one child table "
                          f"(deeper chains and several child tables are not built yet).")
    root, child = db.order()
    rs, cs = db.tables[root].schema, db.tables[child].schema
    _check_labels(db)
    key = db.tables[root].primary_key
    present = PRESENT.format(child=child)
    root_cols = [c for c in rs.columns if c.kind != "id"]
    child_cols = [replace(c, nullable=True) for c in cs.columns if c.kind != "id"]
    names = [c.name for c in root_cols] + [rs.label, key]
    clash = sorted({c.name for c in child_cols} & set(names) | ({present} & set(names + [c.name for c in child_cols])))
    if clash:
        raise SchemaError(f"column(s) {clash} appear in both {root!r} and {child!r}; rename one of them in the data "
                          f"and the schema (the flattened table holds both tables' columns).")
    # the tables are read and validated before they are joined: their missing-value markers are missing values
    # already (none is declared again, so that one table's marker cannot name a value of the other)
    schema = Schema([rs.column(key), *root_cols, *child_cols,
                     Column(present, "categorical", categories=["0", "1"])],
                    rs.label, list(rs.label_categories), constraints=[*rs.constraints, *cs.constraints],
                    privacy_unit=key)
    return Flat(schema, root, child, present, tuple(c.name for c in root_cols), tuple(c.name for c in child_cols))


def flatten(tables: dict[str, pd.DataFrame], db: DatabaseSchema) -> tuple[pd.DataFrame, Flat]:
    """The database as one table (:class:`Flat`), from tables :func:`read_database` returned: the child rows joined
    to their parent's row, and one row for each root without children. Every root is one person of the result, so
    its count of persons is the root table's, and one root with all its children is one person's rows."""
    flat = flat_schema(db)
    key = flat.schema.privacy_unit
    fk = db.parent(flat.child)[0]
    root = tables[flat.root][[key, *flat.root_columns, flat.schema.label]]
    child = tables[flat.child][[fk, *flat.child_columns]].rename(columns={fk: key}).assign(**{flat.present: "1"})
    joined = root.merge(child, on=key, how="left", sort=False)
    joined[flat.present] = joined[flat.present].fillna("0")
    return joined[[c.name for c in flat.schema.columns] + [flat.schema.label]], flat


#: a parent's count of children in one child table is learned up to this many (public; more read as this many):
#: the default of ``fit_tables(max_children=...)``
MAX_CHILDREN = 100
#: the column of a parent's training table that holds its number of children in table ``child``
COUNT = "{child}__count"
#: a child table's training column that holds its parent's column ``column`` (the parent's table ``parent``)
CONTEXT = "{parent}__{column}"


@dataclass(frozen=True)
class Level:
    """One table of a database as the cascade fits it (:func:`levels`): a table model of its training table
    (:func:`level_frames`). The root's: one row a root (the unit: one record each), its learned columns, the label and
    each child table's count of children (``counts``: child -> column, clipped at ``max_children``). A child table's:
    one row a child row, with its parent row's columns (``context``: training column -> the parent level's column;
    empty without conditioning; under the root, the root's learned columns and its counts), its own learned columns
    (``own``), its child tables' counts, the root's label and the root key, the privacy unit (every release per root,
    the count of persons the roots'); each root without a row in the table adds one row with ``present`` "0", its
    other values missing but, under the root, its root's columns. Every root thus weighs one in each child table's
    release, so a row drawn from the root's first child table's model (``carrier``) is a root drawn as the roots are
    spread: the cascade draws its roots there and fits no root model of its own."""

    table: str
    parent: str | None
    schema: Schema
    own: tuple
    context: dict
    counts: dict
    present: str | None = None
    carrier: bool = False


def levels(db: DatabaseSchema, *, conditional: bool = True, max_children: int = MAX_CHILDREN) -> dict[str, Level]:
    """Each table's :class:`Level`, root first, from the database's schema (public) and ``max_children`` (public).
    ``conditional=False``: the child tables without their parent's columns (the baseline of tables fitted apart).
    Refused where the root declares no label, a child table declares one, or two training columns share a name."""
    if int(max_children) != max_children or max_children < 1:
        raise InvalidParameterError(f"max_children must be a positive integer; got {max_children!r}.")
    root = db.privacy_unit
    rs = db.tables[root].schema
    _check_labels(db)
    constrained = sorted(t for t, spec in db.tables.items() if spec.schema.constraints)
    if constrained:
        raise SchemaError(f"table(s) {constrained} declare constraints (fixed_combinations); a database's fit does not "
                          f"hold them yet: remove them from the schema (synthetic rows may then break them).")
    out = {}
    for name in db.order():
        spec = db.tables[name]
        children = db.children(name)
        counts = {t: COUNT.format(child=t) for t in children}
        learned = [c for c in spec.schema.columns if c.kind != "id"]
        count_cols = [Column(counts[t], "numeric", (0, int(max_children)), integer=True, nullable=name != root)
                      for t in children]
        if name == root:
            schema = Schema([*learned, *count_cols], rs.label, list(rs.label_categories), constraints=rs.constraints)
            out[name] = Level(name, None, _unique(schema, name), tuple(c.name for c in learned), {}, counts)
            continue
        parent = db.parent(name)[1]
        up = out[parent]
        context = {}
        if conditional:
            pcols = [up.schema.column(c) for c in (*up.own, *(up.counts.values() if parent == root else ()))]
            context = {CONTEXT.format(parent=parent, column=c.name): c for c in pcols}
        present = PRESENT.format(child=name)
        key = db.tables[root].primary_key
        # under the root every row (a marked one too) has its root's columns: their own nullability holds
        schema = Schema([rs.column(key), *[replace(c, name=n, nullable=c.nullable or parent != root)
                                           for n, c in context.items()],
                         *[replace(c, nullable=True) for c in learned], *count_cols,
                         Column(present, "categorical", categories=["0", "1"])],
                        rs.label, list(rs.label_categories), constraints=spec.schema.constraints, privacy_unit=key)
        carrier = conditional and parent == root and name == next(iter(up.counts))
        out[name] = Level(name, parent, _unique(schema, name), tuple(c.name for c in learned),
                          {n: c.name for n, c in context.items()}, counts, present, carrier)
    return out


def _check_labels(db: DatabaseSchema) -> None:
    """The database's label is the root's: refused where the root declares none or another table declares one."""
    root = db.privacy_unit
    rs = db.tables[root].schema
    if rs.label is None:
        raise SchemaError(f"the root table {root!r} declares no label; the table models are class-conditional: "
                          f"declare one of its categorical columns as \"label\" with its \"label_categories\".")
    for name in db.order()[1:]:
        label = db.tables[name].schema.label
        if label is not None:
            raise SchemaError(f"the child table {name!r} declares a label; the database's label is the root's "
                              f"({rs.label!r}): make {label!r} a column.")


def _unique(schema: Schema, table: str) -> Schema:
    names = [c.name for c in schema.columns] + [schema.label]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise SchemaError(f"the training table of {table!r} would hold column(s) {clash} twice (a column, the "
                          f"root's label or key, a parent's column or a count); rename them in the data and the schema.")
    return schema


def level_frames(tables: dict[str, pd.DataFrame], db: DatabaseSchema, lv: dict[str, Level]) -> dict[str, pd.DataFrame]:
    """Each table's training table (:class:`Level`) from tables :func:`read_database` returned (keys checked): counts
    of children per parent row (more than the level's bound read as the bound), parent columns joined by key, the
    root's label and key carried down, and one marked row for each root without a row in the table (with its root's
    columns, under the root)."""
    build = LevelRows(tables, db, lv, child_counts(tables, db))
    out = {}
    for name in db.order():
        rows, roots = build.rows(name, tables[name])
        out[name] = rows if name == db.privacy_unit else pd.concat([rows, build.marks(name, roots)], ignore_index=True)
    return out


def child_counts(tables: dict[str, pd.DataFrame], db: DatabaseSchema) -> dict[str, pd.Series]:
    """{child table: its rows per parent key} of the child tables among ``tables``."""
    return {t: tables[t][db.parent(t)[0]].value_counts() for t in tables if t != db.privacy_unit}


class LevelRows:
    """The rows of the cascade's training tables (:func:`level_frames`), a table's rows (or a batch of them) at a
    time: ``parents`` holds every table that has child tables, whole (their rows are the context of their children's
    rows), ``counts`` every child table's rows per parent key (:func:`child_counts`, or summed over a stream of
    batches). A table without child tables may come in batches: each row's training row is a function of that row,
    its parent's row and its root's, so the batches' rows together are the table's."""

    def __init__(self, parents: dict[str, pd.DataFrame], db: DatabaseSchema, lv: dict[str, Level], counts: dict):
        self.db, self.lv, self.counts = db, lv, counts
        root = db.privacy_unit
        self.rs, self.key = db.tables[root].schema, db.tables[root].primary_key
        keys = parents[root][self.key]
        self.label = pd.Series(parents[root][self.rs.label].to_numpy(), index=keys.to_numpy())
        self.up = {root: pd.Series(keys.to_numpy(), index=keys.to_numpy())}    # a parent's key -> its root's key
        self.own = {}                                 # a parent's own learned columns and counts, by its key
        for name in db.order():               # only a table with child tables is a context: leaves are skipped
            if name not in parents or not db.children(name):
                continue
            t = parents[name]
            if name != root:
                self.up[name] = pd.Series(self._roots(name, t), index=t[db.tables[name].primary_key].to_numpy())
            self.own[name] = self._own(name, t).set_axis(t[db.tables[name].primary_key].to_numpy())

    def _roots(self, name: str, t: pd.DataFrame) -> np.ndarray:
        fk, parent = self.db.parent(name)
        return self.up[parent].reindex(t[fk].to_numpy()).to_numpy()

    def _own(self, name: str, t: pd.DataFrame) -> pd.DataFrame:
        """The table's learned columns and its counts of children (more than the level's bound read as the bound)."""
        level = self.lv[name]
        frame = t[list(level.own)].copy()
        pk = self.db.tables[name].primary_key
        for child, col in level.counts.items():
            bound = int(level.schema.column(col).bounds[1])
            frame[col] = np.minimum(self.counts[child].reindex(t[pk].to_numpy(), fill_value=0).to_numpy(), bound)
        return frame

    def rows(self, name: str, t: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
        """(the training rows of rows ``t`` of table ``name``, their roots' keys), in the level's column order."""
        level, root = self.lv[name], self.db.privacy_unit
        columns = [c.name for c in level.schema.columns] + [self.rs.label]
        frame = self._own(name, t)
        if name == root:
            return frame.assign(**{self.rs.label: t[self.rs.label].to_numpy()})[columns], t[self.key].to_numpy()
        fk, parent = self.db.parent(name)
        for c, p in level.context.items():
            frame[c] = self.own[parent][p].reindex(t[fk].to_numpy()).to_numpy()
        roots = self._roots(name, t)
        frame[self.key] = roots
        frame[self.rs.label] = self.label.reindex(roots).to_numpy()
        frame[level.present] = "1"
        return frame[columns], roots

    def marks(self, name: str, roots) -> pd.DataFrame:
        """One marked row (``present`` "0") for each root not among ``roots`` (the roots of table ``name``'s rows):
        its key and label and, under the root, its root's columns."""
        level = self.lv[name]
        alone = self.label.index[~self.label.index.isin(set(np.asarray(roots).tolist()))].to_numpy()
        marks = pd.DataFrame({self.key: alone, self.rs.label: self.label.reindex(alone).to_numpy(), level.present: "0"})
        if self.db.parent(name)[1] == self.db.privacy_unit:
            for c, p in level.context.items():
                marks[c] = self.own[self.db.privacy_unit][p].reindex(alone).to_numpy()
        return marks.reindex(columns=[c.name for c in level.schema.columns] + [self.rs.label])
