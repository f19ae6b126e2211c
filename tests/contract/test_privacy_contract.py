"""One privacy contract, run over every entry of the feature-map and method registries (issue 15).

For every plug-in, on adversarial neighbouring datasets (a record's class swapped, a record at the
bounds, an all-zero record, huge values, the record that maximises the feature norm, the record
that moves the statistic most):

* the released statistic moves by at most the sensitivity its ledger entry records (same noise
  seed on both datasets, so the difference of the releases is the difference of the statistics);
* every noise draw has std = noise multiplier x sensitivity of its ledger entry, in ledger order;
* nothing private is read before the noise is calibrated;
* all of it also with subnormal floats flushed to zero, the mode ``mmdsynth`` commands run in
  (``mmdsynth.runtime.flush_subnormals``).

A plug-in registered without an entry here fails ``test_every_registered_*_is_covered``.
"""
import re

import numpy as np
import pytest
import torch

from mmdsynth.privacy import engine as engine_module
from mmdsynth.privacy.engine import PrivacyEngine

from mmdsynth import release_mean_embedding
from mmdsynth.features import (FEATURE_MAPS, ENTKFeatures, HermiteFeatures, MixedRFF, PerceptualFeatures, PixelFeatures,
                              PooledFeatures, RandomConvFeatures, RandomFourierFeatures, build_feature_map)
from mmdsynth.features.encoders import build_encoder, save_encoder
from mmdsynth.privacy.dpsgd import private_gradient
from mmdsynth.kip.kernels import FCReLUKernel
from mmdsynth.methods import DPHP, DPKIP, DPMEPF, DPMERF, DPNTK, METHODS
from mmdsynth.methods.kernel import DPRandConv
from mmdsynth.privacy import NoiseSource, PrivacyPlan, epsilon_for_sigma
from mmdsynth.runtime import flush_subnormals, subnormals_flushed

from conftest import Guarded

#: an adversarial neighbour (inf, 1e39, subnormals) is handled by each release's rule for it, silently: a numpy or
#: torch warning about it would reach the user's log (MixedRFF's sparse path printed one until 2026-11-28)
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

M, C, D = 12, 3, 6          # records, classes, record width of the vector maps
IMAGE = (1, 8, 8)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A randomly initialised (data-free, so public) encoder for 8x8 images."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("enc") / "random.safetensors"
    save_encoder(build_encoder("vgg_small", 1, 10), {"arch": "vgg_small", "in_channels": 1, "n_classes": 10,
                                                      "image_size": 8, "dataset": "random-init"}, path)
    return str(path)


# name in FEATURE_MAPS -> variants: (label, factory(encoder path), record shape)
MAP_VARIANTS = {
    "rff": [("rff", lambda e: RandomFourierFeatures(D, 40), (D,))],
    "mixed_rff": [("mixed_rff", lambda e: MixedRFF(2, 2, 4, 40), (D,)),
                  ("mixed_rff all columns", lambda e: MixedRFF(2, 2, 4, 40, rff_inputs="all"), (D,)),
                  ("mixed_rff pairwise", lambda e: MixedRFF(2, 2, 4, 40, category_sizes=[2, 2]), (D,)),
                  ("mixed_rff numeric x categorical", lambda e: MixedRFF(2, 2, 4, 40, category_sizes=[2, 2],
                                                                         cross_sizes=[2, 2], cross_bins=4), (D,))],
    "entk": [("fc_1l fast", lambda e: ENTKFeatures(D, "fc_1l", (16,), C), (D,)),
             ("fc_1l generic", lambda e: ENTKFeatures(D, "fc_1l", (16,), C, fast=False), (D,)),
             ("fc_2l", lambda e: ENTKFeatures(D, "fc_2l", (16, 8), C), (D,)),
             ("cnn_2l", lambda e: ENTKFeatures(D, "cnn_2l", (4, 8), C), (D,))],
    "hermite": [("hermite", lambda e: HermiteFeatures(D, order=30, length_scale=0.3, n_product=2, product_dims=3,
                                                      product_order=4), (D,))],
    "perceptual": [("perceptual phi1+phi2", lambda e: PerceptualFeatures(e, IMAGE, moments=(1, 2)), IMAGE)],
    "pooled": [("pooled", lambda e: PooledFeatures(e, IMAGE), IMAGE)],
    "pixels": [("pixels", lambda e: PixelFeatures(D), (D,)), ("pixels image", lambda e: PixelFeatures(64), IMAGE)],
    "random-conv": [("random-conv", lambda e: RandomConvFeatures(IMAGE, n_networks=3, width=8), IMAGE),
                    ("random-conv views", lambda e: RandomConvFeatures(IMAGE, n_networks=3, width=8, augment=True),
                     IMAGE),
                    ("random-conv pooled", lambda e: RandomConvFeatures(IMAGE, n_networks=3, width=8, depth=2,
                                                                        pool=1), IMAGE)],
}
VARIANTS = [(name, *v) for name, vs in MAP_VARIANTS.items() for v in vs]


