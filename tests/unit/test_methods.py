"""Generators, training with resume, DPNTK/DPMERF fit/sample/save/load (tiny, on digits)."""
import json

import numpy as np
import pytest
import torch

import mmdsynth
from mmdsynth import DPMERF, DPNTK, BudgetFile
from mmdsynth.errors import ArtifactError, InvalidParameterError, UnknownNameError
from mmdsynth.evaluation import image_classifier_scores
from mmdsynth.generators import ConvGenerator, ResNetGenerator, build_generator
from mmdsynth.generators import image as image_gen  # noqa: F401

TINY = dict(n_classes=10, iterations=60, batch_size=200, noise_seed=0, checkpoint_every=20)


class Exploding:
    """Private data that must not be read (a resume must not touch it)."""

    shape = (1437, 1, 8, 8)

    def __array__(self, *a, **k):
        raise AssertionError("private data was read")


def test_conv_generator_is_the_papers_mnist_architecture():
    g = ConvGenerator((1, 28, 28), 10)
    assert g.fc[0].in_features == 15 and g.fc[0].out_features == 200 and g.fc[3].out_features == 784
    assert [m.out_channels for m in g.conv if isinstance(m, torch.nn.Conv2d)] == [8, 1]
    x = g.generate(g.draw_labels(7))
    assert x.shape == (7, 1, 28, 28) and 0 <= x.min() and x.max() <= 1
    assert build_generator(json.loads(json.dumps(g.spec()))).spec() == g.spec()
    # the authors' ConvCondGen: no ReLU after the second BN; their bilinear (align_corners) upsampling
    assert [type(m).__name__ for m in g.fc] == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d"]
    assert g.upsample == "nearest"
    g = ConvGenerator((1, 28, 28), 10, upsample="bilinear").eval()
    z = torch.randn(6, 15)
    F = torch.nn.functional
    h = g.fc(z).reshape(6, 16, 7, 7)
    h = torch.relu(g.conv[1](F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=True)))
    expected = torch.sigmoid(g.conv[4](F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=True)))
    assert torch.allclose(g(z), expected, atol=1e-6)


def test_conv_generators_saved_before_the_architecture_options_rebuild_unchanged():
    old = ConvGenerator((1, 28, 28), 10, upsample="nearest", relu_after_fc=True)
    spec = old.spec()
    legacy = {k: v for k, v in spec.items() if k not in ("upsample", "relu_after_fc")}   # an older model.json
    again = build_generator(legacy, saved=True)
    assert again.spec() == spec and [type(m).__name__ for m in again.fc][-1] == "ReLU"
    again.load_state_dict(old.state_dict())
    z = torch.randn(4, 15)
    assert torch.equal(again.eval()(z), old.eval()(z))
    with pytest.raises(InvalidParameterError, match="upsample must be 'nearest' \\(default\\) or 'bilinear'"):
        ConvGenerator(upsample="bicubic")


def test_a_partial_generator_spec_from_the_user_takes_todays_defaults_not_the_legacy_ones(digits):
    """Only a spec read back from a file takes LEGACY_SPEC's values for the keys it lacks; a user's
    {"name": "conv", "code_dim": 7} gets the current architecture (no ReLU after the second BN)."""
    fresh = build_generator({"name": "conv", "image_shape": [1, 28, 28], "n_classes": 10, "code_dim": 7})
    assert not fresh.relu_after_fc and fresh.upsample == "nearest" and fresh.code_dim == 7
    assert [type(m).__name__ for m in fresh.fc][-1] == "BatchNorm1d"
    m = DPNTK(epsilon=4, ntk_width=20, **{**TINY, "iterations": 2}, generator={"name": "conv", "code_dim": 7})
    m.fit(digits.x_train, digits.y_train)
    assert m.generator_.spec() == {**ConvGenerator((1, 8, 8), 10).spec(), "code_dim": 7}


