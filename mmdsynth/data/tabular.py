"""Tabular benchmark datasets of the papers, as pandas DataFrames with a schema.

Raw loaders return the published rows unchanged (no undersampling, no split
unless the publisher made one); :mod:`mmdsynth.data.presets` applies the papers'
preprocessing. Missing values stay missing (NaN) except in adult, where the
publisher's ``?`` is kept as its own category.

The schemas of these *public* datasets are built from their complete published
files (all splits) and say so in ``schema.source``.
"""
from __future__ import annotations

import gzip
import io
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import ArtifactError
from .fetch import RemoteFile, locate
from .schema import Schema, public_schema

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"


@dataclass
class TableData:
    name: str
    train: pd.DataFrame
    test: pd.DataFrame | None
    schema: Schema

    kind = "table"

    @property
    def n_classes(self) -> int:
        return self.schema.n_classes


def _schema(name, frames, numeric, categorical, label, label_categories, integer=None):
    return public_schema(frames, numeric, categorical, label, label_categories,
                         f"public benchmark metadata: categories and ranges of the complete published "
                         f"{name} files", integer)


# -- adult -------------------------------------------------------------------
ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                 "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "native-country", "income"]
ADULT_NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
ADULT_FILES = [
    RemoteFile("adult.data", f"{UCI}/adult/adult.data",
               "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d"),
    RemoteFile("adult.test", f"{UCI}/adult/adult.test",
               "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05"),
]


def load_adult(data_dir=None, download=None) -> TableData:
    """UCI Adult: 32,561 train / 16,281 test rows, label ``income`` (<=50K / >50K)."""
    _, paths = locate("adult", [ADULT_FILES], data_dir, download)
    kw = dict(header=None, names=ADULT_COLUMNS, skipinitialspace=True)
    train = pd.read_csv(paths["adult.data"], **kw)
    test = pd.read_csv(paths["adult.test"], skiprows=1, **kw)
    for df in (train, test):
        df["income"] = df["income"].str.rstrip(".")
    cats = [c for c in ADULT_COLUMNS if c not in ADULT_NUMERIC + ["income"]]
    schema = _schema("adult", [train, test], ADULT_NUMERIC, cats, "income", ["<=50K", ">50K"], ADULT_NUMERIC)
    return TableData("adult", train, test, schema)


# -- census (KDD Census-Income) ------------------------------------------------
CENSUS_COLUMNS = [
    "age", "class of worker", "detailed industry recode", "detailed occupation recode", "education",
    "wage per hour", "enroll in edu inst last wk", "marital stat", "major industry code",
    "major occupation code", "race", "hispanic origin", "sex", "member of a labor union",
    "reason for unemployment", "full or part time employment stat", "capital gains", "capital losses",
    "dividends from stocks", "tax filer stat", "region of previous residence",
    "state of previous residence", "detailed household and family stat",
    "detailed household summary in household", "instance weight", "migration code-change in msa",
    "migration code-change in reg", "migration code-move within reg", "live in this house 1 year ago",
    "migration prev res in sunbelt", "num persons worked for employer", "family members under 18",
    "country of birth father", "country of birth mother", "country of birth self", "citizenship",
    "own business or self employed", "fill inc questionnaire for veteran's admin", "veterans benefits",
    "weeks worked in year", "year", "income",
]
CENSUS_NUMERIC = ["age", "wage per hour", "capital gains", "capital losses", "dividends from stocks",
                  "num persons worked for employer", "weeks worked in year"]
CENSUS_BASE = f"{UCI}/census-income-mld"
CENSUS_TEST = RemoteFile("census-income.test.gz", f"{CENSUS_BASE}/census-income.test.gz",
                         "5ac4cacd3ca9f1ecb10de1a0a41e4ac68fdc419e3fec190f5c0c6cc03b2ea659")
CENSUS_TRAIN = RemoteFile("census-income.data.gz", f"{CENSUS_BASE}/census-income.data.gz", None)


