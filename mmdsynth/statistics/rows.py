"""How every statistic reads a batch: its rows and, under a privacy unit, their weights (no torch: the engines
import it)."""
from __future__ import annotations

import weakref


class Weighted:
    """A batch of a table whose rows carry weights: one person's rows share a total weight of 1 (each 1 / their
    row count; :class:`~mmdsynth.engines.persons.PersonTable`). A statistic sums ``w_i`` times each row's
    contribution, so one person adds at most what one row adds today, whatever their number of rows."""

    def __init__(self, frame, weights):
        self.frame, self.weights = frame, weights

    def __len__(self) -> int:
        return len(self.frame)


class Checked(Weighted):
    """A batch of a table that its source checked once against a schema (``TableEncoder.clean``, before the budget
    is charged), with its rows' weights (None: one each) and the check's ``signature``
    (``TableEncoder.check_signature``): a statistic whose encoder checks the same way reads the rows as they are
    (:func:`checked_rows`); one that checks another way (a schema completed by inference since) checks them again."""

    def __init__(self, frame, weights, signature: str):
        super().__init__(frame, weights)
        self.signature = signature


def unweighted(batch):
    """(the batch's rows, their weights as a float64 array or None): every table statistic starts here."""
    if isinstance(batch, Weighted):
        return batch.frame, batch.weights
    return batch, None


def kept(source, key, read):
    """``read(the rows of source's one shard)`` (an in-memory source's whole batch), computed once per ``source`` and
    ``key`` and kept with the source while it lives (never with the planner that asked): how a step's statistic
    reads the run's records (a subsampled embedding's arrays, DP-KIP's records in the kernel's space)."""
    got = _KEPT.get(source)
    if got is None or got[0] != key:
        batch, _ = next(iter(source.batches(0)))
        got = _KEPT[source] = (key, read(batch))
    return got[1]


#: :func:`kept`'s values, by source
_KEPT = weakref.WeakKeyDictionary()


def checked_batch(batch, signature: str) -> Checked:
    """``batch`` (a table's rows, or a :class:`Weighted` batch of them) as a :class:`Checked` one: what a source hands
    the statistics once its rows passed the check of this ``signature``."""
    return Checked(*unweighted(batch), signature)


def checked_rows(batch, encoder):
    """(the batch's rows checked against ``encoder``'s schema, their weights): as they are when the source checked
    them the same way (a :class:`Checked` batch of the same signature), else checked now (``encoder.clean``)."""
    frame, weights = unweighted(batch)
    if isinstance(batch, Checked) and batch.signature == encoder.check_signature:
        return frame, weights
    return encoder.clean(frame), weights
