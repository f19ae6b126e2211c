"""Tables that live in SQL databases: read the private table with a query, write synthetic rows to a
table. Through SQLAlchemy, so any database it speaks to works with its driver (PostgreSQL via
``psycopg``, SQLite built in; the ``sql`` extra installs both libraries).

Reading validates the result against the declared schema exactly like :func:`read_table`: nothing is
inferred from the database's column types, a column the schema does not list is refused by name, and
missing values are refused. Writing happens in one transaction: all rows or none, and an existing
table is refused unless ``replace=True``. Passwords never appear in messages.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import ArtifactError, DataValidationError, InvalidParameterError, SchemaError
from .schema import Schema
from .user import check_listed


def _sqlalchemy():
    try:
        import sqlalchemy
    except ImportError as exc:
        raise InvalidParameterError("reading or writing a SQL database needs SQLAlchemy and the database's driver: "
                                    "pip install 'mmdsynth[sql]' (SQLAlchemy, psycopg for PostgreSQL).") from exc
    return sqlalchemy


def shown(url: str) -> str:
    """The URL as messages show it: the password hidden."""
    sa = _sqlalchemy()
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<the URL given>"


def _engine(url: str):
    sa = _sqlalchemy()
    try:
        engine = sa.create_engine(url)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ModuleNotFoundError) as exc:
        raise InvalidParameterError(
            f"cannot connect with database URL {shown(url)}: {exc}. Give an SQLAlchemy URL such as "
            f"postgresql+psycopg://user@host:5432/db or sqlite:///path/to/file.db (with the driver installed).") from exc
    if engine.dialect.name == "sqlite":
        # Python's sqlite3 commits before DDL on its own; let SQLAlchemy's transaction cover the
        # CREATE TABLE too, so a failed write leaves no table behind (SQLAlchemy's documented recipe)
        @sa.event.listens_for(engine, "connect")
        def _no_implicit_transactions(dbapi_connection, _record):
            dbapi_connection.isolation_level = None

        @sa.event.listens_for(engine, "begin")
        def _begin(conn):
            conn.exec_driver_sql("BEGIN")
    return engine


def read_sql(url: str, query: str, schema: Schema | str | Path, *, label: str | None = None,
             drop_unlisted: bool = False) -> pd.DataFrame:
    """The rows ``query`` returns from the database at ``url``, validated against the declared
    ``schema`` (as :func:`~mmdsynth.data.read_table` validates a file). Returns the DataFrame."""
    if not isinstance(schema, Schema):
        schema = Schema.from_json(schema)
    if label is not None and label != schema.label:
        raise SchemaError(f"label {label!r} was given but the schema's label is {schema.label!r}; they must agree.")
    if not str(query).strip():
        raise InvalidParameterError("the query is empty; give the SELECT that returns the private table.")
    df = next(_results(url, query))
    check_listed(df, schema, f"the query result from {shown(url)}", drop_unlisted)
    return schema.validate(df)


def sql_batches(url: str, query: str, schema: Schema, *, batch_rows: int):
    """The rows ``query`` returns, ``batch_rows`` at a time, each batch validated against ``schema`` as
    :func:`read_sql` validates the whole (every value by itself, so the batches together read as the whole does)."""
    if not str(query).strip():
        raise InvalidParameterError("the query is empty; give the SELECT that returns the private table.")
    for df in _results(url, query, batch_rows):
        check_listed(df, schema, f"the query result from {shown(url)}", drop_unlisted=False)
        yield schema.validate(df.reset_index(drop=True))


def _results(url: str, query: str, batch_rows: int | None = None):
    """The result of ``query`` at ``url`` as one DataFrame (``batch_rows`` None) or in DataFrames of ``batch_rows``
    rows; a database error named by its kind, never its text."""
    sa = _sqlalchemy()
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            if batch_rows is None:
                yield pd.read_sql(sa.text(query), conn)
            else:
                yield from pd.read_sql(sa.text(query), conn, chunksize=batch_rows)
    except (sa.exc.SQLAlchemyError, pd.errors.DatabaseError) as exc:
        raise DataValidationError(f"the query failed on {shown(url)} ({database_error(exc)}); the database's own "
                                  f"message is not shown, as it may quote a private value: run the query in the "
                                  f"database's client to read it.") from None
    finally:
        engine.dispose()


def database_error(exc: BaseException) -> str:
    """What a database error was, without its text (which may quote a value of the table): the driver's
    exception class and, where the driver gives one, its SQLSTATE code."""
    cause = exc.__cause__ if isinstance(exc, pd.errors.DatabaseError) and exc.__cause__ else exc
    orig = getattr(cause, "orig", None) or cause
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return f"{type(orig).__module__.split('.')[0]}.{type(orig).__name__}" + (f", SQLSTATE {code}" if code else "")


def write_sql(df: pd.DataFrame, url: str, table: str, *, replace: bool = False) -> int:
    """Write ``df`` to ``table`` at ``url`` in one transaction (all rows or none); an existing table
    is refused unless ``replace``. Returns the number of rows written."""
    sa = _sqlalchemy()
    if not table or not str(table).replace("_", "").isalnum():
        raise InvalidParameterError(f"the table name must be letters, digits and underscores; got {table!r}.")
    engine = _engine(url)
    try:
        with engine.begin() as conn:
            if sa.inspect(conn).has_table(table) and not replace:
                raise ArtifactError(f"table {table!r} already exists in {shown(url)}; give another table name, or "
                                    f"replace=True (CLI: --replace) to overwrite it.")
            df.to_sql(table, conn, if_exists="replace" if replace else "fail", index=False)
    except sa.exc.SQLAlchemyError as exc:
        raise ArtifactError(f"writing table {table!r} to {shown(url)} failed, nothing was written: "
                            f"{getattr(exc, 'orig', None) or exc}") from exc
    finally:
        engine.dispose()
    return len(df)
