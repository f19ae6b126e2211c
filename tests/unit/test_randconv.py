"""Random ConvNet features (dp-randconv): fixed public views per network, and the per-network block loss that
distillation's stochastic steps use (issue 34)."""
import numpy as np
import pytest
import torch

from mmdsynth import DPMERF, DPRandConv
from mmdsynth.cli import main
from mmdsynth.errors import InvalidParameterError
from mmdsynth.features import RandomFourierFeatures, build_feature_map
from mmdsynth.features.randconv import RandomConvFeatures
from mmdsynth.methods.distill import distill_release
from mmdsynth.training import batch_weights

SHAPE = (1, 16, 16)


def _images(n, seed=0):
    return torch.rand((n, *SHAPE), generator=torch.Generator().manual_seed(seed))


def test_views_keep_every_record_at_unit_norm_and_round_trip_through_the_spec():
    fmap = RandomConvFeatures(SHAPE, n_networks=4, width=8, augment=True)
    x = torch.cat([_images(6), torch.zeros(1, *SHAPE), torch.ones(1, *SHAPE), 1e3 * _images(1, 1)])
    phi = fmap(x)
    assert torch.allclose(phi.norm(dim=1), torch.ones(len(x)), atol=1e-5)
    rebuilt = build_feature_map(fmap.spec())
    assert rebuilt.augment and torch.equal(rebuilt(x), phi)
    old_spec = {k: v for k, v in fmap.spec().items() if k != "augment"}      # releases made before views existed
    assert not build_feature_map(old_spec).augment


def test_each_network_but_the_first_sees_its_own_warped_view():
    x = _images(5)
    plain = RandomConvFeatures(SHAPE, n_networks=3, width=8)(x)
    warped = RandomConvFeatures(SHAPE, n_networks=3, width=8, augment=True)
    views = warped.views
    assert views[0] is None and not torch.equal(views[1], views[2])
    phi, b = warped(x), warped.block
    assert torch.equal(phi[:, :b], plain[:, :b])                 # network 0: the image itself
    for k in (1, 2):
        assert (phi[:, k * b:(k + 1) * b] - plain[:, k * b:(k + 1) * b]).abs().max() > 1e-3
    colour = RandomConvFeatures((3, 16, 16), n_networks=16, width=4, augment=True)
    assert any(float(v[0, 0]) < 0 for v in colour.views[1:])      # colour images: some views are mirrored


def test_block_losses_add_up_to_the_whole_loss():
    fmap = RandomConvFeatures(SHAPE, n_networks=4, width=8, augment=True)
    x, w = _images(6), torch.rand(6, 3)
    target = torch.randn(fmap.out_dim, 3)
    whole = fmap.mmd_loss(target, x, w)
    per_block = sum(fmap.block_loss(target, x, w, [k]) for k in range(4)) / 4   # each scaled by n/1
    assert torch.allclose(per_block, whole, rtol=1e-5)
    assert torch.allclose(fmap.block_loss(target, x, w, range(4)), whole, rtol=1e-5)
    pairs = [fmap.block_loss(target, x, w, [a, b]) for a in range(4) for b in range(a + 1, 4)]
    assert torch.allclose(sum(pairs) / len(pairs), whole, rtol=1e-5)  # the mean over subsets: unbiased


def test_one_block_map_block_loss_is_its_mmd_loss():
    rff = RandomFourierFeatures(5, 20)
    xr, w, t = torch.rand(4, 5), torch.rand(4, 3), torch.randn(20, 3)
    assert rff.n_blocks == 1
    assert torch.equal(rff.block_loss(t, xr, w, [0]), rff.mmd_loss(t, xr, w))


@pytest.fixture(scope="module")
def conv_release(digits):
    model = DPRandConv(epsilon=10, n_classes=10, n_networks=4, conv_width=8, conv_augment=True, noise_seed=0)
    return model.release(digits.x_train, digits.y_train, dataset="digits")


@pytest.fixture
def block_calls(monkeypatch):
    """The blocks of every RandomConvFeatures.block_loss call, in order (the call itself goes through)."""
    calls = []
    original = RandomConvFeatures.block_loss

    def spy(self, target, x, weights, blocks):
        calls.append(list(blocks))
        return original(self, target, x, weights, blocks)

    monkeypatch.setattr(RandomConvFeatures, "block_loss", spy)
    return calls


