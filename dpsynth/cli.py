"""The ``dpsynth`` command."""
from __future__ import annotations

import argparse
import inspect
import json
import logging
import re
import sys
import warnings
from pathlib import Path

from . import __version__
from ._io import atomic_write
from .errors import ArtifactError, DpsynthError, InvalidParameterError, TrainingInterrupted


def _floats(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like 1,1,10; got {text!r}")


def cmd_datasets(args) -> int:
    from .data import DATASETS, is_available

    print(f"{'name':<14} {'kind':<6} {'rows (train / test)':<44} local copy")
    for name, info in DATASETS.items():
        where = is_available(name, args.data_dir)
        print(f"{name:<14} {info.kind:<6} {info.rows:<44} {where or 'not found (see README: Datasets)'}")
    return 0


def cmd_budget(args) -> int:
    from .privacy import PrivacyPlan, calibrate_sigma, classical_sigma, epsilon_for_sigma

    if (args.sample_rate is None) != (args.steps is None):
        raise InvalidParameterError("--sample-rate and --steps go together (DP-SGD); give both or neither.")
    if args.sample_rate is not None:
        if args.releases is not None or args.multipliers is not None:
            raise InvalidParameterError("give either --releases/--multipliers or --sample-rate/--steps, not both.")
        plan = PrivacyPlan((), sample_rate=args.sample_rate, steps=args.steps, neighbouring=args.neighbouring)
    else:
        mults = args.multipliers or [1.0] * (args.releases or 1)
        if args.releases is not None and len(mults) != args.releases:
            raise InvalidParameterError(
                f"--releases {args.releases} but --multipliers lists {len(mults)} value(s); they must agree."
            )
        plan = PrivacyPlan(tuple(mults))
    if args.sigma is not None:
        eps = epsilon_for_sigma(args.sigma, args.delta, plan, args.accountant)
        out = {"sigma": args.sigma, "delta": args.delta, "epsilon": eps}
        text = f"epsilon = {eps:.4f} for sigma = {args.sigma:g} at delta = {args.delta:g}"
    else:
        if args.epsilon is None:
            raise InvalidParameterError("--epsilon is required (or give --sigma to get epsilon).")
        sigma = calibrate_sigma(args.epsilon, args.delta, plan, args.accountant)
        out = {"epsilon": args.epsilon, "delta": args.delta, "sigma": sigma,
               "release_sigmas": [m * sigma for m in plan.multipliers]}
        text = f"sigma = {sigma:.4f}"
        if len(plan.multipliers) > 1:
            text += "  (per release: " + ", ".join(f"{s:.4f}" for s in out["release_sigmas"]) + ")"
        if not plan.subsampled and len(plan.multipliers) == 1 and args.epsilon < 1:
            text += f"  [classical sqrt(2 ln(1.25/delta))/epsilon: {classical_sigma(args.epsilon, args.delta):.4f}]"
    out.update({"accountant": args.accountant, "plan": plan.describe()})
    if args.json:
        print(json.dumps(out))
    else:
        print(f"plan: {plan.describe()}; accountant: {args.accountant}")
        print(text)
    return 0


def cmd_inspect(args) -> int:
    from .release import META_FILE, Release

    path = Path(args.path)
    if path.is_file() and path.name == META_FILE:
        path = path.parent
    if not (path / META_FILE).exists() and (path / "release" / META_FILE).exists():
        path = path / "release"
    model_json = path.parent / "model.json"
    if path.name == "release" and model_json.exists():     # a model folder: its release must be the pinned one
        from ._io import read_sealed_json
        from .release import check_release_pin

        check_release_pin(path, read_sealed_json(model_json, "model").get("release"), f"model in {path.parent}")
    release = Release.load(path)
    if args.json:
        print(json.dumps({"dataset": release.dataset, "feature_spec": release.feature_spec,
                          "ledger": release.ledger.to_list(),
                          "tensors": {k: list(v.shape) for k, v in release.tensors.items()}}, indent=2))
        return 0
    print(f"release: {path}")
    print(f"dataset: {json.dumps(release.dataset)}")
    print(f"feature map: {json.dumps(release.feature_spec)}")
    print("tensors: " + ", ".join(f"{k} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}"
                                  for k, v in release.tensors.items()))
    eps, delta = release.ledger.total()
    print(f"privacy spent: epsilon={eps:g}, delta={delta:g}")
    print(release.ledger.format())
    return 0


def cmd_audit(args) -> int:
    from .audit import audit

    fmap = None
    if args.feature_map is not None:
        try:
            fmap = json.loads(args.feature_map)
        except ValueError as exc:
            raise InvalidParameterError(f"--feature-map must be a JSON spec like "
                                        f"'{{\"name\": \"rff\", \"input_dim\": 2, \"n_features\": 2}}'; "
                                        f"got {args.feature_map!r} ({exc}).") from exc
    extra = {"duplicate_start": True} if args.duplicate_start else {}
    if args.duplicate_start and args.mechanism != "dpsgd-fit":
        raise InvalidParameterError("--duplicate-start applies to --mechanism dpsgd-fit only.")
    result = audit(args.epsilon, args.delta, mechanism=args.mechanism, feature_map=fmap, n_records=args.records,
                   trials=args.trials, confidence=args.confidence, **extra)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(out) as tmp:
            tmp.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    print(json.dumps(result.to_dict()) if args.json else result.format())
    return 0 if result.passed else 1


def cmd_demo(args) -> int:
    from .demo import run_demo

    out = Path(args.out)
    if (out / "budget.json").exists():
        raise InvalidParameterError(
            f"{out} already holds a demo release and its budget file; pass a new --out folder "
            f"(or delete {out}): the budget would refuse a second release."
        )
    if (out / "release").exists() or (out / "model.json").exists():
        raise ArtifactError(
            f"{out} already holds a release or a fitted model (e.g. from `make demo`); the demo would replace "
            f"that release and mislabel the model's privacy. Pass a new --out folder, e.g. --out runs/demo-release."
        )
    run_demo(out, args.epsilon, args.delta, seed=args.seed)
    return 0


RUN_DEFAULTS = {"seed": 0, "noise_seed": None, "checkpoint_every": 200}
#: flags of `fit` whose name is not the parameter's, and how their value becomes the parameter's
FLAG_PARAMS = {
    "hp_order": ("order", None), "product_releases": ("n_product", None), "infer_schema": ("schema_share", None),
    "ntk_widths": ("widths", lambda v: [int(w) for w in v.split(",")]),
    "moments": ("moments", lambda v: [int(m) for m in v.split(",")]),
    "no_early_stopping": ("early_stopping", lambda v: False if v else None),
}
#: `fit` flags that are not method parameters (data, folders, budget, engine...)
NOT_PARAMS = {"command", "func", "verbose", "method", "dataset", "csv", "schema", "label", "drop_unlisted", "shards",
              "n_records", "engine", "ray_address", "ray_workers", "force", "split_seed", "out", "public_init",
              "resume", "budget", "budget_epsilon", "data_dir", "quiet", "seed", "noise_seed", "device",
              "checkpoint_every"}
#: parameters the CLI never sets: a fixed sample voids the guarantee (tests only)
TESTING_ONLY = ("sampler_seed",)


def _fit_inputs(args):
    """(data for fit, fit kwargs, method defaults, public facts) for --dataset or --csv."""
    from .data import Schema, get_info, load_dataset, load_preset, read_table
    from .methods.presets import image_preset, method_preset

    if args.shards:
        return _shard_inputs(args)
    if args.engine or args.ray_address or args.ray_workers or args.n_records:
        raise InvalidParameterError("--engine, --ray-address, --ray-workers and --n-records apply to --shards.")
    if args.csv:
        if not (args.schema and args.label):
            raise InvalidParameterError("--csv needs --schema FILE.json (columns and types; bounds and categories, "
                                        "or --infer-schema SHARE; label categories) and --label COLUMN.")
        schema = Schema.from_json(args.schema)
        df = read_table(args.csv, schema, label=args.label, drop_unlisted=args.drop_unlisted)
        return (df,), {"label": args.label, "schema": schema, "dataset": f"user:{Path(args.csv).name}"}, \
            _method(args).defaults_for("table"), {}
    if not args.dataset:
        raise InvalidParameterError("give --dataset NAME (see `dpsynth datasets`) or --csv FILE with --schema.")
    info = get_info(args.dataset)
    if info.kind == "table":
        data = load_preset(args.dataset, seed=args.split_seed, data_dir=args.data_dir)
        facts = {"preset": args.dataset, "split_seed": args.split_seed}
        return (data.train,), {"label": data.schema.label, "schema": data.schema, "dataset": args.dataset,
                               "privacy_unit": data.privacy_unit}, \
            method_preset(args.method, args.dataset), facts
    defaults = _method(args).defaults_for("image")
    data = load_dataset(args.dataset, data_dir=args.data_dir)
    return (data.x_train, data.y_train), {"dataset": args.dataset}, \
        {**defaults, **image_preset(args.method, args.dataset), "n_classes": data.n_classes}, {}


def _method(args):
    """The class of ``--method`` (importing the methods, hence torch, only here)."""
    from .methods import METHODS

    return METHODS[args.method]


def _shard_inputs(args):
    """(data, fit kwargs, defaults, facts) for --shards: a table or arrays in many files, summed on --engine."""
    from .data import Schema
    from .data.shards import ShardedTable, open_shards
    from .engines import get_engine

    if args.csv or args.dataset:
        raise InvalidParameterError("give one of --shards, --csv and --dataset.")
    if not _method(args).releases_once:
        raise InvalidParameterError(f"{args.method} reads the records at every step; --shards releases sums once: "
                                    f"use a release-once method (dp-merf, dp-ntk, dp-hp or dp-mepf).")
    if args.n_records is None:
        raise InvalidParameterError("--shards needs --n-records N: the total number of records, declared (public "
                                    "metadata: the sensitivity 2/m rests on it; the rows read are checked against it).")
    engine = get_engine(args.engine or "stream", address=args.ray_address, workers=args.ray_workers)
    if bool(args.schema) != bool(args.label):
        raise InvalidParameterError("table shards need both --schema FILE.json and --label COLUMN.")
    schema = Schema.from_json(args.schema) if args.schema else None
    if schema is not None and args.label != schema.label:
        raise InvalidParameterError(f"--label {args.label} but the schema's label is {schema.label!r}.")
    src = open_shards(args.shards, n_records=args.n_records, schema=schema, engine=engine,
                      drop_unlisted=args.drop_unlisted)
    shards = Path(str(args.shards))
    name = f"user:{shards.parent.name}/{shards.name}" if any(c in shards.name for c in "*?[") else f"user:{shards.name}"
    if isinstance(src, ShardedTable):
        return (src,), {"label": args.label, "schema": schema, "dataset": name}, _method(args).defaults_for("table"), {}
    if src.labelled and args.n_classes is None:
        raise InvalidParameterError("the array shards hold labels: give --n-classes C (public: labels are 0..C-1).")
    labels = {"n_classes": args.n_classes} if src.labelled else {"conditional": False}
    return (src,), {"dataset": name}, {**_method(args).defaults_for("image"), **labels}, {}


def _resume_inputs(args):
    """``fit --resume --out DIR`` without --dataset/--csv: everything from the folder's release (no data)."""
    from .release import META_FILE, Release

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
    params = dict(facts.get("fit_params") or {})
    for key in ("seed", "noise_seed", "checkpoint_every"):      # the first run's, unless given again
        if key in params:
            value = params.pop(key)
            if getattr(args, key) == RUN_DEFAULTS.get(key):
                setattr(args, key, value)
    return (None,), {"dataset": facts.get("name", "")}, params, {}


def _check_out_folder(out: Path, args) -> None:
    """Refuse to write a run into a non-empty folder that is not a dpsynth run (unless --force)."""
    if args.resume or args.force or not out.exists():
        return
    if not out.is_dir():
        raise InvalidParameterError(f"--out {out} is a file; give a folder for the model.")
    entries = [p.name for p in out.iterdir()]
    ours = {"release", "model.json", "budget.json"}
    if entries and not ours & set(entries) and not any(n.startswith("checkpoint") for n in entries):
        raise InvalidParameterError(
            f"--out {out} is a non-empty folder that is not a dpsynth run (it holds {sorted(entries)[:5]}); "
            f"give a new or empty folder, or --force to write into it anyway.")


def cmd_fit(args) -> int:
    from .methods import METHODS
    from .privacy import BudgetFile

    out = Path(args.out)
    _check_out_folder(out, args)
    from_folder = args.resume and not (args.dataset or args.csv or args.shards)   # settings and method: the release
    if from_folder:
        data, fit_kwargs, defaults, facts = _resume_inputs(args)
    elif not args.method:
        raise InvalidParameterError("--method is required (dp-ntk, dp-merf, dp-hp, dp-mepf or dp-kip); only "
                                    "`fit --resume --out DIR` reads it from the folder.")
    else:
        if args.method not in METHODS:
            from .errors import unknown_name
            raise unknown_name("method", args.method, METHODS)
        data, fit_kwargs, defaults, facts = _fit_inputs(args)
    cls = METHODS[args.method]
    given = _method_options(args, cls)
    # defaults hold only what this method takes (its per-kind defaults, a preset, the release's settings);
    # a flag given overrides them
    params = {**defaults, **given}
    if params.get("epsilon") is None:
        raise InvalidParameterError("--epsilon is required (e.g. --epsilon 10); there is no default privacy level "
                                    "for images.")
    params.setdefault("delta", 1e-5)
    if args.infer_schema is not None and not args.csv:
        raise InvalidParameterError("--infer-schema applies to --csv tables whose schema leaves out bounds or "
                                    "categories; built-in datasets come with a public schema.")
    run = {"seed": args.seed, "noise_seed": args.noise_seed, "device": args.device,
           "checkpoint_every": args.checkpoint_every, "progress": not args.quiet}
    names = set(cls.param_names())
    model = cls(**{k: v for k, v in run.items() if k in names}, **params)
    fit_kwargs["public_facts"] = facts
    if args.public_init is not None:
        if "public_init" not in inspect.signature(cls.fit).parameters:
            raise InvalidParameterError(f"--public-init is a dp-kip option (its public starting support set); this "
                                        f"run is --method {args.method}.")
        fit_kwargs["public_init"] = _public_init(args.public_init)
    eps_budget = args.budget_epsilon or model.epsilon
    budget = BudgetFile.open(args.budget, fit_kwargs["dataset"], eps_budget, model.delta) if args.budget else None
    model.fit(*data, out=out, budget=budget, resume=args.resume, **fit_kwargs)
    for line in model.fit_summary(fit_kwargs["dataset"], out):
        print(line)
    return 0


def _method_options(args, cls) -> dict:
    """{parameter: value} of every method flag given, refusing (exit 2, naming them) flags that are not
    parameters of ``cls``: a flag for another method is an error, never silently dropped."""
    from .methods import METHODS

    names = set(cls.param_names())
    given, wrong = {}, []
    for dest, value in vars(args).items():
        if dest in NOT_PARAMS or value is None or value is False and dest not in FLAG_PARAMS:
            continue
        param, convert = FLAG_PARAMS.get(dest, (dest, None))
        value = convert(value) if convert is not None else value
        if value is None:
            continue
        if param not in names:
            wrong.append((_flag(dest), param))
            continue
        given[param] = value
    if "widths" in given:
        given["ntk_width"] = None              # --ntk-widths replaces the single width
    if wrong:
        owners = sorted({m for _, p in wrong for m, c in METHODS.items() if p in c.param_names()})
        raise InvalidParameterError(
            f"{', '.join(f for f, _ in wrong)}: {' / '.join(owners) or 'no method'} options, not taken by --method "
            f"{args.method} (its options: `dpsynth fit --method {args.method} --help`).")
    return given


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def add_method_options(fit_parser) -> None:
    """Give `fit` a flag for every method parameter that has no hand-written one (generated from the
    registered methods' signatures; values are JSON, or plain strings). Run only for `fit`: it imports
    the methods, hence torch."""
    from .methods import METHODS, KernelGeneratorMethod

    t = {"delta": 1e-5, **KernelGeneratorMethod.kind_defaults["table"]}
    fit_parser.epilog = fit_parser.epilog.replace("{table}", (
        f": epsilon {t['epsilon']:g}, delta {t['delta']:g}, {t['iterations']} iterations, batch {t['batch_size']}, "
        f"lr {t['lr']} x0.9 every {t['lr_step']}\n      iterations"))
    taken = {a.dest for a in fit_parser._actions} | {p for p, _ in FLAG_PARAMS.values()}
    group = fit_parser.add_argument_group("more method options (generated from the methods' parameters; values "
                                          "as JSON, e.g. --conditional false, --generator '{\"name\": \"conv\"}')")
    owners: dict[str, list] = {}
    for name, cls in METHODS.items():
        for param, default in cls.param_defaults().items():
            owners.setdefault(param, []).append((name, default))
    for param, where in owners.items():
        if param in taken or param in RUN_DEFAULTS or param in TESTING_ONLY or param in ("progress", "device"):
            continue
        text = "; ".join(f"{m}: default {d!r}" for m, d in where)
        group.add_argument(_flag(param), dest=param, type=_json_value, default=None, metavar="VALUE", help=text)


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


def cmd_sample(args) -> int:
    import numpy as np

    from .methods import load

    out = Path(args.out)
    if out.suffix not in (".npz", ".csv", ".parquet"):
        raise InvalidParameterError(f"--out must end in .npz (images) or .csv/.parquet (tables); got {out.name!r}.")
    if out.exists() and not args.force:
        raise InvalidParameterError(f"--out {out} exists; give a new file name, or --force to overwrite it.")
    model = load(args.model)
    if model.encoder_ is not None:
        if out.suffix not in (".csv", ".parquet"):
            raise InvalidParameterError(f"a table model writes .csv or .parquet; got --out {out.name!r}.")
        df = model.sample(args.n, seed=args.seed)
        with atomic_write(out) as tmp:
            df.to_csv(tmp, index=False) if out.suffix == ".csv" else df.to_parquet(tmp, index=False)
        print(f"wrote {len(df)} rows x {df.shape[1]} columns to {out}")
        return 0
    if out.suffix != ".npz":
        raise InvalidParameterError(f"--out must end in .npz (arrays x and y); got {out.name!r}.")
    x, y = model.sample(args.n, seed=args.seed, checkpoint=args.checkpoint)
    with atomic_write(out) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, x=x, **({"y": y} if y is not None else {}))
    print(f"wrote {args.n} samples to {out} (x {tuple(x.shape)}" + (", y)" if y is not None else ")"))
    return 0


