"""The ``mmdsynth`` command: one module per command (``mmdsynth/cli/<command>.py``: ``add_parser`` and its
``cmd_*``). Importing this package, and ``mmdsynth --help``, load no torch: each command imports what it
needs when it runs, and ``fit`` generates its method options from the registered methods only when it is
the command given."""
from __future__ import annotations

import argparse
import logging
import re
import sys
import warnings

from .. import __version__
from ..errors import MmdsynthError, TrainingInterrupted
from ..runtime import flush_subnormals, subnormals_flushed, tune_allocator
from . import audit, budget, datasets, demo, distill, evaluate, fit, inspect, pretrain, report, sample, schema
from .fit import add_method_options, cmd_fit  # noqa: F401  (cmd_fit: re-exported for callers that parse first)

#: the commands in the order `mmdsynth --help` lists them
COMMANDS = (datasets, budget, inspect, schema, fit, sample, distill, pretrain, evaluate, report, audit, demo)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the message and where to read more, not the whole usage first."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="mmdsynth", description="Differentially private synthetic data from kernel mean embeddings "
                                "(DP-NTK, DP-MERF, DP-HP, DP-MEPF, DP-KIP, DP-RandConv), measured marginals (MST, AIM), and "
                                "for tables by default both in one plan (hybrid).")
    p.add_argument("--version", action="version", version=f"mmdsynth {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        s = command.add_parser(sub)
        if command is fit:
            p.fit_parser = s
    return p


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
    return re.sub(rf"^({names}) (must|is required)", lambda m: f"{CLI_FLAGS[m.group(1)]} {m.group(2)}", message)


class _LineFormatter(logging.Formatter):
    """Log records in the same one-line form as warnings and errors: ``mmdsynth: warning: ...``."""

    def format(self, record):
        return f"mmdsynth: {record.levelname.lower()}: {cli_message(record.getMessage())}"


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings on the command line: one line, no source."""
    print(f"mmdsynth: warning: {cli_message(str(message))}", file=sys.stderr if file is None else file)


#: exit status when the reader of stdout went away (``mmdsynth datasets | head -1``): 128 + SIGPIPE, what a shell
#: reports for a command the closed pipe killed (``yes | head -1``), as 130 is 128 + SIGINT for Ctrl-C
EXIT_PIPE_CLOSED = 141


def main(argv=None) -> int:
    """The ``mmdsynth`` command. Ctrl-C at any moment (even while torch is still being imported) ends it with one
    line and exit status 130. A reader that closes stdout early (``| head``) ends it quietly with status 141, as
    the closed pipe would end a Unix tool (no traceback, nothing on stderr): what was cut off was not wanted."""
    try:
        try:
            return _main(argv)
        finally:                # output still buffered (--help, a short table) fails here, not at interpreter exit
            sys.stdout.flush()
    except KeyboardInterrupt:
        print("mmdsynth: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """Point stdout at the null device, so that Python's own flush at exit does not fail a second time (the
    recipe of the Python docs, `signal`: "Note on SIGPIPE"), and give :data:`EXIT_PIPE_CLOSED`."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):      # not a real file (a test's capture): nothing to redirect
        pass
    return EXIT_PIPE_CLOSED


def _after_release(args) -> str:
    """What a Ctrl-C during `fit` leaves behind, once its release is on disk: the budget is spent, and how to go
    on without spending more."""
    from pathlib import Path

    out = getattr(args, "out", None)
    if args.command != "fit" or not out or not (Path(out) / "release" / "release.json").exists():
        return ""
    return (f" after the private release was written to {Path(out) / 'release'}: its privacy budget is spent. "
            f"Train from it without spending more: mmdsynth fit --resume --out {out}")


def _given_method(argv: list[str]) -> str | None:
    """The value of ``--method`` in ``argv`` (``--method M`` or ``--method=M``), before parsing: `fit --method M
    --help` shows M's options only."""
    for i, arg in enumerate(argv):
        if arg == "--method" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--method="):
            return arg.split("=", 1)[1]
    return None


def _main(argv=None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "fit" in argv[:3]:                        # fit's method options come from the registered methods
        add_method_options(parser.fit_parser, method=_given_method(argv))
    args = parser.parse_args(argv)
    tune_allocator()                             # freed batches' memory kept for reuse (mmdsynth.runtime)
    flushing = not subnormals_flushed() and flush_subnormals()   # before torch starts worker threads: they inherit it
    handler = logging.StreamHandler()
    handler.setFormatter(_LineFormatter())
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler], force=True)
    previous = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        return args.func(args)
    except TrainingInterrupted as exc:          # a KeyboardInterrupt too: before the general case
        where = f"; checkpoint saved in {exc.checkpoint_dir}. Resume with: mmdsynth fit --resume --out " \
                f"{exc.checkpoint_dir}" if exc.checkpoint_dir is not None else " (nothing saved)"
        print(f"mmdsynth: interrupted at iteration {exc.iteration}{where}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(f"mmdsynth: interrupted{_after_release(args)}", file=sys.stderr)
        return 130
    except MmdsynthError as exc:
        print(f"mmdsynth: error: {cli_message(str(exc))}", file=sys.stderr)
        return 2
    finally:
        warnings.showwarning = previous
        if flushing:                             # an in-process caller gets its thread's mode back
            flush_subnormals(False)