@pytest.fixture(params=["subnormals kept", "subnormals flushed"])
def fp_mode(request):
    """The releases' floating-point modes: IEEE subnormals (Python's default), and flushed to zero, as the
    ``mmdsynth`` command runs (values below 1.2e-38 become 0; no norm can grow by it)."""
    if request.param == "subnormals flushed" and not flush_subnormals():
        pytest.skip("this CPU (or MMDSYNTH_SUBNORMALS=keep) has no flush mode")
    assert subnormals_flushed() == (request.param == "subnormals flushed")
    yield request.param
    torch.set_flush_denormal(False)


def test_every_registered_feature_map_is_covered():
    assert set(MAP_VARIANTS) == set(FEATURE_MAPS), "add the new feature map to MAP_VARIANTS"


def _base(shape, seed=0):
    g = np.random.default_rng(seed)
    return g.random((M, *shape)), np.arange(M) % C


def _adversarial_neighbours(fmap, X, y):
    """(what, X', y'): D' differs from D in record 0 only."""
    shape = X.shape[1:]
    g = np.random.default_rng(1)
    cands = np.concatenate([g.uniform(-3, 4, (300, *shape)), np.zeros((1, *shape)), np.ones((1, *shape)),
                            np.full((1, *shape), 1e39), np.full((1, *shape), -1e6), np.full((1, *shape), 1e-39)])
    with torch.no_grad():
        phis = fmap.bounded(fmap(torch.as_tensor(cands, dtype=torch.float32)).double())
        phi0 = fmap.bounded(fmap(torch.as_tensor(X[:1], dtype=torch.float32)).double())
    moved = (phis - phi0).norm(dim=1)                         # same class: phi(x') - phi(x0)
    swapped = (phis.norm(dim=1) ** 2 + phi0.norm() ** 2).sqrt()   # other class: both columns move
    out = []

    def record(what, row, label):
        X2, y2 = X.copy(), y.copy()
        X2[0], y2[0] = row, label
        out.append((what, X2, y2))
    other = (y[0] + 1) % C
    record("class swapped", X[0], other)
    record("all-zero record", np.zeros(shape), y[0])
    record("record at the upper bound, other class", np.ones(shape), other)
    record("huge values (1e39)", np.full(shape, 1e39), y[0])
    record("subnormal values (1e-39), other class", np.full(shape, 1e-39), other)
    record("feature-norm maximiser", cands[int(phis.norm(dim=1).argmax())], other)
    record("statistic-move maximiser, same class", cands[int(moved.argmax())], y[0])
    record("statistic-move maximiser, other class", cands[int(swapped.argmax())], other)
    return out


class _NoiseLog:
    """Records the std of every noise draw (patched into NoiseSource, which every mechanism uses)."""

    def __init__(self, monkeypatch):
        self.stds = []
        original = NoiseSource.add_noise

        def add_noise(source, value, std):
            self.stds.append(float(std))
            return original(source, value, std)
        monkeypatch.setattr(NoiseSource, "add_noise", add_noise)


