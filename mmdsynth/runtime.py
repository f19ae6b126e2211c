"""Runtime helpers shared by training, evaluation and encoder pretraining: the compute device and
progress-bar settings. Nothing here touches data."""
from __future__ import annotations

import sys

import torch


def default_device(device: str | None = None) -> torch.device:
    """``device`` if given, else CUDA when a GPU is visible, else the CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def progress_rate() -> dict:
    """tqdm settings: live on a terminal; when stderr is a file or pipe (logs, CI), one line a minute."""
    return {} if sys.stderr.isatty() else {"mininterval": 60.0, "maxinterval": 600.0}
