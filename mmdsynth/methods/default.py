"""``mmdsynth.fit``: the library's default method for the data, so a user need not know the methods to start."""
from __future__ import annotations

import logging

import pandas as pd

from ..choice import HYBRID_MIN_ROWS, sized_settings, table_default, table_default_params
from ..errors import InvalidParameterError
from .contract import METHODS

logger = logging.getLogger(__name__)



def fit(data, y=None, *, label: str | None = None, schema=None, epsilon: float | None = None, delta: float = 1e-5,
        method: str | None = None, out=None, budget=None, dataset: str = "", **params):
    """Fit ``data`` with ``method`` and return the fitted model. A table (a DataFrame or a ShardedTable) with no method
    named gets the table default: ``"hybrid"`` from ``HYBRID_MIN_ROWS`` (5,000) rows up, ``"dp-merf"`` below (its
    one release keeps the whole budget; :func:`mmdsynth.choice.table_default`), with 250 generator iterations under
    1,000 rows and the hybrid's numeric columns on 16 cells cut at equal released mass where rows x epsilon is under
    15,000 (:func:`mmdsynth.choice.table_default_params`; a parameter given wins), logged. ``params`` are the
    method's (``mmdsynth fit --method NAME --help`` lists them)::

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
        n = len(data) if isinstance(data, pd.DataFrame) else data.n_records
        method = table_default(n)
        sized = table_default_params(n, epsilon)
        sized = {k: v for k, v in sized.items() if k not in params}     # a parameter given wins
        params = {**sized, **params}
        logger.info("method: %s (the table default for %s rows; hybrid from %d)%s", method, n, HYBRID_MIN_ROWS,
                    f"; {sized_settings(sized)}" if sized else "")
    if method not in METHODS:
        from ..errors import unknown_name
        raise unknown_name("method", method, METHODS)
    model = METHODS[method](epsilon, delta, **params)
    if table:
        return model.fit(data, label=label, schema=schema, out=out, budget=budget, dataset=dataset)
    return model.fit(data, y, out=out, budget=budget, dataset=dataset)
