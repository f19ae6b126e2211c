"""``mmdsynth.fit``: the library's default method for the data, so a user need not know the methods to start."""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from ..choice import choose_table_default, public_facts
from ..data.schema import Schema
from ..errors import InvalidParameterError
from .contract import METHODS

logger = logging.getLogger(__name__)


def fit(data, y=None, *, label: str | None = None, schema=None, epsilon: float | None = None, delta: float | None = None,
        method: str | None = None, out=None, budget=None, dataset: str = "", **params):
    """Fit ``data`` with ``method`` and return the fitted model. A table (a DataFrame or a ShardedTable) with no method
    named gets the table default, chosen from public facts only (:func:`mmdsynth.choice.choose_table_default`: the
    record count, which is the number of persons under a person unit, never their rows; epsilon): ``"hybrid"`` from
    ``HYBRID_MIN_ROWS`` (3,000) records up or from ``HYBRID_MIN_RECORDS_EPSILON`` (3,000) records x epsilon,
    ``"dp-merf"`` below (its one release keeps the whole budget), with 250
    generator iterations under 1,000 records and 500 above, and the hybrid's numeric columns on 16 cells cut at equal released mass
    where records x epsilon is under 15,000 (a parameter given wins), logged. ``params`` are the
    method's (``mmdsynth fit --method NAME --help`` lists them)::

        model = mmdsynth.fit(df, label="income", schema="schema.json", epsilon=1.0)
        synthetic = model.sample(len(df))

    Images and arrays (``fit(X, y, method="dp-merf", n_classes=10, epsilon=...)``) need a method named."""
    from ..data.shards import ShardedTable

    table = isinstance(data, (pd.DataFrame, ShardedTable))
    if table and y is not None:
        raise InvalidParameterError("a table carries its label as a column: fit(df, label=COLUMN, schema=...), no y.")
    # the schema read and the public count counted once (under a person unit, a read of every ID)
    declared = _declared(schema, data) if table else None
    facts = public_facts(data, declared, epsilon, delta) if table else None
    if method is None:
        if not table:
            raise InvalidParameterError(f"mmdsynth.fit chooses a method for tables only; for images or arrays name "
                                        f"one: method=... ({', '.join(METHODS)}).")
        # the public count only: rows, the declared count of shards, or the persons under a person unit
        plan = choose_table_default(facts, params)
        method, params = plan.method, {**plan.params, **params}
        logger.info("method: %s (the table default for %s)", method, plan.why)
    if method not in METHODS:
        from ..errors import unknown_name
        raise unknown_name("method", method, METHODS)
    model = METHODS[method](epsilon, delta, **params)
    if table:
        outline = model.plan_outline(declared, facts) if declared is not None else None
        if outline is not None:                  # the plan and its cost, before anything is read or charged
            logger.info("%s", "\n".join(outline.lines()))
            outline.check_memory()
        return model.fit(data, label=label, schema=schema, out=out, budget=budget, dataset=dataset)
    return model.fit(data, y, out=out, budget=budget, dataset=dataset)


def _declared(schema, data):
    """The schema given (a Schema, a dict, a path to its JSON) or the shards' own; None when there is none."""
    if isinstance(schema, (str, Path)):
        return Schema.from_json(schema)
    if isinstance(schema, dict):
        return Schema.from_dict(schema)
    return schema if schema is not None else getattr(data, "schema", None)
