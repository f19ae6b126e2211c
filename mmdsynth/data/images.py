"""Image datasets: MNIST, Fashion-MNIST, CIFAR-10 and scikit-learn's digits.

Every loader returns an :class:`ImageData`: ``x_*`` are float32 tensors of shape
``(N, C, H, W)`` with values in [0, 1]; ``y_*`` are int64 class indices; the
standard train/test split is kept.
"""
from __future__ import annotations

import gzip
import io
import re
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from typing import TYPE_CHECKING

if TYPE_CHECKING:              # torch is imported by the loaders: listing datasets (`mmdsynth datasets`) needs none
    import torch

from ..errors import ArtifactError
from .fetch import RemoteFile, locate


@dataclass
class ImageData:
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: list[str]

    kind = "image"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def n_classes(self) -> int:
        return len(self.classes)


def read_idx(path: Path) -> np.ndarray:
    """Parse an IDX file (optionally gzipped): the MNIST container format."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ArtifactError(f"{path} is not an IDX file (bad magic number).")
    dtype_code, ndim = data[2], data[3]
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if dtype_code not in dtypes:
        raise ArtifactError(f"{path}: unknown IDX data type 0x{dtype_code:02x}.")
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=dtypes[dtype_code], offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ArtifactError(f"{path}: IDX header says {dims} but holds {arr.size} values (truncated?).")
    return arr.reshape(dims)


_IDX_NAMES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
MNIST_FILES = [RemoteFile(n, f"https://storage.googleapis.com/cvdf-datasets/mnist/{n}", h) for n, h in zip(_IDX_NAMES, [
    "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
])]
FASHION_FILES = [RemoteFile(n, f"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/{n}", h)
                 for n, h in zip(_IDX_NAMES, [
    "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
    "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
    "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
    "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
])]
CIFAR_BINARY = [RemoteFile("cifar-10-binary.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
                           "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd")]
CIFAR_JPEG = [RemoteFile("cifar10_jpeg_q75.zip")]
CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
MNIST_CLASSES = [str(i) for i in range(10)]
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                   "Bag", "Ankle boot"]
#: class names of the registered image datasets (public), for labels on grids and reports
IMAGE_CLASSES = {"mnist": MNIST_CLASSES, "digits": MNIST_CLASSES, "fashion-mnist": FASHION_CLASSES,
                 "cifar10": CIFAR_CLASSES}


def _to_tensor(images: np.ndarray) -> torch.Tensor:
    import torch

    return torch.from_numpy(np.array(images, dtype=np.float32)).div_(255.0)


def _load_idx_set(name: str, files, classes, data_dir, download) -> ImageData:
    import torch

    _, paths = locate(name, [files], data_dir, download)
    xtr, ytr, xte, yte = (read_idx(paths[n]) for n in _IDX_NAMES)
    return ImageData(name, _to_tensor(xtr[:, None]), torch.from_numpy(ytr.astype(np.int64, copy=True)),
                     _to_tensor(xte[:, None]), torch.from_numpy(yte.astype(np.int64)), list(classes))


def load_mnist(data_dir=None, download=None) -> ImageData:
    return _load_idx_set("mnist", MNIST_FILES, MNIST_CLASSES, data_dir, download)


def load_fashion_mnist(data_dir=None, download=None) -> ImageData:
    return _load_idx_set("fashion-mnist", FASHION_FILES, FASHION_CLASSES, data_dir, download)


def _read_cifar_binary(path: Path):
    splits = {"train": [], "test": []}
    with tarfile.open(path, "r:gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            base = Path(member.name).name
            split = "train" if base.startswith("data_batch_") else "test" if base == "test_batch.bin" else None
            if split is None:
                continue
            raw = np.frombuffer(tar.extractfile(member).read(), dtype=np.uint8).reshape(-1, 3073)
            splits[split].append(raw)
    out = []
    for split in ("train", "test"):
        raw = np.concatenate(splits[split])
        out += [raw[:, 1:].reshape(-1, 3, 32, 32), raw[:, 0].astype(np.int64)]
    return out


_JPEG_RE = re.compile(r"^(train|test)/([^/]+)/(\d+)\.jpe?g$")


def _read_cifar_jpeg(path: Path):
    from PIL import Image

    entries = {"train": [], "test": []}
    raw = Path(path).read_bytes()                      # 65 MB for the export: one read, members sliced from it
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        for name in z.namelist():
            m = _JPEG_RE.match(name)
            if m:
                split, cls, idx = m.groups()
                if cls not in CIFAR_CLASSES:
                    raise ArtifactError(f"{path}: unknown CIFAR-10 class folder {cls!r}.")
                entries[split].append((CIFAR_CLASSES.index(cls), int(idx), name))
        out = []
        for split in ("train", "test"):
            items = sorted(entries[split])
            images = np.empty((len(items), 32, 32, 3), dtype=np.uint8)
            for i, (_, _, name) in enumerate(items):
                images[i] = _cifar_pixels(_member_bytes(z, raw, z.getinfo(name)), Image)
            out += [images.transpose(0, 3, 1, 2), np.array([c for c, _, _ in items], dtype=np.int64)]
    return out


def _member_bytes(z: zipfile.ZipFile, raw: bytes, info: zipfile.ZipInfo) -> bytes:
    """A zip member's bytes: a stored (uncompressed) one sliced from the archive's bytes ``raw`` after its local header
    and checked against its size and CRC-32 (``zipfile`` opens each member as a file: most of the time a small
    member costs), anything else (compressed, encrypted, or not as the directory says) read by ``z.read``, which
    checks it and raises as it does."""
    off = info.header_offset
    if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1 and raw[off:off + 4] == b"PK\x03\x04":
        name_length, extra_length = struct.unpack_from("<HH", raw, off + 26)
        start = off + 30 + name_length + extra_length
        data = raw[start:start + info.compress_size]
        if len(data) == info.file_size and zlib.crc32(data) == info.CRC:
            return data
    return z.read(info)


def _cifar_pixels(data: bytes, Image) -> np.ndarray:
    """One 32 x 32 JPEG's RGB pixels (32, 32, 3): decoded by PIL's JPEG decoder straight into a 32 x 32 RGB image
    (no header parsed in Python: a quarter of the time a file costs through ``Image.open``), or through ``Image.open``
    and ``convert("RGB")`` when it is not a 32 x 32 image the decoder gives as RGB (the same pixels either way)."""
    try:
        image = Image.frombytes("RGB", (32, 32), data, "jpeg", "RGB", "")
    except ValueError:                     # another size or a colour model the direct decode refuses
        image = Image.open(io.BytesIO(data)).convert("RGB")
    return np.asarray(image)


def load_cifar10(data_dir=None, download=None) -> ImageData:
    """CIFAR-10 from the official binary archive or a JPEG export zip.

    The JPEG export (``train/<class>/NNNN.jpg``) is lossy (quality 75); images
    are ordered by class, then by their number within the class.
    """
    import torch

    which, paths = locate("cifar10", [CIFAR_BINARY, CIFAR_JPEG], data_dir, download)
    reader = _read_cifar_binary if which == 0 else _read_cifar_jpeg
    xtr, ytr, xte, yte = reader(next(iter(paths.values())))
    return ImageData("cifar10", _to_tensor(xtr), torch.from_numpy(ytr), _to_tensor(xte),
                     torch.from_numpy(yte), list(CIFAR_CLASSES))


def load_digits(data_dir=None, download=None) -> ImageData:
    """scikit-learn's bundled 8x8 digits (1,797 images): always available offline.

    Split: a fixed stratified 80/20 split (seed 0): 1,437 train / 360 test.
    """
    import torch

    from sklearn.datasets import load_digits as _sk_digits
    from sklearn.model_selection import train_test_split

    d = _sk_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=360, random_state=0, stratify=d.target)
    return ImageData("digits", torch.from_numpy(xtr), torch.from_numpy(ytr.astype(np.int64, copy=True)),
                     torch.from_numpy(xte), torch.from_numpy(yte.astype(np.int64)), MNIST_CLASSES.copy())
