"""A release: the noisy output of a data-touching mechanism, saved before training.

On disk a release is two files in one folder:

* ``release.safetensors``: the noisy tensors (safetensors: no code runs on load);
* ``release.json``: feature-map spec, public dataset facts, the privacy ledger,
  the library version, the sha256 of the tensor file and of its own content (a truncated,
  corrupt or edited file is refused on load, naming the file).

``release.json`` is written last, so a folder without it holds no release.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING, NamedTuple

from ._io import check_file_digest, read_sealed_json, sealed, sha256_file
from ._legacy import current_tag
from ._version import __version__
from .errors import ArtifactError
from .privacy.ledger import Ledger

if TYPE_CHECKING:                       # torch is imported where tensors are read or written: `inspect` never does
    import torch

FORMAT = "mmdsynth-release"
FORMAT_VERSION = 1
TENSOR_FILE = "release.safetensors"
META_FILE = "release.json"


@dataclass
class Release:
    """Noisy tensors + everything needed to use them, and what they cost."""

    tensors: dict[str, torch.Tensor]
    feature_spec: dict
    dataset: dict
    ledger: Ledger
    extra: dict = field(default_factory=dict)

    def with_note(self, note: str) -> "Release":
        """This release with ``note`` added to every ledger entry (what a check established)."""
        entries = tuple(dataclasses.replace(e, notes=tuple(e.notes) + (note,)) for e in self.ledger.entries)
        return dataclasses.replace(self, ledger=Ledger(entries))

    def save(self, directory) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.tensors.items()}
        tmp_tensors = directory / f".{TENSOR_FILE}.tmp"
        tmp_meta = directory / f".{META_FILE}.tmp"
        try:
            save_file(tensors, str(tmp_tensors), metadata={"format": FORMAT})
            meta = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "library_version": __version__,
                "tensors_sha256": sha256_file(tmp_tensors),
                "feature_spec": self.feature_spec,
                "dataset": self.dataset,
                "ledger": self.ledger.to_list(),
                "extra": self.extra,
            }
            tmp_meta.write_text(json.dumps(sealed(meta), indent=2, sort_keys=True))
            os.replace(tmp_tensors, directory / TENSOR_FILE)
            os.replace(tmp_meta, directory / META_FILE)
        finally:
            for p in (tmp_tensors, tmp_meta):
                if p.exists():
                    p.unlink()
        return directory

    @classmethod
    def load(cls, directory, *, tensors: bool = True) -> "Release":
        """The release saved in ``directory`` (its digests checked). ``tensors=False``: each tensor as its
        :class:`TensorHeader` (name, shape, dtype from the file's header), without importing torch (`inspect`)."""
        directory = Path(directory)
        meta_path, tensor_path = directory / META_FILE, directory / TENSOR_FILE
        if not meta_path.exists() or not tensor_path.exists():
            raise ArtifactError(
                f"no release in {directory}: expected {META_FILE} and {TENSOR_FILE}. "
                f"Pass the folder that `mmdsynth fit` or Release.save wrote."
            )
        meta = read_sealed_json(meta_path, "release")
        if current_tag(meta.get("format"), meta_path) != FORMAT:
            raise ArtifactError(f"{meta_path} is not an mmdsynth release (format={meta.get('format')!r}).")
        if meta.get("format_version", 0) > FORMAT_VERSION:
            raise ArtifactError(
                f"{meta_path} has format version {meta['format_version']}, newer than this mmdsynth "
                f"({__version__}) reads ({FORMAT_VERSION}); upgrade mmdsynth."
            )
        check_file_digest(tensor_path, meta.get("tensors_sha256"), f"release recorded in {META_FILE}")
        return cls(
            tensors=load_file(str(tensor_path)) if tensors else tensor_headers(tensor_path),
            feature_spec=meta["feature_spec"],
            dataset=meta["dataset"],
            ledger=Ledger.from_list(meta["ledger"]),
            extra=meta.get("extra", {}),
        )


def save_file(tensors: dict, path: str, metadata: dict | None = None) -> None:
    """safetensors' writer (torch imported here, when a release is written)."""
    from safetensors.torch import save_file as write

    write(tensors, path, metadata=metadata)


def load_file(path: str) -> dict:
    """safetensors' reader (torch imported here, when a release's tensors are read)."""
    from safetensors.torch import load_file as read

    return read(path)


class TensorHeader(NamedTuple):
    """A saved tensor's shape and dtype, read from its safetensors file's header (no data, no torch)."""

    shape: tuple
    dtype: str


#: safetensors' dtype names, as torch writes them
_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
           "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def tensor_headers(path) -> dict[str, TensorHeader]:
    """{name: TensorHeader} of a safetensors file: its header is an 8-byte little-endian length, then JSON."""
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        if not 0 < size <= 100_000_000:
            raise ArtifactError(f"{path} is not a safetensors file (header length {size}).")
        try:
            header = json.loads(fh.read(size))
        except ValueError:
            raise ArtifactError(f"{path} has a corrupt header.") from None
    return {k: TensorHeader(tuple(v["shape"]), _DTYPES.get(v["dtype"], v["dtype"].lower()))
            for k, v in header.items() if k != "__metadata__"}


def release_pin(directory) -> dict:
    """The sha256 of a saved release's two files: what a model folder pins its release by."""
    directory = Path(directory)
    return {name: sha256_file(directory / name) for name in (META_FILE, TENSOR_FILE)}


def check_release_pin(directory, pin: dict | None, what: str) -> None:
    """ArtifactError if the release in ``directory`` is not the one ``pin`` names (a model trained
    on one release must never be reported with another's ledger). ``pin=None``: a model written
    before pins existed, accepted as it is."""
    if not pin:
        return
    directory = Path(directory)
    for name, digest in pin.items():
        path = directory / name
        actual = sha256_file(path) if path.exists() else "missing"
        if actual != digest:
            if name == META_FILE and path.exists():
                read_sealed_json(path, "release")    # a corrupt or edited file is named as such, not as "replaced"
            raise ArtifactError(
                f"the release in {directory} is not the one the {what} was trained on ({name}: "
                f"{actual[:12]}..., pinned {digest[:12]}...): it was replaced (e.g. by `mmdsynth demo` or "
                f"another fit into the same folder), so its ledger would mislabel this model's privacy. "
                f"Restore the original release, or fit again into a new folder.")
