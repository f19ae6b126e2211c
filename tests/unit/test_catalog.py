"""The methods' catalog (`mmdsynth/cli/_methods.py`): what `fit` checks and shows before torch is imported."""
import subprocess
import sys

import pytest

from mmdsynth.cli import _catalog
from mmdsynth.cli.fit import _generated_help, add_method_options


def test_catalog_matches_the_method_classes():
    """Fails when a method's signature, defaults, kinds or help change without `python -m mmdsynth.cli._catalog`."""
    assert _catalog.GENERATED.read_text() == _catalog.render(_catalog.build()), \
        "mmdsynth/cli/_methods.py is stale: run `python -m mmdsynth.cli._catalog` and commit it"


def test_catalog_answers_as_the_classes_do():
    from mmdsynth.methods import METHODS

    infos = _catalog.methods()
    assert list(infos) == list(METHODS)
    for name, cls in METHODS.items():
        info = infos[name]
        assert info.param_names() == cls.param_names()
        assert info.per_kind_params() == cls.per_kind_params()
        assert info.data_kinds == cls.data_kinds and info.releases_once == cls.releases_once
        for kind in cls.data_kinds:
            assert info.defaults_for(kind) == cls.defaults_for(kind)


PROBE = """
import sys
from mmdsynth.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print("torch" in sys.modules, "mmdsynth.methods" in sys.modules)
"""


@pytest.mark.parametrize("argv", [["fit", "--help"], ["fit", "--method", "dp-kip", "--help"],
                                  ["fit", "--method", "dp-merf", "--conditional", "maybe"],
                                  ["fit", "--method", "dp-merf", "--n-networks", "4", "--out", "x"],
                                  ["fit", "--method", "no-such-method", "--out", "x"]])
def test_fit_checks_its_flags_and_helps_without_torch(argv):
    """`fit --help` and a wrong flag are answered before torch is imported (the import took 3-7 s)."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "False False", (out.stdout[-500:], out.stderr[-500:])


def test_every_generated_flag_says_what_it_does():
    """A generated flag's help is a description and its default, never just the parameter's name."""
    import argparse

    from mmdsynth.cli import build_parser

    for name, info in _catalog.methods().items():
        parser = build_parser().fit_parser
        add_method_options(parser, method=name)
        generated = [a for a in parser._action_groups[-1]._group_actions]
        assert generated, name
        for action in generated:
            if action.help == argparse.SUPPRESS:
                continue
            param = action.dest
            assert param in info.param_descriptions(), f"{name}: --{param} has no param_help"
            assert action.help == _generated_help(info, param)
            assert len(action.help) > len(param) + 10


@pytest.mark.parametrize("method", [None, *_catalog.methods()])
def test_fit_help_fits_an_80_column_terminal(method, monkeypatch, capsys):
    """Every line of `fit [--method M] --help` within 80 columns; a long example command continues with a
    backslash (it still pastes into a shell)."""
    from mmdsynth.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main(["fit", *(["--method", method] if method else []), "--help"])
    text = capsys.readouterr().out
    long = [line for line in text.splitlines() if len(line) > 80]
    assert not long, long
    assert "examples:" in text and "mmdsynth fit --method" in text
    commands = text.split("examples:")[1]
    for block in commands.split("\n  mmdsynth")[1:]:
        lines = block.split("#")[0].rstrip().splitlines()
        assert all(line.endswith(" \\") for line in lines[:-1]), block
