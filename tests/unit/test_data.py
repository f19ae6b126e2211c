import gzip
import io
import json
import struct
import tarfile
import zipfile

import numpy as np
import pandas as pd
import pytest
import torch

from mmdsynth.data import DATASETS, Schema, get_info, is_available, list_datasets, load_dataset, load_preset, read_table
from mmdsynth.data.fetch import RemoteFile, locate, search_dirs
from mmdsynth.data.images import read_idx
from mmdsynth.errors import ArtifactError, DataValidationError, InvalidParameterError, DatasetNotFoundError, SchemaError, UnknownNameError


# -- registry contract ---------------------------------------------------------
def test_registry_names():
    assert set(list_datasets()) == {"mnist", "fashion-mnist", "cifar10", "digits", "adult", "census", "cervical",
                                    "credit", "epileptic", "isolet", "covtype", "intrusion"}


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_every_dataset_has_download_info_or_a_clear_error(name, tmp_path, monkeypatch):
    info = get_info(name)
    assert info.kind in ("image", "table") and info.rows and info.description
    if not info.files:  # bundled
        return
    for files in info.files:
        for f in files:
            assert isinstance(f, RemoteFile) and f.name
            if f.sha256 is not None:
                assert len(f.sha256) == 64 and int(f.sha256, 16) >= 0
                assert f.url and f.url.startswith("http")
    # with no local folders, offline: a DatasetNotFoundError naming the places and files
    monkeypatch.delenv("MMDSYNTH_DATA_DIR", raising=False)
    monkeypatch.setattr("mmdsynth.data.fetch.DEBIAN_DIRS", {})
    with pytest.raises(DatasetNotFoundError) as exc:
        load_dataset(name, data_dir=tmp_path / "empty", download=False)
    msg = str(exc.value)
    assert f"dataset {name!r} not found" in msg
    assert str(tmp_path / "empty" / name) in msg and str(tmp_path / "cache" / name) in msg
    assert info.files[0][0].name in msg
    assert is_available(name, tmp_path / "empty") is None


def test_unknown_dataset_lists_choices():
    with pytest.raises(UnknownNameError, match="unknown dataset 'mnsit'; choose one of: adult, census"):
        load_dataset("mnsit")
    with pytest.raises(LookupError):
        load_preset("nope")


def test_search_order(tmp_path, monkeypatch):
    monkeypatch.setenv("MMDSYNTH_DATA_DIR", str(tmp_path / "env"))
    dirs = search_dirs("fashion-mnist", tmp_path / "explicit")
    assert dirs[:4] == [tmp_path / "explicit" / "fashion-mnist", tmp_path / "explicit",
                        tmp_path / "env" / "fashion-mnist", tmp_path / "env"]
    assert str(dirs[4]) == "/usr/share/datasets/fashion-mnist"
    assert dirs[-1] == tmp_path / "cache" / "fashion-mnist"


def test_download_refuses_unknown_checksum(tmp_path, monkeypatch):
    monkeypatch.delenv("MMDSYNTH_DATA_DIR", raising=False)
    with pytest.raises(DatasetNotFoundError, match="canonical sha256 of x.csv is not known"):
        locate("thing", [[RemoteFile("x.csv", "http://example.invalid/x.csv", None)]], tmp_path, download=True)


def test_download_verifies_sha256(tmp_path, monkeypatch):
    monkeypatch.delenv("MMDSYNTH_DATA_DIR", raising=False)
    src = tmp_path / "src.bin"
    src.write_bytes(b"hello")
    good = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    _, paths = locate("thing", [[RemoteFile("a.bin", src.as_uri(), good)]], tmp_path / "x", download=True)
    assert paths["a.bin"].read_bytes() == b"hello" and paths["a.bin"].parent == tmp_path / "cache" / "thing"
    with pytest.raises(DatasetNotFoundError, match="sha256 mismatch"):
        locate("other", [[RemoteFile("b.bin", src.as_uri(), "0" * 64)]], tmp_path / "x", download=True)
    assert not (tmp_path / "cache" / "other" / "b.bin").exists()


# -- format readers on fixtures the tests build ----------------------------------
def _idx(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


def test_idx_reader_and_mnist_layout(tmp_path):
    g = np.random.default_rng(0)
    imgs, labels = g.integers(0, 256, (7, 28, 28)), g.integers(0, 10, 7)
    folder = tmp_path / "mnist"
    folder.mkdir()
    for prefix in ("train", "t10k"):
        (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(imgs)))
        (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(labels)))
    d = load_dataset("mnist", data_dir=tmp_path)
    assert d.x_train.shape == (7, 1, 28, 28) and d.x_train.dtype == torch.float32
    assert torch.allclose(d.x_train[:, 0] * 255, torch.tensor(imgs, dtype=torch.float32))
    assert d.y_test.tolist() == labels.tolist() and d.y_test.dtype == torch.int64
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(_idx(imgs)[:-5]))
    with pytest.raises(ArtifactError, match="truncated"):
        read_idx(bad)


