"""The one contract every method keeps (scikit-learn's estimator shape, synthcity's plug-in declaration).

* **Parameters come from the constructor signature**: ``param_names()`` walks the ``__init__`` of the
  class and of its bases for as long as they pass ``**kwargs`` on; ``get_params()`` reads them back
  (JSON-plain), so ``cls(**model.get_params())`` rebuilds the model and ``model.json`` needs no
  hand-typed list. Constructors only store their arguments; ``fit`` validates.
* **Data kinds and per-kind defaults**: ``data_kinds`` says what the method takes ("image": arrays
  (n, c, h, w) or (n, d); "table": a DataFrame with a schema). A parameter whose best value depends on
  the kind of data (user tables get smaller batches than MNIST, and a privacy level where images have
  none) defaults to None in the signature, meaning "the default for the data's kind"; ``kind_defaults``
  (``defaults_for(kind)``) holds those values. ``fit`` resolves them for the data it receives into
  ``settings_`` (:meth:`Method.settings_for`), which training reads; a parameter given is used as given
  and the constructor's attributes are never rewritten. The Python API and the CLI resolve them the same
  way; a method's defaults live nowhere else.
* **A method's parameters are its own**: a signature lists only what the method uses. Options shared
  by a family come from cooperative mixins (``TableOptions``: the options of methods that take tables);
  options of the shared code that a method does not expose keep the values in its base's ``_shared_defaults``
  (read as attributes, so shared code reads them alike; not parameters).
  ``model.json`` files written by 0.1 (every method listed the 29 options of all) load through
  :meth:`Method.known_params`: an option the method no longer takes is dropped when its value is what the
  method does anyway, and refused, naming it, otherwise.
* **Registration**: :func:`register` files the class under ``method`` (its CLI name).

Adding a method is one module with a class keeping this contract plus its ``@register`` line (see
the README's "Adding a method").
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path
from types import SimpleNamespace

from ..data.schema import Schema
from ..errors import ArtifactError, InvalidParameterError, one_of

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


class Settings(SimpleNamespace):
    """A fitted method's settings (``settings_``): every constructor parameter with the per-kind ones resolved
    for the data ``fit`` received, plus what fit learned from public facts (``n_classes`` of a table's schema).
    Attribute access like the method's own; an option the method does not take reads its value in the method's
    ``_shared_defaults`` (the one the shared code uses). :meth:`to_dict`: the parameters, JSON-plain."""

    def __init__(self, owner: type | None = None, **values):
        super().__init__(**values)
        self.__dict__["_owner"] = owner

    def __getattr__(self, name):
        shared = getattr(self.__dict__.get("_owner"), "_shared_defaults", {})
        if name in shared:
            return shared[name]
        raise AttributeError(name)

    def to_dict(self) -> dict:
        return {k: _plain(v) for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in vars(self).items() if not k.startswith('_'))})"


def epsilon_required(kind: str) -> InvalidParameterError:
    """The refusal of a fit with no privacy level where the data's kind has no default (images)."""
    return InvalidParameterError(
        f"epsilon is required (e.g. epsilon=10): there is no default privacy level for {kind}s (tables default "
        f"to epsilon=1.0).")


def _terminal() -> bool:
    """Whether progress bars have a reader: stderr is a terminal, or this is a Jupyter kernel."""
    stderr = sys.stderr
    return bool(getattr(stderr, "isatty", lambda: False)()) or "ipykernel" in sys.modules


class Method:
    """Base of every method: parameters from the signature, data kinds, per-kind defaults."""

    method = ""
    #: one line for `mmdsynth fit --help` (default: the docstring's first sentence)
    summary = ""
    #: options of a family's shared code that this method does not take, at the values the shared code uses for
    #: it (read as attributes, ``model.loss``; not parameters: not in the signature, help or ``get_params``)
    _shared_defaults: dict = {}
    data_kinds: tuple[str, ...] = DATA_KINDS
    #: kind -> {parameter: its value for data of that kind}, for the parameters whose constructor default is
    #: None ("the default for the data's kind"); a kind that leaves one out keeps None (epsilon for images:
    #: required)
    kind_defaults: dict[str, dict] = {}
    #: one line per parameter this class's own ``__init__`` declares, for `fit --method M --help` and the API
    #: reference (merged over the bases by :meth:`param_descriptions`)
    param_help: dict[str, str] = {}
    #: the values a parameter this class declares may take, where they are a closed list (merged over the bases by
    #: :meth:`param_constraints`): :meth:`settings_for` refuses any other before anything is read or charged, and
    #: `mmdsynth fit` offers exactly these (a default of None, "the method's choice", stays allowed)
    param_choices: dict[str, tuple] = {}
    #: the method reads the records only in sums the engine computes where the data lives, so it takes a table in
    #: shards (`fit --shards`, a ShardedTable); DP-SGD reads records at every step and does not
    takes_shards: bool = False
    #: the method honours a declared privacy unit (a person column, :mod:`mmdsynth.engines.persons`): its sums
    #: weight each person's rows by 1 / their count, and its DP-SGD (dp-kip) samples persons, not rows
    person_level: bool = False

    def _opening(self, *, budget, dataset: str, privacy_unit: str, plan=None, multipliers=None,
                 shares: dict | None = None, **options):
        """The :class:`~mmdsynth.privacy.engine.Open` stage of the fit's plan, which the run builds its engine from
        (:func:`~mmdsynth.privacy.engine.run_plan`; issue 82: one construction site, ``open_engine``): a zCDP filter
        for plans of stages with ``shares`` of named releases (MST, AIM, the hybrid:
        :class:`~mmdsynth.privacy.engine.ZCDPEngine`), otherwise the engine of ``plan`` and its ``multipliers``
        under the method's accountant (:class:`~mmdsynth.privacy.engine.PrivacyEngine`; ``options``: its sampler
        seed, non-private baseline, reserved delta; and for the run, the marginal stages' ``domain``, ``encoder``,
        ``assumed``, ``progress`` and the rows' ``check``). Calibrated and budget-checked before any row is read; the
        noise seed (tests only) is the method's."""
        from ..privacy.engine import Open

        s = self._s
        context = {k: options.pop(k) for k in ("domain", "encoder", "assumed", "progress", "check") if k in options}
        common = dict(budget=budget, noise_seed=s.noise_seed, dataset=dataset, privacy_unit=privacy_unit)
        if shares is not None:
            return Open(s.epsilon, s.delta, shares=shares, options={**common, **options}, **context)
        return Open(s.epsilon, s.delta, plan, options=dict(multipliers=multipliers, accountant=s.accountant, **common,
                                                           **options), **context)

    def _open_engine(self, **opening):
        """The engine of :meth:`_opening`'s stage, built now (DP-KIP's runs, which open their engine before the run;
        a plan's outline, which calibrates and reads nothing)."""
        from ..privacy.engine import open_engine

        stage = self._opening(**opening)
        return open_engine(stage.epsilon, stage.delta, stage.plan, shares=stage.shares, **stage.options)

    def _run_table(self, X, label: str | None, schema, **fit) -> None:
        """A table fit's one run: the schema given (None: table shards carry their own, the run reads it), a
        DataFrame's columns matched to it by name, then the rows handed to
        :func:`~mmdsynth.privacy.engine.run_plan` with :meth:`_table_run` as the planner (``fit``: its arguments)."""
        run_table(X, label, schema, self._table_run(label, **fit))

    def _table_run(self, label: str | None, **fit):
        """A table fit's whole planner, for :func:`~mmdsynth.privacy.engine.run_plan` on its rows: the table's public
        facts (its schema, given or the shards' own, with ``label``; its count), then the method's
        :meth:`table_planner` with ``fit``'s arguments. Returns what that returns."""
        from ..privacy.engine import Facts

        facts = yield Facts()
        return (yield from self.table_planner(as_schema(facts.schema, label), facts=facts, **fit))

    def _settle_delta(self, n_records: int | None) -> None:
        """A delta left out (None) becomes :func:`~mmdsynth.choice.default_delta` of the public count of records (rows,
        or persons under a person unit): called by every fit once that count is known, before the plan is
        calibrated."""
        if self.settings_.delta is None:
            from ..choice import default_delta
            self.settings_.delta = default_delta(n_records)

    def plan_outline(self, schema, facts):
        """What a fit on a table of ``schema`` with public ``facts`` (:class:`~mmdsynth.choice.PublicFacts`) will
        release, each release's share of the plan, and the fit's memory and time estimates
        (:class:`~mmdsynth.methods.outline.PlanOutline`), from public facts only; None where the method does not say
        before its fit (its ledger lists every release after)."""
        return None

    def _unit(self, schema, privacy_unit: str) -> str:
        """The ledger's privacy unit for a fit on ``schema``: "one person (...)" when the schema declares a person
        column (refused, before anything is read, by a method that cannot honour it), else ``privacy_unit``."""
        column = getattr(schema, "privacy_unit", None)
        if column is None:
            return privacy_unit
        if not self.person_level:
            from ..errors import InvalidParameterError
            able = sorted(m for m, c in METHODS.items() if getattr(c, "person_level", False) and "table" in c.data_kinds)
            raise InvalidParameterError(
                f"{self.method} cannot protect a person (privacy_unit={column!r}). Methods that can: "
                f"{', '.join(able)}. Or leave the privacy unit out to protect one row.")
        from ..engines.persons import unit_text
        return unit_text(column)

    def __getattr__(self, name):
        # only for names not found otherwise: an option this method does not take, at its shared value
        shared = type(self)._shared_defaults
        if name in shared:
            return shared[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __new__(cls, *args, **kwargs):
        # a misspelled keyword is named with the method and the closest parameter, not as Python's TypeError about
        # a base class's __init__
        names = cls.param_names()
        unknown = [k for k in kwargs if k not in names]
        if unknown and cls._inits_listed():
            import difflib

            from ..errors import UnknownParameterError
            close = difflib.get_close_matches(unknown[0], names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UnknownParameterError(
                f"{cls.method or cls.__name__} takes no parameter {unknown[0]!r}; {hint}its parameters: "
                f"{', '.join(names)} (`mmdsynth fit --method {cls.method} --help` describes them).")
        return super().__new__(cls)

    @classmethod
    def _inits_listed(cls) -> bool:
        """Whether the constructors :meth:`param_names` reads name every parameter: not where one of them names none
        (a test's stand-in ``lambda self, *a, **k``; the keywords are then left to it)."""
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            params = list(inspect.signature(init).parameters.values())[1:]
            if params and all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
                return False
            if not any(p.kind is p.VAR_KEYWORD for p in params):
                return True
        return True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # help(cls) and inspect.signature(cls) show every parameter the class takes, through its mixins' and
        # bases' **kwargs, not only those of its own __init__
        try:
            cls.__signature__ = cls.signature()
        except (TypeError, ValueError):          # a class whose parameters cannot be listed keeps its own
            pass

    @classmethod
    def signature(cls) -> inspect.Signature:
        """The class's whole parameter list as one signature (epsilon and delta positional, the rest keyword)."""
        params, seen = [], set()
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            own = list(inspect.signature(init).parameters.values())[1:]
            for p in own:
                if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in seen:
                    seen.add(p.name)
                    kind = p.POSITIONAL_OR_KEYWORD if p.name in ("epsilon", "delta") else p.KEYWORD_ONLY
                    params.append(p.replace(kind=kind))
            if not any(p.kind is p.VAR_KEYWORD for p in own):
                break
        positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        return inspect.Signature(positional + [p for p in params if p.kind is not p.POSITIONAL_OR_KEYWORD])

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
    def param_descriptions(cls) -> dict[str, str]:
        """{parameter: one line} for the parameters the class and its bases describe (``param_help``)."""
        out: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            out.update(klass.__dict__.get("param_help", {}))
        return {p: out[p] for p in cls.param_names() if p in out}

    @classmethod
    def param_constraints(cls) -> dict[str, tuple]:
        """{parameter: the values it may take} for the parameters the class and its bases constrain
        (``param_choices``)."""
        out: dict[str, tuple] = {}
        for klass in reversed(cls.__mro__):
            out.update(klass.__dict__.get("param_choices", {}))
        return {p: tuple(out[p]) for p in cls.param_names() if p in out}

    @classmethod
    def defaults_for(cls, kind: str) -> dict:
        """The values this method gives its per-kind parameters (those that default to None) for data of
        ``kind``; refuses a kind the method does not take."""
        if kind not in cls.data_kinds:
            raise InvalidParameterError(f"{cls.method} takes {' and '.join(cls.data_kinds)} data, not {kind}s; "
                                        f"choose another method (see `mmdsynth fit --help`).")
        return dict(cls.kind_defaults.get(kind, {}))

    @classmethod
    def per_kind_params(cls) -> list[str]:
        """The parameters whose default depends on the kind of data (None in the signature)."""
        defaults = cls.param_defaults()
        return [k for k in defaults if defaults[k] is None
                and any(k in cls.kind_defaults.get(kind, {}) for kind in cls.data_kinds)]

    def settings_for(self, kind: str, *, require_epsilon: bool = True) -> Settings:
        """Every parameter as a fit on data of ``kind`` uses it: a value given as given, a per-kind parameter
        left out (None) at the kind's default (:meth:`defaults_for`), ``progress`` left out (None) on when
        someone can see it (stderr a terminal, or a notebook). Reads the constructor's attributes, never
        writes them. Refuses a missing epsilon where the kind has no default (images)."""
        values = {k: getattr(self, k) for k in self.param_names()}
        for k, v in self.defaults_for(kind).items():
            if k in values and values[k] is None:
                values[k] = v
        if "progress" in values and values["progress"] is None:
            values["progress"] = _terminal()
        if require_epsilon and "epsilon" in values and values["epsilon"] is None:
            raise epsilon_required(kind)
        self._check_choices(values)
        return Settings(type(self), **values)

    def _check_choices(self, values: dict) -> None:
        """Refuse a constrained parameter (:meth:`param_constraints`) at a value outside its list, naming the list
        (None, where it is the signature's default, is the method's own choice)."""
        defaults = self.param_defaults()
        for name, allowed in self.param_constraints().items():
            value = values.get(name)
            if value is None and defaults.get(name) is None:
                continue
            if not one_of(value, allowed):
                shown = ", ".join(repr(a) for a in allowed)
                raise InvalidParameterError(f"{name} must be one of {shown}; got {value!r} "
                                            f"(`mmdsynth fit --method {self.method} --help` describes them).")

    @property
    def _s(self) -> Settings:
        """The settings in force: ``settings_`` once a fit has resolved them for its data, before that the
        constructor's values with the per-kind ones for this method's first kind (hooks called directly)."""
        return self.__dict__.get("settings_") or self.settings_for(self.data_kinds[0], require_epsilon=False)

    @classmethod
    def known_params(cls, params: dict, where: str) -> dict:
        """``params`` from a file (``model.json``, a release's ``fit_params``) as this method's constructor takes
        them. Files written by 0.1 list every option of the shared base: one this method no longer takes is
        dropped when its value is the one the method uses anyway (``_shared_defaults``), and refused, naming it,
        otherwise (the model would not be the one that was fitted)."""
        names = set(cls.param_names())
        kept, wrong = {}, []
        for k, v in params.items():
            if k in names:
                kept[k] = v
            elif not (k in cls._shared_defaults and _plain(cls._shared_defaults[k]) == _plain(v)):
                wrong.append(f"{k}={v!r}")
        if wrong:
            raise ArtifactError(
                f"{where} sets {', '.join(wrong)}, which {cls.method} does not take: mmdsynth 0.1 gave every method "
                f"the options of all of them, and these change what the model does. Refit with today's options "
                f"(`mmdsynth fit --method {cls.method} --help`), or load it with mmdsynth 0.1.")
        return kept

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


def as_schema(schema, label) -> Schema:
    """The fit's schema (public: the user's declaration, an object, a dict or a JSON file) with its label checked."""
    if schema is None:
        raise InvalidParameterError(
            "fitting a table needs its schema (numeric columns with bounds, categorical columns with "
            "categories, the label and its categories): pass schema=Schema(...) or a path to its JSON. "
            "mmdsynth never reads bounds or categories from the private data unless asked to, with "
            "budget (leave them out of the schema and pass schema_share=0.1)."
        )
    if isinstance(schema, (str, Path)):
        schema = Schema.from_json(schema)
    elif isinstance(schema, dict):
        schema = Schema.from_dict(schema)
    if label is not None and label != schema.label:
        raise InvalidParameterError(f"label={label!r} but the schema's label is {schema.label!r}; they must agree.")
    if schema.label is None:
        raise InvalidParameterError("the schema declares no label column; tables are modelled per class.")
    return schema


def given_schema(data, schema, label):
    """The schema a table fit was given (public: the user's declaration, with its label checked), or None where
    ``data`` is table shards and no schema was given (they carry their own, which the run reads)."""
    from ..data.shards import ShardedTable

    if schema is None and isinstance(data, ShardedTable):
        return None
    return as_schema(schema, label)


def run_table(X, label: str | None, schema, planner):
    """A table fit's one run: the schema given (None: table shards carry their own, which the run reads; a label
    applied), a DataFrame's columns matched to it by name (its rows are the run's to read), then the rows handed to
    :func:`~mmdsynth.privacy.engine.run_plan` with ``planner``. Returns what the planner returns."""
    from ..data.encoding import check_table_input
    from ..privacy.engine import run_plan

    given = given_schema(X, schema, label)
    check_table_input(X, given)
    return run_plan(X, planner, schema=given)
