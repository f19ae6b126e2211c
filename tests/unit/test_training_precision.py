"""The training step's precision option: bfloat16 autocast of the generator and the feature map's products,
training only (the release is computed as before), float32 weights, loss and optimiser state."""
import numpy as np
import pytest
import torch

from mmdsynth import DPNTK
from mmdsynth.errors import InvalidParameterError, UnknownNameError
from mmdsynth.features import ENTKFeatures
from mmdsynth.generators import FCGenerator
from mmdsynth.training import TrainConfig, train_generator


class _Probe(ENTKFeatures):
    """e-NTK features that record, at each loss, whether autocast was on and the generated batch's dtype."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def mmd_loss(self, target, x, weights):
        self.seen.append((torch.is_autocast_enabled("cpu"), x.dtype, weights.dtype))
        return super().mmd_loss(target, x, weights)


def _train(precision, iterations=60, loss="direct"):
    torch.manual_seed(0)
    fmap = _Probe(16, "fc_1l", (32,), n_outputs=3, seed=1)
    x = torch.rand(300, 16)
    y = torch.arange(300) % 3
    target = fmap.weighted_sum(x, torch.nn.functional.one_hot(y, 3).float() / 300).detach()
    gen = FCGenerator((1, 4, 4), n_classes=3, code_dim=4, hidden=(32,))
    losses = train_generator(gen, fmap, target, TrainConfig(iterations=iterations, batch_size=120, lr=0.01,
                                                            lr_step=1000, precision=precision, loss=loss),
                             device="cpu")
    return gen, fmap, losses


def test_bfloat16_runs_the_step_in_bfloat16_and_keeps_float32_parameters_and_losses():
    gen, fmap, losses = _train("bfloat16")
    assert fmap.seen and all(on for on, _, _ in fmap.seen)               # every step under autocast
    assert {dtype for _, dtype, _ in fmap.seen} == {torch.bfloat16}      # the generator's output in bfloat16
    assert {w for _, _, w in fmap.seen} == {torch.float32}               # 1/B not rounded to bfloat16
    assert all(p.dtype == torch.float32 for p in gen.parameters())
    assert all(np.isfinite(losses))
    assert not torch.is_autocast_enabled("cpu")                           # the mode ends with training
    with torch.no_grad():                                                 # sampling after training: float32
        assert gen.generate(torch.zeros(4, dtype=torch.long)).dtype == torch.float32


def test_bfloat16_training_converges_like_float32():
    _, f32_map, f32 = _train("float32", iterations=150)
    _, _, bf16 = _train("bfloat16", iterations=150)
    assert not any(on for on, _, _ in f32_map.seen)                       # float32: no autocast at all
    assert {dtype for _, dtype, _ in f32_map.seen} == {torch.float32}
    tail32, tail16 = np.mean(f32[-20:]), np.mean(bf16[-20:])
    assert tail16 < 0.3 * bf16[0]                                         # it learns (float32: 0.038 -> 0.0069)
    assert tail16 == pytest.approx(tail32, rel=0.1), (tail16, tail32)     # and ends where float32 does


def test_the_moving_average_loss_trains_in_bfloat16_too():
    """DP-MEPF's loss: the generated embedding is formed under autocast, the moving average in float32."""
    _, _, f32 = _train("float32", iterations=150, loss="mavg")
    _, _, bf16 = _train("bfloat16", iterations=150, loss="mavg")
    assert all(np.isfinite(bf16)) and np.mean(bf16[-20:]) < 0.5 * bf16[0]
    assert np.mean(bf16[-20:]) == pytest.approx(np.mean(f32[-20:]), rel=0.1)


def test_an_unknown_precision_is_refused_before_any_data_is_read():
    with pytest.raises(UnknownNameError, match="bfloat16"):
        TrainConfig(precision="float16").validate()

    class Unreadable:                                                     # reading it would be a bug
        shape = (10, 1, 4, 4)

        def __getattr__(self, name):
            raise AssertionError("the data were read before the settings were checked")

    model = DPNTK(epsilon=1.0, n_classes=2, precision="half", ntk_width=8)
    with pytest.raises(InvalidParameterError, match="precision must be one of 'float32', 'bfloat16', 'auto'; got 'half'"):
        model.fit(Unreadable(), np.zeros(10, dtype=int))         # the method's declared choices, as every parameter's


