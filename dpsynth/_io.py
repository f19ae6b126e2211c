"""Small file helpers shared by loaders and artifacts."""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def save_checkpoint(tensor_path: Path, meta_path: Path, tensors: dict, meta: dict, optimizer,
                    prefix: str = "opt.") -> None:
    """Write a resumable training state: ``tensors`` plus the optimiser's state under keys
    ``prefix``IDX.NAME (safetensors), then ``meta`` plus its param groups (JSON, written last:
    its presence names the step done)."""
    import json

    from safetensors.torch import save_file

    opt_tensors, param_groups = optimizer_tensors(optimizer, prefix)
    with atomic_write(tensor_path) as tmp:
        save_file({**tensors, **opt_tensors}, str(tmp))
    with atomic_write(meta_path) as tmp:
        tmp.write_text(json.dumps({**meta, "param_groups": param_groups}))


def optimizer_tensors(optimizer, prefix: str) -> tuple[dict, list]:
    """(the optimiser's state as tensors under keys ``prefix``IDX.NAME, its param groups for JSON):
    what :func:`restore_optimizer` reads back."""
    import torch

    state = optimizer.state_dict()
    tensors = {f"{prefix}{idx}.{key}": torch.as_tensor(value).detach().cpu().contiguous()
               for idx, st in state["state"].items() for key, value in st.items()}
    return tensors, state["param_groups"]


def load_checkpoint(tensor_path: Path, meta_path: Path, what: str) -> tuple[dict, dict]:
    """(tensors, meta) of :func:`save_checkpoint`; ArtifactError naming ``what`` if unreadable."""
    import json

    from safetensors.torch import load_file

    from .errors import ArtifactError

    try:
        return load_file(str(tensor_path)), json.loads(Path(meta_path).read_text())
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"cannot read the {what} checkpoint {meta_path}: {exc}") from exc


def restore_optimizer(optimizer, tensors: dict, meta: dict, prefix: str = "opt.") -> None:
    """Load the optimiser state written by :func:`save_checkpoint` (moved to the parameters'
    device by ``load_state_dict``)."""
    state = {}
    for key, value in tensors.items():
        if key.startswith(prefix):
            idx, name = key[len(prefix):].split(".", 1)
            state.setdefault(int(idx), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
