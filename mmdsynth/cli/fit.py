"""`mmdsynth fit`: release once, then train. Method options are generated from the registered methods' signatures;
a flag the chosen method does not take is refused by name; every default lives in the method."""
from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path

from ..errors import InvalidParameterError, one_of
from ..choice import (HYBRID_MIN_RECORDS_EPSILON, HYBRID_MIN_ROWS, PAPERS_DELTA, choose_table_default,
                      table_default)
from . import _catalog
from ._types import existing_file, positive_int


RUN_DEFAULTS = {"seed": 0, "noise_seed": None, "checkpoint_every": 200}


#: flags of `fit` whose name is not the parameter's, and how their value becomes the parameter's
FLAG_PARAMS = {
    "hp_order": ("order", None), "product_releases": ("n_product", None), "infer_schema": ("schema_share", None),
    "ntk_widths": ("widths", lambda v: [int(w) for w in v.split(",")]),
    "moments": ("moments", lambda v: [int(m) for m in v.split(",")]),
    "no_early_stopping": ("early_stopping", lambda v: False if v else None),
}


#: `fit` flags that are not method parameters (data, folders, budget, engine...)
NOT_PARAMS = {"command", "func", "verbose", "method", "dataset", "csv", "db", "tables", "query", "schema", "label",
              "label_categories", "nullable", "missing_values", "privacy_unit", "drop_unlisted", "shards",
              "encoding", "sep", "n_records", "engine", "ray_address", "ray_workers", "force", "split_seed", "out", "public_init",
              "resume", "budget", "budget_epsilon", "data_dir", "quiet", "seed", "noise_seed", "device",
              "checkpoint_every", "release_only", "max_children", "layout", "stream"}


#: parameters the CLI never sets: a fixed sample voids the guarantee (tests only)
TESTING_ONLY = ("sampler_seed",)


#: `fit --help`'s epilog: filled by :func:`add_method_options` (the methods, or the chosen one's defaults)
FIT_EPILOG = "{epilog}"


def _default_delta(args, data) -> float:
    """The delta of a fit on arrays given none: a registered dataset's is the papers' (1e-5); other arrays' is
    :func:`~mmdsynth.choice.default_delta` of their public count (the declared --n-records of shards, else the
    records). A table's is settled inside its run from its public count (rows, declared, or persons)."""
    from ..choice import default_delta

    if args.dataset:
        return PAPERS_DELTA
    declared = getattr(data[0], "n_records", None)
    return default_delta(int(declared) if declared is not None else len(data[0]))


def _budget(args, dataset: str, epsilon, delta):
    """The --budget file: an existing one keeps its totals (a draft schema may have opened it); a new one holds
    --budget-epsilon (else this fit's epsilon) and ``delta`` (None: the fit's own, settled inside its run from the
    public count, :meth:`~mmdsynth.privacy.BudgetFile.new_for_fit`)."""
    if not args.budget:
        return None
    from ..privacy import BudgetFile

    if Path(args.budget).exists():
        return BudgetFile.open(args.budget, dataset, args.budget_epsilon)     # a different total is refused
    if delta is None:
        return BudgetFile.new_for_fit(args.budget, dataset, args.budget_epsilon or epsilon)
    return BudgetFile.open(args.budget, dataset, args.budget_epsilon or epsilon, delta)


def _model(args, defaults: dict, from_folder: bool, chosen: dict | None = None):
    """The model of --method: the dataset's (or release's) settings, ``chosen`` (the table default's sizing, its
    parameters given left out), the flags given winning; the run's settings; every flag checked against the method,
    before anything is read."""
    from ..methods import METHODS

    cls = METHODS[args.method]
    given = _method_options(args, cls)
    params = {**defaults, **(chosen or {}), **given}
    if params.get("delta") is None and args.dataset and not from_folder:   # a registered dataset: the papers' delta
        params["delta"] = PAPERS_DELTA
    run = {"seed": args.seed, "noise_seed": args.noise_seed, "device": args.device,
           "checkpoint_every": args.checkpoint_every, "progress": not args.quiet}
    names = set(cls.param_names())
    model = cls(**{k: v for k, v in run.items() if k in names}, **params)
    if args.public_init is not None and "public_init" not in inspect.signature(cls.fit).parameters:
        raise InvalidParameterError(f"--public-init is a dp-kip option (its public starting support set); this "
                                    f"run is --method {args.method}.")
    if args.release_only:
        if not cls.releases_once:
            raise InvalidParameterError(f"--release-only stops after a release-once method's private release; "
                                        f"{args.method} reads the data at every step, so it has none to stop at.")
        if args.resume:
            raise InvalidParameterError("--release-only with --resume would do nothing: the folder already holds "
                                        "its release. Distill it (`mmdsynth distill`) or resume without "
                                        "--release-only to train a generator.")
    return model


def _table_run(args, table, fit_kwargs: dict, defaults: dict, defaulted: bool, out: Path):
    """A table's fit in one run (:func:`mmdsynth.methods.default.table_fit`): from the run's public facts (the count:
    rows, the declared --n-records of shards, or under --privacy-unit the persons, never their rows), the method
    (the table default where --method is left out: :func:`~mmdsynth.choice.choose_table_default` on the count and
    --epsilon, else the --dataset preset's, as in Python; said unless --quiet; a --dataset preset's settings then
    the chosen method's), its flags checked, its plan outlined (printed unless --quiet; a plan over the memory
    refused), calibrated; a new --budget file's delta the fit's own. Returns the fitted model."""
    from ..choice import PublicFacts
    from ..methods.contract import run_table
    from ..methods.default import table_fit

    epsilon = args.epsilon if args.epsilon is not None else defaults.get("epsilon")   # else a preset's, else None

    def choose(facts: PublicFacts):
        chosen, preset = None, defaults
        if defaulted:
            method = table_default(facts.n_records, epsilon)
            if method != args.method:
                args.method = method
                if args.dataset:
                    preset = _method(args).dataset_defaults(args.dataset, "table")
            plan = choose_table_default(PublicFacts(facts.n_records, facts.unit, epsilon),
                                        _method_options(args, _catalog.methods()[method]))     # a flag given wins
            chosen = plan.params
            if not args.quiet:
                print(f"method: {plan.method} (the table default for {plan.why}; --method chooses another)")
        model = _model(args, preset, False, chosen)
        settings = model.settings_for("table")
        # the budget file goes to the method's planner with the other fit options, which table_fit reads after this
        fit["budget"] = _budget(args, fit_kwargs["dataset"], settings.epsilon, settings.delta)
        return model

    fit = {k: v for k, v in fit_kwargs.items() if k not in ("label", "schema")}
    fit["out"] = out
    if args.release_only:
        fit["train"] = False                     # release-once methods only (checked by _model)
    show = (lambda lines: None) if args.quiet else (lambda lines: print("\n".join(lines)))
    label = fit_kwargs.get("label")
    return run_table(table, label, fit_kwargs.get("schema"), table_fit(label, choose, fit, show=show))


