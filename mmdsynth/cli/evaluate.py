"""`mmdsynth evaluate`: classifiers trained on synthetic data, tested on the real test split."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .._io import atomic_write
from ..errors import InvalidParameterError
from ._types import existing_path, positive_int


def cmd_evaluate(args) -> int:
    from ..evaluation import image_classifier_scores, save_image_grid
    from ..methods import load

    if args.cnn_epochs is not None and args.cnn_epochs < 1:
        raise InvalidParameterError(f"--cnn-epochs must be >= 1; got {args.cnn_epochs}.")
    args.cnn = args.cnn or args.cnn_protocol != "fixed" or args.cnn_epochs is not None   # asking for one implies it
    if Path(args.model).suffix == ".npz":
        return _evaluate_set(args)
    from ..methods.database import DATABASE_FILE
    if (Path(args.model) / DATABASE_FILE).is_file():
        return _evaluate_database(args)
    model = load(args.model)
    if model.encoder_ is not None:
        return _evaluate_table(args, model)
    name = model.release_.dataset.get("name", "")
    if not model.generative:                 # a fixed support set (DP-KIP), not a generator
        return _evaluate_kip(args, model, name)
    data = _real_test_data(args, name, "the model was fitted on", "mmdsynth.evaluation.image_classifier_scores")
    n = args.n or 6000
    x, y = model.sample(n, seed=args.seed, checkpoint=args.checkpoint)
    result = _result_header(model, n)
    if getattr(model, "selection_", None):
        result.update(checkpoint=args.checkpoint, selected_iteration=model.selection_["best_iteration"])
    result.update(image_classifier_scores(x, y, data.x_test, data.y_test, seed=args.seed))
    if args.frechet:
        from ..evaluation.frechet import frechet_report

        result.update(frechet_report(data, x, seed=args.seed))
    if args.inception_weights:
        from ..evaluation.inception import inception_report

        result.update(inception_report(args.inception_weights, data.x_test.numpy(), x))
    if args.cnn:
        xc, yc = model.sample(args.cnn_samples, seed=args.seed + 1, checkpoint=args.checkpoint) \
            if args.cnn_samples != n else (x, y)
        result.update(_cnn(args, xc, yc, data))
    grid = save_image_grid(x, y, Path(args.model) / "samples.png", classes=data.classes)
    result["samples_png"] = str(grid)
    return _finish(args, result)


def _evaluate_database(args) -> int:
    """A fitted database (``fit --tables``): ``--n`` roots (default: as many as ``--real-train`` holds) with their
    descendants, scored against the real tables of ``--real-train`` (a folder or URL, read with the database's
    schema): keys, children-per-parent TVD, each table's 1- and 2-way TVD, cross-table 2-way TVD, and with ``--test``
    (the real tables of roots the fit never saw) the downstream task (:mod:`mmdsynth.evaluation.database`)."""
    from ..data.relational import read_database
    from ..evaluation.database import database_scores
    from ..evaluation.report import EVALUATION_FILE
    from ..methods.database import DatabaseModel

    if args.real_train is None:
        raise InvalidParameterError("a fitted database is scored against its real tables: pass --real-train FOLDER|URL "
                                    "(the tables the fit read), and --test FOLDER|URL (other roots' tables) for the "
                                    "downstream task.")
    stray = [f for f, v in (("--cnn", args.cnn), ("--real", args.real), ("--frechet", args.frechet),
                            ("--inception-weights", args.inception_weights)) if v]
    if stray:
        raise InvalidParameterError(f"{', '.join(stray)}: not for a database (its scores are its tables' and their "
                                    f"relations'); drop them.")
    model = DatabaseModel.load(args.model)
    real = read_database(args.real_train, model.schema)
    test = read_database(args.test, model.schema) if args.test else None
    n = args.n or len(real[model.schema.privacy_unit])
    synth = model.sample(n, seed=args.seed)
    eps, delta = model.total()
    result = {"database": True, "layout": model.layout, "epsilon": eps, "delta": delta, "n_roots": n,
              **database_scores(real, synth, model.schema, test=test, seed=args.seed)}
    path = Path(args.model) / EVALUATION_FILE
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result))
        return 0
    db = model.schema
    print(f"a synthetic database of {n} roots ({model.layout}; epsilon={eps:g}, delta={delta:g}): keys "
          f"{'hold' if result['keys_hold'] else 'BROKEN'}")
    for name in db.order():
        two = result[f"{name}.tvd_2way"]
        line = (f"  {name}: {result[f'{name}.rows']} rows, 1-way TVD {result[f'{name}.tvd_1way']:.3f}, 2-way "
                f"{'- (one column)' if two != two else f'{two:.3f}'}")
        if db.parent(name) is not None:
            line += (f"; children per {db.parent(name)[1]} row TVD {result[f'{name}.children_tvd']:.3f}, cross-table "
                     f"2-way (with {db.parent(name)[1]}) {result[f'{name}.cross_tvd_2way']:.3f}")
        print(line)
    if test is not None and result.get("downstream_auc") is not None:
        print(f"  downstream: the root's label from its columns and its children's aggregates, ROC AUC on the test "
              f"roots {result['downstream_auc']:.3f} trained on synthetic, {result['downstream_auc_real']:.3f} on real")
    print(f"saved to {path}")
    return 0


def _real_test_data(args, name: str, origin: str, instead: str):
    """The registered dataset ``name`` (its real test split), or an error saying what to use instead."""
    from ..data import DATASETS, load_dataset

    if name not in DATASETS:
        raise InvalidParameterError(f"{origin} {name or 'user data'!r}, not a registered dataset, so there is no real "
                                    f"test split to evaluate on; use {instead} with your own test data.")
    return load_dataset(name, data_dir=args.data_dir)


def _evaluate_kip(args, model, name) -> int:
    """DP-KIP: KRR accuracy with the support set (krr_acc) and LogReg/MLP trained on it."""
    from ..evaluation import image_classifier_scores, save_image_grid

    data = _real_test_data(args, name, "the model was fitted on", "DPKIP.krr_accuracy(x_test, y_test)")
    x, y = model.sample()
    result = _result_header(model, len(y))
    result["krr_acc"] = model.krr_accuracy(data.x_test, data.y_test.numpy())
    result.update(image_classifier_scores(x.clip(0, 1), y, data.x_test, data.y_test, seed=args.seed))
    if args.cnn:                         # the support set as learned (not clipped), as the papers train on it
        result.update(_cnn(args, x, y, data))
    result["samples_png"] = str(save_image_grid(x.clip(0, 1), y, Path(args.model) / "samples.png",
                                                classes=data.classes))
    return _finish(args, result)


def _evaluate_set(args) -> int:
    """A distilled image set (`mmdsynth distill`): LogReg/MLP and, with --cnn, the ConvNet trained on it; the result
    is saved beside it as SET.evaluation.json."""
    from ..evaluation import image_classifier_scores, save_image_grid
    from ..methods.distill import DistilledSet

    dset = DistilledSet.load(args.model)
    name = dset.info.get("dataset", "")
    data = _real_test_data(args, name, "the set was distilled from a release of", "mmdsynth.evaluation.cnn_scores")
    eps, delta = dset.ledger.total()
    result = {"dataset": name, "method": f"distilled from {dset.info.get('method') or 'a release'}",
              "epsilon": eps, "delta": delta, "n_synthetic": int(len(dset.y)), "per_class": dset.info.get("per_class")}
    result.update(image_classifier_scores(dset.x, dset.y, data.x_test, data.y_test, seed=args.seed))
    if args.cnn:
        result.update(_cnn(args, dset.x, dset.y, data))
    path = Path(args.model)
    result["samples_png"] = str(save_image_grid(dset.x, dset.y, path.with_name(path.stem + ".png"),
                                                classes=data.classes))
    return _finish(args, result, path.with_name(path.stem + ".evaluation.json"))


def _evaluate_table(args, model) -> int:
    from ..data import load_preset, read_table
    from ..data.private_schema import declared_part
    from ..evaluation.fidelity import table_fidelity
    from ..evaluation.tabular import table_classifier_scores

    if args.cnn:
        raise InvalidParameterError("--cnn, --cnn-protocol and --cnn-epochs evaluate images; this model is a table. "
                                    "Drop them: a table is scored by its classifiers and fidelity.")
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
    n = len(synth)                    # a support set (DP-KIP) is what it is, whatever n was asked for
    result = _result_header(model, n)
    keys = ("binary", "mean", "classifiers", "failures")

    def block(scores: dict) -> dict:          # `skipped` only when a classifier was not installed
        return {**{k: scores[k] for k in keys}, **({"skipped": scores["skipped"]} if scores["skipped"] else {})}
    result.update(block(table_classifier_scores(synth, test, encoder, seed=args.seed)))
    if args.real:          # the same layout as the synthetic block
        result["real"] = block(table_classifier_scores(train_real, test, encoder, seed=args.seed))
    result["fidelity"] = table_fidelity(encoder.clean(test), synth, encoder.schema, seed=args.seed)
    result["fidelity"]["reference"] = "the real test split: " + result["fidelity"]["reference"]
    return _finish(args, result)


def _finish(args, result: dict, path: Path | None = None) -> int:
    """Save the result as MODEL/evaluation.json (what `mmdsynth report` shows; ``path`` elsewhere) and print it: a
    short summary for people, or with --json the whole object on one line."""
    from ..evaluation.report import EVALUATION_FILE
    from ..evaluation.summary import evaluation_summary

    path = path or Path(args.model) / EVALUATION_FILE
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(result, indent=1))
    print(json.dumps(result) if args.json else evaluation_summary(result, saved_to=path))
    return 0


def _cnn(args, x, y, data) -> dict:
    from ..evaluation.convnet import cnn_scores

    if args.cnn_seeds < 1:
        raise InvalidParameterError(f"--cnn-seeds must be >= 1; got {args.cnn_seeds}.")
    return cnn_scores(x, y, data.x_test, data.y_test, n_classes=data.n_classes, seeds=tuple(range(args.cnn_seeds)),
                      device=args.device, protocol=args.cnn_protocol, dataset=data.name, epochs=args.cnn_epochs)


def _result_header(model, n: int) -> dict:
    eps, delta = model.release_.ledger.total()
    return {"dataset": model.release_.dataset.get("name"), "method": model.method, "epsilon": eps,
            "delta": delta, "n_synthetic": n}


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("evaluate", help="classifiers trained on synthetic data, tested on the real test split")
    s.add_argument("model", type=existing_path, help="model folder written by `mmdsynth fit`, or a set.npz written by `mmdsynth distill`")
    s.add_argument("--json", action="store_true", help="print the whole result as one JSON object (for scripts) "
                   "instead of the summary; MODEL/evaluation.json holds it either way")
    s.add_argument("--n", type=positive_int, default=None, help="synthetic training samples (default 6000 images with "
                   "balanced labels; tables: as many as the private training rows)")
    s.add_argument("--test", help="tables fitted with --csv: real test split (same schema); a database: the real "
                   "tables (folder or URL) of roots the fit never saw, for the downstream task")
    s.add_argument("--real-train", help="tables fitted with --csv: real training split, for the 'real' row; a "
                   "database: the real tables (folder or URL) the fit read")
    s.add_argument("--real", action="store_true", help="tables: also score classifiers trained on the real "
                   "training split (the 'real' row)")
    s.add_argument("--seed", type=int, default=0, help="seed of the synthetic rows drawn and of the classifiers "
                   "(public randomness)")
    s.add_argument("--inception-weights", metavar="FILE", help="images: also the FID on Inception-v3 with these "
                   "weights (pytorch-fid's pt_inception-2015-12-05 .pth, or torchvision's; never downloaded)")
    s.add_argument("--frechet", action="store_true", help="also a Frechet distance on features of a CNN "
                   "classifier trained by mmdsynth on the real training set (cached; not Inception FID)")
    s.add_argument("--cnn", action="store_true", help="images: also the ConvNet protocol (cnn_acc: DP-KIP's "
                   "downstream ConvNet trained on the synthetic data, 3 seeds, real test split; generators: on "
                   "--cnn-samples samples). Needs a GPU for 60,000 samples")
    s.add_argument("--checkpoint", default="selected", choices=["selected", "final"], help="with DP early "
                   "stopping: evaluate the checkpoint closest to the proxy (default) or the last one")
    s.add_argument("--cnn-samples", type=int, default=60_000, help="generators: samples for --cnn (default 60000)")
    s.add_argument("--cnn-seeds", type=int, default=3, help="training seeds for --cnn (default 3)")
    s.add_argument("--cnn-protocol", "--protocol", dest="cnn_protocol", default="fixed",
                   choices=["fixed", "dc", "dpimagebench"], help="the CNN protocol (any but the default implies --cnn): "
                   "mmdsynth's fixed settings (default); 'dc', the dataset-condensation evaluation NDPDC and Dosser "
                   "report (1,000 epochs, DSA augmentation); 'dpimagebench', DPImageBench's (ResNet-110, WRN-40-4 and "
                   "ResNeXt-29 for 50 epochs each, selected on a synthetic validation split, their mean: GPU hours; one "
                   "training run per classifier, so --cnn-seeds does not apply)")
    s.add_argument("--cnn-epochs", type=int, default=None, help="--cnn: override the protocol's epochs (a quick "
                   "look; the result then says it is not the protocol)")
    s.add_argument("--device", default=None, help="--cnn: cpu or cuda (default: cuda when available)")
    s.add_argument("--data-dir", default=None, help="extra folder holding the real test split's files")
    s.set_defaults(func=cmd_evaluate)
    return s
