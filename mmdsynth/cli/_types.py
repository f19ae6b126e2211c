"""argparse types shared by the commands: a value given is checked here, before anything is imported or read."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number >= 1 (``--n 0`` is refused, never taken as the default)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a whole number >= 1; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number >= 1; got {text!r}")
    return value


def existing_path(text: str) -> str:
    """A file or folder that exists (checked before the command imports anything heavy)."""
    from pathlib import Path

    if not Path(text).exists():
        raise argparse.ArgumentTypeError(f"no file or folder {text!r}; give the folder `mmdsynth fit` wrote (--out)")
    return text


def existing_file(what: str):
    """An argparse type: a file that exists, refused naming ``what`` it should be (before anything is imported)."""
    def check(text: str) -> str:
        from pathlib import Path

        if not Path(text).is_file():
            found = "a folder" if Path(text).is_dir() else "no file"
            raise argparse.ArgumentTypeError(f"{found} at {text!r}; give {what}")
        return text
    check.__name__ = "file"
    return check