def _table_input(args) -> bool:
    """Whether the data given is a table (public: the flags, and a named dataset's registered kind): table shards come
    with a schema, array shards without one."""
    if args.csv or args.db:
        return True
    if args.shards:
        return bool(args.schema)
    if args.dataset:
        from ..data.registry import DATASETS
        info = DATASETS.get(args.dataset)
        return info is not None and info.kind == "table"
    return False


def cmd_fit(args) -> int:
    if args.tables is not None:
        return _fit_database(args)
    stray = [f for f, v in (("--max-children", args.max_children), ("--layout", args.layout),
                            ("--stream", args.stream or None)) if v is not None]
    if stray:
        raise InvalidParameterError(f"{', '.join(stray)}: only for a database (--tables FOLDER|URL); this fit reads "
                                    f"one table.")
    catalog = _catalog.methods()
    if args.epsilon is not None:             # refused before a file is read (a CSV may take seconds)
        from ..privacy.calibration import check_calibrated_epsilon
        check_calibrated_epsilon(args.epsilon)
    if args.dataset:                         # an unknown name is said as such, with or without --method
        from ..data import get_info
        get_info(args.dataset)
    defaulted = args.method is None and not args.resume and _table_input(args)
    if defaulted:                          # the table default, chosen by the row count once the table is read
        args.method = table_default(None)
    elif args.method is not None:            # the flags are checked before anything is read, written or imported
        if args.method not in catalog:
            from ..errors import unknown_name
            raise unknown_name("method", args.method, catalog)
        _method_options(args, catalog[args.method])
    if args.out is None:
        raise InvalidParameterError("--out is required: the model folder (release/ is written there before "
                                    "training).")
    out = Path(args.out)
    _check_out_folder(out, args)
    from ..methods import METHODS

    from_folder = args.resume and not (args.dataset or args.csv or args.shards)   # settings and method: the release
    if from_folder:
        data, fit_kwargs, defaults, facts, kind = _resume_inputs(args)
    elif not args.method:
        raise InvalidParameterError(f"--method is required for images and array shards ({', '.join(METHODS)}); a "
                                    f"table (--csv, --db, --shards with --schema, a table --dataset) gets the table "
                                    f"default when it is left out "
                                    f"(hybrid, or dp-merf under {HYBRID_MIN_ROWS:,} rows where rows x epsilon is under "
                                    f"{HYBRID_MIN_RECORDS_EPSILON:,}), and `fit --resume --out "
                                    f"DIR` reads it from the folder.")
    else:
        data, fit_kwargs, defaults, facts, kind = _fit_inputs(args)
    if args.infer_schema is not None and not args.csv:
        raise InvalidParameterError("--infer-schema applies to --csv tables whose schema leaves out bounds or "
                                    "categories; built-in datasets come with a public schema.")
    fit_kwargs["public_facts"] = facts
    if kind == "table" and not args.resume and hasattr(METHODS[args.method], "table_planner"):
        # one run: the method (the table default where none is named), its flags and its plan's outline settled
        # from the run's public facts (the count: rows, declared, or persons), before any row is read
        model = _table_run(args, data[0], fit_kwargs, defaults, defaulted, out)
    else:
        model = _model(args, defaults, from_folder)
        settings = model.settings_for(kind)
        # a delta left out: a table's is settled inside its run (the budget file's with it), arrays' from their count
        delta = settings.delta if settings.delta is not None or kind == "table" else _default_delta(args, data)
        if args.public_init is not None:
            fit_kwargs["public_init"] = _public_init(args.public_init)
        if args.release_only:
            fit_kwargs["train"] = False          # release-once methods only (checked by _model)
        model.fit(*data, out=out, budget=_budget(args, fit_kwargs["dataset"], settings.epsilon, delta),
                  resume=args.resume, **fit_kwargs)
    if args.release_only:
        eps, delta = model.release_.ledger.total()
        print(f"released {args.method} on {fit_kwargs['dataset'] or 'the data'}: epsilon={eps:g}, delta={delta:g}; "
              f"saved to {out / 'release'} (no generator trained)")
        print(f"next: `mmdsynth distill {out} --images-per-class K --out set.npz`, or `mmdsynth fit --resume --out "
              f"{out}` to train a generator from it (no privacy spent either way)")
        return 0
    for line in model.fit_summary(fit_kwargs["dataset"], out):
        print(line)
    return 0


def _schema(args):
    """The --schema file (an mmdsynth schema or SDV metadata) with --nullable columns and, when it names no
    label (SDV metadata), --label and --label-categories applied."""
    from ..data import Schema

    schema = Schema.from_json(args.schema)
    if args.nullable:
        schema = schema.with_nullable("all" if args.nullable == "all" else args.nullable.split(","))
    if args.missing_values:
        from dataclasses import replace

        schema = replace(schema, missing_values=[*schema.missing_values, *args.missing_values.split(",")])
    if getattr(args, "privacy_unit", None):
        schema = schema.with_privacy_unit(args.privacy_unit)
    if schema.label is None and args.label:
        schema = schema.with_label(args.label, args.label_categories.split(",") if args.label_categories else None)
    elif args.label_categories:
        raise InvalidParameterError("--label-categories is for schemas that declare no label (SDV metadata); this "
                                    "schema declares its label's classes.")
    return schema