def _pieces(release):
    """(released tensor piece, its ledger entry) in ledger order, for the one-shot releases."""
    fmap = build_feature_map(release.feature_spec)
    blocks, start, out = iter(fmap.parts()), 0, []
    for e in release.ledger.entries:
        if e.description.startswith("class proportions"):
            out.append((release.tensors["class_proportions"], e))
        elif e.description.startswith("DP early-stopping proxy"):
            out.append((release.tensors["proxy"], e))
        elif e.mechanism == "gaussian" and "schema" not in e.description:
            _, width, _ = next(blocks)
            out.append((release.tensors["embedding"][start:start + width], e))
            start += width
    assert next(blocks, None) is None, "a block of the embedding has no ledger entry"
    return out


def _assert_moves_within_recorded_sensitivity(rel_a, rel_b, what):
    for (a, entry), (b, _) in zip(_pieces(rel_a), _pieces(rel_b)):
        move = float((a.double() - b.double()).norm())
        assert move <= entry.sensitivity * (1 + 1e-9) + 1e-9, (what, entry.description, move, entry.sensitivity)


def _assert_noise_matches_ledger(log, release):
    entries = [e for e in release.ledger.entries if "schema" not in e.description]
    assert log.stds == pytest.approx([e.noise_std for e in entries], rel=1e-12)
    for e in entries:
        assert e.noise_std == pytest.approx(e.noise_multiplier * e.sensitivity, rel=1e-12)
        assert e.assumed["m"] == e.n_records and "sensitivity" in e.assumed     # what the proof takes as public
    # the releases actually made compose exactly like one at (sum 1/s_i^2)^-1/2: within the claim
    effective = sum(e.noise_multiplier ** -2 for e in entries) ** -0.5
    first = release.ledger.entries[0]
    assert epsilon_for_sigma(effective, first.delta, accountant="exact") <= first.epsilon * (1 + 1e-6)


def _watch_calibration(monkeypatch, *modules):
    flag = {"calibrated": False}
    for module in modules:
        real = module.calibrate_sigma

        def calibrate(*a, _real=real, **k):
            flag["calibrated"] = True
            return _real(*a, **k)
        monkeypatch.setattr(module, "calibrate_sigma", calibrate)
    return flag


@pytest.mark.parametrize("name,label,factory,shape", VARIANTS, ids=[v[1] for v in VARIANTS])
def test_feature_map_release_contract(name, label, factory, shape, encoder, monkeypatch, fp_mode):
    fmap = factory(encoder)
    X, y = _base(shape)
    flag = _watch_calibration(monkeypatch, engine_module)
    log = _NoiseLog(monkeypatch)
    kw = dict(epsilon=1.0, delta=1e-5, n_classes=C)
    base = release_mean_embedding(fmap, Guarded(X, flag), y, seed=0, **kw)
    assert flag["calibrated"]
    _assert_noise_matches_ledger(log, base)
    for what, X2, y2 in _adversarial_neighbours(fmap, X, y):
        other = release_mean_embedding(fmap, X2, y2, seed=0, **kw)
        for t in other.tensors.values():
            assert torch.isfinite(t).all(), what
        _assert_moves_within_recorded_sensitivity(base, other, what)


