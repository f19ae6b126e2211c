"""``mmdsynth.fit``: the library's default method for the data, so a user need not know the methods to start."""
from __future__ import annotations

import pandas as pd

from ..errors import InvalidParameterError
from .contract import METHODS

#: the method a table is fitted with when none is named (``mmdsynth fit`` without --method does the same); measured
#: against MST, AIM and DP-MERF in benchmarks/RESULTS.md ("Marginal methods and the hybrid")
DEFAULT_TABLE_METHOD = "hybrid"


def fit(data, y=None, *, label: str | None = None, schema=None, epsilon: float | None = None, delta: float = 1e-5,
        method: str | None = None, out=None, budget=None, dataset: str = "", **params):
    """Fit ``data`` with ``method`` (default for a table, a DataFrame or a ShardedTable: ``"hybrid"``) and return the
    fitted model. ``params`` are the method's (``mmdsynth fit --method NAME --help`` lists them)::

        model = mmdsynth.fit(df, label="income", schema="schema.json", epsilon=1.0)
        synthetic = model.sample(len(df))

    Images and arrays (``fit(X, y, method="dp-merf", n_classes=10, epsilon=...)``) need a method named."""
    from ..data.shards import ShardedTable

    table = isinstance(data, (pd.DataFrame, ShardedTable))
    if table and y is not None:
        raise InvalidParameterError("a table carries its label as a column: fit(df, label=COLUMN, schema=...), no y.")
    if method is None:
        if not table:
            raise InvalidParameterError(f"mmdsynth.fit chooses a method for tables only; for images or arrays name "
                                        f"one: method=... ({', '.join(METHODS)}).")
        method = DEFAULT_TABLE_METHOD
    if method not in METHODS:
        from ..errors import unknown_name
        raise unknown_name("method", method, METHODS)
    model = METHODS[method](epsilon, delta, **params)
    if table:
        return model.fit(data, label=label, schema=schema, out=out, budget=budget, dataset=dataset)
    return model.fit(data, y, out=out, budget=budget, dataset=dataset)