def _fit_inputs(args):
    """(data for fit, fit kwargs, the dataset's settings, public facts, kind of data) for --dataset or --csv."""
    from ..data import get_info, load_dataset, load_preset, read_table

    if args.privacy_unit and not (args.csv or args.db or args.shards):
        raise InvalidParameterError("--privacy-unit names a column of your table (--csv, --db or --shards); the "
                                    "registered datasets have one row per person.")
    if args.shards:
        return _shard_inputs(args)
    if args.engine or args.ray_address or args.ray_workers or args.n_records:
        raise InvalidParameterError("--engine, --ray-address, --ray-workers and --n-records apply to --shards.")
    if args.db or args.query:
        if not (args.db and args.query and args.schema) or args.csv or args.dataset:
            raise InvalidParameterError("a database table needs --db URL, --query SQL and --schema FILE.json (its "
                                        "label declared there or by --label COLUMN), instead of --csv or --dataset.")
        from ..data import read_sql

        _method(args).defaults_for("table")        # refuses a method that takes no tables, before reading one
        schema, label = _labelled_schema(args)
        df = read_sql(args.db, args.query, schema, label=label, drop_unlisted=args.drop_unlisted)
        return (df,), {"label": label, "schema": schema, "dataset": "user:sql"}, {}, {}, "table"
    if args.csv:
        if not args.schema:
            raise InvalidParameterError("--csv needs --schema FILE.json (columns and types; bounds and categories, "
                                        "or --infer-schema SHARE; the label and its categories, or --label COLUMN). "
                                        "`mmdsynth schema --csv FILE` drafts one.")
        _method(args).defaults_for("table")        # refuses a method that takes no tables, before reading one
        schema, label = _labelled_schema(args)
        from ..runtime import phase
        with phase(f"reading {Path(args.csv).name}", not args.quiet):
            df = read_table(args.csv, schema, label=label, drop_unlisted=args.drop_unlisted,
                            encoding=args.encoding, sep=args.sep)
        return (df,), {"label": label, "schema": schema, "dataset": f"user:{Path(args.csv).name}"}, {}, {}, \
            "table"
    if not args.dataset:
        raise InvalidParameterError("give --dataset NAME (see `mmdsynth datasets`) or --csv FILE with --schema.")
    info = get_info(args.dataset)
    if info.kind == "table":
        data = load_preset(args.dataset, seed=args.split_seed, data_dir=args.data_dir)
        facts = {"preset": args.dataset, "split_seed": args.split_seed}
        return (data.train,), {"label": data.schema.label, "schema": data.schema, "dataset": args.dataset,
                               "privacy_unit": data.privacy_unit}, \
            _method(args).dataset_defaults(args.dataset, "table"), facts, "table"
    _method(args).defaults_for("image")            # refuses a method that takes no images, before loading them
    data = load_dataset(args.dataset, data_dir=args.data_dir)
    return (data.x_train, data.y_train), {"dataset": args.dataset}, \
        {**_method(args).dataset_defaults(args.dataset, "image"), "n_classes": data.n_classes}, {}, "image"


def _labelled_schema(args):
    """(the schema of --schema and the options, its label): the label the schema declares, or --label for a schema
    that declares none (SDV metadata); a --label naming another column than the schema's label is refused."""
    schema = _schema(args)
    if schema.label is None:
        raise InvalidParameterError(f"the schema {args.schema} declares no label: give --label COLUMN (tables are "
                                    f"modelled per class).")
    if args.label is not None and args.label != schema.label:
        raise InvalidParameterError(f"--label {args.label} but the schema's label is {schema.label!r}; they must "
                                    f"agree (leave --label out: the schema's is used).")
    return schema, schema.label


def _method(args):
    """The class of ``--method`` (importing the methods, hence torch, only here)."""
    from ..methods import METHODS

    return METHODS[args.method]


def _shard_inputs(args):
    """(data, fit kwargs, settings, facts, kind) for --shards: a table or arrays in many files, summed on --engine."""
    from ..data.shards import ShardedTable, open_shards
    from ..engines import get_engine

    if args.csv or args.dataset:
        raise InvalidParameterError("give one of --shards, --csv and --dataset.")
    if not _method(args).takes_shards:
        raise InvalidParameterError(f"{args.method} reads the records at every step; --shards releases sums once: "
                                    f"use a method that releases sums (dp-merf, dp-ntk, dp-hp, dp-mepf, mst or aim).")
    if args.n_records is None:
        raise InvalidParameterError("--shards needs --n-records N: the total number of records (with --privacy-unit: "
                                    "of persons), declared (public metadata: the sensitivity 2/m rests on it; the "
                                    "data read is checked against it).")
    engine = get_engine(args.engine or "stream", address=args.ray_address, workers=args.ray_workers)
    if args.label and not args.schema:
        raise InvalidParameterError("table shards need --schema FILE.json (--label alone names no columns).")
    schema, label = _labelled_schema(args) if args.schema else (None, None)
    src = open_shards(args.shards, n_records=args.n_records, schema=schema, engine=engine,
                      drop_unlisted=args.drop_unlisted, encoding=args.encoding, sep=args.sep)
    shards = Path(str(args.shards))
    name = f"user:{shards.parent.name}/{shards.name}" if any(c in shards.name for c in "*?[") else f"user:{shards.name}"
    if isinstance(src, ShardedTable):
        return (src,), {"label": label, "schema": schema, "dataset": name}, {}, {}, "table"
    if src.labelled and args.n_classes is None:
        raise InvalidParameterError("the array shards hold labels: give --n-classes C (public: labels are 0..C-1).")
    labels = {"n_classes": args.n_classes} if src.labelled else {"conditional": False}
    return (src,), {"dataset": name}, labels, {}, "image"


def _resume_inputs(args):
    """``fit --resume --out DIR`` without --dataset/--csv: everything from the folder's release (no data)."""
    from ..release import META_FILE, Release

    out = Path(args.out)
    if not (out / "release" / META_FILE).exists():
        raise InvalidParameterError(f"--resume: {out} holds no release to resume; run the fit without --resume first.")
    facts = Release.load(out / "release").dataset
    method = args.method or facts.get("method")
    if args.method and facts.get("method") and args.method != facts["method"]:
        raise InvalidParameterError(f"--method {args.method}, but {out} holds a {facts['method']} release.")
    args.method = method
    if not _method(args).releases_once:
        raise InvalidParameterError(f"{method} resumes DP-SGD, which reads the private data: give the same --dataset "
                                    f"or --csv as the first run, with --resume.")
    params = _method(args).known_params(dict(facts.get("fit_params") or {}), f"{out / 'release' / META_FILE}")
    for key in ("seed", "noise_seed", "checkpoint_every"):      # the first run's, unless given again
        if key in params:
            value = params.pop(key)
            if getattr(args, key) == RUN_DEFAULTS.get(key):
                setattr(args, key, value)
    return (None,), {"dataset": facts.get("name", "")}, params, {}, "table" if facts.get("table") else "image"


