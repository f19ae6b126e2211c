"""``mmdsynth.fit``: the library's default method for the data, so a user need not know the methods to start."""
from __future__ import annotations

import logging
import pandas as pd

from ..choice import PublicFacts, choose_table_default
from ..errors import InvalidParameterError
from ..privacy.engine import Facts
from .contract import METHODS, as_schema, run_table

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

    Images and arrays (``fit(X, y, method="dp-merf", n_classes=10, epsilon=...)``) need a method named.

    A table is fitted in one run (:func:`~mmdsynth.privacy.engine.run_plan`): its columns are matched to the schema
    here and the rows handed to the run; the method is chosen, its plan outlined (the releases and their shares,
    memory and time, logged; a plan over the memory refused) and calibrated from the run's public facts (the count:
    rows, the declared count of shards, or persons) before any row is read."""
    from ..data.shards import ShardedTable

    table = isinstance(data, (pd.DataFrame, ShardedTable))
    if table and y is not None:
        raise InvalidParameterError("a table carries its label as a column: fit(df, label=COLUMN, schema=...), no y.")
    if method is None and not table:
        raise InvalidParameterError(f"mmdsynth.fit chooses a method for tables only; for images or arrays name "
                                    f"one: method=... ({', '.join(METHODS)}).")
    if method is not None and method not in METHODS:
        from ..errors import unknown_name
        raise unknown_name("method", method, METHODS)
    if not table:
        return METHODS[method](epsilon, delta, **params).fit(data, y, out=out, budget=budget, dataset=dataset)
    if method is not None and not hasattr(METHODS[method], "table_planner"):   # a method with its own runs
        return METHODS[method](epsilon, delta, **params).fit(data, label=label, schema=schema, out=out, budget=budget,
                                                              dataset=dataset)
    return run_table(data, label, schema, table_fit(label, chooser(method, epsilon, delta, params),
                                                    dict(out=out, budget=budget, dataset=dataset)))


def chooser(method: str | None, epsilon, delta, params: dict):
    """The model of a table fit from the run's public facts (``facts``: :class:`~mmdsynth.choice.PublicFacts`, the
    count and the privacy unit): ``method`` with ``params``, or, where none is named, the table default
    (:func:`~mmdsynth.choice.choose_table_default`, a parameter given winning), said in the log. Returns
    ``choose(facts) -> model``."""
    def choose(facts: PublicFacts):
        name, chosen = method, params
        if name is None:
            plan = choose_table_default(PublicFacts(facts.n_records, facts.unit, epsilon, delta), params)
            name, chosen = plan.method, {**plan.params, **params}
            logger.info("method: %s (the table default for %s)", name, plan.why)
        return METHODS[name](epsilon, delta, **chosen)
    return choose


def table_fit(label: str | None, choose, fit: dict, show=None):
    """The planner of a table's fit (run by :func:`~mmdsynth.privacy.engine.run_plan`): the table's public facts
    (its schema, its count), the model ``choose`` makes from them (:func:`chooser`; the CLI's names the method and its
    flags), its plan outlined (``show``: the outline's lines, logged when None; a plan over the memory refused), then
    the method's own planner (:meth:`table_planner`) with the ``fit`` options. Returns the fitted model. Nothing here
    reads a row: the facts are the run's public ones."""
    facts = yield Facts()
    schema = as_schema(facts.schema, label)
    model = choose(PublicFacts(facts.n_records, schema.privacy_unit))
    outline = model.plan_outline(schema, PublicFacts(facts.n_records, schema.privacy_unit, model.epsilon, model.delta))
    if outline is not None:                          # the plan and its cost, before anything is read or charged
        (show or (lambda lines: logger.info("%s", "\n".join(lines))))(outline.lines())
        outline.check_memory()
    yield from model.table_planner(schema, facts=facts, **fit)
    return model
