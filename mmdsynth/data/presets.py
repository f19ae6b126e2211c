"""The papers' preprocessing of the tabular benchmarks, as named, seeded presets.

From the DP-MERF / DP-HP / DP-NTK reference code (see REFERENCE_NOTES.md):
label definition, majority-class undersampling rate, train/test split. Where the
publisher split the data (adult, isolet) the halves are pooled and re-split as the
reference did, for comparability.

Neighbour-preserving by construction: every step is a rule applied to each raw record on
its own, so changing one raw record changes at most one row of the training split (that
row is replaced, added or removed) and nothing else.

* Undersampling and the split use a per-record coin: record i (by its position in the raw
  file) draws two uniforms from the seeded generator, whatever its values; it is dropped if
  its class is undersampled at rate r and its first coin is >= r, and goes to the test split
  if its second coin is < the test share. (The reference drew a fixed number of majority
  rows with ``rng.choice`` and split with stratification: one changed label then reshuffled
  thousands of rows.) Sizes and class shares therefore vary slightly with the seed.
* Missing values (cervical) are filled with public constants (each numeric column's lower
  schema bound, "0" for binary columns), never with statistics of the data.

The DP guarantee of a preset run covers rows of this preprocessed training split (replace-one
neighbours of the split, its size m public; the ledger's ``privacy_unit`` says so). It is not
a guarantee about the raw file: a changed raw record can add or remove a training row, which
changes m, and m is published as a fact of the release. The per-record rules keep the effect
of one raw record to that one row.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..errors import InvalidParameterError, unknown_name
from .schema import Column, Schema


@dataclass(frozen=True)
class Preset:
    name: str
    dataset: str
    test_size: float
    undersample: dict  # class label -> keep rate
    description: str


PRESETS = {
    "adult": Preset("adult", "adult", 0.1, {"<=50K": 0.4},
                    "adult.data + adult.test pooled; majority class (<=50K) kept at 40 %; 90/10 split"),
    "census": Preset("census", "census", 0.2, {"- 50000": 0.2},
                     "majority class (- 50000) kept at 20 %; 80/20 split (offline: test half only)"),
    "cervical": Preset("cervical", "cervical", 0.2, {"0": 0.3},
                       "rows with >= 10 missing values dropped; numeric columns filled with their lower "
                       "schema bound and binary columns with 0 (public constants); class 0 kept at 30 %; "
                       "80/20 split"),
    "credit": Preset("credit", "credit", 0.2, {"0": 0.002},
                     "columns Time..Amount; class 0 kept at 0.2 %; 80/20 split"),
    "epileptic": Preset("epileptic", "epileptic", 0.3, {},
                        "label y == 1 (seizure) vs the rest; no undersampling; 70/30 split"),
    "isolet": Preset("isolet", "isolet", 0.3, {}, "isolet1-5 pooled; no undersampling; 70/30 split"),
    "covtype": Preset("covtype", "covtype", 0.3, {"2": 0.03},
                      "first 20,000 rows; 10 numeric + 44 binary; class 2 (index 1) kept at 3 %; 70/30 split"),
    "intrusion": Preset("intrusion", "intrusion", 0.3, {"dos": 0.03},
                        "5 classes; binary columns moved last; class dos (index 0) kept at 3 %; 70/30 split"),
}


#: what one record of a preset's training data is (recorded in the ledger)
PRIVACY_UNIT = ("one row of the preset's preprocessed training split (per-record rules: one changed raw record "
                "changes at most one training row, replacing, adding or removing it)")


@dataclass
class PresetData:
    name: str
    train: pd.DataFrame
    test: pd.DataFrame
    schema: Schema
    preset: Preset
    seed: int
    #: what one record of ``train`` is, for the ledger of a fit on it
    privacy_unit: str = PRIVACY_UNIT


def per_record_split(df: pd.DataFrame, label: str, rates: dict, test_size: float,
                     rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, test): record i is kept unless its class is undersampled at rate r and its coin
    u_i >= r, and goes to test when its second coin v_i < ``test_size``. The coins are drawn
    for every position before any value is looked at, so they do not depend on the data."""
    u, v = rng.random(len(df)), rng.random(len(df))
    labels = df[label].astype(str).to_numpy()
    rate = np.ones(len(df))
    for cls, r in rates.items():
        rate[labels == str(cls)] = r
    keep = u < rate
    test = v < test_size
    return (df.loc[keep & ~test].reset_index(drop=True), df.loc[keep & test].reset_index(drop=True))


def _cervical_clean(df: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """Rows with >= 10 missing values dropped (a per-record rule), then public fill values:
    each numeric column's lower schema bound (0 for the counts and durations, 1 for the
    time-since-diagnosis columns whose value is missing when there was no diagnosis), "0" for
    the binary columns. The reference filled medians of the whole file (train and test): one
    record could then move every filled value."""
    df = df.loc[df.isna().sum(axis=1) < 10].reset_index(drop=True)
    for c in schema.numeric:
        df[c] = df[c].fillna(schema.column(c).bounds[0])
    for c in schema.categorical:
        df[c] = df[c].fillna("0")
    return df


def _replace_undersampling(p: Preset, undersample: dict, schema: Schema) -> Preset:
    classes = [str(c) for c in schema.label_categories or []]
    for label, rate in undersample.items():
        if classes and str(label) not in classes:
            raise InvalidParameterError(f"undersample: {label!r} is not a class of {p.name} (classes: {classes}).")
        if not (isinstance(rate, (int, float)) and 0 < rate <= 1):
            raise InvalidParameterError(f"undersample: the keep rate of class {label!r} must lie in (0, 1]; "
                                        f"got {rate!r}.")
    return replace(p, undersample={str(k): float(v) for k, v in undersample.items()},
                   description=f"{p.description}; undersampling replaced by {undersample}")


def load_preset(name: str, seed: int = 0, data_dir=None, download=None, undersample: dict | None = None) -> PresetData:
    """Load a tabular benchmark with the papers' preprocessing, seeded.

    ``undersample`` ({class label: keep rate}) replaces the preset's undersampling, e.g. to
    read a paper that undersampled differently; the split is then taken from the undersampled rows.
    """
    from .registry import load_dataset

    if name not in PRESETS:
        raise unknown_name("preset", name, PRESETS)
    p = PRESETS[name]
    data = load_dataset(p.dataset, data_dir=data_dir, download=download)
    schema = data.schema
    df = data.train if data.test is None else pd.concat([data.train, data.test], ignore_index=True)
    if name == "cervical":
        df = _cervical_clean(df, schema)
    elif name == "epileptic":
        df["y"] = np.where(df["y"] == "1", "1", "0")
        schema = Schema(schema.columns, "y", ["0", "1"], schema.source, {"label": "y == 1 vs rest"})
    elif name == "covtype":
        df = df.iloc[:20000].reset_index(drop=True)
    elif name == "intrusion":
        cats = [c for c in schema.columns if c.kind == "categorical"]
        nums = [c for c in schema.columns if c.kind == "numeric"]
        schema = Schema(nums + cats, schema.label, schema.label_categories, schema.source)
        df = df[[c.name for c in schema.columns] + [schema.label]]
    if undersample is not None:
        p = _replace_undersampling(p, undersample, schema)
    train, test = per_record_split(df, schema.label, p.undersample, p.test_size, np.random.default_rng(seed))
    return PresetData(name, train, test, schema, p, seed)


__all__ = ["PRESETS", "PRIVACY_UNIT", "Preset", "PresetData", "load_preset", "per_record_split", "Column"]
