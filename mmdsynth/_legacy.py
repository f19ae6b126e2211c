"""Files written before the rename. Until 0.2 this library was called ``dpsynth``, a name Google's DP tables library
already held; its releases, models, distilled sets and budget files still load, with one line saying where they
come from. The only place the old name lives in the code."""
from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

OLD_NAME = "dpsynth"
NAME = "mmdsynth"
_said: set[str] = set()


def current_tag(tag, path) -> str | None:
    """A file's format tag in today's name: ``dpsynth-release`` is read as ``mmdsynth-release`` (saying once, for
    ``path``, that the file was written by dpsynth 0.1); any other tag is returned as it is."""
    if isinstance(tag, str) and tag.startswith(OLD_NAME + "-"):
        written_by_old(path)
        return NAME + tag[len(OLD_NAME):]
    return tag


def written_by_old(path) -> None:
    """Say once per file that it was written by dpsynth 0.1 (this library before its rename)."""
    if str(path) not in _said:
        _said.add(str(path))
        logger.warning("%s was written by dpsynth 0.1 (this library's name before mmdsynth); read as it is.", path)
