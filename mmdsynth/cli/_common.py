"""Helpers shared by the commands."""
from __future__ import annotations

import argparse
from pathlib import Path


def _floats(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like 1,1,10; got {text!r}")


def release_folder(path) -> Path:
    """The release folder ``path`` names: a release folder, its release.json, or a model folder holding release/
    (``Release.load`` says so when there is none)."""
    from ..release import META_FILE

    path = Path(path)
    if path.is_file() and path.name == META_FILE:
        return path.parent
    if not (path / META_FILE).exists() and (path / "release" / META_FILE).exists():
        return path / "release"
    return path
