"""Data in many files: a folder or glob of table shards (CSV / Parquet) or array shards (.npy / .npz),
read shard by shard in bounded-memory batches.

The record count m is public metadata the user declares (``n_records``): the sensitivity 2/m of
every release rests on it, so the rows read are counted and a mismatch is an error before
anything is released (:meth:`mmdsynth.engines.Source.total`). Shard file names and their order
are public; every batch of a table shard is validated against the schema, and an error names the
shard and the rows.
"""
from __future__ import annotations

import glob
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from ..engines import Engine, Source, StreamEngine, get_engine
from ..errors import DataValidationError, MmdsynthError, InvalidParameterError
from .schema import Schema
from .user import check_listed, csv_delimiter, csv_read_error, read_csv_text, table_suffix

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
ARRAY_SUFFIXES = (".npy", ".npz")
BATCH_ROWS = 65_536


def shard_files(spec, suffixes: tuple[str, ...]) -> list[Path]:
    """The shard files of ``spec``: a folder (its files with one of ``suffixes``), a glob pattern, or
    a list of paths; sorted by name. Raises naming what was searched when none is found."""
    if isinstance(spec, (list, tuple)):
        files = [Path(p) for p in spec]
    elif Path(spec).is_dir():
        files = [p for p in Path(spec).iterdir() if table_suffix(p) in suffixes]
    else:
        files = [Path(p) for p in glob.glob(str(spec))]
    files = sorted(p for p in files if p.is_file())
    if not files:
        raise DataValidationError(f"no shard files found at {spec!r} (a folder searched for {list(suffixes)}, "
                                  f"or a glob pattern such as 'data/part-*.parquet').")
    odd = [p.name for p in files if table_suffix(p) not in suffixes]
    if odd:
        raise InvalidParameterError(f"shard(s) {odd[:5]} are not among {list(suffixes)}; shards of one source share a "
                                    f"format.")
    return files