def cmd_pretrain_encoder(args) -> int:
    from .encoders.pretrain import pretrain_encoder
    from .runtime import default_device

    if args.random == (args.dataset is not None):
        raise InvalidParameterError("pretrain-encoder takes exactly one of --dataset PUBLIC (train on it) and "
                                    "--random (save the seeded initialisation, trained on nothing).")
    # options of the other mode are refused, not silently ignored
    other = (("--epochs", args.epochs), ("--batch-size", args.batch_size), ("--lr", args.lr),
             ("--resume", args.resume or None), ("--data-dir", args.data_dir)) if args.random else \
        (("--channels", args.channels), ("--image-size", args.image_size))
    given = [flag for flag, value in other if value is not None]
    if given:
        mode, what = (("--random", "nothing is trained") if args.random else
                      ("--dataset", "the dataset sets the input channels and size"))
        raise InvalidParameterError(f"pretrain-encoder {mode} does not take {', '.join(given)} ({what}); "
                                    "drop them.")
    if args.random:
        args.channels = 3 if args.channels is None else args.channels
        args.image_size = 32 if args.image_size is None else args.image_size
    if args.out is None:
        from .features.encoders import encoder_dir

        name = f"random-{args.arch}-{args.channels}x{args.image_size}" if args.random else f"{args.dataset}-{args.arch}"
        args.out = str(encoder_dir() / f"{name}.safetensors")
    if args.random:
        from .encoders.pretrain import random_encoder

        spec = random_encoder(args.arch, args.out, in_channels=args.channels, image_size=args.image_size,
                              seed=args.seed)
    else:
        given = {k: v for k, v in (("epochs", args.epochs), ("batch_size", args.batch_size), ("lr", args.lr))
                 if v is not None}                                  # the rest: pretrain_encoder's defaults
        spec = pretrain_encoder(args.dataset, args.arch, args.out, seed=args.seed, resume=args.resume,
                                device=default_device(args.device), progress=not args.quiet, data_dir=args.data_dir,
                                **given)
    print(json.dumps({"out": str(args.out), **spec}))
    return 0