def test_cifar_binary_archive_fixture(tmp_path):
    g = np.random.default_rng(1)
    folder = tmp_path / "cifar10"
    folder.mkdir()
    rows = {}
    with tarfile.open(folder / "cifar-10-binary.tar.gz", "w:gz") as tar:
        for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
            raw = g.integers(0, 256, (2, 3073)).astype(np.uint8)
            raw[:, 0] = g.integers(0, 10, 2)
            rows[name] = raw
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = raw.nbytes
            tar.addfile(info, io.BytesIO(raw.tobytes()))
    d = load_dataset("cifar10", data_dir=tmp_path)
    assert d.x_train.shape == (10, 3, 32, 32) and d.x_test.shape == (2, 3, 32, 32)
    first = rows["data_batch_1.bin"][0]
    assert d.y_train[0].item() == first[0]
    assert torch.allclose(d.x_train[0] * 255, torch.tensor(first[1:].reshape(3, 32, 32), dtype=torch.float32))


def test_cifar_jpeg_zip_fixture(tmp_path):
    from PIL import Image

    folder = tmp_path / "cifar10"
    folder.mkdir()
    with zipfile.ZipFile(folder / "cifar10_jpeg_q75.zip", "w") as z:
        for split, cls, idx, val in [("train", "truck", 1, 200), ("train", "airplane", 0, 10), ("test", "cat", 0, 90)]:
            buf = io.BytesIO()
            Image.fromarray(np.full((32, 32, 3), val, np.uint8)).save(buf, "JPEG", quality=95)
            z.writestr(f"{split}/{cls}/{idx:04d}.jpg", buf.getvalue())
    d = load_dataset("cifar10", data_dir=tmp_path)
    assert d.y_train.tolist() == [0, 9] and d.y_test.tolist() == [3]
    assert abs(d.x_train[1].mean().item() * 255 - 200) < 3


def test_cifar_jpeg_members_read_as_pil_reads_them_and_a_damaged_one_is_refused(tmp_path):
    """The export's members are sliced from the archive and decoded straight into 32 x 32 RGB: stored and deflated
    members, colour, greyscale and progressive JPEGs give PIL's own ``Image.open(...).convert("RGB")`` pixels; a
    stored member whose bytes no longer match its CRC-32 is refused, never decoded."""
    from PIL import Image

    g = np.random.default_rng(3)
    folder = tmp_path / "cifar10"
    folder.mkdir()
    files = {}
    for idx, (mode, how) in enumerate([("RGB", {}), ("L", {}), ("RGB", {"progressive": True}), ("RGB", {})]):
        buf = io.BytesIO()
        pixels = g.integers(0, 256, (32, 32, 3) if mode == "RGB" else (32, 32)).astype(np.uint8)
        Image.fromarray(pixels, mode).save(buf, "JPEG", quality=75, **how)
        files[f"train/dog/{idx:04d}.jpg"] = buf.getvalue()
    zipped = folder / "cifar10_jpeg_q75.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for k, (name, data) in enumerate(files.items()):
            z.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED if k == 3 else zipfile.ZIP_STORED)
        z.writestr("test/cat/0000.jpg", files["train/dog/0000.jpg"])
    d = load_dataset("cifar10", data_dir=tmp_path)
    want = np.stack([np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) for data in files.values()])
    np.testing.assert_array_equal((d.x_train.numpy() * 255).round().astype(np.uint8), want.transpose(0, 3, 1, 2))
    raw = bytearray(zipped.read_bytes())
    raw[raw.index(files["train/dog/0001.jpg"]) + 200] ^= 0xFF          # one byte of a stored member's image data
    zipped.write_bytes(bytes(raw))
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_unavailable_tables_load_from_user_folders(tmp_path):
    g = np.random.default_rng(2)
    (tmp_path / "credit").mkdir()
    credit = pd.DataFrame(g.normal(size=(20, 30)), columns=["Time"] + [f"V{i}" for i in range(1, 29)] + ["Amount"])
    credit["Class"] = [0] * 15 + [1] * 5
    credit.to_csv(tmp_path / "credit" / "creditcard.csv", index=False)
    d = load_dataset("credit", data_dir=tmp_path)
    assert d.train.shape == (20, 31) and d.schema.label == "Class" and len(d.schema.numeric) == 30

    (tmp_path / "isolet").mkdir()
    for name, n in [("isolet1+2+3+4.data", 6), ("isolet5.data", 3)]:
        rows = [", ".join(f"{v:.4f}" for v in g.uniform(-1, 1, 617)) + f", {k % 26 + 1}." for k in range(n)]
        (tmp_path / "isolet" / name).write_text("\n".join(rows) + "\n")
    d = load_dataset("isolet", data_dir=tmp_path)
    assert d.train.shape == (6, 618) and d.test.shape == (3, 618) and d.train["letter"].iloc[1] == "2"

    (tmp_path / "covtype").mkdir()
    cov = np.hstack([g.integers(0, 3000, (5, 10)), g.integers(0, 2, (5, 44)), g.integers(1, 8, (5, 1))])
    (tmp_path / "covtype" / "covtype.data.gz").write_bytes(
        gzip.compress("\n".join(",".join(map(str, r)) for r in cov).encode()))
    d = load_dataset("covtype", data_dir=tmp_path)
    assert d.train.shape == (5, 55) and d.schema.categorical["Soil_Type_40"] == ["0", "1"]


