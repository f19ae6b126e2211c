"""MkDocs hook: the command-line reference is generated from the parsers themselves, so it cannot go stale.

A page line ``<!-- cli-reference -->`` becomes one section per command with its ``--help`` text (for ``fit``
with the options every registered method adds)."""
from __future__ import annotations

import os

MARKER = "<!-- cli-reference -->"


def reference() -> str:
    os.environ["COLUMNS"] = "100"              # argparse wraps help at the terminal width
    from mmdsynth.cli import add_method_options, build_parser

    parser = build_parser()
    out = ["## mmdsynth", "", "```text", parser.format_help().rstrip(), "```", ""]
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, p in sub.choices.items():
        if name == "fit":
            add_method_options(p)
        out += [f"## mmdsynth {name}", "", "```text", p.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, reference()) if MARKER in markdown else markdown
