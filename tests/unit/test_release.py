import json

import numpy as np
import pytest
import torch

from mmdsynth import BudgetFile, RandomFourierFeatures, Release, build_feature_map, mean_embedding, release_mean_embedding
from mmdsynth.errors import ArtifactError, DataValidationError, InvalidParameterError, PrivacyBudgetError
from mmdsynth.privacy import NoiseSource, gaussian_mechanism
from mmdsynth.validation import PrivacyWarning


def toy(n=200, d=5, classes=3, seed=0):
    g = np.random.default_rng(seed)
    return g.random((n, d)).astype(np.float32), g.integers(0, classes, n)


def test_rff_norm_is_exactly_one_and_spec_rebuilds():
    fmap = RandomFourierFeatures(input_dim=5, n_features=101, length_scale=0.7, seed=3)
    x = torch.randn(50, 5) * 10
    phi = fmap(x.double())
    assert phi.shape == (50, 102)
    assert torch.allclose(phi.norm(dim=1), torch.ones(50, dtype=torch.float64), atol=1e-12)
    again = build_feature_map(json.loads(json.dumps(fmap.spec())))
    assert torch.equal(again(x), fmap(x))


def test_rff_gradient_reuses_the_forward_and_is_autograds():
    """A generator's rows go through one autograd function that keeps the forward's cosines and sines for the
    backward: the same features as the no-gradient route and the gradient of the two-op form."""
    fmap = RandomFourierFeatures(input_dim=4, n_features=64, length_scale=0.5, seed=2)
    x = (torch.randn(30, 4, dtype=torch.float64) * 3).requires_grad_(True)
    probe = torch.randn(30, 64, dtype=torch.float64)
    got = fmap(x)
    assert torch.equal(got.detach(), fmap(x.detach()))
    proj = x @ fmap.weights.T
    want = (2 / 64) ** 0.5 * torch.cat([torch.cos(proj), torch.sin(proj)], 1)
    (g_got,), (g_want,) = (torch.autograd.grad((v * probe).sum(), x) for v in (got, want))
    assert (g_got - g_want).abs().max() < 1e-12 and g_want.abs().max() > 0.1


def test_sensitivity_bound_holds_on_neighbouring_datasets():
    X, y = toy()
    fmap = RandomFourierFeatures(5, 64, 0.3, seed=1)
    mu = mean_embedding(fmap, torch.tensor(X), torch.tensor(y), 3)
    bound = 2 * fmap.norm_bound / len(X)
    g = np.random.default_rng(5)
    worst = 0.0
    for _ in range(50):  # replace one record by an arbitrary (even far away) one
        X2, y2 = X.copy(), y.copy()
        i = g.integers(len(X))
        X2[i] = g.normal(0, 5, 5)
        y2[i] = (y[i] + 1) % 3
        mu2 = mean_embedding(fmap, torch.tensor(X2), torch.tensor(y2), 3)
        worst = max(worst, float((mu - mu2).norm()))
    assert 0.5 * bound < worst <= bound + 1e-12


def test_gaussian_mechanism_noise_scale_and_seed_policy():
    zero = torch.zeros(200_000)
    a = gaussian_mechanism(zero, 0.5, 2.0, NoiseSource(seed=1))
    assert a.std().item() == pytest.approx(1.0, rel=0.01)
    assert torch.equal(a, gaussian_mechanism(zero, 0.5, 2.0, NoiseSource(seed=1)))
    s1, s2 = NoiseSource(), NoiseSource()
    assert s1.policy.startswith("secure")
    assert not torch.equal(s1.normal((10,)), s2.normal((10,)))
    assert NoiseSource(7).policy.startswith("fixed-seed:7")


def test_release_round_trips_bit_exactly(tmp_path):
    X, y = toy()
    fmap = RandomFourierFeatures(5, 32, 0.5)
    rel = release_mean_embedding(fmap, X, y, epsilon=1.0, delta=1e-5, n_classes=3, seed=0, dataset="toy")
    rel.save(tmp_path / "r")
    back = Release.load(tmp_path / "r")
    assert torch.equal(back.tensors["embedding"], rel.tensors["embedding"])
    assert back.tensors["embedding"].dtype == torch.float64
    assert back.ledger == rel.ledger
    assert back.feature_spec == rel.feature_spec and back.dataset == rel.dataset
    e = back.ledger.entries[0]
    assert e.noise_multiplier == pytest.approx(3.7306, abs=1e-3)
    assert e.sensitivity == pytest.approx(2 / 200)
    assert "fixed-seed:0" in e.noise_source
    # no pickle anywhere: JSON + safetensors header
    meta = json.loads((tmp_path / "r" / "release.json").read_text())
    assert meta["format"] == "mmdsynth-release"
    assert not (tmp_path / "r" / "release.safetensors").read_bytes().startswith(b"\x80")


def test_corrupt_release_is_refused(tmp_path):
    X, y = toy()
    rel = release_mean_embedding(RandomFourierFeatures(5, 8), X, y, epsilon=1, delta=1e-5, n_classes=3)
    rel.save(tmp_path)
    raw = bytearray((tmp_path / "release.safetensors").read_bytes())
    raw[-1] ^= 0xFF
    (tmp_path / "release.safetensors").write_bytes(bytes(raw))
    with pytest.raises(ArtifactError, match="does not match the sha256"):
        Release.load(tmp_path)
    with pytest.raises(ArtifactError, match="no release in"):
        Release.load(tmp_path / "nowhere")


