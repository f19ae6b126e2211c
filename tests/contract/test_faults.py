"""Faults (issue 15): kill -9 during fit and during save, truncated or edited artifacts, a full disk.

Whatever happens, a model folder is either the previous state, a resumable one, or refused on load
with a typed error naming the file: never a corrupt artifact that loads.
"""
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import mmdsynth
from mmdsynth import DPMERF
from mmdsynth.errors import ArtifactError
from mmdsynth.methods import base as base_module
from mmdsynth.release import Release

KW = dict(epsilon=1.0, n_classes=10, n_features=40, batch_size=50, noise_seed=0, checkpoint_every=2)


def _fit(digits, out, iterations=4, **kw):
    return DPMERF(**{**KW, "iterations": iterations, **kw}).fit(digits.x_train, digits.y_train, out=out)


def _resume(out, iterations):
    return DPMERF(**{**KW, "iterations": iterations}).fit(None, out=out, resume=True)


def _state(model):
    return {k: v.clone() for k, v in model.generator_.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- truncated and edited files ------------------------------------------------------------------
@pytest.mark.parametrize("name,damage", [
    ("release/release.safetensors", "truncate"), ("release/release.json", "truncate"),
    ("release/release.json", "edit"), ("generator.safetensors", "truncate"), ("generator.safetensors", "flip"),
    ("model.json", "truncate"), ("model.json", "edit"), ("model.json", "delete-file-entry")])
def test_damaged_artifacts_are_refused_naming_the_file(digits, tmp_path, name, damage):
    _fit(digits, tmp_path)
    mmdsynth.load(tmp_path)                                   # intact: loads
    path = tmp_path / name
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "edit":                                     # valid JSON, one number changed
        meta = json.loads(data)
        if "ledger" in meta:
            meta["ledger"][0]["epsilon"] = 0.1
        else:
            meta["params"]["epsilon"] = 0.1
        path.write_text(json.dumps(meta))
    else:                                                      # the file list no longer covers the weights
        meta = json.loads(data)
        meta["files"] = {}
        path.write_text(json.dumps(meta))
    with pytest.raises(ArtifactError) as info:
        mmdsynth.load(tmp_path)
    assert path.name in str(info.value)


def test_checkpoint_from_another_save_is_refused_with_the_fix(digits, tmp_path):
    _fit(digits, tmp_path / "a")
    _fit(digits, tmp_path / "b", iterations=6)
    # the tensors of one checkpoint beside the meta file of another: an interrupted checkpoint write
    (ours,), (theirs,) = ((tmp_path / d).glob("checkpoint.*.safetensors") for d in "ab")
    ours.write_bytes(theirs.read_bytes())
    with pytest.raises(ArtifactError, match=r"checkpoint\.[0-9a-f]{16}\.safetensors does not match.*Delete "
                                            r".*checkpoint.json"):
        _resume(tmp_path / "a", 8)


# -- kill -9 ---------------------------------------------------------------------------------
SCRIPT = textwrap.dedent("""
    import os, sys
    from mmdsynth import DPMERF
    from mmdsynth.data import load_dataset
    out, iterations, crash_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if crash_at:                          # die like kill -9 (no cleanup) at the crash_at-th file move
        real, calls = os.replace, [0]
        def replace(*a, **k):
            calls[0] += 1
            if calls[0] == crash_at:
                os._exit(137)
            return real(*a, **k)
        os.replace = replace
    kw = dict(epsilon=1.0, n_classes=10, n_features=40, batch_size=50, noise_seed=0, checkpoint_every=2,
              iterations=iterations)
    if os.path.exists(os.path.join(out, "release", "release.json")):
        DPMERF(**kw).fit(None, out=out, resume=True)
    else:
        d = load_dataset("digits")
        DPMERF(**kw).fit(d.x_train, d.y_train, out=out)
    print("moves", calls[0] if crash_at else 0)
""")


def _run(out, iterations, crash_at=0, **popen):
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), str(iterations), str(crash_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_kill_9_during_training_leaves_a_resumable_folder(tmp_path):
    out = tmp_path / "run"
    proc = _run(out, 100000)
    deadline = time.time() + 120
    while not (out / "checkpoint.json").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert (out / "checkpoint.json").exists(), proc.communicate()
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    release = (out / "release" / "release.safetensors").read_bytes()
    with pytest.raises(ArtifactError, match="resume=True"):
        mmdsynth.load(out)                                     # no model yet: says how to continue
    step = json.loads((out / "checkpoint.json").read_text())["iteration"]
    model = _resume(out, step + 2)                            # reads no data, spends nothing
    assert (out / "release" / "release.safetensors").read_bytes() == release
    assert len(mmdsynth.load(out).release_.ledger.entries) == len(model.release_.ledger.entries)


def test_kill_at_every_file_move_of_a_resumed_fit_never_leaves_a_loadable_mix(digits, tmp_path):
    base = tmp_path / "base"
    _fit(digits, base, iterations=2)
    before = _state(mmdsynth.load(base))
    count = tmp_path / "count"                              # an uninterrupted resume: its moves and result
    subprocess.run(["cp", "-r", str(base), str(count)], check=True)
    stdout, stderr = _run(count, 4, crash_at=10**6).communicate()
    moves = int(stdout.split()[-1])
    assert moves >= 4, stderr                               # checkpoint (2 files), generator, model.json
    after = _state(mmdsynth.load(count))
    assert not _same(before, after)
    for crash_at in range(1, moves + 1):
        out = tmp_path / f"crash{crash_at}"
        subprocess.run(["cp", "-r", str(base), str(out)], check=True)
        proc = _run(out, 4, crash_at)
        proc.communicate()
        assert proc.returncode == 137
        try:
            state = _state(mmdsynth.load(out))
            assert _same(state, before) or _same(state, after), crash_at   # the old model or the new one
        except ArtifactError as exc:
            assert "generator.safetensors" in str(exc) and "resume=True" in str(exc), crash_at
        assert _same(_state(_resume(out, 4)), after), crash_at             # and a resume finishes the job
        assert _same(_state(mmdsynth.load(out)), after), crash_at


# -- a full disk ------------------------------------------------------------------------------
def _full_disk_after(nbytes):
    def save_file(tensors, filename, metadata=None):
        with open(filename, "wb") as fh:
            fh.write(b"\0" * nbytes)
        raise OSError(errno.ENOSPC, "No space left on device", filename)
    return save_file


def test_full_disk_during_save_keeps_the_previous_model(digits, tmp_path, monkeypatch):
    _fit(digits, tmp_path, iterations=2)
    before = _state(mmdsynth.load(tmp_path))
    files = sorted(p.name for p in tmp_path.iterdir())
    more = DPMERF(**{**KW, "iterations": 2, "seed": 5}).fit(digits.x_train, digits.y_train)   # in memory
    monkeypatch.setattr(base_module, "save_file", _full_disk_after(100))
    with pytest.raises(OSError, match="No space left"):
        more.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == files              # nothing half-written left
    assert _same(_state(mmdsynth.load(tmp_path)), before) and not _same(_state(more), before)


def test_full_disk_during_release_save_leaves_no_release(digits, tmp_path, monkeypatch):
    import mmdsynth.release as release_module

    monkeypatch.setattr(release_module, "save_file", _full_disk_after(100))
    with pytest.raises(OSError, match="No space left"):
        _fit(digits, tmp_path / "run", iterations=2)
    left = sorted(p.name for p in (tmp_path / "run" / "release").iterdir())
    assert left == []
    with pytest.raises(ArtifactError, match="no release"):
        Release.load(tmp_path / "run" / "release")


@pytest.mark.parametrize("damage", ["weights", "spec"])
def test_damaged_encoder_is_refused_naming_the_file(tmp_path, damage):
    from mmdsynth.features.encoders import build_encoder, load_encoder, save_encoder

    path = save_encoder(build_encoder("vgg_small", 1, 10), {"arch": "vgg_small", "in_channels": 1, "n_classes": 10,
                                                             "dataset": "fashion-mnist"}, tmp_path / "enc.safetensors")
    load_encoder(path)
    if damage == "weights":
        data = path.read_bytes()
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        name = path.name
    else:
        spec_path = path.with_suffix(".json")
        spec = json.loads(spec_path.read_text())
        spec["dataset"] = "mnist"                       # claims another public dataset
        spec_path.write_text(json.dumps(spec))
        name = spec_path.name
    with pytest.raises(ArtifactError, match=name):
        load_encoder(path)
