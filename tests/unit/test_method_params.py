"""Issue 46 items 3 and 7: a method's parameters are its own (signature, help, generated flags), and one set of
per-kind defaults applied the same way by the Python API and the CLI (a parameter left out takes the default for
the kind of data fit receives; one given is used as given; the constructor's attributes are never rewritten)."""
import inspect
import io
import json
import pydoc
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import mmdsynth
from mmdsynth import DPHP, DPKIP, DPMEPF, DPMERF, DPNTK, InvalidParameterError
from mmdsynth._io import sealed
from mmdsynth.cli import main
from mmdsynth.errors import ArtifactError
from mmdsynth.methods import METHODS, KernelGeneratorMethod, DPRandConv
from mmdsynth.methods.presets import dphp_table
from mmdsynth.methods.tables import TableOptions

MEPF_ONLY = ("loss", "mavg_lr", "beta1", "early_stopping", "proxy_encoder", "proxy_multiplier", "select_every",
             "select_samples")
TABLE_ONLY = ("proportions_share", "schema_share", "numeric_encoding", "numeric_share")
OLD = Path(__file__).resolve().parents[1] / "fixtures" / "written-by-0.1"

SCHEMA = {"label": "y", "label_categories": ["a", "b"],
          "columns": [{"name": "x", "type": "numeric", "bounds": [0, 1]},
                      {"name": "c", "type": "categorical", "categories": ["u", "v", "w"]}]}


