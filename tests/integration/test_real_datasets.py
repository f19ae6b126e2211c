"""The real datasets in ../shared/datasets: row counts, published labels, the papers' presets and
their neighbour property (slow; they read MMDSYNTH_DATA_DIR)."""


import numpy as np
import pandas as pd
import pytest
import torch

from mmdsynth.data import PRESETS, load_dataset, load_preset
import mmdsynth
from mmdsynth.data import presets

from conftest import require_data
from support import EXPECTED_ROWS, preset_rows


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
def test_real_dataset_row_counts(name):
    require_data(name)
    d = load_dataset(name)
    train_shape, test_shape = EXPECTED_ROWS[name]
    if d.kind == "image":
        assert tuple(d.x_train.shape) == train_shape and tuple(d.x_test.shape) == test_shape
        assert d.x_train.dtype == torch.float32 and 0 <= d.x_train.min() and d.x_train.max() <= 1
        assert d.x_train.max() == 1.0 and d.y_train.dtype == torch.int64
        assert sorted(d.y_train.unique().tolist()) == list(range(10))
        assert d.n_classes == 10
    else:
        assert d.train.shape == train_shape
        assert (d.test.shape if d.test is not None else None) == test_shape
        frames = [d.train] + ([d.test] if d.test is not None else [])
        for f in frames:  # the loaded data conforms to its schema (modulo missing values)
            d.schema.validate(f.dropna())


@pytest.mark.slow
def test_real_mnist_matches_published_labels():
    require_data("mnist")
    d = load_dataset("mnist")
    assert d.y_train[:8].tolist() == [5, 0, 4, 1, 9, 2, 1, 3]
    assert torch.bincount(d.y_test).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["adult", "census", "cervical", "epileptic", "intrusion"])
def test_presets_are_seeded_and_follow_the_papers(name):
    require_data(name)
    a, b, c = load_preset(name, seed=0), load_preset(name, seed=0), load_preset(name, seed=1)
    pd.testing.assert_frame_equal(a.train, b.train)
    assert not a.train.equals(c.train)
    total = len(a.train) + len(a.test)
    q = PRESETS[name].test_size                     # per-record coins: binomial sizes, 4 sd tolerance
    assert len(a.test) / total == pytest.approx(q, abs=4 * (q * (1 - q) / total) ** 0.5)
    assert not a.train.isna().any().any()
    counts = pd.concat([a.train, a.test])[a.schema.label].value_counts()

    def kept(n, rate):
        return pytest.approx(rate * n, abs=4 * (n * rate * (1 - rate)) ** 0.5)
    if name == "adult":
        assert counts["<=50K"] == kept(24720 + 12435, 0.4) and counts[">50K"] == 7841 + 3846
    if name == "epileptic":
        assert counts.to_dict() == {"0": 9200, "1": 2300}
    if name == "intrusion":
        assert counts["dos"] == kept(391458, 0.03) and list(a.train.columns[-8:-1]) == [
            "protocol_type", "service", "flag", "land", "logged_in", "is_host_login", "is_guest_login"]
    if name == "cervical":
        assert total < 858 and counts["1"] == pd.concat([a.train, a.test])["Biopsy"].eq("1").sum()


@pytest.mark.slow
def test_adult_preset_label_flip_changes_one_training_row(monkeypatch):
    require_data("adult")
    from mmdsynth.data import registry

    raw = registry.load_dataset("adult")
    train = raw.train.copy()
    i = int(np.flatnonzero(train["income"].to_numpy() == "<=50K")[0])
    train.loc[i, "income"] = ">50K"
    flipped = type(raw)(**{**raw.__dict__, "train": train})
    splits = []
    for data in (raw, flipped):
        monkeypatch.setattr(registry, "load_dataset", lambda *a, _d=data, **k: _d)
        splits.append(mmdsynth.load_preset("adult", seed=0))
    a, b = splits
    assert int(preset_rows(a.train).sub(preset_rows(b.train), fill_value=0).abs().sum()) <= 2   # was 12,577 rows
    assert a.privacy_unit == presets.PRIVACY_UNIT