@pytest.mark.parametrize("k", [3, 5, 7])
def test_phase_decomposed_upsample_conv_equals_upsample_then_conv(k):
    torch.manual_seed(k)
    conv = torch.nn.Conv2d(6, 4, k, padding=(k - 1) // 2)
    x = torch.randn(5, 6, 7, 9, dtype=torch.float64)
    conv.double()
    ref = conv(torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest"))
    assert torch.allclose(image_gen.upsample_conv(x, conv), ref, atol=1e-12)
    g = ConvGenerator((1, 8, 8), 3, kernel_size=k).eval()
    z = torch.randn(50, 8)
    naive = g.conv(g.fc(z).reshape(50, 16, 2, 2))   # the Sequential as declared: upsample, conv, ...
    assert torch.allclose(g(z), naive, atol=1e-6)


def test_fc_generator_is_the_dp_hp_authors_mnist_architecture():
    g = build_generator({"name": "fc", "image_shape": [1, 28, 28], "n_classes": 10})
    linears = [m for m in g.net if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(15, 500), (500, 500), (500, 784)]
    with torch.no_grad():
        x = g.generate(torch.arange(6) % 10, torch.Generator().manual_seed(0))
    assert x.shape == (6, 1, 28, 28) and 0 <= float(x.min()) and float(x.max()) <= 1
    assert build_generator(json.loads(json.dumps(g.spec()))).spec() == g.spec()
    with pytest.raises(InvalidParameterError, match="hidden"):
        build_generator({"name": "fc", "hidden": []})


def test_resnet_generator_and_shape_errors():
    g = ResNetGenerator((3, 32, 32), 10, code_dim=8, channels=(16, 8, 8))
    assert g.generate(g.draw_labels(4)).shape == (4, 3, 32, 32)
    with pytest.raises(InvalidParameterError, match="divisible by 4"):
        ConvGenerator((1, 30, 30), 10)
    with pytest.raises(UnknownNameError, match="conv"):
        build_generator({"name": "gan"})


def _assert_beats_chance(model, digits):
    x, y = model.sample(1000, seed=0)
    assert x.shape == (1000, 1, 8, 8) and np.bincount(y).min() == 100  # balanced labels
    acc = image_classifier_scores(x, y, digits.x_test, digits.y_test, classifiers=("logreg",))["logreg_acc"]
    assert 0.3 < acc < 0.99, acc  # chance is 0.1; a perfect score would mean something is off
    return acc


def test_tiny_dpntk_beats_chance_on_digits_and_loss_decreases(digits):
    m = DPNTK(epsilon=10, ntk_width=100, **{**TINY, "iterations": 200}).fit(digits.x_train, digits.y_train,
                                                                             dataset="digits")
    assert m is not None and np.mean(m.losses_[-20:]) < 0.5 * m.losses_[0]
    _assert_beats_chance(m, digits)


def test_tiny_dpmerf_beats_chance_on_digits(digits):
    m = DPMERF(epsilon=10, n_features=1000, length_scale=2.0, **{**TINY, "iterations": 200})
    _assert_beats_chance(m.fit(digits.x_train, digits.y_train), digits)


def test_generic_entk_path_trains_a_generator(digits):
    m = DPNTK(epsilon=10, arch="fc_2l", widths=(16, 16), **{**TINY, "iterations": 10, "batch_size": 50})
    m.fit(digits.x_train, digits.y_train)
    assert len(m.losses_) == 10 and all(np.isfinite(m.losses_))


def test_save_load_round_trip_samples_identically(digits, tmp_path):
    m = DPNTK(epsilon=5, ntk_width=20, **TINY).fit(digits.x_train, digits.y_train, out=tmp_path / "m")
    again = mmdsynth.load(tmp_path / "m")
    assert isinstance(again, DPNTK) and again.get_params() == m.get_params()
    a, b = m.sample(30, seed=3), again.sample(30, seed=3)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert again.release_.ledger.total() == (5.0, 1e-5)


def test_resume_spends_no_budget_reads_no_data_and_continues_exactly(digits, tmp_path):
    budget = BudgetFile.open(tmp_path / "budget.json", "digits", 10.0, 1e-5)
    kw = dict(epsilon=4, ntk_width=20, **{**TINY, "iterations": 20, "checkpoint_every": 10})
    DPNTK(**kw).fit(digits.x_train, digits.y_train, dataset="digits", out=tmp_path / "a", budget=budget)
    release_json = (tmp_path / "a" / "release" / "release.json").read_text()
    resumed = DPNTK(**{**kw, "iterations": 40}).fit(Exploding(), None, out=tmp_path / "a", resume=True,
                                                    budget=BudgetFile.open(tmp_path / "budget.json"))
    assert len(BudgetFile.open(tmp_path / "budget.json").charges) == 1  # still the first release only
    assert (tmp_path / "a" / "release" / "release.json").read_text() == release_json
    # one uninterrupted 40-iteration run from the same release gives the same generator, bit for bit
    straight = DPNTK(**{**kw, "iterations": 40})
    straight.release_ = resumed.release_
    straight._train(None, False)
    assert len(resumed.losses_) == 40 and resumed.losses_ == straight.losses_
    for (k, v), w in zip(resumed.generator_.state_dict().items(), straight.generator_.state_dict().values()):
        assert torch.equal(v, w), k


def test_resume_continues_the_checkpointed_generator_architecture(digits, tmp_path):
    """A resume rebuilds the generator the checkpoint holds, not this version's default; a
    checkpoint written before generator specs were saved gets the legacy architecture."""
    kw = dict(epsilon=4, ntk_width=20, **{**TINY, "iterations": 4, "checkpoint_every": 2})
    variant = {"name": "conv", "upsample": "bilinear", "relu_after_fc": True}
    DPNTK(**kw, generator=variant).fit(digits.x_train, digits.y_train, out=tmp_path / "a")
    resumed = DPNTK(**{**kw, "iterations": 6}).fit(Exploding(), None, out=tmp_path / "a", resume=True)
    assert resumed.generator_.upsample == "bilinear" and resumed.generator_.relu_after_fc
    meta_path = tmp_path / "a" / "checkpoint.json"
    meta = json.loads(meta_path.read_text())
    for key in ("generator_spec", "sha256", "tensors_sha256"):      # as written before these existed
        del meta[key]
    meta_path.write_text(json.dumps(meta))
    old = DPNTK(**{**kw, "iterations": 8}).fit(Exploding(), None, out=tmp_path / "a", resume=True)
    assert old.generator_.upsample == "nearest" and old.generator_.relu_after_fc   # ConvGenerator.LEGACY_SPEC


def test_refitting_a_folder_refuses_to_spend_again(digits, tmp_path):
    DPNTK(epsilon=1, ntk_width=10, **{**TINY, "iterations": 2}).fit(digits.x_train, digits.y_train, out=tmp_path)
    with pytest.raises(ArtifactError, match="spend privacy budget a second time"):
        DPNTK(epsilon=1, ntk_width=10, **TINY).fit(digits.x_train, digits.y_train, out=tmp_path)
    with pytest.raises(ArtifactError, match="nothing to resume"):
        DPNTK(epsilon=1, ntk_width=10, **TINY).fit(Exploding(), None, out=tmp_path / "new", resume=True)


def test_errors_name_the_problem(digits, tmp_path):
    with pytest.raises(InvalidParameterError, match="n_classes must be given"):
        DPNTK(epsilon=1).fit(Exploding(), None)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        DPNTK(epsilon=0, n_classes=10).fit(Exploding(), None)
    with pytest.raises(InvalidParameterError, match="batch_size"):
        DPNTK(epsilon=1, n_classes=10, batch_size=0).fit(Exploding(), None)
    with pytest.raises(InvalidParameterError, match="not fitted"):
        DPNTK().sample(5)
    with pytest.raises(ArtifactError, match="model.json is missing"):
        mmdsynth.load(tmp_path)


def test_unconditional_variant(digits):
    m = DPMERF(epsilon=10, n_features=200, conditional=False, iterations=5, batch_size=50)
    m.fit(digits.x_train)
    assert m.release_.tensors["embedding"].shape == (200,)
    x, y = m.sample(10, seed=0)
    assert x.shape == (10, 1, 8, 8) and y is None


def test_frechet_distance_closed_form_and_named_network(digits):
    from mmdsynth.evaluation.frechet import frechet_distance, frechet_report, trace_sqrt_product

    g = np.random.default_rng(0)
    a = g.normal(size=(4000, 3))
    assert frechet_distance(a, a) == pytest.approx(0, abs=1e-6)
    # equal covariances: the distance is the squared mean shift
    assert frechet_distance(a, a + [1.0, 2.0, 0.0]) == pytest.approx(5.0, rel=1e-6)
    # the trace term against a general eigensolver on S1 S2: covariances of full rank, and singular ones (fewer
    # samples than features, on one side or both), where a matrix square root of S1 S2 is ill-conditioned
    for n1, n2 in ((500, 400), (12, 9), (12, 400), (400, 7)):
        f1, f2 = g.normal(size=(n1, 20)) ** 2, g.normal(size=(n2, 20)) @ g.normal(size=(20, 20))
        s1, s2 = np.cov(f1, rowvar=False), np.cov(f2, rowvar=False)
        direct = np.sqrt(np.clip(np.linalg.eigvals(s1 @ s2).real, 0, None)).sum()
        assert trace_sqrt_product(f1, f2, s1, s2) == pytest.approx(direct, rel=1e-6)
    real = frechet_report(digits, digits.x_train.numpy())
    noise = frechet_report(digits, np.random.default_rng(1).random((1437, 1, 8, 8)).astype(np.float32))
    assert real["fd_network"] == "mmdsynth-cnn/digits"
    assert 0 < real["fd"] < noise["fd"] / 5


def test_colour_32x32_uses_resnet_generator_and_generic_cnn_entk():
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(64, 3, 32, 32, generator=g), torch.randint(0, 10, (64,), generator=g)
    m = DPNTK(epsilon=10, arch="cnn", ntk_width=2, n_classes=10, iterations=3, batch_size=8, noise_seed=0,
              generator={"name": "resnet", "code_dim": 8, "channels": [8, 8, 8]})
    m.fit(x, y)
    assert m.generator_.spec()["name"] == "resnet" and not m.release_.feature_spec["fast"]
    assert m.release_.tensors["embedding"].shape == (2 * 3 * 9 + 2 + 2 * 1024 * 10 + 10, 10)
    xs, ys = m.sample(4, seed=0)
    assert xs.shape == (4, 3, 32, 32) and np.isfinite(m.losses_).all()
