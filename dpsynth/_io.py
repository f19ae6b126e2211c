"""Small file helpers shared by loaders and artifacts."""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def atomic_write(path):
    """Yield a hidden temporary path beside ``path``; on success it replaces ``path``,
    on error it is removed, so a failed write leaves no half-written file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
