"""Runtime helpers shared by training, evaluation and encoder pretraining: the compute device, the C
allocator's settings and progress-bar settings. Nothing here touches data."""
from __future__ import annotations

import ctypes
import os
import sys

#: glibc's mallopt parameters (malloc.h) and the values :func:`tune_allocator` sets
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20        # glibc's largest: blocks up to this size come from the heap and are reused
TRIM_THRESHOLD = 2**30             # free heap kept for reuse, up to this much, instead of being given back
#: set to "default" to leave the C allocator as it is
ALLOCATOR_ENV = "MMDSYNTH_MALLOC"


def default_device(device: str | None = None) -> torch.device:
    """``device`` if given, else CUDA when a GPU is visible, else the CPU."""
    import torch                                # here: the CLI imports this module before it needs torch

    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def tune_allocator() -> bool:
    """On Linux with glibc, keep freed working memory for reuse instead of returning it to the kernel after each
    batch (``mallopt``: blocks up to 32 MiB from the heap, up to 1 GiB of free heap kept). A convolutional feature
    map allocates and frees tens of MiB of activations per batch; by default glibc maps each such block fresh, and
    the kernel zeroes its pages again on every batch. Measured on this project's 2-core CPU
    (``benchmarks/RESULTS.md``, "Speed"): random-ConvNet features 1.7x faster, generator steps on them 1.5x, peak
    memory about the same. ``mmdsynth`` commands call it at start; Python users may call it once. Returns whether
    the settings took; does nothing (False) elsewhere or with ``MMDSYNTH_MALLOC=default``."""
    if os.environ.get(ALLOCATOR_ENV, "").strip().lower() == "default" or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):          # not glibc (musl has no mallopt): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1


def progress_rate() -> dict:
    """tqdm settings: live on a terminal; when stderr is a file or pipe (logs, CI), one line a minute."""
    return {} if sys.stderr.isatty() else {"mininterval": 60.0, "maxinterval": 600.0}