def _read_census(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path, header=None, names=CENSUS_COLUMNS, skipinitialspace=True, na_values=[],
                     keep_default_na=False, dtype=str)
    df = df.drop(columns=["instance weight"])  # a sampling weight, not a feature (census-income.names)
    df["income"] = df["income"].str.rstrip(".").str.strip()
    for c in CENSUS_NUMERIC:
        df[c] = pd.to_numeric(df[c])
    return df


def load_census(data_dir=None, download=None) -> TableData:
    """KDD Census-Income. With both halves: 199,523 train / 99,762 test rows; with only
    the published test half (the offline copy), that half is returned as ``train``
    with ``test=None`` (split it with the ``census`` preset). Label ``income``
    (``- 50000`` / ``50000+``); the ``instance weight`` column is dropped.
    """
    which, paths = locate("census", [[CENSUS_TRAIN, CENSUS_TEST], [CENSUS_TEST]], data_dir, download)
    test = _read_census(paths[CENSUS_TEST.name])
    if which == 0:
        train = _read_census(paths[CENSUS_TRAIN.name])
        frames = [train, test]
    else:
        train, test, frames = test, None, [test]
    cats = [c for c in train.columns if c not in CENSUS_NUMERIC + ["income"]]
    schema = _schema("census", frames, CENSUS_NUMERIC, cats, "income", ["- 50000", "50000+"], CENSUS_NUMERIC)
    schema.notes["halves"] = "train+test" if which == 0 else "test half only (99,762 rows)"
    return TableData("census", train, test, schema)


# -- cervical -------------------------------------------------------------------
CERVICAL_FILES = [RemoteFile("risk_factors_cervical_cancer.csv", f"{UCI}/00383/risk_factors_cervical_cancer.csv",
                             "8df193ad5c9ff4288fb4c401eef70dcd2cbda404ce7f82ac74c68cfc960ab063")]
CERVICAL_LABELS = ["Hinselmann", "Schiller", "Citology", "Biopsy"]


def load_cervical(data_dir=None, download=None) -> TableData:
    """UCI Cervical cancer (Risk Factors): 858 rows, 35 features, label ``Biopsy``.

    ``?`` becomes NaN. Columns with at most two distinct published values are
    categorical (0/1), the rest numeric; the other diagnosis columns
    (Hinselmann, Schiller, Citology) are kept as features, as in the reference.
    """
    _, paths = locate("cervical", [CERVICAL_FILES], data_dir, download)
    df = pd.read_csv(paths[CERVICAL_FILES[0].name], na_values=["?"])
    feats = [c for c in df.columns if c != "Biopsy"]
    binary = [c for c in feats if df[c].dropna().nunique() <= 2]
    numeric = [c for c in feats if c not in binary]
    for c in binary:
        df[c] = df[c].map(lambda v: v if pd.isna(v) else str(int(v)))
    df["Biopsy"] = df["Biopsy"].astype(int).astype(str)
    schema = _schema("cervical", [df], numeric, binary, "Biopsy", ["0", "1"])
    return TableData("cervical", df, None, schema)


# -- epileptic ------------------------------------------------------------------
EPILEPTIC_FILES = [RemoteFile("epileptic_seizure_recognition.csv.zip",
                              "https://archive.ics.uci.edu/static/public/388/epileptic+seizure+recognition.zip",
                              None)]


def load_epileptic(data_dir=None, download=None) -> TableData:
    """UCI Epileptic Seizure Recognition: 11,500 rows, X1..X178, label ``y`` in 1..5
    (the papers' binary task is y == 1, see the ``epileptic`` preset)."""
    _, paths = locate("epileptic", [EPILEPTIC_FILES], data_dir, download)
    with zipfile.ZipFile(paths[EPILEPTIC_FILES[0].name]) as z:
        csvs = [n for n in z.namelist() if n.lower().endswith(".csv")]
        if not csvs:
            raise ArtifactError(f"{paths[EPILEPTIC_FILES[0].name]} holds no CSV file.")
        df = pd.read_csv(io.BytesIO(z.read(csvs[0])))
    df = df.drop(columns=[df.columns[0]])  # the segment ID ("Unnamed")
    df["y"] = df["y"].astype(str)
    numeric = [c for c in df.columns if c != "y"]
    schema = _schema("epileptic", [df], numeric, [], "y", ["1", "2", "3", "4", "5"], numeric)
    return TableData("epileptic", df, None, schema)