def _refuse_database_flags(args) -> None:
    """The flags of one table's fit that a database's cannot honour, refused by name."""
    other = [flag for flag, v in (("--csv", args.csv), ("--db", args.db), ("--dataset", args.dataset),
                                  ("--shards", args.shards), ("--resume", args.resume), ("--query", args.query),
                                  ("--n-records", args.n_records), ("--drop-unlisted", args.drop_unlisted),
                                  ("--public-init", args.public_init), ("--release-only", args.release_only)) if v]
    if other:
        raise InvalidParameterError(f"--tables reads the whole database; it takes no {', '.join(other)}.")
    declared = [flag for flag, v in (("--label", args.label), ("--label-categories", args.label_categories),
                                     ("--nullable", args.nullable), ("--missing-values", args.missing_values),
                                     ("--privacy-unit", args.privacy_unit)) if v]
    if declared:
        raise InvalidParameterError(f"{', '.join(declared)}: a database declares these in its schema (the root's "
                                    f"label, each column's nullable, privacy_unit: the root table); drop the flags.")


def _database_budget(args, dataset: str):
    """The budget file a database's fit charges (``--budget``), or None: an existing one keeps its totals; a new one
    holds ``--budget-epsilon`` (else this fit's epsilon) and ``--delta`` (the default delta rests on the count of
    roots, which only the fit reads)."""
    if args.budget is None:
        if args.budget_epsilon is not None:
            raise InvalidParameterError("--budget-epsilon sets the total of a new budget file: give --budget FILE too.")
        return None
    from ..privacy import BudgetFile
    if not Path(args.budget).exists() and args.delta is None:
        raise InvalidParameterError(f"--budget {args.budget} is a new budget file: give its total delta with --delta "
                                    f"(a database's default delta rests on its count of roots, read only by the fit).")
    return BudgetFile.open(args.budget, dataset, args.budget_epsilon or (
        None if Path(args.budget).exists() else args.epsilon), args.delta)


def _fit_database(args) -> int:
    """``fit --tables SOURCE --schema DATABASE.json``: a database (issue 84), fitted as :func:`mmdsynth.fit_tables` fits
    it; the folder holds each table's model and the database's layout."""
    _refuse_database_flags(args)
    if args.schema is None:
        raise InvalidParameterError("--tables needs --schema DATABASE.json: its tables, their keys and the root "
                                    "(privacy_unit); see docs/tutorials/database.md.")
    if args.epsilon is None or args.out is None:
        raise InvalidParameterError("--tables needs --epsilon and --out (the model folder).")
    from ..privacy.calibration import check_calibrated_epsilon
    check_calibrated_epsilon(args.epsilon)
    out = Path(args.out)
    _check_out_folder(out, args)
    if args.method is not None:
        catalog = _catalog.methods()
        if args.method not in catalog:
            from ..errors import unknown_name
            raise unknown_name("method", args.method, catalog)
        given = _method_options(args, catalog[args.method])
    else:
        stray = sorted(_flag(d) for d, (param, _) in _flags_given(args).items() if param not in ("epsilon", "delta"))
        if stray:
            raise InvalidParameterError(f"{', '.join(stray)}: method options; the table default takes none here. Name "
                                        f"the method (--method NAME) to set them.")
        given = {}
    given = {k: v for k, v in given.items() if k not in ("epsilon", "delta")}         # given apart, as fit_tables
    from ..methods.database import fit_tables
    layout = {k: v for k, v in (("layout", args.layout), ("max_children", args.max_children)) if v is not None}
    if args.stream:
        layout["stream"] = True
    if args.noise_seed is not None:                           # tests only: fixed noise
        given["noise_seed"] = args.noise_seed
    dataset = f"database:{Path(str(args.tables)).name}"
    model = fit_tables(args.tables, args.schema, epsilon=args.epsilon, delta=args.delta, method=args.method,
                       dataset=dataset, out=out, budget=_database_budget(args, dataset), **layout, **given)
    if not args.quiet:
        for name, m in model.models_.items():
            for line in m.fit_summary(f"{name} of the database {args.tables} ({model.shares[name]:.0%} of the "
                                      f"privacy)", out / name):
                print(line)
        eps, delta = model.total()
        print(f"the database's guarantee: epsilon={eps:g}, delta={delta:g}, one root with all its descendants the unit")
        print(f"sample it: mmdsynth sample {out} --n ROOTS --out FOLDER (one CSV a table)")
    return 0


def _check_out_folder(out: Path, args) -> None:
    """Refuse to write a run into a non-empty folder that is not an mmdsynth run (unless --force)."""
    if args.resume or args.force or not out.exists():
        return
    if not out.is_dir():
        raise InvalidParameterError(f"--out {out} is a file; give a folder for the model.")
    entries = [p.name for p in out.iterdir()]
    ours = {"release", "model.json", "budget.json"}
    if entries and not ours & set(entries) and not any(n.startswith("checkpoint") for n in entries):
        raise InvalidParameterError(
            f"--out {out} is a non-empty folder that is not an mmdsynth run (it holds {sorted(entries)[:5]}); "
            f"give a new or empty folder, or --force to write into it anyway.")


def _method_options(args, cls) -> dict:
    """{parameter: value} of every method flag given, refusing (exit 2, naming them) flags that are not
    parameters of ``cls``: a flag for another method is an error, never silently dropped."""
    names = set(cls.param_names())
    given, wrong = {}, []
    for dest, (param, value) in _flags_given(args).items():
        if param not in names:
            wrong.append((_flag(dest), param))
            continue
        given[param] = value
    if "widths" in given:
        given["ntk_width"] = None              # --ntk-widths replaces the single width
    if wrong:
        owners = sorted({m for _, p in wrong for m, c in _catalog.methods().items() if p in c.param_names()})
        raise InvalidParameterError(
            f"{', '.join(f for f, _ in wrong)}: {' / '.join(owners) or 'no method'} options, not taken by --method "
            f"{args.method} (its options: `mmdsynth fit --method {args.method} --help`).")
    return given


