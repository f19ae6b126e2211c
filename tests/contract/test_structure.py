"""Issue 31: the shape that keeps the privacy machinery in one place, checked on the code itself.

* calibration, the Gaussian mechanism on private data and ledger entries each have one home (the
  privacy engine): outside ``mmdsynth/privacy/`` at most one module calls each (the `budget`
  calculator command may calibrate; nobody else);
* every function that reads private rows lives in ``mmdsynth/statistics/`` and columns are parsed value by value
  there (issue 82);
* the package's imports (module-level and inside functions) form no circle;
* the CLI is generated from the methods: a flag the method does not take is refused by name, and a
  method's defaults are its own; ``import mmdsynth.cli`` loads no torch.
"""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmdsynth import cli

PACKAGE = Path(__file__).resolve().parents[2] / "mmdsynth"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield name, path, ast.parse(path.read_text())


def _callers(func: str) -> set[str]:
    out = set()
    for name, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if called == func:
                    out.add(name)
    return out


@pytest.mark.parametrize("func,allowed", [("calibrate_sigma", {"mmdsynth.cli.budget"}), ("gaussian_mechanism", set()),
                                          ("LedgerEntry", set())])
def test_the_privacy_machinery_has_one_home(func, allowed):
    outside = {m for m in _callers(func) if not m.startswith("mmdsynth.privacy")}
    assert outside <= allowed, f"{func} is called outside the privacy engine from {sorted(outside - allowed)}"
    assert len(outside) <= 1


#: the modules outside ``mmdsynth/privacy/`` that still call one of the engine's mechanisms directly (issue 82: none;
#: every release is a stage a planner yields to ``engine.run(source, planner)``, which reads the rows where they live,
#: noises and records). A new caller fails here.
MECHANISM_CALLERS = {"gaussian": set(), "exponential": set()}


@pytest.mark.parametrize("func", sorted(MECHANISM_CALLERS))
def test_the_engines_mechanisms_are_called_only_where_listed(func):
    outside = {m for m in _callers(func) if not m.startswith("mmdsynth.privacy")}
    assert outside == MECHANISM_CALLERS[func], (
        f"engine.{func} is called outside the privacy engine from {sorted(outside)}; listed: "
        f"{sorted(MECHANISM_CALLERS[func])}. Yield the release as a stage to engine.run(source, planner) instead.")


@pytest.mark.parametrize("func", ["_sums", "_step", "_declare", "_record", "_spend"])
def test_stages_run_only_through_engine_run(func):
    """Issue 82: a release outside ``mmdsynth/privacy/`` is a stage a planner yields to ``engine.run(source,
    planner)``; the engine's executors of stages and its bookkeeping are called from nowhere else."""
    outside = {m for m in _callers(func) if not m.startswith("mmdsynth.privacy")}
    assert not outside, f"engine.{func} is called outside the privacy engine from {sorted(outside)}"


def test_every_engine_is_built_in_one_place():
    """A fresh privacy engine is constructed only by ``privacy.engine.open_engine`` (issue 82: one construction site;
    a fit's run builds it from its planner's ``Open`` stage, DP-KIP and a plan's outline through
    ``Method._open_engine``, the schema draft and the audit directly): a module that builds ``PrivacyEngine(...)`` or ``ZCDPEngine(...)`` itself fails here. The resume and
    a test's fixed sigma are the engine's own class methods (``cls(...)``)."""
    sites = set()
    for name, _, tree in _modules():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                            node.func.id in ("PrivacyEngine", "ZCDPEngine"):
                        sites.add((name, fn.name))
    assert sites == {("mmdsynth.privacy.engine", "open_engine")}, sorted(sites)