def test_noise_is_really_added():
    X, y = toy(n=2000)
    fmap = RandomFourierFeatures(5, 64, 0.5)
    exact = mean_embedding(fmap, torch.tensor(X), torch.tensor(y), 3)
    rel = release_mean_embedding(fmap, X, y, epsilon=1.0, delta=1e-5, n_classes=3)
    diff = rel.tensors["embedding"] - exact
    std = rel.ledger.entries[0].noise_std
    assert diff.std().item() == pytest.approx(std, rel=0.15)


def test_budget_file_refuses_overspend_and_writes_nothing(tmp_path):
    X, y = toy()
    fmap = RandomFourierFeatures(5, 8)
    budget = BudgetFile.open(tmp_path / "b.json", "toy", 1.5, 1e-5)
    release_mean_embedding(fmap, X, y, epsilon=1.0, delta=5e-6, n_classes=3, budget=budget)
    before = (tmp_path / "b.json").read_text()
    with pytest.raises(PrivacyBudgetError, match=r"would exceed the budget of dataset 'toy'.*remaining epsilon=0.5"):
        release_mean_embedding(fmap, X, y, epsilon=1.0, delta=5e-6, n_classes=3, budget=budget)
    assert (tmp_path / "b.json").read_text() == before
    reopened = BudgetFile.open(tmp_path / "b.json")
    assert reopened.spent == (1.0, 5e-6) and len(reopened.charges) == 1
    release_mean_embedding(fmap, X, y, epsilon=0.5, delta=5e-6, n_classes=3, budget=reopened)
    assert BudgetFile.open(tmp_path / "b.json").remaining[0] == pytest.approx(0.0)
    with pytest.raises(PrivacyBudgetError, match="belongs to dataset 'toy', not 'other'"):
        BudgetFile.open(tmp_path / "b.json", "other")


def test_bad_inputs_are_typed_and_named():
    X, y = toy()
    fmap = RandomFourierFeatures(5, 8)
    kw = dict(epsilon=1.0, delta=1e-5, n_classes=3)
    Xn = X.copy(); Xn[3, 1] = np.nan
    with pytest.raises(DataValidationError, match="X contains 1 NaN or infinite value"):
        release_mean_embedding(fmap, Xn, y, **kw)
    with pytest.raises(DataValidationError, match="X is empty"):
        release_mean_embedding(fmap, X[:0], y[:0], **kw)
    with pytest.raises(DataValidationError, match="X has 200 rows but y has 199 labels"):
        release_mean_embedding(fmap, X, y[:-1], **kw)
    release_mean_embedding(fmap, X, np.zeros(200, int), **kw)   # one class present: released (issue 18)
    with pytest.raises(DataValidationError, match="labels must lie in 0..2"):
        release_mean_embedding(fmap, X, np.where(y == 0, 3, y), **kw)
    with pytest.raises(InvalidParameterError, match="n_classes must be given"):
        release_mean_embedding(fmap, X, y, epsilon=1.0, delta=1e-5)
    with pytest.warns(PrivacyWarning, match="delta=0.01 is >= 1/n"):
        release_mean_embedding(fmap, X, y, epsilon=1.0, delta=0.01, n_classes=3)


def test_calibration_happens_before_data_is_read():
    class Exploding:
        shape = (10, 5)

        def __array__(self, *a, **k):
            raise AssertionError("data was read")

    with pytest.raises(InvalidParameterError):
        release_mean_embedding(RandomFourierFeatures(5, 8), Exploding(), None, epsilon=-1, delta=1e-5)


def test_exhausted_budget_refuses_before_data_is_read(tmp_path):
    class Exploding:
        shape = (10, 5)

        def __array__(self, *a, **k):
            raise AssertionError("data was read")

    budget = BudgetFile.open(tmp_path / "b.json", "toy", 1.0, 1e-5)
    budget.charge(1.0, 1e-5, "earlier release")
    with pytest.raises(PrivacyBudgetError):
        release_mean_embedding(RandomFourierFeatures(5, 8), Exploding(), None, epsilon=0.1, delta=1e-6,
                               budget=budget)


def test_atomic_write_replaces_on_success_and_leaves_nothing_on_failure(tmp_path):
    from mmdsynth._io import atomic_write

    target = tmp_path / "out.txt"
    with atomic_write(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"
    with pytest.raises(RuntimeError):
        with atomic_write(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_library_warning_names_the_users_line():
    """A warning raised deep in a fit (here in a planner's stages, inside the engine's run) points at the caller's
    line, not at the library's, whatever the depth: the Python user sees where their call is."""
    import warnings

    X = torch.rand(20, 3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        release_mean_embedding(RandomFourierFeatures(3, 10, seed=0), X, epsilon=1.0, delta=0.1)   # delta >= 1/n
    (w,) = [w for w in seen if "permits releasing a record" in str(w.message)]
    assert w.filename == __file__
