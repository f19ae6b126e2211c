"""Distillation from a release (`mmdsynth distill`, issue 34): post-processing only, the ledger travels with the set."""
import json
import numpy as np
import pandas as pd
import pytest
import torch

from mmdsynth import DPMERF, DPNTK, BudgetFile, InvalidParameterError
from mmdsynth.errors import ArtifactError
from mmdsynth.evaluation.augment import FAMILIES, dsa_augment
from mmdsynth.evaluation.convnet import cnn_scores
from mmdsynth.evaluation.downstream import image_classifier_scores
from mmdsynth.methods.distill import DistilledSet, distill_release, release_digest
from support import MIXED_SCHEMA, mixed_table

NTK = dict(n_classes=10, ntk_width=200, noise_seed=0)


@pytest.fixture(scope="module")
def digits_release(digits):
    return DPNTK(epsilon=10, **NTK).release(digits.x_train, digits.y_train, dataset="digits")


def test_distilled_digits_learn_the_classes_and_noise_shows(digits, digits_release):
    """A set distilled from an eps-10 release classifies digits; one from an eps-0.05 release (mostly noise) scores
    clearly lower, so silently dropped noise would show."""
    good = distill_release(digits_release, 10, iterations=300)
    assert good.x.shape == (100, 1, 8, 8) and good.x.dtype == np.float32
    assert 0 <= good.x.min() and good.x.max() <= 1
    assert np.array_equal(np.bincount(good.y), np.full(10, 10))
    assert good.info["loss_final"] < 0.9 * good.info["loss_start"]
    acc = image_classifier_scores(good.x, good.y, digits.x_test, digits.y_test, classifiers=("logreg",))["logreg_acc"]
    noisy_release = DPNTK(epsilon=0.05, **NTK).release(digits.x_train, digits.y_train, dataset="digits")
    noisy = distill_release(noisy_release, 10, iterations=300)
    acc_noisy = image_classifier_scores(noisy.x, noisy.y, digits.x_test, digits.y_test,
                                        classifiers=("logreg",))["logreg_acc"]
    assert 0.6 < acc < 0.99
    assert acc_noisy < acc - 0.15


def test_distillation_reads_no_private_data_and_spends_nothing(tmp_path, digits, monkeypatch):
    budget = BudgetFile.open(tmp_path / "budget.json", "digits", 10.0, 1e-4)
    model = DPNTK(epsilon=2, **NTK)
    release = model.release(digits.x_train, digits.y_train, dataset="digits", budget=budget)
    spent = BudgetFile.open(tmp_path / "budget.json").spent
    import mmdsynth.embedding
    import mmdsynth.privacy.engine

    def explode(*a, **k):
        raise AssertionError("distillation touched the privacy engine")
    monkeypatch.setattr(mmdsynth.privacy.engine.PrivacyEngine, "__init__", explode)
    monkeypatch.setattr(mmdsynth.embedding, "release_mean_embedding", explode)
    dset = model.distill(3, iterations=20)
    assert BudgetFile.open(tmp_path / "budget.json").spent == spent and spent[0] == pytest.approx(2.0)
    assert dset.ledger.to_list() == release.ledger.to_list()
    assert dset.info["release_sha256"] == release_digest(release)
    # free to repeat with another K, from the same release, still nothing spent
    assert len(model.distill(1, iterations=5).y) == 10
    assert BudgetFile.open(tmp_path / "budget.json").spent == spent


def test_set_round_trips_with_its_ledger_and_refuses_overwrites(tmp_path, digits_release):
    dset = distill_release(digits_release, 2, iterations=5, seed=3)
    path = dset.save(tmp_path / "set.npz")
    with np.load(path, allow_pickle=False) as z:         # what an independent evaluator reads
        assert set(z.files) == {"x", "y", "mmdsynth"} and z["x"].shape == (20, 1, 8, 8) and z["y"].dtype == np.int64
    back = DistilledSet.load(path)
    assert np.array_equal(back.x, dset.x) and np.array_equal(back.y, dset.y)
    assert back.ledger.to_list() == digits_release.ledger.to_list() and back.info["seed"] == 3
    with pytest.raises(InvalidParameterError, match="exists"):
        dset.save(path)
    np.savez(tmp_path / "plain.npz", x=dset.x, y=dset.y)
    with pytest.raises(ArtifactError, match="not a distilled set"):
        DistilledSet.load(tmp_path / "plain.npz")