def test_only_the_statistics_folder_unpacks_a_batch():
    """Issue 82: every function that reads private rows lives in ``mmdsynth/statistics/``. Outside it no module
    unpacks a batch (``unweighted(...)``) or defines a statistic (a ``__call__`` reading a ``batch``); a batch's
    weighted form is built only where sources build batches (``mmdsynth/engines/``). ``tests/conftest.py`` checks
    the same at run time for every sum a test runs."""
    found = set()
    for name, _, tree in _modules():
        if name.startswith("mmdsynth.statistics"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if called == "unweighted" or (called == "Weighted" and not name.startswith("mmdsynth.engines")):
                    found.add((name, called))
            if isinstance(node, ast.FunctionDef) and node.name == "__call__" and \
                    any(a.arg == "batch" for a in node.args.args):
                found.add((name, "__call__(batch)"))
    assert not found, f"private rows read outside mmdsynth/statistics/: {sorted(found)}"


#: the column-wide parses (``pd.to_numeric``, ``pd.to_datetime``, ``.astype(str)``) outside the per-value readers
#: (``mmdsynth/statistics/values.py``), each on data that is not private: the papers' registered tables as their
#: presets load them (public files), a schema drawn from public data, synthetic seconds decoded to dates, and the
#: evaluation's report to the data holder (not a release). A new one fails here: read each value by itself.
COLUMN_PARSES = {
    ("mmdsynth.data.tabular", "to_numeric"), ("mmdsynth.data.tabular", "astype(str)"),
    ("mmdsynth.data.presets", "astype(str)"), ("mmdsynth.data.schema", "to_numeric"),
    ("mmdsynth.data.encoding", "to_datetime"), ("mmdsynth.evaluation.fidelity", "astype(str)"),
    ("mmdsynth.evaluation.database", "to_numeric"),
}


def test_columns_are_parsed_value_by_value():
    found = set()
    for name, _, tree in _modules():
        if name == "mmdsynth.statistics.values":
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr in ("to_numeric", "to_datetime"):
                found.add((name, node.func.attr))
            elif node.func.attr == "astype" and node.args and isinstance(node.args[0], ast.Name) and \
                    node.args[0].id == "str":
                found.add((name, "astype(str)"))
    assert found == COLUMN_PARSES, (f"column-wide parses outside mmdsynth/statistics/values.py: new "
                                    f"{sorted(found - COLUMN_PARSES)}, gone (take them off COLUMN_PARSES) "
                                    f"{sorted(COLUMN_PARSES - found)}")


def _imports() -> dict[str, set[str]]:
    names = {name for name, _, _ in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path, tree in _modules():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    deps.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in names else target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("mmdsynth"))
        # a package's __init__ re-exporting its own modules is its face, not a room depending on them
        own = (lambda d: d.startswith(name + ".")) if path.name == "__init__.py" else (lambda d: False)
        graph[name] = {d for d in deps if d in names and d != name and d != "mmdsynth" and not own(d)}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of ``graph`` (node -> the nodes it imports) as a path that ends where it starts, or None."""
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if state.get(dep) is None and (found := visit(dep, path + [dep])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [node])):
            return found
    return None


def test_no_import_circle():
    circle = _circle(_imports())
    assert circle is None, "import circle: " + " -> ".join(circle)


def _room(module: str) -> str:
    """A module's folder (``mmdsynth.data.schema`` -> ``mmdsynth.data``); a top-level module is its own room."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else module


def test_the_folders_form_layers():
    """Issue 82: collapsed to folders, the imports still form no circle, so every arrow points down a layer (a module
    of ``data/`` importing ``statistics/`` while ``statistics/`` imports ``data/`` fails, though no module circle
    exists); and the statistics, which read private rows, import only the layers under them."""
    rooms: dict[str, set[str]] = {}
    for module, deps in _imports().items():
        rooms.setdefault(_room(module), set()).update(_room(d) for d in deps if _room(d) != _room(module))
    circle = _circle(rooms)
    assert circle is None, "folders import each other: " + " -> ".join(circle)
    assert rooms["mmdsynth.statistics"] <= {"mmdsynth.kip", "mmdsynth.validation", "mmdsynth.errors"}, \
        rooms["mmdsynth.statistics"]


def test_importing_the_cli_and_its_help_load_no_torch():
    code = ("import sys, mmdsynth.cli\nassert 'torch' not in sys.modules\n"
            "try:\n    mmdsynth.cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("method,flag", [("dp-ntk", "--n-features 5"), ("dp-merf", "--arch fc_1l"),
                                         ("dp-kip", "--iterations 5"), ("dp-ntk", "--images-per-class 3"),
                                         ("dp-merf", "--hp-order 4")])
