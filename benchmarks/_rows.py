"""One JSON line per benchmark run: printed and appended to the results file."""
import json
from pathlib import Path


def emit(row: dict, path) -> None:
    print(json.dumps(row), flush=True)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def add_set_option(parser) -> None:
    """``--set KEY=JSON ...``: any other constructor argument of the method."""
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=JSON",
                        help="any other constructor argument, e.g. n_product=50 beta1=0.5")


def set_overrides(parser, items) -> dict:
    """The ``--set`` pairs as a dict (values parsed as JSON)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set takes KEY=JSON pairs; got {item!r}")
        out[key] = json.loads(value)
    return out
