"""Helpers shared by the commands."""
from __future__ import annotations

import argparse


def _floats(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like 1,1,10; got {text!r}")