def test_stochastic_distillation_matches_subsets_and_reports_the_whole_loss(conv_release, block_calls):
    calls = block_calls
    dset = distill_release(conv_release, 3, iterations=40, seed=5, blocks_per_step=1)
    assert len(calls) == 40 and all(len(c) == 1 for c in calls)
    assert len({c[0] for c in calls}) == 4                         # every network gets its turn
    assert dset.info["blocks_per_step"] == 1 and conv_release.feature_spec["augment"]
    fmap = build_feature_map(conv_release.feature_spec)
    target = conv_release.tensors["embedding"].float()
    assert "class_proportions" not in conv_release.tensors         # uniform weights, as distill_release uses
    labels = torch.as_tensor(dset.y)
    weights = batch_weights(labels, 10, len(labels), "cpu", proportions=None)
    whole = fmap.mmd_loss(target, torch.as_tensor(dset.x), weights).item()
    assert dset.info["loss_final"] == pytest.approx(whole, rel=1e-4)
    start = torch.sigmoid(torch.randn((len(labels), *dset.x.shape[1:]), generator=torch.Generator().manual_seed(5)))
    assert dset.info["loss_start"] == pytest.approx(fmap.mmd_loss(target, start, weights).item(), rel=1e-4)
    assert dset.info["loss_final"] < dset.info["loss_start"]
    again = distill_release(conv_release, 3, iterations=40, seed=5, blocks_per_step=1)
    assert np.array_equal(again.x, dset.x)                          # the subsets come from the public seed


def test_blocks_per_step_covering_every_network_is_the_full_loss(conv_release):
    full = distill_release(conv_release, 2, iterations=5, seed=1, blocks_per_step=None)
    same = distill_release(conv_release, 2, iterations=5, seed=1, blocks_per_step=4)
    assert same.info["blocks_per_step"] is None and np.allclose(same.x, full.x, atol=1e-6)
    with pytest.raises(Exception, match="blocks_per_step"):
        distill_release(conv_release, 2, iterations=5, blocks_per_step=0)


def test_the_measured_recipe_is_the_default(conv_release, digits, tmp_path, capsys):
    """Issue 49 item 2: dp-randconv releases 32 networks and distillation matches 2 of them a step unless told
    otherwise; other releases keep every block every step; the command line's 'all' matches every block."""
    assert DPRandConv(1.0).get_params()["n_networks"] == 32
    auto = distill_release(conv_release, 2, iterations=5, seed=1)
    assert auto.info["blocks_per_step"] == 2
    assert np.array_equal(auto.x, distill_release(conv_release, 2, iterations=5, seed=1, blocks_per_step=2).x)
    merf = DPMERF(epsilon=10, n_classes=10, n_features=200, noise_seed=0).release(digits.x_train, digits.y_train)
    assert distill_release(merf, 2, iterations=3).info["blocks_per_step"] is None
    conv_release.save(tmp_path / "rc")
    for flag, said in ([], "(2 of the map's blocks per step)"), (["--blocks-per-step", "all"], None):
        assert main(["distill", str(tmp_path / "rc"), "--images-per-class", "2", "--iterations", "3", "--out",
                     str(tmp_path / f"d{len(flag)}.npz")] + flag) == 0
        out = capsys.readouterr().out
        assert (said in out) if said else "blocks per step" not in out
    with pytest.raises(SystemExit):
        main(["distill", str(tmp_path / "rc"), "--images-per-class", "2", "--blocks-per-step", "two", "--out",
              str(tmp_path / "x.npz")])


def test_default_depth_leaves_the_last_convolution_at_least_four_by_four():
    from mmdsynth.features.randconv import auto_depth
    assert auto_depth((1, 28, 28)) == 3 and auto_depth((3, 32, 32)) == 3 and auto_depth((1, 8, 8)) == 2
    assert RandomConvFeatures((1, 8, 8), n_networks=1, width=4).depth == 2
    assert RandomConvFeatures((1, 8, 8), n_networks=1, width=4, depth=3).depth == 3      # an explicit choice stays