# -- user tables --------------------------------------------------------------------
SCHEMA = {
    "label": "outcome", "label_categories": ["no", "yes"],
    "columns": [
        {"name": "age", "type": "numeric", "bounds": [0, 120], "integer": True},
        {"name": "blood", "type": "categorical", "categories": ["A", "B", "O"]},
        {"name": "score", "type": "numeric", "bounds": [-1, 1]},
    ],
}


def _frame():
    return pd.DataFrame({"age": [30, 41, 77], "blood": ["A", "O", "B"], "score": [0.5, -0.2, 0.0],
                         "outcome": ["no", "yes", "no"]})


@pytest.mark.parametrize("fmt", ["csv", "parquet", "npy", "npz"])
def test_user_table_formats(tmp_path, fmt):
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    df = _frame()
    path = tmp_path / f"data.{fmt}"
    if fmt == "csv":
        df.to_csv(path, index=False)
    elif fmt == "parquet":
        df.to_parquet(path)
    else:
        arr = df.assign(blood=df["blood"].map({"A": 0, "B": 1, "O": 2})).to_numpy(dtype=object)
        schema = json.loads(json.dumps(SCHEMA))
        schema["columns"][1]["categories"] = ["0", "1", "2"]
        schema["label_categories"] = ["0", "1"]
        (tmp_path / "s.json").write_text(json.dumps(schema))
        arr[:, 3] = (df["outcome"] == "yes").astype(int)
        arr = arr.astype(float)
        np.save(path, arr) if fmt == "npy" else np.savez(path, data=arr)
    out = read_table(path, tmp_path / "s.json")
    assert list(out.columns) == ["age", "blood", "score", "outcome"]
    assert out["age"].tolist() == [30, 41, 77]
    assert out["score"].tolist() == [0.5, -0.2, 0.0]


def test_user_table_errors_name_the_problem(tmp_path):
    schema = Schema.from_dict(SCHEMA)
    bad = _frame().assign(blood=["A", "AB", "B"])
    with pytest.raises(DataValidationError, match=r"column 'blood' has 1 value\(s\) \(1 distinct\) not among its "
                       r"declared categories \['A', 'B', 'O'\]") as err:
        schema.validate(bad)
    assert "AB" not in str(err.value)                 # a private value is never quoted (issue 45)
    with pytest.raises(DataValidationError, match=r"'age' has 1 value\(s\) outside its declared bounds \[0, 120\]"):
        schema.validate(_frame().assign(age=[30, 41, 177]))
    with pytest.raises(DataValidationError, match="'score' has 1 missing value"):
        schema.validate(_frame().assign(score=[0.5, None, 0.0]))
    with pytest.raises(SchemaError, match=r"column\(s\) \['score'\] declared in the schema are missing"):
        schema.validate(_frame().drop(columns=["score"]))
    with pytest.raises(DataValidationError, match="the table is empty"):
        schema.validate(_frame().iloc[:0])
    with pytest.raises(SchemaError, match="categorical column 'c': 'categories' must be a non-empty list"):
        Schema.from_dict({"columns": [{"name": "c", "type": "categorical", "categories": []}]})
    with pytest.raises(SchemaError, match="bounds must be two finite numbers lo < hi"):
        Schema.from_dict({"columns": [{"name": "c", "type": "numeric", "bounds": [3, 1]}]})
    with pytest.raises(SchemaError, match="needs 'label_categories' with at least 2 classes"):
        Schema.from_dict({"columns": [], "label": "y", "label_categories": ["a"]})
    with pytest.raises(InvalidParameterError, match="unsupported file type '.xlsx'"):
        read_table(tmp_path / "x.xlsx", schema)


def test_schema_json_round_trip(tmp_path):
    s = Schema.from_dict(SCHEMA)
    s.to_json(tmp_path / "s.json")
    assert Schema.from_json(tmp_path / "s.json").to_dict() == s.to_dict()


def test_reading_with_a_schema_reads_no_statistics(tmp_path, monkeypatch):
    """With a declared schema nothing is aggregated: min/max/unique are never called."""
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    _frame().to_csv(tmp_path / "d.csv", index=False)
    for name in ("min", "max", "unique", "nunique", "median", "mean", "value_counts"):
        monkeypatch.setattr(pd.Series, name, lambda *a, **k: (_ for _ in ()).throw(AssertionError("statistic read")))
    out = read_table(tmp_path / "d.csv", tmp_path / "s.json")
    assert len(out) == 3


# -- real data (slow) ------------------------------------------------------------------