def test_sampled_release_contract(monkeypatch, fp_mode):
    """release_sampled_embedding (dp-randconv's sample_rate, one Poisson sample per network): calibrated before
    reading; T draws of std sigma x clip, as its ledger says; the plan within epsilon; on every adversarial
    neighbour (same test sampler and noise seeds on both, so the difference of the releases is the difference of
    the sampled sums) each step's sum moves by <= 2 x clip (replace-one), i.e. block t by <= 2 / (q m sqrt(T))."""
    from mmdsynth.embedding import release_sampled_embedding
    fmap = RandomConvFeatures(IMAGE, n_networks=3, width=8)
    X, y = _base(IMAGE)
    flag = _watch_calibration(monkeypatch, engine_module)
    log = _NoiseLog(monkeypatch)
    q, T, width = 0.5, 3, fmap.block
    kw = dict(epsilon=1.0, delta=1e-5, n_classes=C, sample_rate=q, seed=0, sampler_seed=0)
    base = release_sampled_embedding(fmap, Guarded(X, flag), y, **kw)
    assert flag["calibrated"]
    (e,) = base.ledger.entries
    assert e.sensitivity == 1.0 and e.neighbouring == "replace_one" and e.assumed["m"] == e.n_records == M
    assert log.stds == pytest.approx([e.noise_multiplier * e.sensitivity] * T, rel=1e-12)
    assert epsilon_for_sigma(e.noise_multiplier, 1e-5, PrivacyPlan((), q, T, "replace_one")) <= 1.0 + 1e-9
    bound, largest = 2 * e.sensitivity / (q * M * T ** 0.5), 0.0
    for what, X2, y2 in _adversarial_neighbours(fmap, X, y):
        other = release_sampled_embedding(fmap, X2, y2, **kw).tensors["embedding"]
        assert torch.isfinite(other).all(), what
        diff = other - base.tensors["embedding"]
        for t in range(T):
            move = float(diff[t * width:(t + 1) * width].norm())
            assert move <= bound * (1 + 1e-9), (what, t, move, bound)
            largest = max(largest, move)
    assert largest > 0.2 * bound          # record 0 was in a sample: the test saw the worst case move something


def test_sampled_release_add_remove_contract():
    """neighbouring="add_remove" (NDPDC's accounting): the ledger and plan say add/remove, the plan is within
    epsilon at that relation, and adding any adversarial record to a step's sample moves that step's sum (the
    release's own sampled_block_sums) by <= clip = 1, the add/remove sensitivity the accountant prices."""
    from mmdsynth.embedding import release_sampled_embedding
    from mmdsynth.statistics.embedding import sampled_block_sums
    fmap = RandomConvFeatures(IMAGE, n_networks=3, width=8)
    X, y = _base(IMAGE)
    rel = release_sampled_embedding(fmap, X, y, epsilon=1.0, delta=1e-5, n_classes=C, sample_rate=0.5, seed=0,
                                    neighbouring="add_remove")
    (e,) = rel.ledger.entries
    assert e.neighbouring == "add_remove" == e.plan["neighbouring"] and e.sensitivity == 1.0
    assert epsilon_for_sigma(e.noise_multiplier, 1e-5, PrivacyPlan((), 0.5, 3, "add_remove")) <= 1.0 + 1e-9
    assert e.noise_multiplier < 0.6 * release_sampled_embedding(
        fmap, X, y, epsilon=1.0, delta=1e-5, n_classes=C, sample_rate=0.5, seed=0).ledger.entries[0].noise_multiplier
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
    for what, X2, y2 in _adversarial_neighbours(fmap, X, y):
        extra_x = torch.cat([Xt, torch.as_tensor(X2[:1], dtype=torch.float32)])
        extra_y = torch.cat([yt, torch.as_tensor(y2[:1])])
        for t in range(3):
            base = sampled_block_sums(fmap, t, Xt, yt, C, 3 ** 0.5, 4)
            more = sampled_block_sums(fmap, t, extra_x, extra_y, C, 3 ** 0.5, 4)
            assert torch.isfinite(more).all() and float((more - base).norm()) <= 1.0 + 1e-9, (what, t)


