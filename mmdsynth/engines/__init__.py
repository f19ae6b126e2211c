"""Where a release's sums are computed: in memory, streamed over shards, or on Ray.

Every data-touching function of mmdsynth releases a *sum over records* (per-class feature sums,
cell counts, value counts) plus Gaussian noise. The sum is what this package computes; the noise
is added afterwards by the caller, on the driver, once. A :class:`Source` is the private data
(one in-memory table or array, or many shard files) with its public facts (the record count m,
the number of shards); a *statistic* is a picklable callable that maps one batch of records to a
dict of partial sums. :meth:`Source.total` runs the statistic over every batch of every shard on
the source's engine, adds the partial sums in shard order (so the result does not depend on which
worker finished first), checks that each shard was counted exactly once and that the rows add up
to the declared m, and only then returns the total.

Engines: ``"memory"`` (the data is already in memory: one shard), ``"stream"`` (one process,
shard by shard, bounded memory), ``"ray"`` (one Ray task per shard; :mod:`mmdsynth.engines.ray_engine`).
In one process the statistic runs on the GPU when one is visible (:func:`on_device`), as a Ray worker given a GPU
runs it; the sums come back to the CPU, where the noise is added.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from typing import Iterator

import pandas as pd

from ..errors import DataValidationError, InvalidParameterError, unknown_name
from ..statistics.rows import checked_batch

ENGINES = ("stream", "ray")


def add_partials(a, b):
    """The sum of two partial results: tensors and arrays add, dicts add key by key (a key missing on
    one side counts as zero: value counts of categorical columns), numbers add. The inputs are left as they were."""
    if isinstance(a, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = add_partials(out[k], v) if k in out else v
        return out
    return a + b


class Source:
    """Private records and their public facts; iterated shard by shard, batch by batch."""

    #: the public record count m the sensitivity rests on
    n_records: int
    engine: "Engine"
    #: a person table's (every release per person, the count m the persons'); a row-level source's False
    persons = False

    @property
    def n_shards(self) -> int:
        raise NotImplementedError

    def shard_name(self, i: int) -> str:
        raise NotImplementedError

    def batches(self, i: int) -> Iterator[tuple[object, int]]:
        """(batch, number of records in it) for every batch of shard ``i``."""
        raise NotImplementedError

    def describe(self) -> dict:
        """What the ledger records about how the sums were computed (public)."""
        return {"engine": self.engine.name, "shards": self.n_shards, "m": int(self.n_records)}

    def checked_with(self, encoder) -> "Source":
        """The source whose rows passed ``encoder``'s check (a table's :class:`~mmdsynth.data.encoding.TableEncoder`):
        shards are checked as they are read, so this source as it is."""
        return self

    def validated(self, schema) -> "Source":
        """The view a statistic reads when the rows must first be checked against ``schema`` (one still to complete:
        schema inference's): shards are checked as they are read, so this source as it is."""
        return self

    def total(self, statistic) -> dict:
        """The statistic summed over every record (see the module docstring). Raises
        :class:`~mmdsynth.errors.DataValidationError` if the rows do not add up to ``n_records``."""
        total, records = summed(self.engine.partials(self, statistic), self.n_shards, self.engine.name)
        if not abs(records - self.n_records) <= RECORDS_TOLERANCE * max(1, self.n_records):   # NaN fails too
            raise DataValidationError(
                f"the data holds {records:.0f} records but n_records={self.n_records} was declared; the sensitivity "
                f"2/m rests on m, so they must agree. Declare the true count (nothing was released).")
        return total


#: records of a batch may be fractions (a person's rows in several shards each count 1 / their rows): their sum
#: must equal the declared m up to float rounding (relative), far below one record
RECORDS_TOLERANCE = 1e-9


def summed(parts: dict, n_shards: int, engine: str) -> tuple[dict, float]:
    """(the partial sums added in shard order, the records counted) of an engine's ``partials``, after checking
    that each shard 0..n_shards-1 came back exactly once."""
    missing = sorted(set(range(n_shards)) - set(parts))
    if missing or len(parts) != n_shards:
        raise RuntimeError(f"the {engine} engine returned shards {sorted(parts)}, expected each of "
                           f"0..{n_shards - 1} once; nothing was released.")
    records = sum(parts[i][1] for i in range(n_shards))
    return reduce(add_partials, (parts[i][0] for i in range(n_shards))), records


def shard_partial(source: Source, i: int, statistic) -> tuple[dict, int]:
    """(summed statistic, record count) of shard ``i``: what one worker computes."""
    acc, rows = None, 0
    for batch, n in source.batches(i):
        part = statistic(batch)
        acc = part if acc is None else add_partials(acc, part)
        rows += n if isinstance(n, float) else int(n)
    if acc is None:
        raise DataValidationError(f"shard {source.shard_name(i)} holds no records; remove it.")
    return acc, rows


class Engine:
    name = ""

    def partials(self, source: Source, statistic) -> dict[int, tuple[dict, int]]:
        raise NotImplementedError


class StreamEngine(Engine):
    """One process, shard after shard (the in-memory case is one shard)."""

    name = "stream"

    def partials(self, source, statistic):
        with on_device(statistic) as stat:
            return {i: shard_partial(source, i, stat) for i in range(source.n_shards)}


@contextmanager
def on_device(statistic):
    """The statistic computed on the GPU when one is visible (as a Ray worker given one computes it), its sums
    brought back to the CPU; moved back to the CPU afterwards, so the feature map that served the release is where
    the caller left it. On a machine without a GPU, or for a statistic that cannot move, it is used as it is."""
    from ..runtime import default_device

    device = default_device()
    if device.type == "cpu" or not hasattr(statistic, "to"):
        yield statistic
        return
    try:
        yield statistic.to(device)
    finally:
        statistic.to("cpu")


class InMemory(Source):
    """Data already in memory (a DataFrame, or arrays ``(X, y)``): one shard, one batch; its
    statistic streams internally where it needs to (feature maps batch their records). ``checked``: the signature
    of the check a DataFrame already passed (``TableEncoder.check_signature``): its batch is then a
    :class:`~mmdsynth.statistics.rows.Checked` one, which statistics of the same check read without checking it
    again."""

    def __init__(self, data, n_records: int, checked: str | None = None):
        self.data, self.n_records, self.engine = data, int(n_records), StreamEngine()
        self.checked = checked

    @property
    def n_shards(self) -> int:
        return 1

    def shard_name(self, i: int) -> str:
        return "the in-memory data"

    def batches(self, i):
        yield (self.data if self.checked is None else checked_batch(self.data, self.checked)), self.n_records

    def describe(self) -> dict:
        return {"engine": "memory", "shards": 1, "m": self.n_records}

    def checked_with(self, encoder) -> "InMemory":
        """A DataFrame's rows checked by ``encoder`` (:meth:`~mmdsynth.data.encoding.TableEncoder.clean`, each value
        read by itself), marked with its signature so that statistics of the same check read them as they are."""
        if not isinstance(self.data, pd.DataFrame):
            return self
        return InMemory(encoder.clean(self.data), self.n_records, encoder.check_signature)

    def validated(self, schema) -> "InMemory":
        """A DataFrame's rows checked against ``schema`` (:meth:`~mmdsynth.data.schema.Schema.validate`, each value read
        by itself); other records as they are."""
        if isinstance(self.data, pd.DataFrame):
            return InMemory(schema.validate(self.data), self.n_records)
        return self


@dataclass(frozen=True)
class SourceFacts:
    """What a planner knows of a run's private input (public, issue 82: a planner never holds the rows): the record
    count m (rows, the declared count of shards, or persons under a unit), whether it is a person table, a table's
    column names (names and order, never values), an array's record shape and whether it carries labels, how its
    sums are computed (for the ledger), whether the records are in memory (not shards) and a table's schema
    (declared: given, or the shards' own). :func:`~mmdsynth.privacy.engine.run_plan` sends it for a :class:`~mmdsynth.privacy.engine.Facts`
    stage."""

    n_records: int
    persons: bool = False
    columns: tuple = ()
    record_shape: tuple = ()
    labelled: bool = False
    computation: dict = field(default_factory=dict)
    in_memory: bool = True
    schema: object = None

    @classmethod
    def of(cls, source: Source, data=None, y=None, schema=None) -> "SourceFacts":
        """The facts of ``source``, made of ``data`` (the input it was made of: its column names, its records' shape
        and labels are read from its form, never from a value) under ``schema`` (a table's, public)."""
        data = source if data is None else data
        columns = getattr(data, "columns", None)
        if isinstance(data, tuple):                  # (X, y) in memory
            data, y = data
        shape = getattr(data, "record_shape", None)
        if shape is None and columns is None and hasattr(data, "shape"):
            shape = tuple(int(s) for s in data.shape[1:])
        return cls(int(source.n_records), bool(source.persons),
                   tuple(str(c) for c in (() if columns is None else columns)),
                   tuple(shape or ()), y is not None or bool(getattr(data, "labelled", False)),
                   source.describe(), isinstance(source, InMemory), schema)


def as_source(X, y=None, checked: str | None = None) -> Source:
    """``X`` as a :class:`Source`: a Source as is (its labels live in its shards), a DataFrame (``checked``: the
    signature of the check it passed, :class:`InMemory`), or arrays / tensors ``X`` (n, ...) with labels ``y`` (n,)
    or None."""
    if isinstance(X, Source):
        if y is not None:
            raise InvalidParameterError("a sharded source holds its labels in its shards; pass y=None.")
        return X
    if isinstance(X, pd.DataFrame):
        return InMemory(X, len(X), checked)
    n = X.shape[0] if hasattr(X, "shape") else len(X)
    return InMemory((X, y), n)


def get_engine(name: str, *, address: str | None = None, workers: int | None = None) -> Engine:
    """An engine by name: ``"stream"`` or ``"ray"`` (``address`` of a running cluster, or a local one
    with ``workers`` CPUs)."""
    if name == "stream":
        if address is not None or workers is not None:
            raise InvalidParameterError("ray_address / ray_workers apply to engine='ray' only.")
        return StreamEngine()
    if name == "ray":
        from .ray_engine import RayEngine

        return RayEngine(address=address, workers=workers)
    raise unknown_name("engine", name, ENGINES)

