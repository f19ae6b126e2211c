"""Runtime helpers shared by training, evaluation and encoder pretraining: the compute device, the C
allocator's settings, the floating-point mode, progress-bar settings and the phases of a long fit. Nothing here
touches data."""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import sys
import time

logger = logging.getLogger(__name__)

#: glibc's mallopt parameters (malloc.h) and the values :func:`tune_allocator` sets
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20        # glibc's largest: blocks up to this size come from the heap and are reused
TRIM_THRESHOLD = 2**30             # free heap kept for reuse, up to this much, instead of being given back
#: set to "default" to leave the C allocator as it is
ALLOCATOR_ENV = "MMDSYNTH_MALLOC"
#: set to "keep" to leave subnormal floats as they are (see :func:`flush_subnormals`)
SUBNORMALS_ENV = "MMDSYNTH_SUBNORMALS"
#: glibc's x86-64 ``fenv_t``: 28 bytes of x87 state, then the SSE control/status register (MXCSR), whose bit 15
#: flushes subnormal results to zero and bit 6 reads subnormal inputs as zero
FENV_SIZE, MXCSR_OFFSET, MXCSR_FTZ, MXCSR_DAZ = 32, 28, 1 << 15, 1 << 6


def default_device(device: str | None = None) -> torch.device:
    """``device`` if given, else CUDA when a GPU is visible, else the CPU."""
    import torch                                # here: the CLI imports this module before it needs torch

    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def native_bfloat16(device) -> bool:
    """Whether ``device`` computes bfloat16 products in hardware: a CUDA GPU that torch says does, or a CPU with
    AVX512-BF16 or AMX instructions (torch's own checks). A public fact of the machine, never of the data. Elsewhere
    torch emulates bfloat16: the MNIST generator step measured 1.8x slower than float32 on an AVX-512 CPU without
    them (benchmarks/log/2026-11-28.md#bf16-option)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:                       # older torch: no emulation argument
            return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        checks = (getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
        return any(bool(check()) for check in checks if check is not None)
    return False


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


def mapped_zeros(shape: tuple, dtype) -> "np.ndarray":
    """A zeroed array in its own anonymous memory map, on the kernel's small pages: numpy advises transparent huge
    pages for every large array, and where the kernel compacts memory on a fault to find them (``defrag`` set to
    ``madvise``, as on this project's VM), the first write of a fresh large block waits for it. Measured here
    (``benchmarks/log/2026-11-29.md#small-pages``): the hybrid's 1 GB block of pool features took 2.1 s to write
    the first time in a process, 0.2 s the second, 0.4 s on small pages, and products over it run as fast. Freed
    with the array (the map is its base). Values are the same either way: only where the memory comes from."""
    import mmap

    import numpy as np

    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size == 0 or not hasattr(mmap, "MAP_PRIVATE"):         # Windows: no private anonymous maps
        return np.zeros(shape, dtype)
    block = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(block, dtype=dtype).reshape(shape)


def _sse_env():
    """(libm, its ``fenv_t`` as read now) on x86-64 Linux with glibc; None elsewhere."""
    if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
        return None
    try:
        libm = ctypes.CDLL("libm.so.6")
    except OSError:
        return None
    env = ctypes.create_string_buffer(FENV_SIZE)
    return (libm, env) if libm.fegetenv(env) == 0 else None


def _x86() -> bool:
    """torch's flush mode exists on x86 only (elsewhere ``torch.set_flush_denormal`` returns False)."""
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


def _mxcsr(env) -> int:
    return int.from_bytes(env.raw[MXCSR_OFFSET:MXCSR_OFFSET + 4], "little")


def subnormals_flushed() -> bool:
    """Whether the calling thread flushes subnormal floats to zero (a float32 product below 1.2e-38 comes out 0)."""
    sse = _sse_env()
    if sse is not None:
        return bool(_mxcsr(sse[1]) & MXCSR_FTZ)
    if not _x86():                               # no such mode here: no torch import to learn it
        return False
    import torch

    return float(torch.full((1,), 1e-20) * torch.full((1,), 1e-20)) == 0.0


def flush_subnormals(flush: bool = True) -> bool:
    """Flush subnormal floats to zero (and read them as zero) in the calling thread and in every thread it starts
    after: call it first thing, before any tensor operation starts torch's worker threads, which inherit the mode
    they are created in. On x86 CPUs an operation on a subnormal takes a slow path, and a generator that has trained
    a while produces them: full-MNIST DP-NTK ran at 1.2 s an iteration instead of 0.5 (benchmarks/RESULTS.md,
    "Speed"). ``mmdsynth`` commands call it at start (and turn it off again in the calling thread when they return,
    where they turned it on); Python users may call it once. Values below 1.2e-38 (float32) or 2.2e-308 (float64)
    become 0; the releases' worst-case-neighbour tests run in both modes (tests/contract/test_privacy_contract.py).
    Returns whether the mode took; does nothing (False) with ``MMDSYNTH_SUBNORMALS=keep`` or on a CPU without the
    mode. ``flush=False`` turns it off in the calling thread.

    On x86-64 Linux it sets the SSE control register's flush-to-zero and denormals-are-zero bits through the C
    library's ``fegetenv``/``fesetenv`` (no torch import: the CLI answers ``--help`` and flag errors without it);
    on other x86 systems through ``torch.set_flush_denormal``; off x86 there is no such mode (False, no import)."""
    if flush and os.environ.get(SUBNORMALS_ENV, "").strip().lower() == "keep":
        return False
    sse = _sse_env()
    if sse is not None:
        libm, env = sse
        bits = MXCSR_FTZ | MXCSR_DAZ
        mxcsr = _mxcsr(env) | bits if flush else _mxcsr(env) & ~bits
        env[MXCSR_OFFSET:MXCSR_OFFSET + 4] = mxcsr.to_bytes(4, "little")
        return libm.fesetenv(env) == 0
    if not _x86():
        return False
    import torch

    return bool(torch.set_flush_denormal(flush))


def progress_rate() -> dict:
    """tqdm settings: live on a terminal; when stderr is a file or pipe (logs, CI), one line a minute."""
    return {} if sys.stderr.isatty() else {"mininterval": 60.0, "maxinterval": 600.0}


def phases_shown(progress) -> bool:
    """Whether a fit's phases are shown as they run: progress on (``progress``; None: someone can see it) and stderr
    a terminal. Off a terminal (a log, a pipe, CI) the phases are logged only, so a refusal stays one line there."""
    return progress is not False and bool(getattr(sys.stderr, "isatty", lambda: False)())


@contextlib.contextmanager
def phase(what: str, progress=None):
    """One phase of a long fit (reading, measuring, estimating, sampling the pool, reweighting): ``what ...`` on stderr
    when it starts and its seconds when it ends, on a terminal (:func:`phases_shown`); logged always. Says nothing
    about the data (the phase's name and its time only)."""
    shown = phases_shown(progress)
    if shown:
        print(f"{what} ...", end="", file=sys.stderr, flush=True)
    start = time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    finally:
        seconds = time.perf_counter() - start
        logger.info("%s: %.1f s", what, seconds)
        if shown:
            print(f" {seconds:.1f} s" if ok else " stopped", file=sys.stderr, flush=True)