# -- methods -----------------------------------------------------------------------------------
KERNEL_METHODS = {
    "dp-ntk": lambda e: DPNTK(1.0, n_classes=10, ntk_width=20, iterations=1, batch_size=10, noise_seed=0),
    "dp-merf": lambda e: DPMERF(1.0, n_classes=10, n_features=40, iterations=1, batch_size=10, noise_seed=0),
    "dp-hp": lambda e: DPHP(1.0, n_classes=10, order=8, n_product=2, product_order=3, iterations=1, batch_size=10,
                            noise_seed=0),
    "dp-mepf": lambda e: DPMEPF(1.0, encoder=e, n_classes=10, iterations=1, batch_size=10, select_every=1,
                                select_samples=20, noise_seed=0),
    "dp-randconv": lambda e: DPRandConv(1.0, n_classes=10, n_networks=2, conv_width=8, iterations=1, batch_size=10,
                                        noise_seed=0),
}
DPSGD_METHODS = {"dp-kip"}
#: methods whose releases are marginals and selections in a zCDP filter (tests/contract/test_marginals.py covers
#: their stages; test_marginal_method_contract the method's path)
MARGINAL_METHODS = {"mst": dict(iters=50), "aim": dict(iters=20, rounds=10),
                    "hybrid": dict(iters=50, n_features=50, pool=2, steps=20)}


def test_every_registered_method_is_covered():
    assert set(KERNEL_METHODS) | DPSGD_METHODS | set(MARGINAL_METHODS) == set(METHODS), \
        "add the new method to this contract"


@pytest.mark.parametrize("name", sorted(MARGINAL_METHODS))
def test_marginal_method_contract(name, monkeypatch, fp_mode):
    """MST and AIM: calibrated before the rows are read, every noise draw (Gaussian std, Gumbel draw) is a ledger entry's,
    the entries' rho add up to the plan's, and a worst-case neighbour (one row replaced by an extreme one) moves
    the 1-way release by at most its recorded sensitivity."""
    pytest.importorskip("mbi")
    import pandas as pd

    from mmdsynth.data.encoding import TableEncoder
    from mmdsynth.privacy import zcdp

    from support import SCHEMA, toy_table

    flag = {"calibrated": False}
    real_rho, real_clean = zcdp.rho_for_epsilon, TableEncoder.clean

    def rho_for_epsilon(*a, **k):
        flag["calibrated"] = True
        return real_rho(*a, **k)

    def clean(self, df, **k):
        assert flag["calibrated"], "private rows read before the plan was calibrated"
        return real_clean(self, df, **k)
    monkeypatch.setattr(zcdp, "rho_for_epsilon", rho_for_epsilon)
    monkeypatch.setattr(TableEncoder, "clean", clean)
    log, gumbels = _NoiseLog(monkeypatch), []
    real_gumbel = NoiseSource.gumbel
    monkeypatch.setattr(NoiseSource, "gumbel", lambda src, n: gumbels.append(n) or real_gumbel(src, n))
    df = toy_table(400)
    cls, params = METHODS[name], MARGINAL_METHODS[name]
    rel = cls(1.0, noise_seed=0, **params).fit(df, label="y", schema=SCHEMA).release_
    entries = rel.ledger.entries
    gaussian = [e for e in entries if e.mechanism == "gaussian" and "cell counts of" in e.description]
    # one draw per clique's counts: "cell counts of K clique(s)" in each Gaussian entry of marginals
    per_release = [int(re.search(r"cell counts of (\d+) clique", e.description).group(1)) for e in gaussian]
    marginal_draws = sum(per_release)
    assert log.stds[:marginal_draws] == pytest.approx(
        [e.noise_std for e, k in zip(gaussian, per_release) for _ in range(k)], rel=1e-12)
    others = [e for e in entries if e.mechanism == "gaussian" and e not in gaussian]    # the hybrid's kernel part
    assert {round(s, 12) for s in log.stds[marginal_draws:]} == {round(e.noise_std, 12) for e in others}
    assert len(gumbels) == sum(e.mechanism == "exponential" for e in entries) >= 1
    assert sum(e.rho for e in entries) == pytest.approx(entries[0].plan["rho"], rel=1e-9)
    assert zcdp.epsilon_for_rho(entries[0].plan["rho"], 1e-5) <= 1.0 + 1e-9
    for e in entries:
        assert e.assumed["m"] == e.n_records == 400 and "sensitivity" in " ".join(e.assumed)
    first = {m["tensor"] for m in rel.feature_spec["measurements"][:per_release[0]]}       # the 1-way release
    for row in ({"age": 17, "score": -1.0, "colour": "blue", "smoker": "yes", "y": "neg"},
                {"age": 90, "score": 1.0, "colour": "red", "smoker": "no", "y": "pos"}):
        other = df.copy()
        other.loc[0] = row
        rel2 = cls(1.0, noise_seed=0, **params).fit(other, label="y", schema=SCHEMA).release_
        move = float(sum(((rel.tensors[k] - rel2.tensors[k]) ** 2).sum() for k in first)) ** 0.5
        assert move <= gaussian[0].sensitivity + 1e-9 and len(first) == 5