def test_a_set_distilled_from_a_digits_release_classifies_digits(digits):
    """At the default depth (2 on 8 x 8) the features carry the classes; at depth 3 they carried almost nothing
    (LogReg 0.13 at eps 10), which this would catch."""
    from mmdsynth.evaluation.downstream import image_classifier_scores
    rel = DPRandConv(epsilon=10, n_classes=10, n_networks=8, noise_seed=0).release(digits.x_train, digits.y_train)
    dset = distill_release(rel, 10, iterations=300)
    acc = image_classifier_scores(dset.x, dset.y, digits.x_test, digits.y_test, classifiers=("logreg",))["logreg_acc"]
    assert acc > 0.7


def test_fit_release_only_then_distill_then_resume_to_train(tmp_path, capsys):
    """`mmdsynth fit --release-only` keeps the release and trains nothing; `distill` reads it; `fit --resume` trains a
    generator from it later without a second release; DP-KIP (no single release) is refused by name."""
    from mmdsynth.cli import main

    run = tmp_path / "run"
    assert main(["fit", "--method", "dp-randconv", "--dataset", "digits", "--epsilon", "2", "--n-networks", "2",
                 "--conv-width", "8", "--release-only", "--out", str(run)]) == 0
    out = capsys.readouterr().out
    assert "no generator trained" in out and f"mmdsynth distill {run}" in out
    assert sorted(p.name for p in run.iterdir()) == ["release"]
    assert main(["distill", str(run), "--images-per-class", "2", "--iterations", "4", "--blocks-per-step", "1",
                 "--out", str(tmp_path / "set.npz")]) == 0
    assert "(1 of the map's blocks per step)" in capsys.readouterr().out
    before = (run / "release" / "release.json").read_bytes()
    assert main(["fit", "--resume", "--out", str(run), "--iterations", "2", "--batch-size", "20"]) == 0
    assert (run / "model.json").exists() and (run / "release" / "release.json").read_bytes() == before
    capsys.readouterr()
    assert main(["fit", "--method", "dp-kip", "--dataset", "digits", "--epsilon", "1", "--release-only",
                 "--out", str(tmp_path / "kip")]) == 2
    assert "dp-kip reads the data at every step" in capsys.readouterr().err
    assert not (tmp_path / "kip").exists()


def test_pool_averages_the_last_map_and_round_trips_through_the_spec():
    """pool=p: each network's last map averaged to p x p cells (width * p * p features), still unit norm; the
    spec rebuilds it, an old spec (no "pool") keeps the whole map, and a pool larger than the map is refused."""
    x = torch.cat([_images(4), torch.zeros(1, *SHAPE)])
    whole = RandomConvFeatures(SHAPE, n_networks=2, width=8, depth=2)            # 16 -> 4 x 4 after 2 blocks
    pooled = RandomConvFeatures(SHAPE, n_networks=2, width=8, depth=2, pool=2)
    assert whole.block == 8 * 16 and pooled.block == 8 * 4 and pooled.out_dim == 2 * 32
    phi = pooled(x)
    assert torch.allclose(phi[:4].norm(dim=1), torch.ones(4), atol=1e-5) and phi[4].norm() <= 1 + 1e-6
    raw = whole.networks[0]((x - 0.5) / 0.5).reshape(len(x), 8, 4, 4)           # the same network, unpooled
    cells = torch.nn.functional.avg_pool2d(raw, 2).reshape(len(x), -1)
    expected = cells[:4] / cells[:4].norm(dim=1, keepdim=True) / 2 ** 0.5
    assert torch.allclose(phi[:4, :32], expected, atol=1e-5)
    assert torch.equal(build_feature_map(pooled.spec())(x), phi)
    assert build_feature_map({k: v for k, v in pooled.spec().items() if k != "pool"}).pool is None
    with pytest.raises(Exception, match="pool=8 is larger than the last map"):
        RandomConvFeatures(SHAPE, n_networks=1, width=4, depth=2, pool=8)


# -- NDPDC's sampling: one Poisson sample per network ---------------------------------------------------------
def _sampled(X, y, q, *, T=6, eps=1.0, noise_seed=0, sampler_seed=0, **kw):
    from mmdsynth.embedding import release_sampled_embedding
    fmap = RandomConvFeatures(SHAPE, n_networks=T, width=4)
    return fmap, release_sampled_embedding(fmap, X, y, epsilon=eps, delta=1e-5, sample_rate=q, n_classes=3,
                                           seed=noise_seed, sampler_seed=sampler_seed, **kw)