def cmd_evaluate(args) -> int:
    from .data import DATASETS, load_dataset
    from .evaluation import image_classifier_scores, save_image_grid
    from .methods import load

    model = load(args.model)
    if model.encoder_ is not None:
        return _evaluate_table(args, model)
    name = model.release_.dataset.get("name", "")
    if not model.generative:                 # a fixed support set (DP-KIP), not a generator
        return _evaluate_kip(args, model, name)
    if name not in DATASETS:
        raise InvalidParameterError(
            f"the model was fitted on {name or 'user data'!r}, not a registered dataset, so there is no real "
            f"test split to evaluate on; use dpsynth.evaluation.image_classifier_scores with your own test data."
        )
    data = load_dataset(name, data_dir=args.data_dir)
    n = args.n or 6000
    x, y = model.sample(n, seed=args.seed, checkpoint=args.checkpoint)
    result = _result_header(model, n)
    if getattr(model, "selection_", None):
        result.update(checkpoint=args.checkpoint, selected_iteration=model.selection_["best_iteration"])
    result.update(image_classifier_scores(x, y, data.x_test, data.y_test, seed=args.seed))
    if args.frechet:
        from .evaluation.frechet import frechet_report

        result.update(frechet_report(data, x, seed=args.seed))
    if args.inception_weights:
        from .evaluation.inception import inception_report

        result.update(inception_report(args.inception_weights, data.x_test.numpy(), x))
    if args.cnn:
        xc, yc = model.sample(args.cnn_samples, seed=args.seed + 1, checkpoint=args.checkpoint) \
            if args.cnn_samples != n else (x, y)
        result.update(_cnn(args, xc, yc, data))
    grid = save_image_grid(x, y, Path(args.model) / "samples.png", classes=data.classes)
    result["samples_png"] = str(grid)
    print(json.dumps(result))
    return 0