@pytest.mark.parametrize("name", sorted(KERNEL_METHODS))
def test_kernel_method_release_contract(name, encoder, digits, monkeypatch, fp_mode):
    X, y = digits.x_train[:60].numpy().astype(np.float64), digits.y_train[:60].numpy()
    flag = _watch_calibration(monkeypatch, engine_module)
    log = _NoiseLog(monkeypatch)
    base = KERNEL_METHODS[name](encoder).fit(Guarded(X, flag), y).release_
    assert flag["calibrated"]
    _assert_noise_matches_ledger(log, base)
    for what, row, label in [("class swapped", X[0], (y[0] + 1) % 10), ("all-zero image", 0.0, y[0]),
                             ("white image, other class", 1.0, (y[0] + 5) % 10), ("huge values", 1e39, y[0]),
                             ("subnormal values", 1e-39, (y[0] + 3) % 10)]:
        X2, y2 = X.copy(), y.copy()
        X2[0], y2[0] = row, label
        other = KERNEL_METHODS[name](encoder).fit(X2, y2).release_
        _assert_moves_within_recorded_sensitivity(base, other, what)


def test_dpsgd_step_contract(monkeypatch, fp_mode):
    """DP-KIP's data-touching step: add/remove one record (any record) moves the clipped sum by <= C,
    and the noise std is sigma x C."""
    kernel = FCReLUKernel(1)
    g = torch.Generator().manual_seed(0)
    x_s, y_s = torch.rand(4, D, generator=g, dtype=torch.float64), torch.eye(2, dtype=torch.float64)[[0, 1, 0, 1]]
    X, Y = torch.rand(M, D, generator=g, dtype=torch.float64), torch.eye(2, dtype=torch.float64)[torch.arange(M) % 2]
    clip, sigma = 1e-3, 2.0
    log = _NoiseLog(monkeypatch)
    kw = dict(reg=1e-6, clip=clip, expected_batch=float(M))

    def engine():
        return PrivacyEngine.with_sigma(sigma, noise_seed=0, multipliers={"step": 1.0})
    base = private_gradient(kernel, x_s, y_s, X, Y, engine=engine(), **kw)
    for what, row in [("all-zero", torch.zeros(D)), ("ones", torch.ones(D)), ("huge", torch.full((D,), 1e39, dtype=torch.float64)),
                      ("copy of record 0", X[0])]:
        for label in (0, 1):
            X2 = torch.cat([X, row[None].double()])
            Y2 = torch.cat([Y, torch.eye(2, dtype=torch.float64)[[label]]])
            other = private_gradient(kernel, x_s, y_s, X2, Y2, engine=engine(), **kw)
            assert torch.isfinite(other).all()
            assert float((other - base).norm()) * M <= clip * (1 + 1e-9), what      # outputs are divided by qN
    removed = private_gradient(kernel, x_s, y_s, X[1:], Y[1:], engine=engine(), **kw)
    assert float((removed - base).norm()) * M <= clip * (1 + 1e-9)
    assert set(log.stds) == {sigma * clip}