def test_sampled_release_is_each_steps_sample_sum_plus_its_noise_scaled_to_the_mean_embedding():
    """Block t = (sum over step t's Poisson sample of sqrt(T) * block_t(x), in its class row, + N(0, sigma^2))
    / (q m sqrt(T)). Recomputing the samples from the test sampler's seed, the residual has std sigma and mean 0;
    a wrong scale, a block read from the wrong records or noise at the wrong level fails."""
    from mmdsynth.privacy.sampling import PoissonSampler
    X, y = _images(300).numpy(), np.arange(300) % 3
    T, q, m = 6, 0.3, 300
    fmap, rel = _sampled(X, y, q, T=T)
    (entry,) = rel.ledger.entries
    assert entry.mechanism == "subsampled-gaussian" and entry.sensitivity == 1.0
    assert entry.plan["sample_rate"] == q and entry.plan["steps"] == T and entry.neighbouring == "replace_one"
    assert entry.assumed["m"] == m and "fixed-seed:0" in entry.sampler
    sigma, width = entry.noise_multiplier, fmap.block
    sampler, xt, residuals = PoissonSampler(0), torch.as_tensor(X), []
    for t in range(T):
        idx = sampler.sample(m, q)
        exact = torch.zeros(3, width, dtype=torch.float64)
        exact.index_add_(0, torch.as_tensor(y)[idx], T ** 0.5 * fmap.block_features(xt[idx], t).double())
        got = rel.tensors["embedding"][t * width:(t + 1) * width].T * (q * m * T ** 0.5)
        residuals.append(got - exact)
    r = torch.cat(residuals).flatten()
    assert abs(float(r.std()) / sigma - 1) < 0.08 and abs(float(r.mean())) < 0.1 * sigma


def test_sampled_release_estimates_the_full_mean_embedding_without_bias():
    """At rate 1 every record is in every step: the release is the mean embedding plus noise of std
    sigma / (m sqrt(T)); the mean embedding itself comes from the full-release route (mean_embedding)."""
    from mmdsynth.embedding import mean_embedding
    X, y = _images(200).numpy(), np.arange(200) % 3
    fmap, rel = _sampled(X, y, 1.0, T=4, eps=8.0, sampler_seed=None)
    assert "secure" in rel.ledger.entries[0].sampler
    exact = mean_embedding(fmap, torch.as_tensor(X), torch.as_tensor(y), 3)
    noise = (rel.tensors["embedding"] - exact) * 200 * 4 ** 0.5 / rel.ledger.entries[0].noise_multiplier
    assert abs(float(noise.std()) - 1) < 0.08 and abs(float(noise.mean())) < 0.1


def test_sampled_release_refusals_come_before_calibration():
    from mmdsynth.embedding import release_sampled_embedding
    X, y = _images(20).numpy(), np.arange(20) % 3
    with pytest.raises(Exception, match="one sample per block"):
        release_sampled_embedding(RandomConvFeatures(SHAPE, n_networks=1, width=4), X, y, epsilon=1, delta=1e-5,
                                  sample_rate=0.5, n_classes=3)
    with pytest.raises(Exception, match="sample_rate"):
        _sampled(X, y, 1.5)
    with pytest.raises(Exception, match="n_classes must be given"):
        release_sampled_embedding(RandomConvFeatures(SHAPE, n_networks=2, width=4), X, y, epsilon=1, delta=1e-5,
                                  sample_rate=0.5)
    with pytest.raises(Exception, match=r"labels must lie in 0..2"):
        _sampled(X, np.arange(20) % 4, 0.5)
    with pytest.raises(Exception, match="add_remove' is the accounting of the subsampled release"):
        DPRandConv(1.0, n_classes=3, neighbouring="add_remove").release(X, y)
    with pytest.raises(Exception, match="neighbouring must be"):
        DPRandConv(1.0, n_classes=3, sample_rate=0.5, neighbouring="swap").release(X, y)
    for bad in (dict(n_networks=1), dict(early_stopping=True, proxy_encoder="x")):
        with pytest.raises(Exception, match="sample_rate|early_stopping"):
            DPRandConv(1.0, n_classes=3, sample_rate=0.5, **{"n_networks": 2, **bad}).release(X, y)