def _evaluate_kip(args, model, name) -> int:
    """DP-KIP: KRR accuracy with the support set (krr_acc) and LogReg/MLP trained on it."""
    from .data import DATASETS, load_dataset
    from .evaluation import image_classifier_scores, save_image_grid

    if name not in DATASETS:
        raise InvalidParameterError(f"the model was fitted on {name or 'user data'!r}, not a registered dataset: "
                                    f"use DPKIP.krr_accuracy(x_test, y_test) with your own test data.")
    data = load_dataset(name, data_dir=args.data_dir)
    x, y = model.sample()
    result = _result_header(model, len(y))
    result["krr_acc"] = model.krr_accuracy(data.x_test, data.y_test.numpy())
    result.update(image_classifier_scores(x.clip(0, 1), y, data.x_test, data.y_test, seed=args.seed))
    if args.cnn:                         # the support set as learned (not clipped), as the papers train on it
        result.update(_cnn(args, x, y, data))
    result["samples_png"] = str(save_image_grid(x.clip(0, 1), y, Path(args.model) / "samples.png",
                                                classes=data.classes))
    print(json.dumps(result))
    return 0


def cmd_report(args) -> int:
    from .data import read_table
    from .data.private_schema import declared_part
    from .evaluation.report import build_report
    from .methods import load

    test = None
    if args.test:
        schema = load(args.model).encoder_
        if schema is None:
            raise InvalidParameterError("--test applies to table models; an image model's report needs no data.")
        test = read_table(args.test, declared_part(schema.schema), label=schema.schema.label, drop_unlisted=True)
    out = build_report(load(args.model), args.model, test=test, out=args.out, seed=args.seed,
                       data_dir=args.data_dir)
    print(f"wrote {out}")
    return 0