def _flags_given(args) -> dict:
    """{flag's dest: (the method parameter, its value)} of every method flag given: a value given (false too) is
    applied or refused; a flag left out is None."""
    out = {}
    for dest, value in vars(args).items():
        if dest in NOT_PARAMS or value is None:
            continue
        param, convert = FLAG_PARAMS.get(dest, (dest, None))
        value = convert(value) if convert is not None else value
        if value is not None:
            out[dest] = (param, value)
    return out


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def add_method_options(fit_parser, method: str | None = None) -> None:
    """Give `fit` a flag for every method parameter that has no hand-written one (generated from the
    registered methods' signatures; values are JSON, or plain strings). Run only for `fit`: it imports
    the methods, hence torch.

    ``method`` (the ``--method`` given, if any) sets what `--help` shows: that method's options only, each with
    its default (per-kind ones for each kind of data it takes); without it, the options every run has and the
    list of methods. Every method's flags are still parsed, so one the chosen method does not take is refused
    by name (:func:`_method_options`). Reads the methods' catalog (:mod:`mmdsynth.cli._catalog`): no torch."""
    catalog = _catalog.methods()
    cls = catalog.get(method) if method else None
    fit_parser.epilog = fit_parser.epilog.replace("{epilog}", _epilog(cls, catalog, _catalog.generic()))
    taken = {a.dest for a in fit_parser._actions} | {p for p, _ in FLAG_PARAMS.values()}
    group = fit_parser.add_argument_group(
        f"more {method} options (values as JSON, e.g. --conditional false)"
        if cls is not None else "more method options")
    owners: dict[str, list] = {}
    choices = _choices(catalog)
    for name, klass in catalog.items():
        for param, default in klass.param_defaults().items():
            owners.setdefault(param, []).append((name, default))
    for param, where in owners.items():
        if param in taken or param in RUN_DEFAULTS or param in TESTING_ONLY or param in ("progress", "device"):
            continue
        kind = _value_kind([d for _, d in where])
        metavar = ("{" + ",".join(_json_text(v) for v in choices[param]) + "}" if param in choices else
                   {"bool": "{true,false}", "int": "INT", "float": "NUMBER"}.get(kind, "VALUE"))
        group.add_argument(_flag(param), dest=param, type=_typed(param, kind, choices.get(param)), default=None,
                           metavar=metavar,
                           help=_generated_help(cls, param) if cls is not None else "a method option")
    for action in fit_parser._actions:            # a hand-written flag of a constrained parameter: the methods' list
        param = _param_of(action.dest)
        if action.dest in taken and param in choices and action.choices is not None:
            action.choices = list(choices[param])
    _help_for(fit_parser, cls, taken)


def _help_for(fit_parser, cls, taken: set) -> None:
    """`fit --help`'s flags for the chosen method ``cls`` (a catalog entry): its options, each with its default, and
    none of another method's; without one, the options every run has."""
    for action in fit_parser._actions:
        if action.dest in METHOD_FLAGS and (cls is None or not METHOD_FLAGS[action.dest](cls)):
            action.help = argparse.SUPPRESS
        if action.dest in TABLE_FLAGS and cls is not None and "table" not in cls.data_kinds:
            action.help = argparse.SUPPRESS
        param = _param_of(action.dest)
        if param is None:
            continue
        if cls is None:
            if param not in ("epsilon", "delta"):
                action.help = argparse.SUPPRESS
        elif param not in cls.param_names():
            action.help = argparse.SUPPRESS
        elif action.dest not in taken:                # a generated flag: what it does, and its default
            action.help = _generated_help(cls, param)
        elif action.dest not in FLAG_CONVERTS:
            words, text = _default_text(cls, param), action.help
            action.help = f"{text} ({words})" if text and words else (text or words or param.replace("_", " "))


#: `fit` flags that are not method parameters but apply to some methods only (shown for those)
METHOD_FLAGS = {"public_init": lambda cls: cls.takes_public_init,
                "release_only": lambda cls: cls.releases_once}
#: `fit` flags for tables only: not shown for a method that takes images only
TABLE_FLAGS = ("csv", "db", "query", "schema", "label", "label_categories", "nullable", "missing_values",
               "privacy_unit", "drop_unlisted", "encoding", "sep",
               "infer_schema", "split_seed")
#: flags whose value is not the parameter's (their help says what they do; a default would mislead)
FLAG_CONVERTS = ("no_early_stopping",)
#: what a default of None means, where it is not "unset"
NONE_MEANS = {"epsilon": "required", "length_scale": "sqrt(d)/2", "product_dims": "5, at most the encoded inputs",
              "code_dim": "auto (5, or a table preset's)", "select_every": "iterations / 20",
              "proxy_encoder": "--encoder", "conv_depth": "3 (2 on 8 x 8 images)", "conv_pool": "none",
              "start": "pixels", "device": "cuda when available"}


def _param_of(dest: str) -> str | None:
    """The method parameter a `fit` flag sets (None: a flag of the run, the data or the output)."""
    if dest in NOT_PARAMS or dest in ("help", "n_classes") or dest in TESTING_ONLY:
        return None
    return FLAG_PARAMS.get(dest, (dest, None))[0]


def _generated_help(cls, param: str) -> str:
    """A generated flag's help: what the parameter does (the method's ``param_help``) and its default."""
    words, default = cls.param_descriptions().get(param, ""), _default_text(cls, param)
    return f"{words} ({default})" if words and default else (words or default or param.replace("_", " "))


def _default_text(cls, param: str) -> str:
    """``param``'s default for ``cls`` in words: the value, or for a per-kind one its value for each kind of data
    the method takes ("" where None means unset and the help says what it does)."""
    if param in cls.per_kind_params():
        shown = [f"{kind}s {_shown(cls.defaults_for(kind).get(param), param)}" for kind in cls.data_kinds]
        return "default: " + ", ".join(shown)
    value = _shown(cls.param_defaults().get(param), param)
    return value if value == "required" else f"default {value}" if value else ""


