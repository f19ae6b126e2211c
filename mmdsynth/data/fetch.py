"""Finding dataset files on disk, and downloading them with sha256 checks.

Search order for a dataset ``name`` (first folder holding every needed file wins):

1. the folder passed explicitly (``data_dir``), as ``data_dir/name`` then ``data_dir``;
2. each folder in ``$MMDSYNTH_DATA_DIR`` (``os.pathsep``-separated), same two forms;
3. the Debian package location, where one exists (Fashion-MNIST);
4. the user cache ``$MMDSYNTH_CACHE_DIR`` or ``$XDG_CACHE_HOME/mmdsynth`` or
   ``~/.cache/mmdsynth``, as ``cache/name``.

If none has the files and downloading is allowed (``download=True``, or unset
and ``$MMDSYNTH_OFFLINE`` is not ``1``), each file is fetched from its canonical
URL into the cache and its sha256 compared with the published value. A file
whose canonical checksum is unknown is not trusted unless
``$MMDSYNTH_ALLOW_UNVERIFIED=1``. Otherwise :class:`DatasetNotFoundError` names
every folder searched and every file needed.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .._io import sha256_file
from ..errors import DatasetNotFoundError

DEBIAN_DIRS = {"fashion-mnist": Path("/usr/share/datasets/fashion-mnist")}


@dataclass(frozen=True)
class RemoteFile:
    """A file a dataset needs: its name on disk, canonical URL and sha256."""

    name: str
    url: str | None = None
    sha256: str | None = None


def cache_dir() -> Path:
    if os.environ.get("MMDSYNTH_CACHE_DIR"):
        return Path(os.environ["MMDSYNTH_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mmdsynth"


def search_dirs(name: str, data_dir=None) -> list[Path]:
    dirs: list[Path] = []
    roots = [Path(data_dir)] if data_dir is not None else []
    roots += [Path(p) for p in os.environ.get("MMDSYNTH_DATA_DIR", "").split(os.pathsep) if p]
    for root in roots:
        dirs += [root / name, root]
    if name in DEBIAN_DIRS:
        dirs.append(DEBIAN_DIRS[name])
    dirs.append(cache_dir() / name)
    seen, unique = set(), []
    for d in dirs:
        key = str(d.expanduser().resolve()) if d.exists() else str(d)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


def _download(f: RemoteFile, dest_dir: Path) -> Path:
    if f.url is None:
        raise OSError(f"{f.name} has no public download URL; place it in one of the folders above")
    if f.sha256 is None and os.environ.get("MMDSYNTH_ALLOW_UNVERIFIED") != "1":
        raise OSError(
            f"the canonical sha256 of {f.name} is not known to mmdsynth, so a download could not be "
            f"verified; download {f.url} yourself, or set MMDSYNTH_ALLOW_UNVERIFIED=1"
        )
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=f".{f.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(f.url, timeout=60) as resp:
            shutil.copyfileobj(resp, out)
        if f.sha256 is not None:
            got = sha256_file(Path(tmp))
            if got != f.sha256:
                raise OSError(f"sha256 mismatch for {f.url}: expected {f.sha256}, got {got}")
        final = dest_dir / f.name
        os.replace(tmp, final)
        return final
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _download_allowed(download: bool | None) -> bool:
    if download is not None:
        return download
    return os.environ.get("MMDSYNTH_OFFLINE", "") not in ("1", "true", "yes")


def locate(name: str, alternatives: list[list[RemoteFile]], data_dir=None,
           download: bool | None = None) -> tuple[int, dict[str, Path]]:
    """Find one complete set of files; return (index of the set, name -> path).

    ``alternatives`` lists interchangeable file sets in order of preference
    (e.g. CIFAR-10 as the official binary archive or as a JPEG export).
    """
    dirs = search_dirs(name, data_dir)
    for d in dirs:
        for i, files in enumerate(alternatives):
            paths = {f.name: d / f.name for f in files}
            if all(p.is_file() for p in paths.values()):
                return i, paths
    failure = "downloading is off (download=False or MMDSYNTH_OFFLINE=1)"
    if _download_allowed(download):
        files = alternatives[0]
        target = cache_dir() / name
        try:
            paths = {}
            for f in files:
                existing = target / f.name
                paths[f.name] = existing if existing.is_file() else _download(f, target)
            return 0, paths
        except OSError as exc:  # URLError is an OSError
            failure = f"download failed: {exc}"
    needed = " or ".join("[" + ", ".join(f.name for f in files) + "]" for files in alternatives)
    searched = "\n".join(f"  - {d}" for d in dirs)
    raise DatasetNotFoundError(
        f"dataset {name!r} not found. Needed files: {needed}.\nSearched:\n{searched}\n"
        f"{failure}.\nFix: put the files in one of these folders, pass data_dir=..., or set "
        f"MMDSYNTH_DATA_DIR to a folder holding a '{name}/' subfolder."
    )