def test_unconditional_and_non_embedding_releases_are_refused(digits):
    unconditional = DPNTK(epsilon=10, conditional=False, ntk_width=50, noise_seed=0).release(digits.x_train)
    with pytest.raises(InvalidParameterError, match="unconditional.*conditional=True"):
        distill_release(unconditional, 10)
    with pytest.raises(InvalidParameterError, match="per_class"):
        distill_release(DPNTK(epsilon=10, **NTK).release(digits.x_train, digits.y_train), 0)


def test_table_rows_are_distilled_per_class(tmp_path):
    df = mixed_table(600)
    model = DPMERF(epsilon=5, n_features=300, noise_seed=0, numeric_share=0.1)
    model.release(df, schema=MIXED_SCHEMA)
    dset = model.distill(4, iterations=100)
    rows = dset.x
    assert isinstance(rows, pd.DataFrame) and len(rows) == 8
    assert list(rows["y"]) == ["lo"] * 4 + ["hi"] * 4
    out = dset.save(tmp_path / "rows.csv")
    ledger = json.loads((tmp_path / "rows.ledger.json").read_text())
    assert ledger["format"] == "mmdsynth-distilled-set" and ledger["ledger"] == json.loads(json.dumps(model.release_.ledger.to_list()))
    assert len(pd.read_csv(out)) == 8
    with pytest.raises(InvalidParameterError, match=r"\.csv or \.parquet"):
        dset.save(tmp_path / "rows.npz")


def test_cli_distill_then_evaluate(tmp_path, digits, capsys):
    from mmdsynth.cli import main

    def run(*argv):
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err
    run_dir, out_set = tmp_path / "run", tmp_path / "set.npz"
    assert run("fit", "--method", "dp-ntk", "--dataset", "digits", "--epsilon", 5, "--iterations", 5,
               "--batch-size", 100, "--ntk-width", 100, "--out", run_dir)[0] == 0
    code, out, _ = run("distill", run_dir, "--images-per-class", 5, "--iterations", 50, "--out", out_set)
    assert code == 0 and "50 in all" in out and "no privacy spent" in out and "epsilon=5" in out
    code, _, err = run("distill", run_dir, "--images-per-class", 5, "--out", out_set)
    assert code == 2 and "--force" in err and err.count("\n") == 1
    code, out, _ = run("evaluate", out_set, "--json")
    result = json.loads(out)
    assert result["method"] == "distilled from dp-ntk" and result["epsilon"] == 5 and result["n_synthetic"] == 50
    assert 0.2 < result["logreg_acc"] <= 1 and (tmp_path / "set.evaluation.json").exists()
    code, _, err = run("distill", run_dir, "--images-per-class", 5, "--out", tmp_path / "s.csv")
    assert code == 2 and "FILE.npz" in err and not (tmp_path / "s.csv").exists()


def test_dsa_augment_keeps_shapes_and_is_reproducible():
    x = torch.rand(6, 3, 16, 16)
    for family in FAMILIES:
        a = dsa_augment(x, family, torch.Generator().manual_seed(0))
        b = dsa_augment(x, family, torch.Generator().manual_seed(0))
        assert a.shape == x.shape and torch.equal(a, b)
        assert not torch.allclose(a, x), family
    with pytest.raises(InvalidParameterError, match="unknown.*blur"):
        dsa_augment(x, "crop_blur", torch.Generator())


def test_dc_protocol_needs_a_known_dataset(digits):
    with pytest.raises(InvalidParameterError, match="normalisation of mnist"):
        cnn_scores(digits.x_train[:20], digits.y_train[:20], digits.x_test, digits.y_test, protocol="dc",
                   dataset="digits", seeds=(0,))
    res = cnn_scores(digits.x_train[:50], digits.y_train[:50], digits.x_test[:50], digits.y_test[:50],
                     protocol="fixed", seeds=(0,), epochs=2)
    assert res["cnn_protocol"]["name"] == "fixed"


def test_cli_defaults_are_the_library_defaults_and_help_loads_no_torch():
    import inspect
    import subprocess
    import sys

    from mmdsynth.cli import distill as cli_distill

    params = inspect.signature(distill_release).parameters
    assert (cli_distill.ITERATIONS, cli_distill.LR) == (params["iterations"].default, params["lr"].default)
    code = "import sys; from mmdsynth.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