def _cnn(args, x, y, data) -> dict:
    from .evaluation.convnet import cnn_scores

    if args.cnn_seeds < 1:
        raise InvalidParameterError(f"--cnn-seeds must be >= 1; got {args.cnn_seeds}.")
    return cnn_scores(x, y, data.x_test, data.y_test, n_classes=data.n_classes, seeds=tuple(range(args.cnn_seeds)),
                      device=args.device)


def _result_header(model, n: int) -> dict:
    eps, delta = model.release_.ledger.total()
    return {"dataset": model.release_.dataset.get("name"), "method": model.method, "epsilon": eps,
            "delta": delta, "n_synthetic": n}


def _evaluate_table(args, model) -> int:
    from .data import load_preset, read_table
    from .data.private_schema import declared_part
    from .evaluation.fidelity import table_fidelity
    from .evaluation.report import EVALUATION_FILE
    from .evaluation.tabular import table_classifier_scores

    facts, encoder = model.release_.dataset, model.encoder_
    if args.test:
        declared = declared_part(encoder.schema)  # raw rows; inferred bounds/categories apply in encode
        test = read_table(args.test, declared, label=encoder.schema.label, drop_unlisted=True)
        train_real = (read_table(args.real_train, declared, label=encoder.schema.label, drop_unlisted=True)
                      if args.real_train else None)
    elif facts.get("preset"):
        data = load_preset(facts["preset"], seed=facts.get("split_seed", 0), data_dir=args.data_dir)
        test, train_real = data.test, data.train
    else:
        raise InvalidParameterError("this model was fitted on a user table: pass --test FILE (same schema) to "
                                    "evaluate on your real test split.")
    if args.real and train_real is None:
        raise InvalidParameterError("--real scores classifiers trained on the real training split, which this "
                                    "model cannot find: pass --real-train FILE (same schema) with --test.")
    n = args.n or int(facts["n_records"])
    synth = model.sample(n, seed=args.seed)
    result = _result_header(model, n)
    keys = ("binary", "mean", "classifiers", "failures")
    scores = table_classifier_scores(synth, test, encoder, seed=args.seed)
    result.update({k: scores[k] for k in keys})
    if args.real:          # the same layout as the synthetic block
        real = table_classifier_scores(train_real, test, encoder, seed=args.seed)
        result["real"] = {k: real[k] for k in keys}
    result["fidelity"] = table_fidelity(encoder.clean(test), synth, encoder.schema, seed=args.seed)
    result["fidelity"]["reference"] = "the real test split: " + result["fidelity"]["reference"]
    with atomic_write(Path(args.model) / EVALUATION_FILE) as tmp:     # what `dpsynth report` shows
        tmp.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dpsynth", description="Differentially private synthetic data "
                                "from kernel mean embeddings (DP-NTK, DP-MERF, DP-HP, DP-MEPF, DP-KIP).")
    p.add_argument("--version", action="version", version=f"dpsynth {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("datasets", help="list datasets and whether each is available locally")
    s.add_argument("--data-dir", default=None, help="extra folder to search (besides DPSYNTH_DATA_DIR)")
    s.set_defaults(func=cmd_datasets)

    s = sub.add_parser("budget", help="calibrate the noise multiplier sigma (or epsilon from --sigma)")
    s.add_argument("--epsilon", type=float)
    s.add_argument("--delta", type=float, required=True)
    s.add_argument("--releases", type=int, help="number of one-shot Gaussian releases (default 1)")
    s.add_argument("--multipliers", type=_floats, help="noise multiple of each release, e.g. 1,1,10")
    s.add_argument("--sample-rate", type=float, help="DP-SGD Poisson sampling rate q = batch / n")
    s.add_argument("--steps", type=int, help="DP-SGD number of steps T")
    s.add_argument("--neighbouring", default="replace_one", choices=["replace_one", "add_remove"],
                   help="neighbouring relation for DP-SGD (default replace_one, like every release: N public; "
                        "add_remove reproduces the DP-SGD papers' accounting)")
    s.add_argument("--accountant", default="pld", choices=["pld", "rdp", "exact"])
    s.add_argument("--sigma", type=float, help="compute epsilon for this sigma instead")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_budget)

    s = sub.add_parser("inspect", help="print a release's privacy ledger")
    s.add_argument("path", help="a release folder (or a folder holding release/)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("fit", help="release a private embedding of a dataset, then train a generator",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=FIT_EPILOG)
    s.add_argument("--method", help="a registered method (dp-ntk, dp-merf, dp-hp, dp-mepf, dp-kip, ...); required, "
                   "except for `fit --resume --out DIR`, which reads it from the folder")
    s.add_argument("--dataset", help="a registered dataset (see `dpsynth datasets`); tables use the papers' "
                   "preprocessing and settings (presets)")
    s.add_argument("--csv", help="your own table (CSV/Parquet/npy), with --schema and --label")
    s.add_argument("--schema", help="JSON schema of --csv (see README: schema format)")
    s.add_argument("--label", help="label column of --csv")
    s.add_argument("--drop-unlisted", action="store_true", help="--csv: drop columns the schema does not list "
                   "(default: refuse, naming them)")
    s.add_argument("--shards", help="data in many files: a folder or glob of CSV / Parquet table shards (with "
                   "--schema, --label) or .npz shards (arrays x, y) / .npy shards; read in bounded memory")
    s.add_argument("--n-records", type=int, help="--shards: the total number of records, declared (public; "
                   "checked against the rows read)")
    s.add_argument("--n-classes", type=int, help="--shards of arrays with labels: the number of classes (public)")
    s.add_argument("--engine", choices=["stream", "ray"], help="--shards: where the sums are computed: this "
                   "process, shard after shard (stream, default), or Ray tasks, one per shard (needs dpsynth[ray])")
    s.add_argument("--ray-address", help="--engine ray: a running cluster (e.g. auto); default: a local one")
    s.add_argument("--ray-workers", type=int, help="--engine ray without --ray-address: CPUs of the local cluster")
    s.add_argument("--numeric-encoding", choices=["quantile", "minmax"], default=None, help="tables: numeric "
                   "columns through their privately released CDF (quantile, default) or scaled by their declared "
                   "bounds (minmax)")
    s.add_argument("--numeric-share", type=float, default=None, help="tables: share of the privacy plan for the "
                   "numeric columns' distributions (quantile encoding; default 0.1)")
    s.add_argument("--force", action="store_true", help="write into a non-empty --out that is not a dpsynth run")
    s.add_argument("--infer-schema", type=float, default=None, metavar="SHARE",
                   help="--csv: release the bounds / categories the schema leaves out from the data, with "
                   "this share of the privacy plan (e.g. 0.1); recorded in the ledger")
    s.add_argument("--split-seed", type=int, default=0, help="tables: seed of the preset's undersampling and split")
    s.add_argument("--epsilon", type=float, help="required for images; tables default to the preset's 1")
    s.add_argument("--delta", type=float, default=None, help="default 1e-5")
    s.add_argument("--out", required=True, help="model folder (release/ is written before training)")
    s.add_argument("--iterations", type=int, help="default: 2000 (images), the preset's (tables)")
    s.add_argument("--batch-size", type=int, help="generator batch per step (default 5000 images, 200 tables)")
    s.add_argument("--lr", type=float, help="default 0.01")
    s.add_argument("--lr-step", type=int, help="multiply the learning rate by 0.9 every N iterations (default 1500 "
                   "images, as the DP-NTK authors' code; 100 tables)")
    s.add_argument("--code-dim", type=int, help="generator code size (default 5 images, the preset's tables)")
    s.add_argument("--ntk-width", type=int, help="dp-ntk: width of a one-hidden-layer NTK network (default 800)")
    s.add_argument("--ntk-widths", help="dp-ntk: comma-separated widths, e.g. 30,200 for cnn_2l")
    s.add_argument("--arch", choices=["fc_1l", "fc_2l", "cnn_2l", "cnn"], help="dp-ntk: NTK network "
                   "(default fc_1l images, the preset's tables)")
    s.add_argument("--n-features", type=int, help="dp-merf: number of random features (default 10000 images)")
    s.add_argument("--length-scale", type=float, default=None, help="dp-merf, dp-hp: kernel length scale s of "
                   "exp(-(x-y)^2/(2 s^2)) (public; dp-hp default 0.0707, the authors' MNIST s^2 = 0.005)")
    s.add_argument("--hp-order", type=int, help="dp-hp: Hermite order C of the sum kernel (default 100)")
    s.add_argument("--product-releases", type=int, help="dp-hp: number of product-kernel releases, each over its "
                   "own random dimensions (default 10, one per epoch in the paper; 0: sum kernel only)")
    s.add_argument("--product-dims", type=int, help="dp-hp: dimensions per product kernel (default 2)")
    s.add_argument("--product-order", type=int, help="dp-hp: Hermite order of the product kernels (default 20)")
    s.add_argument("--sum-weight", type=float, help="dp-hp: weight gamma of the sum-kernel loss (default 20)")
    s.add_argument("--product-weight", type=float, help="dp-hp: weight of the product-kernel loss (default 1; "
                   "tables: the preset's)")
    s.add_argument("--sum-share", type=float, help="dp-hp: share of the privacy for the sum kernel (default 0.8)")
    s.add_argument("--encoder", metavar="FILE", help="dp-mepf: encoder trained on PUBLIC data (from `dpsynth "
                   "pretrain-encoder`, or its name; or a torchvision VGG19/ResNet18 .pth)")
    s.add_argument("--moments", help="dp-mepf: 1,2 (phi1 and phi2, default) or 1")
    s.add_argument("--loss", choices=["mavg", "direct"], help="dp-mepf: moving-average (default) or direct MMD loss")
    s.add_argument("--mavg-lr", type=float, help="dp-mepf: learning rate of the moving average (default 1e-2)")
    s.add_argument("--no-early-stopping", action="store_true", help="dp-mepf: no proxy release, keep the last "
                   "checkpoint (the proxy otherwise takes its part of the plan at 10x the noise)")
    s.add_argument("--proxy-encoder", metavar="FILE", help="dp-mepf: PUBLIC network for the early-stopping proxy "
                   "(default: --encoder)")
    s.add_argument("--select-every", type=int, help="dp-mepf: score a checkpoint every N iterations "
                   "(default iterations / 20)")
    s.add_argument("--images-per-class", type=int, help="dp-kip: support points per class (default 10)")
    s.add_argument("--epochs", type=int, help="dp-kip: DP-SGD epochs (default 10)")
    s.add_argument("--clip", type=float, help="dp-kip: per-record gradient clip norm C (default 1e-6)")
    s.add_argument("--reg", type=float, help="dp-kip: KRR regulariser lambda (default 1e-6)")
    s.add_argument("--public-init", metavar="FILE", help="dp-kip: a PUBLIC starting support set (.npy, or .npz "
                   "with 'x'): images_per_class x n_classes records in the data's scale, ordered class by class; "
                   "not charged, so never from the private data (default: N(0, I) noise)")
    s.add_argument("--seed", type=int, default=0, help="public randomness only: generator initialisation and "
                   "training; dp-kip: the support set's N(0, I) start. Never the privacy noise, never which "
                   "records a DP-SGD step reads (both drawn from the OS CSPRNG)")
    s.add_argument("--noise-seed", type=int, default=None, help="fix the privacy noise (testing only)")
    s.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    s.add_argument("--checkpoint-every", type=int, default=200)
    s.add_argument("--resume", action="store_true", help="continue from the folder's release and checkpoint "
                   "(spends no privacy budget, reads no data: `fit --resume --out DIR` is enough; a larger "
                   "--iterations trains longer)")
    s.add_argument("--budget", default=None, help="budget file to charge (created with --budget-epsilon)")
    s.add_argument("--budget-epsilon", type=float, default=None, help="total epsilon of a new budget file")
    s.add_argument("--data-dir", default=None)
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_fit)
    p.fit_parser = s

    s = sub.add_parser("sample", help="draw synthetic records from a fitted model")
    s.add_argument("model", help="model folder written by `dpsynth fit`")
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--out", required=True, help="FILE.npz with arrays x and y (images), FILE.csv or "
                   "FILE.parquet (tables)")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--checkpoint", default="selected", choices=["selected", "final"], help="with DP early "
                   "stopping: the checkpoint closest to the proxy (default) or the last one")
    s.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    s.set_defaults(func=cmd_sample)

    s = sub.add_parser("pretrain-encoder", help="train an encoder on a PUBLIC image dataset (for DP-MEPF's "
                       "perceptual features); saves FILE.safetensors + FILE.json with its test accuracy")
    s.add_argument("--dataset", default=None, help="a PUBLIC image dataset (mnist, fashion-mnist, cifar10, digits)")
    s.add_argument("--random", action="store_true", help="no training: save the architecture at its seeded random "
                   "initialisation (public by construction; for private data with no public dataset at hand, "
                   "e.g. CIFAR-10 without ImageNet); give --channels and --image-size")
    s.add_argument("--channels", type=int, default=None, help="with --random: input channels (default 3)")
    s.add_argument("--image-size", type=int, default=None, help="with --random: input size (default 32)")
    s.add_argument("--arch", required=True, help="vgg_small, resnet_small, vgg19 or resnet18")
    s.add_argument("--out", default=None, help="weights file, ending in .safetensors (default: the encoder "
                   "folder, ~/.cache/dpsynth/encoders/DATASET-ARCH.safetensors, so --encoder DATASET-ARCH finds it)")
    s.add_argument("--epochs", type=int, default=None, help="with --dataset (default 5)")
    s.add_argument("--batch-size", type=int, default=None, help="with --dataset (default 128)")
    s.add_argument("--lr", type=float, default=None, help="with --dataset (default 1e-3)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--resume", action="store_true", help="continue an interrupted run (checkpoint beside --out)")
    s.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    s.add_argument("--data-dir", default=None)
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_pretrain_encoder)

    s = sub.add_parser("evaluate", help="classifiers trained on synthetic data, tested on the real test split")
    s.add_argument("model", help="model folder written by `dpsynth fit`")
    s.add_argument("--n", type=int, default=None, help="synthetic training samples (default 6000 images with "
                   "balanced labels; tables: as many as the private training rows)")
    s.add_argument("--test", help="tables fitted with --csv: real test split (same schema)")
    s.add_argument("--real-train", help="tables fitted with --csv: real training split, for the 'real' row")
    s.add_argument("--real", action="store_true", help="tables: also score classifiers trained on the real "
                   "training split (the 'real' row)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--inception-weights", metavar="FILE", help="images: also the FID on Inception-v3 with these "
                   "weights (pytorch-fid's pt_inception-2015-12-05 .pth, or torchvision's; never downloaded)")
    s.add_argument("--frechet", action="store_true", help="also a Frechet distance on features of a CNN "
                   "classifier trained by dpsynth on the real training set (cached; not Inception FID)")
    s.add_argument("--cnn", action="store_true", help="images: also the ConvNet protocol (cnn_acc: DP-KIP's "
                   "downstream ConvNet trained on the synthetic data, 3 seeds, real test split; generators: on "
                   "--cnn-samples samples). Needs a GPU for 60,000 samples")
    s.add_argument("--checkpoint", default="selected", choices=["selected", "final"], help="with DP early "
                   "stopping: evaluate the checkpoint closest to the proxy (default) or the last one")
    s.add_argument("--cnn-samples", type=int, default=60_000, help="generators: samples for --cnn (default 60000)")
    s.add_argument("--cnn-seeds", type=int, default=3, help="training seeds for --cnn (default 3)")
    s.add_argument("--device", default=None, help="--cnn: cpu or cuda (default: cuda when available)")
    s.add_argument("--data-dir", default=None)
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("report", help="one self-contained HTML file: marginals, dependence heatmaps, utility, "
                       "the privacy ledger in words (tables), or the sample grid (images)")
    s.add_argument("model", help="model folder written by `dpsynth fit` (run `dpsynth evaluate` first for the "
                   "utility table)")
    s.add_argument("--test", help="tables fitted with --csv: real rows to compare against (same schema)")
    s.add_argument("--out", default=None, help="HTML file (default MODEL/report.html)")
    s.add_argument("--seed", type=int, default=0, help="seed of the synthetic rows drawn for the plots")
    s.add_argument("--data-dir", default=None)
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("audit", help="empirical privacy audit: attack a mechanism on neighbouring datasets and "
                                     "print the epsilon lower bound it proves beside the claim",
                       description="Run a mechanism many times on a small public dataset D and on its neighbour D' "
                                   "(one canary record changed), each run with fresh noise, attack the outputs with "
                                   "a likelihood-ratio test and turn its true- and false-positive rates into a "
                                   "lower bound on epsilon (Clopper-Pearson). Exit status 1 if the bound exceeds "
                                   "the claimed epsilon. 20,000 trials of the release take about 20 s.")
    s.add_argument("--epsilon", type=float, default=1.0, help="the claimed epsilon the mechanism is calibrated to "
                                                               "(default 1)")
    s.add_argument("--delta", type=float, default=1e-5, help="the claimed delta (default 1e-5)")
    s.add_argument("--mechanism", default="release", choices=["release", "dpsgd-step", "dpsgd-fit"],
                   help="release: the mean-embedding release (default); dpsgd-step: one full-batch DP-SGD step "
                        "of DP-KIP; dpsgd-fit: a whole DP-KIP fit (its own secret sampler and clipping, "
                        "worst-case canary at a public start point, the attacker sees every iterate)")
    s.add_argument("--duplicate-start", action="store_true",
                   help="dpsgd-fit: the public start is one point repeated (the case that broke clipping)")
    s.add_argument("--feature-map", help="JSON spec of a one-block feature map for --mechanism release "
                                         "(default: 2 random Fourier features of 2-d records)")
    s.add_argument("--records", type=int, default=None, help="records in the audited dataset (default 10; "
                   "dpsgd-fit: 40, one expected per step)")
    s.add_argument("--trials", type=int, default=20000, help="runs on each of D and D' (default 20000)")
    s.add_argument("--confidence", type=float, default=0.95, help="confidence of the lower bound (default 0.95)")
    s.add_argument("--out", help="also write the result as JSON to this file")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_audit)

    s = sub.add_parser("demo", help="private release on scikit-learn digits (works offline)")
    s.add_argument("--out", default="runs/demo-release", help="new folder for the release and its budget file "
                   "(default runs/demo-release; refused if it already holds a release or a model)")
    s.add_argument("--epsilon", type=float, default=1.0)
    s.add_argument("--delta", type=float, default=1e-5)
    s.add_argument("--seed", type=int, default=None, help="fix the privacy noise (testing only)")
    s.set_defaults(func=cmd_demo)
    return p