# -- intrusion (KDD Cup 1999, 10 %) ---------------------------------------------
KDD_COLUMNS = [
    "duration", "protocol_type", "service", "flag", "src_bytes", "dst_bytes", "land", "wrong_fragment",
    "urgent", "hot", "num_failed_logins", "logged_in", "num_compromised", "root_shell", "su_attempted",
    "num_root", "num_file_creations", "num_shells", "num_access_files", "num_outbound_cmds",
    "is_host_login", "is_guest_login", "count", "srv_count", "serror_rate", "srv_serror_rate",
    "rerror_rate", "srv_rerror_rate", "same_srv_rate", "diff_srv_rate", "srv_diff_host_rate",
    "dst_host_count", "dst_host_srv_count", "dst_host_same_srv_rate", "dst_host_diff_srv_rate",
    "dst_host_same_src_port_rate", "dst_host_srv_diff_host_rate", "dst_host_serror_rate",
    "dst_host_srv_serror_rate", "dst_host_rerror_rate", "dst_host_srv_rerror_rate",
]
KDD_CATEGORICAL = ["protocol_type", "service", "flag", "land", "logged_in", "is_host_login", "is_guest_login"]
KDD_ATTACKS = {
    "dos": ["back", "land", "neptune", "pod", "smurf", "teardrop"],
    "probe": ["ipsweep", "nmap", "portsweep", "satan"],
    "r2l": ["ftp_write", "guess_passwd", "imap", "multihop", "phf", "spy", "warezclient", "warezmaster"],
    "u2r": ["buffer_overflow", "loadmodule", "perl", "rootkit"],
}
KDD_CLASSES = ["dos", "normal", "probe", "r2l", "u2r"]
INTRUSION_FILES = [RemoteFile("kddcup.data_10_percent.gz", "https://ndownloader.figshare.com/files/5976042",
                              "8045aca0d84e70e622d1148d7df782496f6333bf6eb979a1b0837c42a9fd9561")]


def load_intrusion(data_dir=None, download=None) -> TableData:
    """KDD Cup 1999 10 % training set: 494,021 rows, 41 features. ``attack`` is the raw
    label; ``label`` the papers' 5 classes (dos, normal, probe, r2l, u2r)."""
    _, paths = locate("intrusion", [INTRUSION_FILES], data_dir, download)
    df = pd.read_csv(paths[INTRUSION_FILES[0].name], header=None, names=KDD_COLUMNS + ["attack"])
    df["attack"] = df["attack"].str.rstrip(".")
    lookup = {a: cls for cls, attacks in KDD_ATTACKS.items() for a in attacks}
    lookup["normal"] = "normal"
    unknown = sorted(set(df["attack"]) - set(lookup))
    if unknown:
        raise ArtifactError(f"intrusion: unknown attack names {unknown} in the data file.")
    df["label"] = df["attack"].map(lookup)
    df = df.drop(columns=["attack"])
    for c in KDD_CATEGORICAL:
        df[c] = df[c].astype(str)
    numeric = [c for c in KDD_COLUMNS if c not in KDD_CATEGORICAL]
    schema = _schema("intrusion", [df], numeric, KDD_CATEGORICAL, "label", KDD_CLASSES)
    return TableData("intrusion", df, None, schema)


# -- credit (Kaggle credit-card fraud) -----------------------------------------
CREDIT_FILES = [RemoteFile("creditcard.csv", None, None)]