def test_dp_randconv_sample_rate_release_distils_and_charges_its_budget_once(digits, tmp_path):
    """DPRandConv(sample_rate=q): the release through the method (its fit facts, the budget charged once, under the
    plan's epsilon), then a set distilled from it classifies digits above chance."""
    from mmdsynth.evaluation.downstream import image_classifier_scores
    from mmdsynth.privacy import PrivacyPlan, epsilon_for_sigma
    from mmdsynth.privacy.budget import BudgetFile
    budget = BudgetFile.open(tmp_path / "budget.json", "digits", 20.0, 1e-4)
    model = DPRandConv(epsilon=10, n_classes=10, n_networks=16, sample_rate=0.25, noise_seed=0)
    rel = model.release(digits.x_train, digits.y_train, dataset="digits", budget=budget)
    (e,) = rel.ledger.entries
    plan = PrivacyPlan((), 0.25, 16, "replace_one")
    assert epsilon_for_sigma(e.noise_multiplier, 1e-5, plan) <= 10 * (1 + 1e-9)
    assert rel.dataset["fit_params"]["sample_rate"] == 0.25 and rel.dataset["sample_rate"] == 0.25
    spent = BudgetFile.open(tmp_path / "budget.json").spent
    assert spent[0] == pytest.approx(10) and len(BudgetFile.open(tmp_path / "budget.json").charges) == 1
    dset = distill_release(rel, 10, iterations=300, blocks_per_step=4)
    acc = image_classifier_scores(dset.x, dset.y, digits.x_test, digits.y_test, classifiers=("logreg",))["logreg_acc"]
    assert acc > 0.5


def test_cli_fit_sample_rate_inspect_and_distill(tmp_path, capsys):
    """`mmdsynth fit --method dp-randconv --sample-rate q --release-only`, `inspect` (the subsampled steps named),
    then `distill` from it; a bad rate exits 2 before anything is written."""
    from mmdsynth.cli import main

    run = tmp_path / "run"
    assert main(["fit", "--method", "dp-randconv", "--dataset", "digits", "--epsilon", "1", "--n-networks", "8",
                 "--conv-width", "8", "--sample-rate", "0.25", "--release-only", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(run)]) == 0
    assert "subsampled-gaussian: 8 steps, each reading a secret Poisson sample at rate 0.25" in capsys.readouterr().out
    assert main(["distill", str(run), "--images-per-class", "2", "--iterations", "3", "--blocks-per-step", "2",
                 "--out", str(tmp_path / "set.npz")]) == 0
    assert np.load(tmp_path / "set.npz")["x"].shape == (20, 1, 8, 8)
    capsys.readouterr()
    assert main(["fit", "--method", "dp-randconv", "--dataset", "digits", "--epsilon", "1", "--sample-rate", "2",
                 "--release-only", "--out", str(tmp_path / "bad")]) == 2
    assert "sample_rate" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_smooth_distillation_leaves_no_pixel_noise_and_is_recorded(digits, tmp_path, capsys):
    """smooth=True learns each image through the fixed [1, 2, 1] blur: from the same start and release, the set's
    pixel-to-pixel differences are far smaller than without it; the set records it; tables are refused; the CLI
    flag reaches it."""
    from mmdsynth.cli import main
    from mmdsynth.methods.distill import smooth_images
    u = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(smooth_images(torch.ones(1, 2, 5, 5)), torch.ones(1, 2, 5, 5))       # constants kept
    assert float(smooth_images(u).std()) < 0.7 * float(u.std())
    rel = DPRandConv(epsilon=10, n_classes=10, n_networks=4, conv_width=8, noise_seed=0).release(digits.x_train,
                                                                                                  digits.y_train)
    rough = distill_release(rel, 2, iterations=30, seed=1)
    smooth = distill_release(rel, 2, iterations=30, seed=1, smooth=True)

    def jumps(x):
        return float(np.abs(np.diff(x, axis=-1)).mean())
    assert smooth.info["smooth"] and not rough.info["smooth"]
    assert jumps(smooth.x) < 0.6 * jumps(rough.x)
    run = tmp_path / "run"
    rel.save(run / "release")
    assert main(["distill", str(run), "--images-per-class", "1", "--iterations", "2", "--smooth",
                 "--out", str(tmp_path / "s.npz")]) == 0
    assert "smoothed images" in capsys.readouterr().out
    # the default: blurred for colour images only (the record shape, public), and --no-smooth turns it off
    colour = DPRandConv(epsilon=10, n_classes=10, n_networks=2, conv_width=4, noise_seed=0).release(
        np.repeat(digits.x_train[:200], 3, axis=1), digits.y_train[:200])
    assert distill_release(colour, 1, iterations=1).info["smooth"] and not rough.info["smooth"]
    assert not distill_release(colour, 1, iterations=1, smooth=False).info["smooth"]
    colour.save(tmp_path / "colour" / "release")
    for flag, said in (([], True), (["--no-smooth"], False)):
        assert main(["distill", str(tmp_path / "colour"), "--images-per-class", "1", "--iterations", "1", *flag,
                     "--out", str(tmp_path / f"c{len(flag)}.npz")]) == 0
        assert ("smoothed images" in capsys.readouterr().out) == said
    with pytest.raises(InvalidParameterError, match="True, False or 'auto'"):
        distill_release(colour, 1, iterations=1, smooth="yes")
    from mmdsynth import DPMERF
    from sklearn.datasets import load_iris
    iris = load_iris()
    flat = DPMERF(epsilon=10, n_classes=3, n_features=20, noise_seed=0).release(iris.data / 8, iris.target)
    with pytest.raises(InvalidParameterError, match="smooth blurs images"):
        distill_release(flat, 1, iterations=1, smooth=True)