FIT_EPILOG = """\
defaults live in the methods (`dpsynth fit --method M --help` lists every option with each method's default):
  --dataset (images): the method's own defaults and its per-dataset settings; --epsilon is required.
  --dataset (tables): the paper's preset (epsilon 1, delta 1e-5, its iterations and network).
  --csv (your table){table} (the release-once methods' table defaults; --shards of tables too);
      numeric columns quantile-encoded with 0.1 of the privacy, class proportions released with 0.1: shares
      of one (epsilon, delta), not extra charges.
  A flag that the chosen method does not take is refused by name (exit status 2).

examples:
  dpsynth fit --method dp-merf --csv data.csv --schema schema.json --label income --out runs/mine
  dpsynth fit --resume --out runs/mine --iterations 4000      # train longer: no data read, no budget spent
"""

#: Python parameter -> command-line flag, for messages raised by the library
CLI_FLAGS = {"epsilon": "--epsilon", "delta": "--delta", "resume": "--resume", "schema_share": "--infer-schema",
             "encoder": "--encoder", "iterations": "--iterations", "batch_size": "--batch-size", "lr": "--lr",
             "n_features": "--n-features", "length_scale": "--length-scale", "numeric_share": "--numeric-share",
             "numeric_encoding": "--numeric-encoding", "drop_unlisted": "--drop-unlisted", "out": "--out",
             "proxy_encoder": "--proxy-encoder", "noise_seed": "--noise-seed", "n": "--n"}