def table(n=300, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random(n)
    return pd.DataFrame({"x": x, "c": rng.choice(["u", "v", "w"], n), "y": np.where(x > 0.5, "a", "b")})


@pytest.fixture
def files(tmp_path):
    table().to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    return tmp_path


# ---- item 7: a method's parameters are its own -------------------------------------------------------------
@pytest.mark.parametrize("cls", [DPNTK, DPMERF, DPHP, DPRandConv])
def test_only_dp_mepf_lists_dp_mepfs_options(cls):
    names = cls.param_names()
    assert not set(MEPF_ONLY) & set(names), cls
    assert set(MEPF_ONLY) <= set(DPMEPF.param_names())
    shown = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert "mavg_lr" not in shown and "select_samples" not in shown and "iterations" in shown
    assert "mavg_lr" in pydoc.render_doc(DPMEPF, renderer=pydoc.plaintext)
    with pytest.raises(TypeError, match="mavg_lr"):
        cls(1.0, mavg_lr=0.1)
    assert cls(1.0).loss == "direct" and cls(1.0).early_stopping is False   # the shared code's values, not params


def test_the_table_options_belong_to_the_methods_that_take_tables():
    for name, cls in METHODS.items():
        if not issubclass(cls, KernelGeneratorMethod):
            continue
        takes_tables = "table" in cls.data_kinds
        assert issubclass(cls, TableOptions) == takes_tables, name
        assert (set(TABLE_ONLY) <= set(cls.param_names())) == takes_tables, name
    assert DPRandConv.data_kinds == DPMEPF.data_kinds == ("image",)
    # the signature Python shows is the whole parameter list, through the mixin's and the base's **kwargs
    sig = inspect.signature(DPMERF)
    assert list(sig.parameters)[:3] == ["epsilon", "delta", "n_features"]
    assert {"proportions_share", "batch_size", "progress"} <= set(sig.parameters) and "mavg_lr" not in sig.parameters
    assert "kwargs" not in sig.parameters


def test_every_per_kind_parameter_defaults_to_none_and_params_round_trip():
    for name, cls in METHODS.items():
        defaults = cls.param_defaults()
        for kind in cls.data_kinds:
            for param in cls.defaults_for(kind):
                assert param in defaults and defaults[param] is None, (name, kind, param)
        m = cls(1.0)
        assert cls(**m.get_params()).get_params() == m.get_params()


def test_dphps_table_defaults_are_the_adult_preset():
    preset = dphp_table("adult")
    t = {**DPHP.param_defaults(), **DPHP.defaults_for("table")}
    # delta: the preset pins the paper's 1e-5; the default is choice.default_delta of the table's count (None here)
    skip = ("code_dim", "product_dims", "delta")
    assert {k: t[k] for k in preset if k not in skip} == {k: v for k, v in preset.items() if k not in skip}
    assert t["product_dims"] is None                  # 5, at most the table's encoded inputs
    assert t["delta"] is None and preset["delta"] == 1e-5


@pytest.mark.parametrize("method, has, lacks", [
    ("dp-merf", ["--n-features", "--numeric-share", "--csv", "--batch-size"], ["--mavg-lr", "--encoder", "--hp-order"]),
    ("dp-mepf", ["--mavg-lr", "--encoder", "--beta1", "--select-samples"], ["--n-features", "--numeric-share", "--csv",
                                                                           "--proportions-share"]),
    ("dp-kip", ["--images-per-class", "--public-init", "--clip"], ["--iterations", "--mavg-lr", "--release-only"]),
    ("dp-randconv", ["--n-networks", "--sample-rate"], ["--numeric-share", "--mavg-lr", "--n-features"]),
])
def test_fit_help_for_a_method_shows_its_options_only(method, has, lacks, capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--method", method, "--help"])
    text = capsys.readouterr().out
    options = set(re.findall(r"^  (--[\w-]+)(?= [A-Z{]|  |$)", text, re.M))         # the option lines of the help
    assert set(has) <= options, (method, set(has) - options)
    assert not set(lacks) & options, (method, set(lacks) & options)
    assert f"{method} (" in text


def test_fit_help_without_a_method_lists_the_methods(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = capsys.readouterr().out
    assert "`mmdsynth fit --method M --help`" in text
    for name in METHODS:
        assert f"\n  {name} " in text
    options = set(re.findall(r"^  (--[\w-]+)(?= [A-Z{]|  |$)", text, re.M))
    assert not {"--n-features", "--mavg-lr", "--hp-order", "--images-per-class", "--lr"} & options
    assert {"--epsilon", "--delta", "--csv", "--out"} <= options


def test_per_kind_defaults_are_shown_for_each_kind(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--method", "dp-hp", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: images 5000, tables 200)" not in text              # DP-HP's batch is 200 for both
    assert "(default: images 0.0707, tables 0.3)" in text
    assert "(default: images required, tables 1)" in text


def test_a_flag_of_another_method_is_still_refused_by_name(tmp_path, capsys):
    assert main(["fit", "--method", "dp-merf", "--dataset", "digits", "--epsilon", "1", "--mavg-lr", "0.1",
                 "--out", str(tmp_path / "m")]) == 2
    assert "--mavg-lr: dp-mepf options, not taken by --method dp-merf" in capsys.readouterr().err


# ---- item 3: one set of per-kind defaults, the same in Python and on the CLI -------------------------------
def _trained_config(monkeypatch):
    import mmdsynth.methods.base as base

    seen = []
    real = base.train_generator

    def spy(generator, fmap, target, config, **kw):
        seen.append(config)
        return real(generator, fmap, target, config, **kw)
    monkeypatch.setattr(base, "train_generator", spy)
    return seen


def test_a_python_table_fit_takes_the_table_defaults(monkeypatch):
    seen = _trained_config(monkeypatch)
    m = DPMERF(iterations=2, n_features=50, noise_seed=0).fit(table(), label="y", schema=SCHEMA)
    assert (seen[0].batch_size, seen[0].lr_step) == (200, 100)
    assert (m.settings_.epsilon, m.settings_.batch_size, m.settings_.lr_step) == (1.0, 200, 100)
    assert m.release_.ledger.total() == (1.0, 1e-5)
    # the constructor's attributes are as given: None, "the default for the data's kind"
    assert m.epsilon is None and m.batch_size is None and m.n_classes is None
    assert m.get_params() == DPMERF(iterations=2, n_features=50, noise_seed=0).get_params()
    assert m.settings_.n_classes == 2                                   # from the schema (public)


def test_a_value_given_wins_over_the_kind_default(monkeypatch):
    seen = _trained_config(monkeypatch)
    m = DPMERF(2.0, iterations=2, batch_size=64, lr_step=7, n_features=50, noise_seed=0).fit(
        table(), label="y", schema=SCHEMA)
    assert (seen[0].batch_size, seen[0].lr_step) == (64, 7)
    assert m.release_.ledger.total()[0] == pytest.approx(2.0)
    d = mmdsynth.load_dataset("digits")
    m = DPNTK(1.0, n_classes=10, iterations=1, batch_size=30, ntk_width=20, noise_seed=0).fit(d.x_train, d.y_train)
    assert (seen[-1].batch_size, seen[-1].lr_step) == (30, 1500)            # images: their own default lr_step


def test_dphp_resolves_its_kernel_for_the_kind_of_data():
    m = DPHP(iterations=2, noise_seed=0, n_product=2).fit(table(), label="y", schema=SCHEMA)
    s = m.settings_
    assert (s.length_scale, s.sum_weight, s.epsilon, s.n_product) == (0.3, 1.0, 1.0, 2)
    assert m.release_.feature_spec["product_dims"] == 4          # 5, at most the 4 encoded inputs (x; c's 3)
    d = mmdsynth.load_dataset("digits")
    m = DPHP(1.0, n_classes=10, iterations=2, order=5, n_product=1, product_order=3, noise_seed=0).fit(
        d.x_train, d.y_train)
    assert (m.settings_.length_scale, m.settings_.sum_weight, m.settings_.product_dims) == (0.0707, 20.0, 2)


@pytest.mark.parametrize("make", [lambda: DPNTK(n_classes=10, iterations=1, ntk_width=20),
                                  lambda: DPKIP(n_classes=10, epochs=1, images_per_class=1, batch_size=50)])
def test_images_refuse_a_missing_epsilon(make, tmp_path):
    d = mmdsynth.load_dataset("digits")
    with pytest.raises(InvalidParameterError, match="epsilon is required .* no default privacy level for images"):
        make().fit(d.x_train, d.y_train, out=tmp_path / "m")
    assert not (tmp_path / "m" / "release").exists()


def test_the_cli_says_the_same_for_images(tmp_path, capsys):
    assert main(["fit", "--method", "dp-kip", "--dataset", "digits", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "--epsilon is required (e.g. --epsilon 10)" in err and not (tmp_path / "m").exists()


def test_cli_and_python_fit_a_table_with_the_same_settings(files, tmp_path):
    assert main(["fit", "--method", "dp-merf", "--csv", str(files / "t.csv"), "--schema", str(files / "s.json"),
                 "--label", "y", "--iterations", "3", "--n-features", "50", "--noise-seed", "0", "-q",
                 "--out", str(tmp_path / "cli")]) == 0
    df = pd.read_csv(files / "t.csv")
    DPMERF(iterations=3, n_features=50, noise_seed=0).fit(df, label="y", schema=SCHEMA, out=tmp_path / "py")
    cli, py = (json.loads((tmp_path / f / "model.json").read_text()) for f in ("cli", "py"))
    run = ("progress", "device")
    assert {k: v for k, v in cli["settings"].items() if k not in run} == \
        {k: v for k, v in py["settings"].items() if k not in run}
    assert cli["settings"]["batch_size"] == 200 and cli["settings"]["epsilon"] == 1.0
    assert {k: v for k, v in cli["params"].items() if k not in run} == \
        {k: v for k, v in py["params"].items() if k not in run}
    rel = [json.loads((tmp_path / f / "release" / "release.json").read_text())["dataset"]["fit_params"]
           for f in ("cli", "py")]
    assert rel[0] == rel[1] and rel[0]["lr_step"] == 100


def test_a_table_fit_in_python_shows_progress_on_a_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    for progress, shown in ((None, True), (False, False)):
        err = Terminal()
        monkeypatch.setattr("sys.stderr", err)
        m = DPMERF(iterations=3, n_features=50, noise_seed=0, progress=progress).fit(table(), label="y",
                                                                                  schema=SCHEMA)
        assert ("training generator" in err.getvalue()) == shown, progress
        assert m.settings_.progress is shown and m.progress is progress
    monkeypatch.setattr("sys.stderr", io.StringIO())                  # not a terminal: quiet (tests, logs)
    assert DPMERF(1.0).settings_for("table").progress is False


def test_an_image_only_method_refuses_a_table_by_name():
    with pytest.raises(InvalidParameterError, match="dp-randconv takes image data, not tables"):
        DPRandConv(1.0).fit(table(), label="y", schema=SCHEMA)


# ---- files written by 0.1: every method listed all 29 options ---------------------------------------------
def test_an_old_model_drops_the_options_its_method_no_longer_takes(tmp_path):
    shutil.copytree(OLD, tmp_path / "old")
    params = json.loads((tmp_path / "old" / "run" / "model.json").read_text())["params"]
    assert len(params) == 35 and set(MEPF_ONLY) <= set(params)          # 0.1: the base's 29 and DP-MERF's own
    model = mmdsynth.load(tmp_path / "old" / "run")
    assert isinstance(model, DPMERF) and not set(MEPF_ONLY) & set(model.get_params())
    assert model.get_params()["n_features"] == 50 and model.settings_.batch_size == 50
    # `fit --resume` rebuilds the model from the release's fit_params (the same 35): filtered the same way
    assert main(["fit", "--resume", "--out", str(tmp_path / "old" / "run"), "--iterations", "4", "-q"]) == 0
    meta = json.loads((tmp_path / "old" / "run" / "model.json").read_text())
    assert meta["iterations_done"] == 4 and "mavg_lr" not in meta["params"]


def test_an_old_model_with_a_value_its_method_cannot_honour_is_refused(tmp_path):
    shutil.copytree(OLD, tmp_path / "old")
    path = tmp_path / "old" / "run" / "model.json"
    meta = json.loads(path.read_text())
    meta.pop("sha256")
    meta["params"]["mavg_lr"] = 0.5
    path.write_text(json.dumps(sealed(meta)))
    with pytest.raises(ArtifactError, match=r"sets mavg_lr=0.5, which dp-merf does not take"):
        mmdsynth.load(tmp_path / "old" / "run")


# ---- issue 82 item 3: each method's parameters carry their declared constraints -----------------------------
CONSTRAINED = [(name, param) for name, cls in METHODS.items() for param in cls.param_constraints()]


@pytest.mark.parametrize("name,param", CONSTRAINED, ids=[f"{n}-{p}" for n, p in CONSTRAINED])
def test_a_constrained_parameter_is_refused_outside_its_list_before_anything_is_read(name, param, tmp_path, capsys):
    """Every registered method: a parameter with declared choices (``param_choices``) defaults to one of them (or to
    None, the method's own choice), takes each of them, and is refused at any other value when the fit resolves its
    settings (before a row is read or the budget charged), naming the list; `mmdsynth fit` offers the same list."""
    from mmdsynth.cli._catalog import methods as catalog

    cls = METHODS[name]
    allowed = cls.param_constraints()[param]
    for kind in cls.data_kinds:
        default = {**cls.param_defaults(), **cls.defaults_for(kind)}[param]
        assert default is None or default in allowed, (name, param, kind, default)
        for value in allowed:
            assert getattr(cls(1.0, **{param: value}).settings_for(kind), param) == value
        wrong = "surely-not-a-choice"
        with pytest.raises(InvalidParameterError, match=rf"{param} must be one of {re.escape(repr(allowed[0]))}"):
            cls(1.0, **{param: wrong}).settings_for(kind)
    if "table" in cls.data_kinds:
        from mmdsynth.privacy.budget import BudgetFile

        budget = BudgetFile.open(tmp_path / "b.json", "toy", 5.0, 1e-5)
        with pytest.raises(InvalidParameterError, match=f"{param} must be one of"):
            cls(1.0, **{param: wrong}).fit(table(), label="y", schema=SCHEMA, budget=budget)
        assert BudgetFile.open(tmp_path / "b.json").spent == (0.0, 0.0)
    assert catalog()[name].param_constraints()[param] == allowed          # the CLI's catalog says the same
    flag = "--" + param.replace("_", "-")
    table().to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(SystemExit) as refused:           # argparse's usage error
        main(["fit", "--method", name, "--csv", str(tmp_path / "t.csv"), flag, wrong, "--out", str(tmp_path / "o")])
    assert refused.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err and not (tmp_path / "o").exists()
