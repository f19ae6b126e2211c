"""One JSON line per benchmark run: printed and appended to the results file."""
import json
from pathlib import Path


def emit(row: dict, path) -> None:
    print(json.dumps(row), flush=True)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")
