"""The C allocator's settings (mmdsynth.runtime.tune_allocator): freed batches' memory is kept for reuse; and the
floating-point mode (mmdsynth.runtime.flush_subnormals): subnormal floats flushed to zero in every thread."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import mmdsynth.cli as cli
from mmdsynth.runtime import ALLOCATOR_ENV, SUBNORMALS_ENV, flush_subnormals, subnormals_flushed, tune_allocator

#: a fresh process: allocate a 16 MiB tensor and report where glibc put it (mallinfo2: hblkhd is the memory in
#: mmap'd blocks, uordblks the heap's blocks in use)
PROBE = """
import ctypes, json, sys
import torch
from mmdsynth.runtime import tune_allocator

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
took = tune_allocator() if sys.argv[1] == "tuned" else None
before = libc.mallinfo2()
x = torch.ones(4 * 2**20)          # 16 MiB
alive = libc.mallinfo2()
print(json.dumps({"took": took, "mmapped": alive.hblkhd - before.hblkhd, "heap": alive.uordblks - before.uordblks}))
"""

linux_glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                                 reason="mallopt is glibc's")


def _probe(mode: str, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


@linux_glibc
def test_tuned_allocator_serves_batches_from_the_heap():
    plain, tuned = _probe("plain"), _probe("tuned")
    assert plain["mmapped"] >= 16 * 2**20          # glibc's default: a fresh mapping per large block
    assert tuned["took"] is True
    assert tuned["mmapped"] < 16 * 2**20 <= tuned["heap"]   # from the heap, where a freed block is reused
    assert plain["heap"] < 16 * 2**20


@linux_glibc
def test_the_environment_variable_leaves_the_allocator_alone():
    got = _probe("tuned", {ALLOCATOR_ENV: "default"})
    assert got["took"] is False and got["mmapped"] >= 16 * 2**20


def test_the_command_tunes_the_allocator(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli, "tune_allocator", lambda: calls.append(1) or True)
    assert cli.main(["datasets"]) == 0
    assert calls == [1]


def test_tune_allocator_is_a_no_op_off_linux(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert tune_allocator() is False


#: a fresh process: flush (or not), then multiply 2^20 float32 values of 1e-20 (products 1e-40, below float32's
#: normal range) on two threads: the sum is 0 only if every thread flushed
FLUSH_PROBE = """
import json, sys
from mmdsynth.runtime import flush_subnormals, subnormals_flushed
took = flush_subnormals() if sys.argv[1] == "flush" else None
import torch
torch.set_num_threads(2)
x = torch.full((1 << 20,), 1e-20)
print(json.dumps({"took": took, "main": subnormals_flushed(), "all_threads": float((x * x).sum())}))
"""


def _flush_probe(mode: str, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", FLUSH_PROBE, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "2", **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


x86 = pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"), reason="the flush mode is x86's")


@x86
def test_flushing_reaches_the_worker_threads_started_after():
    kept, flushed = _flush_probe("plain"), _flush_probe("flush")
    assert kept["main"] is False and kept["all_threads"] > 0          # 2^20 x 1e-40, about 1e-34
    assert flushed["took"] is True and flushed["main"] is True
    assert flushed["all_threads"] == 0.0                              # no thread kept a subnormal product


@x86
def test_the_environment_variable_keeps_subnormals():
    got = _flush_probe("flush", {SUBNORMALS_ENV: "keep"})
    assert got["took"] is False and got["main"] is False and got["all_threads"] > 0


def test_the_command_flushes_subnormals_before_it_runs(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli, "subnormals_flushed", lambda: False)
    monkeypatch.setattr(cli, "flush_subnormals", lambda flush=True: calls.append(flush) or True)
    assert cli.main(["datasets"]) == 0
    assert calls == [True, False]           # on at the start, off again for an in-process caller


@x86
def test_an_in_process_command_gives_the_thread_its_mode_back(capsys):
    assert not subnormals_flushed()
    assert cli.main(["datasets"]) == 0
    assert not subnormals_flushed()
    import torch
    torch.set_flush_denormal(True)          # a caller that flushes already keeps flushing
    try:
        assert cli.main(["datasets"]) == 0 and subnormals_flushed()
    finally:
        torch.set_flush_denormal(False)


@x86
def test_flush_subnormals_in_this_thread_and_back():
    import torch
    tiny = torch.full((1,), 1e-20)
    try:
        assert flush_subnormals() is True and subnormals_flushed()
        assert float(tiny * tiny) == 0.0                 # torch sees the mode the control register says
    finally:
        assert flush_subnormals(False) is True
    assert not subnormals_flushed() and float(tiny * tiny) > 0


def test_off_x86_there_is_no_flush_mode_and_no_torch_call(monkeypatch):
    """On an ARM Mac (no SSE register, and torch's flush mode is x86's) both answer False without asking torch: the
    command's start stays free of a torch import there too."""
    import platform

    import torch
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    monkeypatch.setattr(torch, "set_flush_denormal", lambda *a: pytest.fail("torch asked off x86"))
    assert flush_subnormals() is False and subnormals_flushed() is False


def _vm_flags(address: int) -> set:
    """The kernel's VmFlags of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    with open("/proc/self/smaps") as fh:
        inside = False
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError("no mapping holds the address")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux's /proc")
def test_mapped_zeros_are_zeros_on_a_mapping_without_huge_page_advice():
    """``mapped_zeros`` (the hybrid's block of pool features): a writable zeroed array of the shape and dtype asked,
    on a private mapping of its own that numpy's transparent-huge-page advice ("hg") never reached, which lives as
    long as the array does."""
    import numpy as np

    from mmdsynth.runtime import mapped_zeros

    a = mapped_zeros((4096, 1024), np.float32)           # 16 MiB
    assert a.shape == (4096, 1024) and a.dtype == np.float32 and a.flags.writeable and not a.any()
    a[123, 45] = 2.5
    assert float(a.sum()) == 2.5
    flags = _vm_flags(a.ctypes.data + a.nbytes // 2)
    assert "hg" not in flags and "sh" not in flags         # private memory, never advised to huge pages
    plain = np.empty((4096, 1024), np.float32)
    # what numpy does to its own large arrays (their middle), where this numpy says it advises huge pages (a private
    # query: a numpy without it skips the comparison, not the test)
    advised = getattr(getattr(np, "_core", None) and np._core.multiarray, "_get_madvise_hugepage", None)
    if advised is not None and advised():
        assert "hg" in _vm_flags(plain.ctypes.data + plain.nbytes // 2)
    view = a[10:20]
    del a
    assert float(view.sum()) == 0.0                       # the map lives on with any view of it
    assert mapped_zeros((0, 3), np.float64).shape == (0, 3)
