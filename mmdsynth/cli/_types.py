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
