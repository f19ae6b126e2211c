"""Small file helpers shared by loaders and artifacts."""
from __future__ import annotations

import hashlib
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path

#: key under which a JSON artifact records the sha256 of the rest of its content
SEAL = "sha256"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def json_digest(meta: dict) -> str:
    """sha256 of ``meta`` without its seal, as canonical JSON (sorted keys, no spaces)."""
    body = {k: v for k, v in meta.items() if k != SEAL}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sealed(meta: dict) -> dict:
    """``meta`` with its own digest under :data:`SEAL` (see :func:`read_sealed_json`)."""
    return {**meta, SEAL: json_digest(meta)}


def read_json(path: Path, what: str, error=None):
    """The JSON content of ``path``; ``error`` (default ArtifactError) naming the file and ``what`` it
    should hold if it is missing, unreadable or not valid JSON (e.g. truncated)."""
    from .errors import ArtifactError

    error = error or ArtifactError
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise error(f"{what} {path} does not exist.") from exc
    except OSError as exc:
        raise error(f"cannot read the {what} {path}: {exc}") from exc
    except ValueError as exc:
        raise error(f"{what} {path} is not valid JSON (truncated or corrupt?): {exc}") from exc


def read_sealed_json(path: Path, what: str) -> dict:
    """Read a JSON artifact written with :func:`sealed`, refusing (ArtifactError naming the file) one
    that is unreadable, truncated or whose content no longer matches its recorded digest. Files
    written before seals existed (no digest) are read as they are. The seal detects corruption and
    accidental edits; it is not a signature (whoever can write the file can recompute it)."""
    from .errors import ArtifactError

    path = Path(path)
    meta = read_json(path, what)
    if not isinstance(meta, dict):
        raise ArtifactError(f"{path} is not an mmdsynth {what} (a JSON object was expected).")
    if SEAL in meta and meta[SEAL] != json_digest(meta):
        raise ArtifactError(f"{path} was modified or is corrupt: its content does not match the sha256 it "
                            f"records. Restore it from where it came from (or refit).")
    return meta


def check_file_digest(path: Path, expected: str, what: str) -> None:
    """ArtifactError naming ``path`` if it is missing or its sha256 is not ``expected``."""
    from .errors import ArtifactError

    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path} is missing: the {what} is incomplete.")
    digest = sha256_file(path)
    if digest != expected:
        raise ArtifactError(f"{path} does not match the sha256 recorded for it (file {digest[:12]}..., recorded "
                            f"{str(expected)[:12]}...): the {what} is corrupt, was modified, or a save was "
                            f"interrupted.")


@contextmanager
def atomic_write(path):
    """Yield a hidden temporary path beside ``path``; on success it replaces ``path``,
    on error it is removed, so a failed write leaves no half-written file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _versions(tensor_path: Path) -> list[Path]:
    """The tensor files of a checkpoint, legacy name included (``NAME.safetensors`` and the
    digest-named ``NAME.<digest>.safetensors`` of :func:`save_checkpoint`)."""
    tensor_path = Path(tensor_path)
    stem, suffix = re.escape(tensor_path.stem), re.escape(tensor_path.suffix)
    name = re.compile(rf"{stem}(\.[0-9a-f]{{16}})?{suffix}")
    return [p for p in tensor_path.parent.iterdir() if name.fullmatch(p.name)]


def save_checkpoint(tensor_path: Path, meta_path: Path, tensors: dict, meta: dict, optimizer,
                    prefix: str = "opt.") -> None:
    """Write a resumable training state: ``tensors`` plus the optimiser's state under keys
    ``prefix``IDX.NAME (safetensors), then ``meta`` plus its param groups (JSON, written last:
    its presence names the step done).

    Crash-consistent: the tensors go to a new file named by their digest
    (``checkpoint.<16 hex>.safetensors`` for ``checkpoint.safetensors``), the meta file (sealed, naming
    that file and its sha256) replaces the previous one atomically, and only then are older tensor
    files removed. A kill at any point leaves the previous checkpoint or the new one, whole."""
    from safetensors.torch import save_file

    tensor_path, meta_path = Path(tensor_path), Path(meta_path)
    opt_tensors, param_groups = optimizer_tensors(optimizer, prefix)
    tmp = tensor_path.with_name(f".{tensor_path.name}.tmp")
    try:
        save_file({**tensors, **opt_tensors}, str(tmp))
        digest = sha256_file(tmp)
        named = tensor_path.with_name(f"{tensor_path.stem}.{digest[:16]}{tensor_path.suffix}")
        os.replace(tmp, named)
    finally:
        if tmp.exists():
            tmp.unlink()
    with atomic_write(meta_path) as tmp_meta:
        tmp_meta.write_text(json.dumps(sealed({**meta, "param_groups": param_groups, "tensors_file": named.name,
                                               "tensors_sha256": digest})))
    for old in _versions(tensor_path):
        if old != named:
            old.unlink(missing_ok=True)


def remove_checkpoint(tensor_path: Path, meta_path: Path) -> None:
    """Delete a checkpoint written by :func:`save_checkpoint` (meta first: no half checkpoint is left)."""
    Path(meta_path).unlink(missing_ok=True)
    for path in _versions(tensor_path):
        path.unlink(missing_ok=True)


def optimizer_tensors(optimizer, prefix: str) -> tuple[dict, list]:
    """(the optimiser's state as tensors under keys ``prefix``IDX.NAME, its param groups for JSON):
    what :func:`restore_optimizer` reads back."""
    import torch

    state = optimizer.state_dict()
    tensors = {f"{prefix}{idx}.{key}": torch.as_tensor(value).detach().cpu().contiguous()
               for idx, st in state["state"].items() for key, value in st.items()}
    return tensors, state["param_groups"]


def load_checkpoint(tensor_path: Path, meta_path: Path, what: str) -> tuple[dict, dict]:
    """(tensors, meta) of :func:`save_checkpoint`; ArtifactError naming the file if unreadable, or if
    the tensors are not the ones the meta file recorded (an interrupted save)."""
    from safetensors.torch import load_file

    from .errors import ArtifactError

    fix = f" Delete {meta_path} to restart this training from its start (a saved release is reused: no privacy is spent)."
    try:
        meta = read_sealed_json(meta_path, f"{what} checkpoint")
        tensor_path = Path(meta_path).parent / meta.get("tensors_file", Path(tensor_path).name)
        if "tensors_sha256" in meta:
            check_file_digest(tensor_path, meta["tensors_sha256"], f"{what} checkpoint")
        return load_file(str(tensor_path)), meta
    except ArtifactError as exc:
        raise ArtifactError(f"{exc}{fix}") from exc
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"cannot read the {what} checkpoint {tensor_path}: {exc}.{fix}") from exc


def restore_optimizer(optimizer, tensors: dict, meta: dict, prefix: str = "opt.") -> None:
    """Load the optimiser state written by :func:`save_checkpoint` (moved to the parameters'
    device by ``load_state_dict``)."""
    state = {}
    for key, value in tensors.items():
        if key.startswith(prefix):
            idx, name = key[len(prefix):].split(".", 1)
            state.setdefault(int(idx), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


#: the ledger written beside a file that is not a release (``STEM.ledger.json``: distilled table rows, a schema drafted
#: by `mmdsynth schema`); here, not in mmdsynth.data or .methods, so that `inspect` reads it without importing torch
LEDGER_SUFFIX = ".ledger.json"
#: the format tag of a drafted schema's ledger
SCHEMA_LEDGER_FORMAT = "mmdsynth-schema-ledger"