def test_a_flag_the_method_does_not_take_exits_2_naming_it(method, flag, tmp_path, capsys):
    rc = cli.main(["fit", "--method", method, "--dataset", "digits", "--epsilon", "1", *flag.split(),
                   "--out", str(tmp_path / "m")])
    assert rc == 2
    err = capsys.readouterr().err
    assert flag.split()[0] in err and f"not taken by --method {method}" in err
    assert not (tmp_path / "m" / "release").exists()                  # refused before anything was released


def test_dp_kip_on_digits_runs_with_its_own_defaults(tmp_path):
    # the image batch 5,000 of the generator methods once reached DP-KIP and failed on 1,437 digits
    assert cli.main(["fit", "--method", "dp-kip", "--dataset", "digits", "--epsilon", "1", "--epochs", "1",
                     "--out", str(tmp_path / "m"), "-q"]) == 0
    params = json.loads((tmp_path / "m" / "model.json").read_text())["settings"]
    assert params["batch_size"] == 500 and params["images_per_class"] == 10 and params["clip"] == 1e-6


def test_generated_flags_reach_the_method(tmp_path):
    assert cli.main(["fit", "--method", "dp-merf", "--dataset", "digits", "--epsilon", "1", "--iterations", "2",
                     "--batch-size", "50", "--n-features", "40", "--rff-seed", "3", "--lr-decay", "0.5",
                     "--out", str(tmp_path / "m"), "-q"]) == 0
    params = json.loads((tmp_path / "m" / "model.json").read_text())["params"]
    assert params["rff_seed"] == 3 and params["lr_decay"] == 0.5 and params["n_features"] == 40


def test_the_methods_take_the_data_kinds_they_declare(tmp_path, capsys):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"label": "y", "label_categories": ["a", "b"],
                                  "columns": [{"name": "x", "type": "numeric", "bounds": [0, 1]}]}))
    (tmp_path / "t.csv").write_text("x,y\n" + "".join(f"{i / 10},{'ab'[i % 2]}\n" for i in range(10)))
    rc = cli.main(["fit", "--method", "dp-mepf", "--csv", str(tmp_path / "t.csv"), "--schema", str(schema),
                   "--label", "y", "--out", str(tmp_path / "m")])
    assert rc == 2 and "dp-mepf takes image data, not tables" in capsys.readouterr().err


def test_the_issues_command_refuses_the_foreign_flag_before_anything_else(capsys):
    """`mmdsynth fit --method dp-ntk --dataset digits --n-features 5`, exactly: exit 2 naming the flag."""
    assert cli.main(["fit", "--method", "dp-ntk", "--dataset", "digits", "--n-features", "5"]) == 2
    assert "--n-features: dp-merf / hybrid options, not taken by --method dp-ntk" in capsys.readouterr().err


class _Watched:
    """A planner that the test watches: after each stage it yields, no frame of its generators (the ``yield from``
    chain) holds a Source, the rows handed to the fit or an object made of them (issue 82: a planner learns from
    public facts and noisy results only)."""

    def __init__(self, planner, rows: list, seen: list):
        self.planner, self.rows, self.seen = planner, rows, seen

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def send(self, value):
        stage = self.planner.send(value)
        self._look(type(stage).__name__)
        return stage

    def throw(self, *args):
        return self.planner.throw(*args)

    def close(self):
        self.planner.close()

    def _look(self, stage: str) -> None:
        from mmdsynth.engines import Source

        g = self.planner
        while g is not None and getattr(g, "gi_frame", None) is not None:
            for name, value in g.gi_frame.f_locals.items():
                if isinstance(value, Source) or any(value is r for r in self.rows):
                    self.seen.append(f"{g.gi_code.co_qualname} holds {name!r} at a {stage} stage")
            g = g.gi_yieldfrom


