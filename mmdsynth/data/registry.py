"""Datasets by name: one registry, one contract test."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import DatasetNotFoundError, unknown_name
from . import images, tabular
from .fetch import RemoteFile, locate


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    kind: str          # "image" | "table"
    loader: Callable
    files: tuple       # alternatives: tuple of tuples of RemoteFile
    rows: str          # documented row counts
    description: str


def _alts(*sets):
    return tuple(tuple(s) for s in sets)


DATASETS: dict[str, DatasetInfo] = {d.name: d for d in [
    DatasetInfo("digits", "image", images.load_digits, (), "1,437 train / 360 test",
                "scikit-learn's bundled 8x8 handwritten digits (always available)"),
    DatasetInfo("mnist", "image", images.load_mnist, _alts(images.MNIST_FILES), "60,000 / 10,000",
                "MNIST handwritten digits, 1x28x28"),
    DatasetInfo("fashion-mnist", "image", images.load_fashion_mnist, _alts(images.FASHION_FILES),
                "60,000 / 10,000", "Fashion-MNIST, 1x28x28 (Debian: dataset-fashion-mnist)"),
    DatasetInfo("cifar10", "image", images.load_cifar10, _alts(images.CIFAR_BINARY, images.CIFAR_JPEG),
                "50,000 / 10,000", "CIFAR-10, 3x32x32 (official binary or JPEG-export zip)"),
    DatasetInfo("adult", "table", tabular.load_adult, _alts(tabular.ADULT_FILES), "32,561 / 16,281",
                "UCI Adult census income"),
    DatasetInfo("census", "table", tabular.load_census,
                _alts([tabular.CENSUS_TRAIN, tabular.CENSUS_TEST], [tabular.CENSUS_TEST]),
                "199,523 / 99,762 (test half alone: 99,762)", "UCI KDD Census-Income"),
    DatasetInfo("cervical", "table", tabular.load_cervical, _alts(tabular.CERVICAL_FILES), "858",
                "UCI Cervical cancer risk factors"),
    DatasetInfo("credit", "table", tabular.load_credit, _alts(tabular.CREDIT_FILES), "284,807",
                "Kaggle credit-card fraud (manual download)"),
    DatasetInfo("epileptic", "table", tabular.load_epileptic, _alts(tabular.EPILEPTIC_FILES), "11,500",
                "UCI Epileptic Seizure Recognition"),
    DatasetInfo("isolet", "table", tabular.load_isolet, _alts(tabular.ISOLET_Z, tabular.ISOLET_PLAIN),
                "6,238 / 1,559", "UCI ISOLET spoken letters"),
    DatasetInfo("covtype", "table", tabular.load_covtype, _alts(tabular.COVTYPE_FILES), "581,012",
                "UCI Covertype forest cover"),
    DatasetInfo("intrusion", "table", tabular.load_intrusion, _alts(tabular.INTRUSION_FILES), "494,021",
                "KDD Cup 1999 network intrusion, 10 % set"),
]}


def get_info(name: str) -> DatasetInfo:
    if name not in DATASETS:
        raise unknown_name("dataset", name, DATASETS)
    return DATASETS[name]


def list_datasets() -> list[str]:
    return list(DATASETS)


def load_dataset(name: str, data_dir=None, download: bool | None = None):
    """Load a registered dataset: :class:`ImageData` or :class:`TableData`."""
    return get_info(name).loader(data_dir=data_dir, download=download)


def is_available(name: str, data_dir=None) -> str | None:
    """Folder holding the dataset's files locally (no download), or None."""
    info = get_info(name)
    if not info.files:
        return "(bundled with scikit-learn)"
    try:
        _, paths = locate(name, [list(f) for f in info.files], data_dir, download=False)
    except DatasetNotFoundError:
        return None
    return str(next(iter(paths.values())).parent)


__all__ = ["DATASETS", "DatasetInfo", "RemoteFile", "get_info", "is_available", "list_datasets", "load_dataset"]
