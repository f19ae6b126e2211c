"""MkDocs hook: the command-line reference is generated from the parsers themselves, so it cannot go stale.

A page line ``<!-- cli-reference -->`` becomes one section per command with its ``--help`` text, and for ``fit`` one
more per registered method with what ``mmdsynth fit --method M --help`` prints (that method's options). The help is
formatted for an 80-column terminal, which fits the page's code column on a laptop screen; the blocks carry the class
``cli-help``, which ``docs/stylesheets/extra.css`` wraps on narrower screens (a long ``usage:`` line or choice list),
so no line is cut off or needs a sideways scroll."""
from __future__ import annotations

import inspect
import os

MARKER = "<!-- cli-reference -->"
COLUMNS = 80                                   # argparse wraps help at the terminal width


def _block(title: str, text: str) -> list[str]:
    return [f"## {title}", "", "``` {.text .cli-help}", text.rstrip(), "```", ""]


def _parsers(method: str | None = None):
    """A fresh top-level parser and its commands, ``fit`` with its method options (``method``'s only, if given)."""
    from mmdsynth.cli import add_method_options, build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    if method is None:
        add_method_options(commands["fit"])
    else:
        add_method_options(commands["fit"], method=method)
    return parser, commands


def reference() -> str:
    from mmdsynth.cli import add_method_options
    from mmdsynth.methods import METHODS

    per_method = "method" in inspect.signature(add_method_options).parameters
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(COLUMNS)
    try:
        parser, commands = _parsers()
        out = _block("mmdsynth", parser.format_help())
        for name, command in commands.items():
            out += _block(f"mmdsynth {name}", command.format_help())
            if name == "fit" and per_method:
                for method in METHODS:
                    out += _block(f"mmdsynth fit --method {method}", _parsers(method)[1]["fit"].format_help())
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, reference()) if MARKER in markdown else markdown
