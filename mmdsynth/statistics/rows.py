"""How every statistic reads a batch: its rows and, under a privacy unit, their weights (no torch: the engines
import it)."""
from __future__ import annotations


class Weighted:
    """A batch of a table whose rows carry weights: one person's rows share a total weight of 1 (each 1 / their
    row count; :class:`~mmdsynth.engines.persons.PersonTable`). A statistic sums ``w_i`` times each row's
    contribution, so one person adds at most what one row adds today, whatever their number of rows."""

    def __init__(self, frame, weights):
        self.frame, self.weights = frame, weights

    def __len__(self) -> int:
        return len(self.frame)


def unweighted(batch):
    """(the batch's rows, their weights as a float64 array or None): every table statistic starts here."""
    if isinstance(batch, Weighted):
        return batch.frame, batch.weights
    return batch, None