def load_credit(data_dir=None, download=None) -> TableData:
    """Kaggle credit-card fraud (``creditcard.csv``: Time, V1..V28, Amount, Class; 284,807
    rows). Kaggle needs a login, so mmdsynth cannot download it: place the file in a
    data folder."""
    _, paths = locate("credit", [CREDIT_FILES], data_dir, download)
    df = pd.read_csv(paths["creditcard.csv"])
    df["Class"] = df["Class"].astype(int).astype(str)
    numeric = [c for c in df.columns if c != "Class"]
    schema = _schema("credit", [df], numeric, [], "Class", ["0", "1"])
    return TableData("credit", df, None, schema)


# -- isolet ----------------------------------------------------------------------
ISOLET_PARTS = ["isolet1+2+3+4.data", "isolet5.data"]
ISOLET_PLAIN = [RemoteFile(n) for n in ISOLET_PARTS]
ISOLET_Z = [RemoteFile(f"{n}.Z", f"{UCI}/isolet/{n}.Z", None) for n in ISOLET_PARTS]


def _read_maybe_z(path: Path) -> bytes:
    if path.suffix == ".Z":  # Unix compress; gzip decompresses it
        return subprocess.run(["gzip", "-dc", str(path)], check=True, capture_output=True).stdout
    return path.read_bytes()


def load_isolet(data_dir=None, download=None) -> TableData:
    """UCI ISOLET: 6,238 train (isolet1-4) / 1,559 test (isolet5) rows, 617 features,
    label ``letter`` 1..26. Plain ``.data`` files or the published ``.data.Z``."""
    which, paths = locate("isolet", [ISOLET_Z, ISOLET_PLAIN], data_dir, download)
    frames = []
    for f in (ISOLET_Z if which == 0 else ISOLET_PLAIN):
        raw = _read_maybe_z(paths[f.name])
        df = pd.read_csv(io.BytesIO(raw), header=None, skipinitialspace=True)
        df.columns = [f"f{i}" for i in range(df.shape[1] - 1)] + ["letter"]
        df["letter"] = df["letter"].astype(float).astype(int).astype(str)
        frames.append(df)
    numeric = [c for c in frames[0].columns if c != "letter"]
    schema = _schema("isolet", frames, numeric, [], "letter", [str(i) for i in range(1, 27)])
    return TableData("isolet", frames[0], frames[1], schema)


# -- covtype ------------------------------------------------------------------------
COVTYPE_FILES = [RemoteFile("covtype.data.gz", "https://ndownloader.figshare.com/files/5976039",
                            "614360d0257557dd1792834a85a1cdebfadc3c4f30b011d56afee7ffb5b15771")]
COVTYPE_NUMERIC = ["Elevation", "Aspect", "Slope", "Horizontal_Distance_To_Hydrology",
                   "Vertical_Distance_To_Hydrology", "Horizontal_Distance_To_Roadways", "Hillshade_9am",
                   "Hillshade_Noon", "Hillshade_3pm", "Horizontal_Distance_To_Fire_Points"]
COVTYPE_BINARY = [f"Wilderness_Area_{i}" for i in range(1, 5)] + [f"Soil_Type_{i}" for i in range(1, 41)]


def load_covtype(data_dir=None, download=None) -> TableData:
    """UCI Covertype: 581,012 rows, 10 numeric + 44 binary columns, label ``Cover_Type`` 1..7."""
    _, paths = locate("covtype", [COVTYPE_FILES], data_dir, download)
    with gzip.open(paths["covtype.data.gz"], "rb") as fh:
        df = pd.read_csv(fh, header=None, names=COVTYPE_NUMERIC + COVTYPE_BINARY + ["Cover_Type"])
    for c in COVTYPE_BINARY + ["Cover_Type"]:
        df[c] = df[c].astype(int).astype(str)
    schema = _schema("covtype", [df], COVTYPE_NUMERIC, COVTYPE_BINARY, "Cover_Type",
                     [str(i) for i in range(1, 8)], COVTYPE_NUMERIC)
    # binary columns may miss a value in a small file; they are 0/1 by definition
    for c in schema.columns:
        if c.kind == "categorical":
            c.categories = ["0", "1"]
    return TableData("covtype", df, None, schema)


