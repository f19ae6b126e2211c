"""The papers' preprocessing of the tabular benchmarks, as named, seeded presets.

From the DP-MERF / DP-HP / DP-NTK reference code (see REFERENCE_NOTES.md):
label definition, majority-class undersampling rate, train/test split. Unlike
the reference, the undersampling and the split are seeded. Where the publisher
split the data (adult, isolet) the halves are pooled and re-split as the
reference did, for comparability.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from ..errors import unknown_name
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
                       "rows with >= 10 missing values dropped; numeric columns median-filled and binary "
                       "columns zero-filled (public benchmark statistics); class 0 kept at 30 %; 80/20 split"),
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


@dataclass
class PresetData:
    name: str
    train: pd.DataFrame
    test: pd.DataFrame
    schema: Schema
    preset: Preset
    seed: int


def _undersample(df: pd.DataFrame, label: str, rates: dict, rng: np.random.Generator) -> pd.DataFrame:
    keep = np.ones(len(df), dtype=bool)
    for cls, rate in rates.items():
        idx = np.flatnonzero(df[label].to_numpy() == cls)
        n_keep = int(round(rate * idx.size))
        drop = rng.choice(idx, size=idx.size - n_keep, replace=False)
        keep[drop] = False
    return df.loc[keep].reset_index(drop=True)


def _cervical_clean(df: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    df = df.loc[df.isna().sum(axis=1) < 10].reset_index(drop=True)
    for c in schema.numeric:
        df[c] = df[c].fillna(df[c].median())
    for c in schema.categorical:
        df[c] = df[c].fillna("0")
    return df


def load_preset(name: str, seed: int = 0, data_dir=None, download=None) -> PresetData:
    """Load a tabular benchmark with the papers' preprocessing, seeded."""
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
    rng = np.random.default_rng(seed)
    df = _undersample(df, schema.label, p.undersample, rng)
    train, test = train_test_split(df, test_size=p.test_size, random_state=seed, stratify=df[schema.label])
    return PresetData(name, train.reset_index(drop=True), test.reset_index(drop=True), schema, p, seed)


__all__ = ["PRESETS", "Preset", "PresetData", "load_preset", "Column"]