def test_the_release_does_not_depend_on_the_training_precision():
    """precision changes training only: with the same (test-only) noise seed the releases are bit-identical."""
    rng = np.random.default_rng(0)
    x, y = rng.random((64, 1, 4, 4)).astype(np.float32), np.arange(64) % 2
    releases = []
    for precision in ("float32", "bfloat16"):
        model = DPNTK(epsilon=1.0, n_classes=2, ntk_width=8, iterations=3, batch_size=16, noise_seed=7,
                      precision=precision, generator={"name": "fc", "hidden": [8]}, progress=False)
        model.fit(x, y)
        releases.append(model.release_.tensors["embedding"])
        assert model.settings_.precision == precision
    assert torch.equal(releases[0], releases[1])


@pytest.mark.parametrize("hardware", [True, False])
def test_auto_trains_in_bfloat16_exactly_where_the_device_computes_it_in_hardware(monkeypatch, hardware):
    """precision="auto": bfloat16 autocast on a device with bfloat16 hardware, plain float32 elsewhere (where torch
    would emulate it, slower than float32)."""
    import mmdsynth.training as training

    monkeypatch.setattr(training, "native_bfloat16", lambda device: hardware)
    assert training.step_dtype("auto", "cpu") == ("bfloat16" if hardware else "float32")
    assert training.step_dtype("float32", "cpu") == "float32" and training.step_dtype("bfloat16", "cpu") == "bfloat16"
    _, fmap, losses = _train("auto", iterations=5)
    assert {on for on, _, _ in fmap.seen} == {hardware}
    assert {dtype for _, dtype, _ in fmap.seen} == {torch.bfloat16 if hardware else torch.float32}
    assert all(np.isfinite(losses))


def test_native_bfloat16_follows_torchs_own_checks_of_the_processor(monkeypatch):
    from mmdsynth.runtime import native_bfloat16

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert native_bfloat16("cpu") is False
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert native_bfloat16("cpu") is True and native_bfloat16(torch.device("cpu")) is True
    assert native_bfloat16("meta") is False                               # no autocast claim for other devices


def test_dp_ntk_images_default_to_auto_and_everything_else_to_float32():
    """The measured default (MNIST, benchmarks/log/2026-11-29.md#bf16-amx): DP-NTK on images only."""
    from mmdsynth import DPHP, DPMEPF, DPMERF, DPRandConv

    assert DPNTK(epsilon=1.0).settings_for("image").precision == "auto"
    assert DPNTK(epsilon=1.0).settings_for("table").precision == "float32"
    assert DPNTK(epsilon=1.0, precision="float32").settings_for("image").precision == "float32"   # given: kept
    for cls in (DPMERF, DPHP):
        for kind in ("image", "table"):
            assert cls(epsilon=1.0).settings_for(kind).precision == "float32", (cls, kind)
    for cls in (DPRandConv, DPMEPF):
        assert cls(epsilon=1.0).settings_for("image").precision == "float32", cls


@pytest.mark.parametrize("hardware", [True, False])
def test_the_fit_summary_says_which_arithmetic_auto_chose(monkeypatch, hardware):
    import mmdsynth.training as training

    monkeypatch.setattr(training, "native_bfloat16", lambda device: hardware)
    rng = np.random.default_rng(0)
    x, y = rng.random((64, 1, 4, 4)).astype(np.float32), np.arange(64) % 2
    model = DPNTK(epsilon=1.0, n_classes=2, ntk_width=8, iterations=3, batch_size=16,
                  generator={"name": "fc", "hidden": [8]}, progress=False).fit(x, y)
    line = model.fit_summary("tiny", "runs/x")[0]
    assert model.settings_.precision == "auto"
    assert ("in bfloat16 (precision auto: this device computes bfloat16 in hardware)" in line) == hardware
    assert ("in float32 (precision auto: no bfloat16 hardware here)" in line) == (not hardware)
    plain = DPNTK(epsilon=1.0, n_classes=2, ntk_width=8, iterations=3, batch_size=16, precision="float32",
                  generator={"name": "fc", "hidden": [8]}, progress=False).fit(x, y)
    assert "precision" not in plain.fit_summary("tiny", "runs/x")[0]