@pytest.mark.parametrize("start", ["noise", "pixels"])
def test_dpkip_fit_contract(digits, monkeypatch, start, fp_mode):
    """The method around the step: calibrated before reading, every draw's noise as its ledger says (a private
    start: its release first, then the steps), the whole plan within epsilon."""
    flag = _watch_calibration(monkeypatch, engine_module)
    log = _NoiseLog(monkeypatch)
    X, y = digits.x_train[:200].numpy(), digits.y_train[:200].numpy()
    m = DPKIP(1.0, 1e-5, n_classes=10, images_per_class=1, epochs=1, batch_size=50, clip=1e-2, seed=0,
              noise_seed=0, start=start).fit(Guarded(X, flag), y)
    *first, e = m.release_.ledger.entries
    assert flag["calibrated"] and e.neighbouring == "replace_one" and e.sensitivity == 1e-2
    assert e.assumed["N"] == 200 and e.assumed["clip"] == 1e-2
    assert [f.mechanism for f in first] == ([] if start == "noise" else ["gaussian"])
    assert log.stds and log.stds == pytest.approx([f.noise_std for f in first] + [e.noise_std] * e.plan["steps"],
                                                  rel=1e-12)
    for f in first:
        assert f.noise_std == pytest.approx(f.noise_multiplier * f.sensitivity) and f.sensitivity == 2 / 200
    plan = PrivacyPlan(tuple(e.plan["multipliers"]), e.plan["sample_rate"], e.plan["steps"], "replace_one")
    assert epsilon_for_sigma(e.noise_multiplier, 1e-5, plan) <= 1.0 + 1e-9


@pytest.mark.parametrize("name,label,factory,shape", VARIANTS, ids=[v[1] for v in VARIANTS])
def test_a_records_released_features_are_a_function_of_that_record_alone(name, label, factory, shape, encoder):
    """Every map's release route (``class_sums``: the generic one, :meth:`FeatureMap.released_rows`, or the map's
    own) adds a record's features bit for bit alike whatever shares its batch: the record alone in its class gives
    the same class row drawn alone, in a full batch and in a short last one among records of another class, with
    and without weights (a person's rows take the generic route). How many records share a batch can follow private
    facts (a person's rows, a stream's shards, a subsample), and a float32 network or product of another shape
    rounds them apart (random Fourier features by 1.7e-7 before every chunk had one shape)."""
    fmap = factory(encoder)
    X = torch.as_tensor(np.random.default_rng(4).random((90, *shape)), dtype=torch.float32)
    for w in (None, 0.5):
        def row0(x, at):
            y = torch.ones(len(x), dtype=torch.long)
            y[at] = 0
            weights = None if w is None else torch.full((len(x),), w, dtype=torch.float64)
            return fmap.class_sums(x, y, 2, 64, weights=weights)[0]
        alone = row0(X[:1], 0)
        for at in (0, 17, 75):                       # in the full first batch, and in the 26-record last one
            x = torch.cat([X[1:at + 1], X[:1], X[at + 1:]])
            assert torch.equal(row0(x, at), alone), (label, at, w)


def test_a_sampled_steps_record_is_read_alone():
    """A subsampled step's sums (``sampled_block_sums``, the dp-randconv distillation release) compute each record in
    chunks of one shape, however many records the sample drew: a record alone in its class gives the same class row,
    bit for bit, drawn alone, in a full chunk and in a short last chunk beside records of another class."""
    from mmdsynth.statistics.embedding import sampled_block_sums
    fmap = RandomConvFeatures(IMAGE, n_networks=3, width=8)
    X = torch.as_tensor(np.random.default_rng(5).random((12, *IMAGE)), dtype=torch.float32)
    alone = sampled_block_sums(fmap, 1, X[:1], torch.zeros(1, dtype=torch.long), 2, 3 ** 0.5, 8)[0]
    for at in (0, 5, 10):                                       # in the first chunk of 8, and in the last of 4
        Xs = torch.cat([X[1:at + 1], X[:1], X[at + 1:12]])
        ys = torch.ones(12, dtype=torch.long)
        ys[at] = 0
        assert torch.equal(sampled_block_sums(fmap, 1, Xs, ys, 2, 3 ** 0.5, 8)[0], alone), at