@contextmanager
def _reading(path: Path):
    """Errors while reading a shard's file become a DataValidationError naming it (mmdsynth's own pass) and the
    rule, never quoting the reader's own text where it may hold the file's bytes, values or line numbers: a file
    that is not text in its encoding, a malformed CSV line, any other reader error (only its type is named; file
    system errors keep their message, which names paths only)."""
    try:
        yield
    except MmdsynthError:
        raise
    except (UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise csv_read_error(f"shard {path}", exc) from None
    except OSError as exc:
        raise DataValidationError(f"shard {path} cannot be read: {type(exc).__name__}: {exc}") from None
    except Exception as exc:
        raise DataValidationError(f"shard {path} cannot be read ({type(exc).__name__}: the file is corrupt or "
                                  f"not in its format; check it with the tool that wrote it).") from None


def _require(path: Path, key: str, names) -> None:
    if key not in names:
        raise DataValidationError(f"shard {path} has no array {key!r} (it holds {sorted(names)}); pass x_key=.")


def _check_n_records(n_records) -> int:
    if isinstance(n_records, bool) or not isinstance(n_records, (int, np.integer)) or n_records < 1:
        raise InvalidParameterError(
            f"n_records must be the declared total record count (an integer >= 1, public metadata: the sensitivity "
            f"2/m rests on it); got {n_records!r}.")
    return int(n_records)


def check_batch_rows(batch_rows) -> int:
    """``batch_rows`` (rows read at a time) as given, refused unless a whole number >= 1."""
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InvalidParameterError(f"batch_rows must be an integer >= 1; got {batch_rows!r}.")
    return batch_rows


def open_shards(spec, *, n_records: int, schema=None, engine="stream", drop_unlisted: bool = False,
                encoding: str = "utf-8", sep: str | None = None):
    """A :class:`ShardedTable` (CSV / Parquet shards; needs ``schema``) or :class:`ShardedArrays`
    (.npy / .npz shards) by the shards' file type."""
    files = shard_files(spec, TABLE_SUFFIXES + ARRAY_SUFFIXES)
    if table_suffix(files[0]) in TABLE_SUFFIXES:
        if schema is None:
            raise InvalidParameterError(f"table shards ({files[0].name}, ...) need their schema: --schema FILE.json "
                                        f"and --label COLUMN.")
        return ShardedTable(files, schema, n_records=n_records, engine=engine, drop_unlisted=drop_unlisted,
                            encoding=encoding, sep=sep)
    if schema is not None:
        raise InvalidParameterError("array shards (.npy / .npz) have no schema; --schema applies to CSV / Parquet "
                                    "shards.")
    return ShardedArrays(files, n_records=n_records, engine=engine)


class _Sharded(Source):
    def __init__(self, files, suffixes, n_records, engine, batch_rows):
        self.files = shard_files(files, suffixes)
        self.n_records = _check_n_records(n_records)
        self.engine = engine if isinstance(engine, Engine) else get_engine(engine) if engine else StreamEngine()
        self.batch_rows = check_batch_rows(batch_rows)

    @property
    def n_shards(self) -> int:
        return len(self.files)

    def shard_name(self, i: int) -> str:
        return str(self.files[i])

    def __getstate__(self):       # the engine stays on the driver
        return {**self.__dict__, "engine": None}


class ShardedTable(_Sharded):
    """A table in CSV / Parquet shards with one declared schema (and label column in every shard).

    ``files``: folder, glob or list; ``n_records``: the declared total; ``engine``: "stream" (default),
    "ray" or an :class:`~mmdsynth.engines.Engine`; ``drop_unlisted``: drop columns the schema does not
    list instead of refusing them (as :func:`~mmdsynth.data.read_table`)."""

    def __init__(self, files, schema: Schema | dict | str | Path, *, n_records: int, engine="stream",
                 drop_unlisted: bool = False, batch_rows: int = BATCH_ROWS, encoding: str = "utf-8",
                 sep: str | None = None):
        super().__init__(files, TABLE_SUFFIXES, n_records, engine, batch_rows)
        self.schema = (schema if isinstance(schema, Schema) else Schema.from_dict(schema) if isinstance(schema, dict)
                       else Schema.from_json(schema))
        self.drop_unlisted = drop_unlisted
        self.encoding, self.sep = encoding, sep

    @property
    def columns(self) -> list[str]:
        """The public column order: the schema's (shards may order their columns differently)."""
        return [c.name for c in self.schema.columns] + ([self.schema.label] if self.schema.label else [])

    def batches(self, i: int):
        for df in table_batches(self.files[i], self.schema, batch_rows=self.batch_rows,
                                drop_unlisted=self.drop_unlisted, encoding=self.encoding, sep=self.sep):
            yield df, len(df)


def table_batches(path, schema: Schema, *, batch_rows: int = BATCH_ROWS, drop_unlisted: bool = False,
                  encoding: str = "utf-8", sep: str | None = None):
    """The rows of one CSV (compressed too) or Parquet file, ``batch_rows`` at a time, each batch validated against
    ``schema`` (every value by itself, so the batches together read as the whole file does); an error names the file,
    never a row."""
    path = Path(path)
    raw = _raw_batches(path, schema, batch_rows, encoding, sep)
    while True:
        with _reading(path):                          # a corrupt or unreadable file: name it
            df = next(raw, None)
        if df is None:
            return
        try:
            check_listed(df, schema, path, drop_unlisted)
            df = schema.validate(df.reset_index(drop=True))
        except MmdsynthError as exc:
            raise type(exc)(f"shard {path}: {exc}") from None     # the shard, never a row number
        yield df


def _raw_batches(path: Path, schema: Schema, batch_rows: int, encoding: str, sep: str | None):
    if table_suffix(path) == ".csv":        # each shard's delimiter from its own header line (or --sep)
        columns = [c.name for c in schema.columns] + ([schema.label] if schema.label else [])
        sep = sep or csv_delimiter(path, columns, encoding)
        yield from read_csv_text(path, encoding, sep=sep, chunksize=batch_rows)
        return
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - pyarrow missing
        raise InvalidParameterError("reading Parquet needs pyarrow: pip install 'mmdsynth[parquet]'") from exc
    for rb in pq.ParquetFile(path).iter_batches(batch_size=batch_rows):
        yield rb.to_pandas()


class ShardedArrays(_Sharded):
    """Arrays in shards: ``.npz`` files holding records under ``x_key`` and labels under ``y_key``
    (labels optional: unconditional), or ``.npy`` files of records only. Every shard's records have
    the same shape (public); ``.npy`` shards are memory-mapped."""

    def __init__(self, files, *, n_records: int, engine="stream", x_key: str = "x", y_key: str | None = "y",
                 batch_rows: int = 8192):
        super().__init__(files, ARRAY_SUFFIXES, n_records, engine, batch_rows)
        self.x_key, self.y_key = x_key, y_key
        shape, self.labelled = self._header(0)
        self.record_shape = tuple(int(s) for s in shape[1:])     # public; no record is read here

    def _header(self, i: int) -> tuple[tuple, bool]:
        """(shape of shard ``i``'s records, whether it holds labels), from the file headers alone."""
        path = self.files[i]
        with _reading(path):
            if path.suffix.lower() == ".npy":
                return np.load(path, mmap_mode="r", allow_pickle=False).shape, False
            with zipfile.ZipFile(path) as z:
                names = {n[:-4]: n for n in z.namelist() if n.endswith(".npy")}
                _require(path, self.x_key, names)
                with z.open(names[self.x_key]) as fh:
                    major, _ = np.lib.format.read_magic(fh)
                    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                    shape = read(fh)[0]
                return shape, bool(self.y_key) and self.y_key in names

    def _open(self, i: int):
        path = self.files[i]
        with _reading(path):
            if path.suffix.lower() == ".npy":
                return np.load(path, mmap_mode="r", allow_pickle=False), None
            with np.load(path, allow_pickle=False) as z:
                _require(path, self.x_key, z.files)
                y = z[self.y_key] if self.y_key and self.y_key in z.files else None
                return z[self.x_key], y

    def batches(self, i: int):
        X, y = self._open(i)
        path = self.files[i]
        if tuple(X.shape[1:]) != self.record_shape:
            raise DataValidationError(f"shard {path} holds records of shape {tuple(X.shape[1:])}; the first shard's "
                                      f"are {self.record_shape}.")
        if (y is not None) != self.labelled or (y is not None and y.shape != (X.shape[0],)):
            raise DataValidationError(f"shard {path}: labels {None if y is None else y.shape} do not match its "
                                      f"{X.shape[0]} records (every shard has labels, or none does).")
        for start in range(0, X.shape[0], self.batch_rows):
            stop = min(start + self.batch_rows, X.shape[0])
            # copies: a memory-mapped shard is read-only; one batch at a time is in memory
            yield (np.array(X[start:stop]), None if y is None else np.array(y[start:stop])), stop - start