def cli_message(message: str) -> str:
    """A library message in command-line words: ``epsilon=1.0`` -> ``--epsilon 1.0``, ``resume=True`` ->
    ``--resume``, a leading ``epsilon must`` -> ``--epsilon must``."""
    names = "|".join(sorted(map(re.escape, CLI_FLAGS), key=len, reverse=True))

    def flag(m):
        value = m.group(2)
        return CLI_FLAGS[m.group(1)] + ("" if value == "True" else f" {value}")
    message = re.sub(rf"(?<![\w.-])({names})=(True\b|[^\s,;)]+)", flag, message)
    return re.sub(rf"^({names}) must", lambda m: f"{CLI_FLAGS[m.group(1)]} must", message)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings on the command line: one line, no source."""
    print(f"dpsynth: warning: {cli_message(str(message))}", file=sys.stderr if file is None else file)


def main(argv=None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "fit" in argv[:3]:                        # fit's method options come from the registered methods
        add_method_options(parser.fit_parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    previous = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        return args.func(args)
    except DpsynthError as exc:
        print(f"dpsynth: error: {cli_message(str(exc))}", file=sys.stderr)
        return 2
    except TrainingInterrupted as exc:
        where = f"; checkpoint saved in {exc.checkpoint_dir}. Resume with: dpsynth fit --resume --out " \
                f"{exc.checkpoint_dir}" if exc.checkpoint_dir is not None else " (nothing saved)"
        print(f"dpsynth: interrupted at iteration {exc.iteration}{where}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("dpsynth: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = previous


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
