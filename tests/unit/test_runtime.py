"""The C allocator's settings (mmdsynth.runtime.tune_allocator): freed batches' memory is kept for reuse."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import mmdsynth.cli as cli
from mmdsynth.runtime import ALLOCATOR_ENV, tune_allocator

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