def _shown(value, param: str) -> str:
    if value is None:
        return NONE_MEANS.get(param, "")
    if isinstance(value, (bool, dict, list, tuple)):
        return json.dumps(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _summary(cls) -> str:
    """A method's one-line description: its ``summary``, or the first sentence of its docstring."""
    text = getattr(cls, "summary", "") or " ".join((cls.__doc__ or "").split())
    return text.split(". ")[0].rstrip(".")


def _kinds(cls) -> str:
    return " and ".join(k + "s" for k in cls.data_kinds)


def _epilog(cls, methods: dict, generic) -> str:
    """`fit --help`'s epilog: without --method, the methods and how to see one's options; with ``cls``, that
    method and its defaults for each kind of data it takes."""
    if cls is None:
        lines = ["methods (each has its own options: `mmdsynth fit --method M --help` lists them with their defaults):"]
        lines += [f"  {name:<12} {_kinds(c):<18} {_summary(c)}" for name, c in methods.items()]
        lines.append("")
    else:
        lines = [f"{cls.method} ({_kinds(cls)}): {_summary(cls)}.", ""]
    lines.append("defaults live in the methods, the same for `mmdsynth fit` and Python (`DPMERF(epsilon=1).fit(df, "
                 "...)`):")
    kinds = (cls or generic).data_kinds
    if "image" in kinds:
        lines.append("  --dataset (images): the method's defaults for images and its per-dataset settings; --epsilon "
                     "is required.")
    if "table" in kinds:
        lines.append("  --dataset (tables): the paper's preset (epsilon 1, delta 1e-5, its iterations and network).")
        lines.append(f"  --csv (your table){_table_defaults(cls or generic)}.")
    else:
        lines.append(f"  --csv (your table): {cls.method} takes images only.")
    lines += ["  An option left out takes the method's default for the kind of data; one given is used as given. A flag "
              "that the chosen method does not take is refused by name (exit status 2).", "", "examples:"]
    name = cls.method if cls is not None else "dp-merf"
    if "table" in kinds and cls is None:
        lines.append("  mmdsynth fit --csv data.csv --schema schema.json --label income --out runs/mine      # no "
                     "--method: the table default (hybrid, or dp-merf for a small table)")
    if "table" in kinds:
        lines.append(f"  mmdsynth fit --method {name} --csv data.csv --schema schema.json --label income --out runs/mine")
    if "image" in kinds and (cls is not None and "table" not in kinds):
        lines.append(f"  mmdsynth fit --method {name} --dataset mnist --epsilon 1 --out runs/mine"
                     + (" --encoder runs/enc.safetensors" if "encoder" in cls.param_names() else ""))
    if (cls or generic).releases_once:
        lines.append("  mmdsynth fit --resume --out runs/mine --iterations 4000      # train longer: no data read, no "
                     "budget spent")
    return "\n".join(_fitted(line) for line in lines) + "\n"


#: the width `fit --help` keeps its epilog within (a terminal's 80 columns, one spare)
EPILOG_WIDTH = 79


def _fitted(line: str, width: int = EPILOG_WIDTH) -> str:
    """One epilog line within ``width``: a command continued with a backslash (it still pastes into a shell), a
    method's row under its summary column, anything else under its own indent plus two."""
    import re
    import textwrap

    if len(line) <= width:
        return line
    indent = len(line) - len(line.lstrip())
    command, comment = (line.split("  #", 1) + [""])[:2] if line.lstrip().startswith("mmdsynth ") else ("", "")
    if command:
        words, rows = command.split(), [" " * indent]
        for word in words:
            if len(rows[-1]) + len(word) + 3 > width and rows[-1].strip():
                rows[-1] += " \\"
                rows.append(" " * (indent + 4))
            rows[-1] += ("" if not rows[-1].strip() else " ") + word
        if comment:
            rows.append(" " * (indent + 4) + "#" + comment)
        return "\n".join(rows)
    row = re.match(r"( +\S+ +.+?  +)\S", line)        # "  name  kinds  summary": under the summary
    hang = len(row.group(1)) if row and len(row.group(1)) < width // 2 else indent + 2
    return textwrap.fill(line, width=width, subsequent_indent=" " * hang, break_long_words=False,
                         break_on_hyphens=False)


def _table_defaults(cls) -> str:
    """The epilog's words for a table fit's defaults with ``cls`` (the release-once methods' without --method)."""
    t = {**cls._shared_defaults, **cls.param_defaults(), **cls.defaults_for("table")}
    delta = f"{t['delta']:g}" if t["delta"] is not None else "1e-5 up to 10,000 records, then at most 1/(10 x records)"
    words = f": epsilon {t['epsilon']:g}, delta {delta}"
    if "iterations" in t:
        words += (f", {t['iterations']} iterations, batch {t['batch_size']}, lr {t['lr']} x0.9 every "
                  f"{t['lr_step']} iterations")
    elif "batch_size" in t:
        words += f", batch {t['batch_size']}"
    if "max_cells" in t:
        words += f", numeric columns on a public grid of at most {t['max_cells']} cells from their bounds"
        return words
    words += " (the release-once methods' table defaults; --shards of tables too)" if not cls.method else ""
    if t.get("numeric_encoding") != "quantile":
        return words + "; numeric columns scaled by their declared bounds (--numeric-encoding quantile: their CDF, " \
                       "released with a share of the privacy)"
    words += f"; numeric columns quantile-encoded with {t.get('numeric_share', 0.1):g} of the privacy"
    if "proportions_share" in t:
        words += f", class proportions released with {t['proportions_share']:g}"
    return words + ": shares of one (epsilon, delta), not extra charges"


def _value_kind(defaults: list) -> str:
    """What a generated flag takes, from the methods' defaults for its parameter: bool, int, float or json."""
    known = [d for d in defaults if d is not None and d is not inspect.Parameter.empty]
    if known and all(isinstance(d, bool) for d in known):
        return "bool"
    if known and all(isinstance(d, int) and not isinstance(d, bool) for d in known):
        return "int"
    if known and all(isinstance(d, (int, float)) and not isinstance(d, bool) for d in known):
        return "float"
    return "json"


def _choices(catalog: dict) -> dict[str, tuple]:
    """{parameter: the values the registered methods allow it} (each method's ``param_choices``; a parameter two
    methods constrain takes the values of both, and each method's fit refuses what it does not take)."""
    out: dict[str, list] = {}
    for klass in catalog.values():
        for param, allowed in klass.param_constraints().items():
            out.setdefault(param, [])
            out[param] += [v for v in allowed if not one_of(v, out[param])]
    return {k: tuple(v) for k, v in out.items()}


def _json_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _typed(param: str, kind: str, allowed: tuple | None = None):
    """The argparse type of a generated flag: its value parsed as ``kind`` (and, for a constrained parameter, one
    of ``allowed``), anything else refused naming the allowed values (never read as true, never dropped)."""
    def parse(text: str):
        value = _json_value(text)
        if allowed is not None:
            if not one_of(value, allowed):
                raise argparse.ArgumentTypeError(f"takes one of {', '.join(_json_text(a) for a in allowed)}; "
                                                 f"got {text!r}")
            return value
        if kind == "bool" and not isinstance(value, bool):
            raise argparse.ArgumentTypeError(f"takes true or false; got {text!r}")
        if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            raise argparse.ArgumentTypeError(f"takes a whole number; got {text!r}")
        if kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise argparse.ArgumentTypeError(f"takes a number; got {text!r}")
        return value
    parse.__name__ = kind
    return parse


def _json_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _public_init(path):
    """dp-kip --public-init: a PUBLIC starting support set from a .npy file or the array 'x' of an .npz."""
    import numpy as np

    try:
        loaded = np.load(path, allow_pickle=False)
        return loaded["x"] if isinstance(loaded, np.lib.npyio.NpzFile) else loaded
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidParameterError(f"--public-init {path}: cannot read a .npy array or an .npz with 'x' ({exc}).") \
            from exc


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("fit", help="release private summaries of a dataset once, then fit a model to them "
                       "(tables: hybrid by default)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=FIT_EPILOG)
    s.add_argument("--method", help="a registered method (hybrid, mst, aim, dp-merf, dp-ntk, dp-kip, ...); tables "
                   f"default to hybrid (dp-merf under {HYBRID_MIN_ROWS:,} rows where rows x epsilon is under "
                   f"{HYBRID_MIN_RECORDS_EPSILON:,}; table shards: by --n-records); images and array "
                   "shards need one; `fit --resume --out DIR` reads it from the folder")
    s.add_argument("--dataset", help="a registered dataset (see `mmdsynth datasets`); tables use the papers' "
                   "preprocessing and settings (presets)")
    s.add_argument("--csv", type=existing_file("your table: a CSV, Parquet or .npy file"), help="your own table (CSV/Parquet/npy), with --schema (and --label when the schema declares no label)")
    s.add_argument("--db", metavar="URL", help="your table in a SQL database: an SQLAlchemy URL (postgresql+psycopg://"
                   "user@host/db, sqlite:///file.db), with --query, --schema, --label (needs mmdsynth[sql])")
    s.add_argument("--query", metavar="SQL", help="--db: the SELECT that returns the private table")
    s.add_argument("--tables", metavar="FOLDER|URL", help="a database of tables joined by keys under one root table: a folder "
                   "of NAME.csv / NAME.csv.gz / NAME.parquet, or a database URL, with --schema DATABASE.json (its tables, "
                   "keys and root: docs/tutorials/database.md); one root with all its descendants is one unit")
    s.add_argument("--max-children", type=positive_int, default=None, help="--tables: a parent's number of children "
                   "in a table is learned up to this many (public; more read as this many; default 100)")
    s.add_argument("--layout", choices=["cascade", "independent", "flat"], default=None, help="--tables: the cascade "
                   "(default), or a baseline: the tables fitted apart, or a root and one child table joined")
    s.add_argument("--stream", action="store_true", help="--tables: read the tables without child tables in batches "
                   "and fit from temporary shards, in memory that grows with the parent tables, not the leaves")
    s.add_argument("--schema", type=existing_file("the schema: a JSON file (docs/tutorials/tables.md, 'The schema')"), help="JSON schema of --csv or --db (format: 'The schema' in docs/tutorials/tables.md)")
    s.add_argument("--label", help="the label column, when the schema declares none (SDV metadata); else the schema's")
    s.add_argument("--label-categories", metavar="A,B,...", help="the label's classes (public), when the schema "
                   "declares no label (SDV metadata)")
    s.add_argument("--nullable", metavar="COLS", help="comma-separated columns that may be missing, or 'all' "
                   "(SDV metadata does not say which)")
    s.add_argument("--privacy-unit", metavar="COLUMN", help="protect a person, not a row: COLUMN names the person "
                   "(all rows with the same value are one record of the guarantee; the schema's \"privacy_unit\"). "
                   "COLUMN is never learned; generated rows get synthetic persons")
    s.add_argument("--missing-values", metavar="TEXTS", help="comma-separated cell texts that mean missing "
                   "besides empty cells, e.g. '?' (the schema's \"missing_values\"); their columns must be nullable")
    s.add_argument("--encoding", default="utf-8", help="--csv / CSV --shards: the files' text encoding (default "
                   "utf-8; e.g. latin-1, cp1252)")
    s.add_argument("--sep", metavar="TEXT", help="--csv / CSV --shards: the delimiter (default: of , ; tab |, the one "
                   "whose split of the header line gives the most of the schema's columns)")
    s.add_argument("--drop-unlisted", action="store_true", help="--csv: drop columns the schema does not list "
                   "(default: refuse, naming them)")
    s.add_argument("--shards", help="data in many files: a folder or glob of CSV / Parquet table shards (with "
                   "--schema, --label) or .npz shards (arrays x, y) / .npy shards; read in bounded memory")
    s.add_argument("--n-records", type=int, help="--shards: the total number of records, declared (public; "
                   "checked against the rows read); with --privacy-unit, the number of persons")
    s.add_argument("--n-classes", type=int, help="--shards of arrays with labels: the number of classes (public)")
    s.add_argument("--engine", choices=["stream", "ray"], help="--shards: where the sums are computed: this "
                   "process, shard after shard (stream, default), or Ray tasks, one per shard (needs mmdsynth[ray])")
    s.add_argument("--ray-address", help="--engine ray: a running cluster (e.g. auto); default: a local one")
    s.add_argument("--ray-workers", type=int, help="--engine ray without --ray-address: CPUs of the local cluster")
    s.add_argument("--numeric-encoding", choices=["quantile", "minmax"], default=None, help="tables: numeric "
                   "columns through their privately released CDF (quantile) or scaled by their declared bounds "
                   "(minmax)")
    s.add_argument("--numeric-share", type=float, default=None, help="tables: share of the privacy plan for the "
                   "numeric columns' distributions (quantile encoding)")
    s.add_argument("--force", action="store_true", help="write into a non-empty --out that is not an mmdsynth run")
    s.add_argument("--infer-schema", type=float, default=None, metavar="SHARE",
                   help="--csv: release the bounds / categories the schema leaves out from the data, with "
                   "this share of the privacy plan (e.g. 0.1); recorded in the ledger")
    s.add_argument("--split-seed", type=int, default=0, help="tables: seed of the preset's undersampling and split")
    s.add_argument("--epsilon", type=float, help="the privacy level")
    s.add_argument("--delta", type=float, default=None, help="the privacy level's delta (default: 1e-5 up to 10,000 "
                   "records, then the largest power of ten at most 1 / (10 x records); a --dataset's: 1e-5, the papers')")
    s.add_argument("--out", help="model folder (required; release/ is written before training)")
    s.add_argument("--release-only", action="store_true", help="stop after the private release (release/ in "
                   "--out, no generator): for `mmdsynth distill`, or a later `fit --resume` to train")
    s.add_argument("--iterations", type=int, help="generator training iterations")
    s.add_argument("--batch-size", type=int, help="generated batch per step (dp-kip: the expected Poisson batch "
                   "of records)")
    s.add_argument("--lr", type=float, help="learning rate (Adam)")
    s.add_argument("--lr-step", type=int, help="multiply the learning rate by 0.9 every N iterations")
    s.add_argument("--code-dim", type=int, help="generator code size")
    s.add_argument("--ntk-width", type=int, help="width of a one-hidden-layer NTK network")
    s.add_argument("--ntk-widths", help="comma-separated widths of the NTK network, e.g. 30,200 for cnn_2l")
    s.add_argument("--arch", choices=["fc_1l", "fc_2l", "cnn_2l", "cnn"], help="NTK network")
    s.add_argument("--n-features", type=int, help="number of random features")
    s.add_argument("--length-scale", type=float, default=None, help="kernel length scale s of "
                   "exp(-(x-y)^2/(2 s^2)) (public: never read from the data)")
    s.add_argument("--hp-order", type=int, help="Hermite order C of the sum kernel")
    s.add_argument("--product-releases", type=int, help="number of product-kernel releases, each over its own "
                   "random dimensions (one per epoch in the paper; 0: sum kernel only)")
    s.add_argument("--product-dims", type=int, help="dimensions per product kernel")
    s.add_argument("--product-order", type=int, help="Hermite order of the product kernels")
    s.add_argument("--sum-weight", type=float, help="weight gamma of the sum-kernel loss")
    s.add_argument("--product-weight", type=float, help="weight of the product-kernel loss")
    s.add_argument("--sum-share", type=float, help="share of the privacy for the sum kernel")
    s.add_argument("--encoder", metavar="FILE", help="encoder trained on PUBLIC data (from `mmdsynth "
                   "pretrain-encoder`, or its name; or a torchvision VGG19/ResNet18 .pth)")
    s.add_argument("--moments", help="1,2 (phi1 and phi2) or 1")
    s.add_argument("--loss", choices=["mavg", "direct"], help="generator loss: moving average or direct MMD")
    s.add_argument("--mavg-lr", type=float, help="learning rate of the moving average")
    s.add_argument("--no-early-stopping", action="store_true", help="no proxy release, keep the last checkpoint "
                   "(the proxy otherwise takes its part of the plan at 10x the noise)")
    s.add_argument("--proxy-encoder", metavar="FILE", help="PUBLIC network for the early-stopping proxy "
                   "(default: --encoder)")
    s.add_argument("--select-every", type=int, help="score a checkpoint every N iterations (default "
                   "iterations / 20)")
    s.add_argument("--images-per-class", type=int, help="support points per class")
    s.add_argument("--epochs", type=int, help="DP-SGD epochs")
    s.add_argument("--clip", type=float, help="per-record gradient clip norm C")
    s.add_argument("--reg", type=float, help="KRR regulariser lambda")
    s.add_argument("--public-init", metavar="FILE", type=existing_file("a .npy, or an .npz holding x"), help="dp-kip: a PUBLIC starting support set (.npy, or .npz "
                   "with 'x'): images_per_class x n_classes records in the data's scale, ordered class by class; "
                   "not charged, so never from the private data (default: --start pixels)")
    s.add_argument("--start", choices=["noise", "pixels", "random-conv"], help="where the support set starts: a "
                   "set distilled from the class means (pixels; the default without --public-init) or from 8 random "
                   "ConvNets' class-conditional means, released with --start-share of the same plan; or noise: "
                   "N(0, I), the paper's start (the default with --public-init, which replaces it)")
    s.add_argument("--start-share", type=float, help="the start's share of the privacy plan")
    s.add_argument("--seed", type=int, default=0, help="public randomness only: generator initialisation and "
                   "training; dp-kip: the support set's N(0, I) start. Never the privacy noise, never which "
                   "records a DP-SGD step reads (both drawn from the OS CSPRNG)")
    s.add_argument("--noise-seed", type=int, default=None, help="fix the privacy noise (testing only)")
    s.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    s.add_argument("--checkpoint-every", type=int, default=200, help="save the training state every N "
                   "iterations (default 200)")
    s.add_argument("--resume", action="store_true", help="continue from the folder's release and checkpoint "
                   "(spends no privacy budget, reads no data: `fit --resume --out DIR` is enough; a larger "
                   "--iterations trains longer)")
    s.add_argument("--budget", default=None, help="budget file to charge (a new one holds --budget-epsilon, else "
                   "this fit's epsilon, and --delta, else this fit's own, settled from the public count when the "
                   "fit's engine is calibrated)")
    s.add_argument("--budget-epsilon", type=float, default=None, help="total epsilon of a new budget file")
    s.add_argument("--data-dir", default=None, help="extra folder holding the dataset's files (besides "
                   "MMDSYNTH_DATA_DIR)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_fit)
    return s
