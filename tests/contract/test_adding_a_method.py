"""The README's "Adding a method" walk-through, run as written: one module, one registry line, and the
contract, the CLI, save/load and the privacy path work for the new method with no other change."""
import json

import pytest

import mmdsynth
from mmdsynth import cli
from mmdsynth.methods import METHODS


@pytest.fixture
def toy():
    # --- the README's example, verbatim ------------------------------------------------------
    from mmdsynth.features import RandomFourierFeatures
    from mmdsynth.methods import KernelGeneratorMethod, register

    @register
    class ToyRFF(KernelGeneratorMethod):
        """A toy method: a release-once generator on `width` random Fourier features."""

        method = "toy-rff"
        data_kinds = ("image",)

        def __init__(self, epsilon: float | None = None, delta: float = 1e-5, *, width: int = 64, **kwargs):
            super().__init__(epsilon, delta, **kwargs)
            self.width = width

        def feature_map(self, input_dim: int, n_classes: int):
            return RandomFourierFeatures(input_dim, self.width, seed=0)
    # -------------------------------------------------------------------------------------------
    yield ToyRFF
    METHODS.pop("toy-rff")


def test_the_toy_method_keeps_the_contract(toy):
    assert "width" in toy.param_names() and "iterations" in toy.param_names()
    m = toy(1.0, n_classes=10, width=32, iterations=3, batch_size=50, noise_seed=0)
    assert toy(**m.get_params()).get_params() == m.get_params()
    with pytest.raises(mmdsynth.InvalidParameterError, match="takes image data, not tables"):
        toy.defaults_for("table")


def test_the_toy_method_fits_saves_loads_and_goes_through_the_engine(toy, tmp_path):
    digits = mmdsynth.load_dataset("digits")
    m = toy(1.0, n_classes=10, width=32, iterations=3, batch_size=50).fit(digits.x_train, digits.y_train,
                                                                           out=tmp_path / "m")
    entry = m.release_.ledger.entries[0]
    assert entry.noise_source.startswith("secure") and entry.neighbouring == "replace_one"
    assert m.release_.feature_spec["n_features"] == 32
    again = mmdsynth.load(tmp_path / "m")
    assert type(again) is toy and again.width == 32
    x, y = again.sample(20, seed=0)
    assert x.shape == (20, 1, 8, 8)


def test_the_cli_takes_the_toy_methods_own_flag_and_refuses_others(toy, tmp_path, capsys):
    out = tmp_path / "m"
    assert cli.main(["fit", "--method", "toy-rff", "--dataset", "digits", "--epsilon", "1", "--width", "16",
                     "--iterations", "2", "--batch-size", "50", "--out", str(out), "-q"]) == 0
    assert json.loads((out / "model.json").read_text())["params"]["width"] == 16
    assert cli.main(["fit", "--method", "toy-rff", "--dataset", "digits", "--epsilon", "1", "--n-features", "5",
                     "--out", str(tmp_path / "n"), "-q"]) == 2
    assert "--n-features: dp-merf / hybrid options, not taken by --method toy-rff" in capsys.readouterr().err