def _planner_fits():
    """Every registered method that plans a table fit (``table_planner``), each at fast settings, the image
    releases of the kernel methods (dp-randconv's subsampled one too) and DP-KIP's runs (its DP-SGD steps)."""
    from mmdsynth.methods import METHODS

    fast = {"dp-merf": dict(iterations=2, n_features=50), "dp-hp": dict(iterations=2), "dp-ntk": dict(iterations=2),
            "mst": dict(iters=20), "aim": dict(iters=10, rounds=12), "hybrid": dict(iters=20, n_features=50, pool=1,
                                                                                  steps=2)}
    cases = [("table", name, fast.get(name)) for name, cls in sorted(METHODS.items())
             if hasattr(cls, "table_planner") and "table" in cls.data_kinds]
    kip = dict(images_per_class=1, epochs=1, batch_size=50)
    cases += [("images", "dp-ntk", dict(iterations=2)), ("images", "dp-randconv", dict(n_networks=4, iterations=2)),
              ("images", "dp-randconv", dict(n_networks=4, iterations=2, sample_rate=0.5)), ("images", "dp-kip", kip),
              ("table", "dp-kip", kip)]
    return cases


@pytest.mark.parametrize("kind,name,params", _planner_fits(), ids=lambda v: v if isinstance(v, str) else
                         ",".join(f"{k}={x}" for k, x in v.items() if k == "sample_rate"))
def test_a_planner_never_holds_the_rows(kind, name, params, monkeypatch, digits):
    """Issue 82's protocol, run: a fit hands its rows to ``run_plan`` alone; its planner, every frame of it, at every
    stage it yields, holds no Source and no object the rows were given as (the DataFrame, the arrays, the checked
    frame the run makes, DP-KIP's records in the kernel's space). A new method's planner joins by registering."""
    import mmdsynth
    from mmdsynth.engines import InMemory
    from mmdsynth.privacy.engine import PrivacyEngine

    from support import SCHEMA, toy_table

    assert params is not None, f"give {name} fast settings here: it plans table fits this contract must check"
    from mmdsynth.statistics.gradients import KernelRecords

    rows, seen, runs = [], [], []
    real_run, real_checked, real_of = PrivacyEngine.run, InMemory.checked_with, KernelRecords.of

    def of(self, source):
        out = real_of(self, source)
        rows.extend(out)
        return out
    monkeypatch.setattr(KernelRecords, "of", of)

    def run(self, source, planner, **kwargs):
        runs.append(source)
        rows.append(getattr(source, "data", None))
        return real_run(self, source, _Watched(planner, rows, seen), **kwargs)

    def checked_with(self, encoder):
        out = real_checked(self, encoder)
        rows.append(getattr(out, "data", None))
        return out
    monkeypatch.setattr(PrivacyEngine, "run", run)
    monkeypatch.setattr(InMemory, "checked_with", checked_with)
    if kind == "table":
        df = toy_table(300)
        rows.append(df)
        mmdsynth.fit(df, label="y", schema=SCHEMA, epsilon=1.0, method=name, noise_seed=0, **params)
    else:
        X, y = digits.x_train[:200].numpy(), digits.y_train[:200].numpy()
        rows += [X, y]
        mmdsynth.fit(X, y, method=name, epsilon=10.0, n_classes=10, noise_seed=0, **params)
    assert runs, "the fit ran no planner"
    assert not seen, seen
