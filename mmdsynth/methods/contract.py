"""The one contract every method keeps (scikit-learn's estimator shape, synthcity's plug-in declaration).

* **Parameters come from the constructor signature**: ``param_names()`` walks the ``__init__`` of the
  class and of its bases for as long as they pass ``**kwargs`` on; ``get_params()`` reads them back
  (JSON-plain), so ``cls(**model.get_params())`` rebuilds the model and ``model.json`` needs no
  hand-typed list. Constructors only store their arguments; ``fit`` validates.
* **Data kinds and per-kind defaults**: ``data_kinds`` says what the method takes ("image": arrays
  (n, c, h, w) or (n, d); "table": a DataFrame with a schema); ``defaults_for(kind)`` the settings
  that differ from the constructor's for that kind (user tables get smaller batches than MNIST). The
  CLI reads both; a method's defaults live nowhere else.
* **Registration**: :func:`register` files the class under ``method`` (its CLI name).

Adding a method is one module with a class keeping this contract plus its ``@register`` line (see
the README's "Adding a method").
"""
from __future__ import annotations

import inspect
from pathlib import Path

from ..errors import InvalidParameterError

METHODS: dict[str, type] = {}
#: parameters that set how a run goes, not what the method computes: the CLI fills them from its
#: own run flags (``--seed``, ``--device``...) for every method that has them
RUN_PARAMS = ("seed", "noise_seed", "device", "checkpoint_every", "progress")
DATA_KINDS = ("image", "table")


def register(cls):
    """File ``cls`` in the method registry under ``cls.method`` (its CLI name)."""
    bad = [k for k in cls.data_kinds if k not in DATA_KINDS]
    if not cls.method or bad:
        raise InvalidParameterError(f"{cls.__name__}: a method needs a name (method = 'dp-...') and data_kinds "
                                    f"among {DATA_KINDS}; got {cls.method!r}, {cls.data_kinds!r}.")
    METHODS[cls.method] = cls
    return cls


def _plain(value):
    """A parameter value as JSON has it (tuples as lists, paths as strings)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class Method:
    """Base of every method: parameters from the signature, data kinds, per-kind defaults."""

    method = ""
    data_kinds: tuple[str, ...] = DATA_KINDS
    #: kind -> {parameter: default for that kind}, where it differs from the constructor's
    kind_defaults: dict[str, dict] = {}

    @classmethod
    def param_names(cls) -> list[str]:
        """The constructor's parameters, through the bases its ``**kwargs`` reach."""
        names: list[str] = []
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            params = list(inspect.signature(init).parameters.values())[1:]
            names += [p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
                      and p.name not in names]
            if not any(p.kind is p.VAR_KEYWORD for p in params):
                break
        return names

    @classmethod
    def param_defaults(cls) -> dict:
        """Each parameter's constructor default (the first class in the MRO that declares it wins)."""
        out: dict = {}
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            params = list(inspect.signature(init).parameters.values())[1:]
            for p in params:
                if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in out:
                    out[p.name] = p.default
            if not any(p.kind is p.VAR_KEYWORD for p in params):
                break
        return out

    @classmethod
    def defaults_for(cls, kind: str) -> dict:
        """The settings of this method for data of ``kind`` that differ from its constructor's."""
        if kind not in cls.data_kinds:
            raise InvalidParameterError(f"{cls.method} takes {' and '.join(cls.data_kinds)} data, not {kind}s; "
                                        f"choose another method (see `mmdsynth fit --help`).")
        return dict(cls.kind_defaults.get(kind, {}))

    @classmethod
    def dataset_defaults(cls, dataset: str, kind: str) -> dict:
        """The method's settings for a registered dataset (the papers' per-dataset presets); {} for
        images without one. A method with no preset for a tabular benchmark says so."""
        if kind == "table":
            raise InvalidParameterError(f"{cls.method} has no preset for the tabular benchmark {dataset!r}; fit it "
                                        f"with --csv and a schema, or use dp-ntk, dp-merf, dp-hp or dp-kip.")
        return {}

    def get_params(self) -> dict:
        """Every constructor parameter's current value, JSON-plain."""
        return {k: _plain(getattr(self, k)) for k in self.param_names()}