def test_a_generator_can_match_a_few_networks_a_step(digits, block_calls):
    """Issue 49's lever: blocks_per_step for the generator: each step matches that many networks drawn from the
    training seed (public), every network gets its turn, the loss falls."""
    calls = block_calls
    model = DPRandConv(epsilon=10, n_classes=10, n_networks=4, conv_width=8, noise_seed=0, iterations=30,
                       batch_size=100, blocks_per_step=1).fit(digits.x_train, digits.y_train)
    assert len(calls) == 30 and all(len(c) == 1 for c in calls) and len({c[0] for c in calls}) == 4
    assert model.losses_[-1] < model.losses_[0]
    x, y = model.sample(50, seed=0)
    assert x.shape[0] == 50 and 0 <= x.min() and x.max() <= 1
    with pytest.raises(InvalidParameterError, match="blocks_per_step"):
        DPRandConv(epsilon=10, n_classes=10, n_networks=4, blocks_per_step=0, iterations=2).fit(
            digits.x_train, digits.y_train)


def test_the_generator_defaults_are_the_measured_recipe(digits, block_calls):
    """dp-randconv trains its generator as measured on MNIST (benchmarks/RESULTS.md): 1,500 iterations of 250
    images, 2 networks a step, lr x 0.9 every 500; given values still win."""
    settings = DPRandConv(epsilon=1).settings_for("image")
    assert (settings.iterations, settings.batch_size, settings.lr_step, settings.blocks_per_step) == (1500, 250, 500, 2)
    model = DPRandConv(epsilon=10, n_classes=10, n_networks=4, conv_width=8, noise_seed=0, iterations=6)
    model.fit(digits.x_train, digits.y_train)
    assert len(block_calls) == 6 and all(len(c) == 2 for c in block_calls)
    assert model.train_config().batch_size == 250
    assert DPRandConv(epsilon=1, batch_size=64, blocks_per_step=None).settings_for("image").batch_size == 64


def test_a_spec_from_another_version_is_refused_naming_its_settings():
    """A release's feature spec with a setting this version's map does not take (written by a version that had it) is
    refused with a typed error naming the setting and the fix, instead of a TypeError from the constructor."""
    from mmdsynth.errors import ArtifactError
    from mmdsynth.features import build_feature_map

    spec = RandomConvFeatures((1, 8, 8), n_networks=2, width=4).spec()
    assert build_feature_map(spec).spec() == spec
    with pytest.raises(ArtifactError, match=r"settings \['average_views', 'scales'\] that this version"):
        build_feature_map({**spec, "scales": 1, "average_views": 1})
