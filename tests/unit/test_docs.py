"""The documentation (issue 35): the site builds with `mkdocs build --strict`, and every code block in it and in the
README runs as written.

Python blocks of a page run in order in one namespace; bash and console blocks run in the same working folder (lines
starting with ``$ ``, and the lines their ``\\`` continues, are the commands of a block that shows its output, as a
``console`` block does; other blocks are all commands). A block preceded by ``<!-- illustrative: REASON -->`` is
shown, not run (it needs a dataset, a cluster or minutes); the reason must be given. ``json`` blocks must parse unless
they are marked fragments (``<!-- fragment -->``); ``text`` blocks are output. A block preceded by
``<!-- file: NAME -->`` is a file the reader writes (a schema, a config): it is written to NAME in the working folder,
so the commands after it read exactly what the page shows.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import run_cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md"] + sorted(p for p in DOCS.rglob("*.md"))
RUN = {"python", "bash", "console"}          # console: a shell session, ``$ `` commands and their output
KNOWN = RUN | {"json", "text"}
FENCE = re.compile(r"^```(\S*)\s*$")


def blocks(path: Path):
    """(line, language, code, marker) for every fenced block; ``marker``: the HTML comment just above, if any."""
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            above = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            marker = above if above.startswith("<!--") else ""
            yield i + 1, m.group(1), "\n".join(lines[i + 1:j]), marker
            i = j
        i += 1


def commands(code: str) -> list[str]:
    """A bash block's commands: the ``$ `` lines if it shows output (with the lines a ``\\`` continues), else every
    line; ``\\`` joins lines."""
    lines = code.split("\n")
    if any(line.startswith("$ ") for line in lines):
        kept, going_on = [], False
        for line in lines:
            if line.startswith("$ ") or going_on:
                kept.append(line[2:] if line.startswith("$ ") else line)
                going_on = line.rstrip().endswith("\\")
        lines = kept
    out, current = [], ""
    for line in lines:
        current += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            if current.strip() and not current.strip().startswith("#"):
                out.append(current.strip())
            current = ""
    return out


def run_command(cmd: str, env: dict, where: str, capsys) -> None:
    """A plain ``mmdsynth ...`` line runs in this process (no second torch import); anything else in bash."""
    words = shlex.split(cmd, comments=True)
    if words and words[0] == "mmdsynth" and not set(cmd) & set("|&;<>$`"):
        code, _, err = run_cli(capsys, *words[1:])
        assert code == 0, f"{where}: `{cmd}` exited {code}:\n{err[-2000:]}"
        return
    res = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{where}: `{cmd}` exited {res.returncode}:\n{res.stderr[-2000:]}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_block_runs(page, tmp_path, monkeypatch, capsys):
    from mmdsynth.features import FEATURE_MAPS
    from mmdsynth.methods import METHODS

    if os.environ.get("MMDSYNTH_DATA_DIR"):               # a relative path would break in the page's folder
        monkeypatch.setenv("MMDSYNTH_DATA_DIR", str(Path(os.environ["MMDSYNTH_DATA_DIR"]).resolve()))
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    registries = [(reg, dict(reg)) for reg in (METHODS, FEATURE_MAPS)]
    namespace: dict = {"__name__": "__docs__"}
    try:
        for line, lang, code, marker in blocks(page):
            where = f"{page.relative_to(ROOT)}:{line}"
            assert lang in KNOWN, f"{where}: a code block needs a language among {sorted(KNOWN)}; got {lang!r}"
            if marker.startswith("<!-- illustrative"):
                assert re.match(r"<!-- illustrative: \S.+ -->", marker), f"{where}: say why it is illustrative"
                continue
            if marker.startswith("<!-- file:"):
                name = re.match(r"<!-- file: ([\w.-]+) -->", marker)
                assert name, f"{where}: a file marker reads <!-- file: NAME -->"
                (tmp_path / name.group(1)).write_text(code + "\n")
            if lang == "json" and marker != "<!-- fragment -->":
                json.loads(code)
            elif lang == "python":
                exec(compile(code, where, "exec"), namespace)
            elif lang in ("bash", "console"):
                for cmd in commands(code):
                    run_command(cmd, env, where, capsys)
    finally:
        for reg, before in registries:
            reg.clear()
            reg.update(before)


def test_site_builds_strictly(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    assert mkdocs, "mkdocs is a test dependency (pip install -e '.[test]')"
    # not -q: it silences the warnings strict mode counts (a dead link passed with it, issue 83)
    res = subprocess.run([mkdocs, "build", "--strict", "-d", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    for command in ("mmdsynth fit", "mmdsynth distill", "mmdsynth evaluate", "--images-per-class", "--ntk-width"):
        assert command in cli, command                     # the reference is generated from the parsers
    # its help text wraps inside the box instead of being cut off at the edge (issue 46)
    assert cli.count('class="cli-help') >= 10 and "stylesheets/extra.css" in cli
    css = (tmp_path / "site" / "stylesheets" / "extra.css").read_text()
    assert re.search(r"\.cli-help pre > code \{[^}]*white-space: pre-wrap", css)
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "distill_release" in api and "DPNTK" in api and "KernelGeneratorMethod" in api


def test_readme_is_short_and_links_the_site():
    text = (ROOT / "README.md").read_text()
    assert len(text.split("\n")) < 150
    assert "../shared" not in text                          # a clone does not have it
    assert "make demo" in text and "make test" in text and "docs/" in text


def test_docs_give_methods_only_their_own_parameters():
    """Every method call and `mmdsynth fit --method M` command on a page, illustrative ones included (they are not
    run), passes only parameters the method takes: ``param_names()`` is the truth, since each method's signature
    lists its own options (issue 46: a tutorial said DP-NTK and DP-MERF take ``early_stopping=``)."""
    import ast

    from mmdsynth.cli import add_method_options, build_parser
    from mmdsynth.cli import fit as fit_command
    from mmdsynth.errors import InvalidParameterError
    from mmdsynth.methods import METHODS

    by_class = {cls.__name__: set(cls.param_names()) for cls in METHODS.values()}
    wrong, checked = [], 0
    for page in PAGES:
        for line, lang, code, _ in blocks(page):
            where = f"{page.relative_to(ROOT)}:{line}"
            if lang == "python":
                try:
                    tree = ast.parse(code)
                except SyntaxError:
                    continue
                for node in ast.walk(tree):
                    if not isinstance(node, ast.Call):
                        continue
                    name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    if name in by_class:
                        checked += 1
                        wrong += [f"{where}: {name} takes no {k.arg}=" for k in node.keywords
                                  if k.arg is not None and k.arg not in by_class[name]]
            elif lang in ("bash", "console"):
                for cmd in commands(code):
                    words = shlex.split(re.sub(r"[\[\]|]", " ", cmd), comments=True)   # [optional | alternative]
                    if words[:2] != ["mmdsynth", "fit"] or "--method" not in words:
                        continue
                    parser = build_parser()
                    add_method_options(parser.fit_parser)
                    for action in parser.fit_parser._actions:   # values as written: the files named need not exist
                        action.type = None
                    args = parser.parse_args(words[1:])
                    checked += 1
                    try:
                        fit_command._method_options(args, METHODS[args.method])
                    except InvalidParameterError as exc:
                        wrong.append(f"{where}: {exc}")
    assert checked > 10, checked
    assert not wrong, "\n".join(wrong)
