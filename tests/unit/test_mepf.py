"""DP-MEPF: the three-release plan, the early-stopping proxy (data-touching function #3), checkpoint
selection, the moving-average loss, the method end to end on digits with a tiny public encoder."""
import json

import numpy as np
import pytest
import torch

from mmdsynth import DPMEPF, BudgetFile, load
from mmdsynth.early_stopping import release_proxy
from mmdsynth.privacy.engine import PrivacyEngine
from mmdsynth.embedding import release_mean_embedding, release_plan
from mmdsynth.errors import ArtifactError, InvalidParameterError, UnknownNameError
from mmdsynth.features.base import FeatureMap
from mmdsynth.features.encoders import build_encoder, save_encoder
from mmdsynth.features.perceptual import PerceptualFeatures, PooledFeatures
from mmdsynth.generators.base import ConditionalGenerator
from mmdsynth.privacy import PrivacyPlan, calibrate_sigma, compose_plan, epsilon_for_sigma
from mmdsynth.training import Selection, TrainConfig, train_generator

from conftest import assert_learns_digits_and_noise_shows


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A tiny PUBLIC encoder for 8x8 digits: randomly initialised, so it has seen no data at all."""
    torch.manual_seed(0)
    net = build_encoder("vgg_small", 1, 10)
    path = tmp_path_factory.mktemp("enc") / "random.safetensors"
    save_encoder(net, {"arch": "vgg_small", "in_channels": 1, "n_classes": 10, "image_size": 8,
                       "dataset": "random-init"}, path)
    return str(path)


# -- the plan ------------------------------------------------------------------------------------
def test_compose_plan_keeps_the_multiples_and_costs_one_plan():
    plan, mults = compose_plan({"phi1": 1, "phi2": 1, "proxy": 10})
    assert plan == PrivacyPlan((1.0, 1.0, 10.0)) and mults == {"phi1": 1.0, "phi2": 1.0, "proxy": 10.0}
    shared, smults = compose_plan({"phi1": 1, "phi2": 1, "proxy": 10}, {"class_proportions": 0.1})
    assert smults["proxy"] / smults["phi1"] == pytest.approx(10) and smults["phi1"] == smults["phi2"]
    # 1/sigma^2 adds up to exactly one release at the base sigma
    assert sum(1 / m ** 2 for m in smults.values()) == pytest.approx(1)
    assert epsilon_for_sigma(3.7306, 1e-5, shared, "exact") == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(InvalidParameterError, match="add up to 1"):
        compose_plan({"embedding": 1}, {"schema": 0.6, "class_proportions": 0.5})


def test_three_release_plan_calibrates_to_the_exact_composed_sigma_and_charges_one_budget(encoder, digits,
                                                                                          tmp_path):
    budget = BudgetFile.open(tmp_path / "budget.json", "digits", 2.0, 1e-5)
    model = DPMEPF(1.0, 1e-5, encoder=encoder, n_classes=10, iterations=4, batch_size=20, select_every=2,
                   select_samples=50, noise_seed=0)
    model.fit(digits.x_train, digits.y_train, dataset="digits", out=tmp_path / "m", budget=budget)
    entries = model.release_.ledger.entries
    assert [e.description.split(",")[-1].strip() if "block" in e.description else e.description[:23]
            for e in entries] == ["block phi1 (rows 0:3584 of 'embedding')", "block phi2 (rows 3584:7168 of "
                                  "'embedding')", "DP early-stopping proxy"]
    sigma = calibrate_sigma(1.0, 1e-5, PrivacyPlan((1.0, 1.0, 10.0)))
    assert [e.noise_multiplier for e in entries] == pytest.approx([sigma, sigma, 10 * sigma], rel=1e-9)
    assert len({e.budget_id for e in entries}) == 1 and model.release_.ledger.total() == (1.0, 1e-5)
    m = len(digits.y_train)
    assert [e.sensitivity for e in entries] == pytest.approx([2 / m, 2 / m, 2 * 2 ** 0.5 / m])
    charges = json.loads((tmp_path / "budget.json").read_text())["charges"]
    assert len(charges) == 1 and charges[0]["epsilon"] == 1.0
    assert model.release_.tensors["embedding"].shape == (2 * 3584, 10)
    assert model.release_.tensors["proxy"].shape == (2 * 128,)
    # phi1 only: two releases (phi1, proxy)
    plan, mults = release_plan(PerceptualFeatures(encoder, (1, 8, 8), moments=(1,)), proxy_multiplier=10)
    assert plan == PrivacyPlan((1.0, 10.0)) and list(mults) == ["phi1", "proxy"]


def test_cli_fit_inspect_sample_show_three_releases_under_one_budget(encoder, tmp_path, capsys):
    from mmdsynth.cli import main

    out = tmp_path / "cli"
    assert main(["fit", "--method", "dp-mepf", "--dataset", "digits", "--encoder", encoder, "--epsilon", "1",
                 "--iterations", "4", "--batch-size", "20", "--select-every", "2", "--out", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "fitted dp-mepf on digits: epsilon=1" in text and "DP early stopping: iteration" in text
    assert main(["inspect", str(out), "--ledger"]) == 0
    text = capsys.readouterr().out
    assert "privacy spent: epsilon=1," in text and text.count("plan={'multipliers': [1.0, 1.0, 10.0]}") == 3
    assert "proxy (256,)" in text
    for ck in ("selected", "final"):
        assert main(["sample", str(out), "--n", "10", "--out", str(tmp_path / f"{ck}.npz"), "--checkpoint", ck]) == 0
    assert main(["fit", "--method", "dp-ntk", "--dataset", "digits", "--encoder", encoder, "--epsilon", "1",
                 "--out", str(tmp_path / "x")]) == 2
    assert "dp-mepf options" in capsys.readouterr().err


# -- the proxy: data-touching function #3 ------------------------------------------------------------
@pytest.mark.parametrize("adversary", [1e39, -3e38, 0.0, float("nan"), 1e6])
def test_proxy_release_moves_by_at_most_its_sensitivity_on_worst_case_neighbours(encoder, adversary):
    proxy = PooledFeatures(encoder, (1, 8, 8))
    assert proxy.norm_bound == 2 ** 0.5 and [p[0] for p in proxy.parts()] == ["proxy_phi1", "proxy_phi2"]
    x = torch.rand(30, 1, 8, 8, dtype=torch.float64)     # 1e39: inf once the map casts to float32
    bad = x.clone()
    bad[7] = adversary
    def engine(sigma, seed):
        return PrivacyEngine.with_sigma(sigma, noise_seed=seed, multipliers={"proxy": 1.0})
    ea, eb = engine(1.0, 3), engine(1.0, 3)
    a = release_proxy(proxy, x, ea)
    b = release_proxy(proxy, bad, eb)                                     # same noise: the difference is the data's
    sens, sens_b = ea.entries[0].sensitivity, eb.entries[0].sensitivity
    assert sens == sens_b == pytest.approx(2 * 2 ** 0.5 / 30)
    assert torch.isfinite(b).all() and float((a - b).norm()) <= sens * (1 + 1e-6)
    noisy = release_proxy(proxy, x, engine(50.0, 4))
    assert float((noisy - a).std()) > 10 * sens                          # the noise is really there


# -- checkpoint selection ----------------------------------------------------------------------------
class Identity(FeatureMap):
    name, norm_bound = "identity-test", 1.0

    def __init__(self, d):
        self.d = d

    @property
    def out_dim(self):
        return self.d

    def __call__(self, x):
        return x.reshape(x.shape[0], -1)

    def spec(self):
        return {"name": self.name, "d": self.d}


class ConstantGenerator(ConditionalGenerator):
    """Outputs one learnable vector c, whatever the code."""

    name = "constant-test"

    def __init__(self, d=4):
        super().__init__(1, 1)
        self.c = torch.nn.Parameter(torch.zeros(d))

    def forward(self, z):
        return self.c.expand(z.shape[0], -1) + 0 * z[:, :1]

    def spec(self):
        return {"name": self.name, "d": self.c.numel()}


def test_training_flushes_subnormal_floats_and_restores_the_mode():
    """train_generator runs with subnormals flushed to zero (a trained generator's tiny activations took x86's slow
    path: full MNIST DP-NTK 1.21 s an iteration against 0.49 with every thread flushing) and leaves the mode as it found
    it (off), also when it stops on an error; the release's sums never run in that mode."""
    tiny = torch.tensor([1e-39], dtype=torch.float32)                # below float32's normal range

    class Probe(Identity):
        seen = []

        def __call__(self, x):
            self.seen.append(float(tiny * 1.0))
            return super().__call__(x)

    assert float(tiny * 1.0) > 0
    probe = Probe(4)
    train_generator(ConstantGenerator(), probe, torch.ones(4), TrainConfig(iterations=3, batch_size=4),
                    conditional=False, device="cpu")
    assert probe.seen and all(v == 0.0 for v in probe.seen)        # flushed during training
    assert float(tiny * 1.0) > 0                                    # and restored after

    class Broken(Identity):
        def __call__(self, x):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        train_generator(ConstantGenerator(), Broken(4), torch.ones(4), TrainConfig(iterations=3, batch_size=4),
                        conditional=False, device="cpu")
    assert float(tiny * 1.0) > 0
    # a process that flushes already (the mmdsynth command: mmdsynth.runtime.flush_subnormals) keeps flushing after
    torch.set_flush_denormal(True)
    try:
        train_generator(ConstantGenerator(), Identity(4), torch.ones(4), TrainConfig(iterations=3, batch_size=4),
                        conditional=False, device="cpu")
        assert float(tiny * 1.0) == 0.0
    finally:
        torch.set_flush_denormal(False)


def test_early_stopping_picks_the_checkpoint_closest_to_the_proxy(tmp_path):
    """The generator walks from 0 to the target 1; the proxy sits at 0.3, so the selected checkpoint is an
    early one near 0.3, not the last one, and a resume restores the selection exactly."""
    config = TrainConfig(iterations=60, batch_size=4, lr=0.02, lr_step=1000, checkpoint_every=10)
    target, proxy = torch.ones(4), torch.full((4,), 0.3, dtype=torch.float64)
    gen = ConstantGenerator()
    sel = Selection(Identity(4), proxy, every=5, n_samples=8)
    train_generator(gen, Identity(4), target, config, conditional=False, selection=sel, device="cpu")
    final_c = gen.c.detach().clone()
    best_c = sel.best_state["c"]
    assert 0 < sel.best_iteration < 60 and len(sel.scores) == 12
    assert abs(float(best_c.mean()) - 0.3) < 0.05 < abs(float(final_c.mean()) - 0.3)
    assert sel.scores[sel.best_iteration // 5 - 1][1] == min(s for _, s in sel.scores)
    # interrupted at 30, resumed: same scores, same choice
    gen2, sel2 = ConstantGenerator(), Selection(Identity(4), proxy, every=5, n_samples=8)
    half = TrainConfig(**{**config.__dict__, "iterations": 30})
    train_generator(gen2, Identity(4), target, half, conditional=False, selection=sel2, checkpoint_dir=tmp_path,
                    device="cpu")
    gen3, sel3 = ConstantGenerator(), Selection(Identity(4), proxy, every=5, n_samples=8)
    train_generator(gen3, Identity(4), target, config, conditional=False, selection=sel3, checkpoint_dir=tmp_path,
                    resume=True, device="cpu")
    assert np.allclose(sel3.scores, sel.scores) and sel3.best_iteration == sel.best_iteration
    assert torch.allclose(sel3.best_state["c"], best_c) and torch.allclose(gen3.c, final_c)


def test_moving_average_loss_reaches_the_target_and_resumes_exactly(tmp_path):
    target = torch.tensor([0.5, -0.2, 0.9, 0.1])
    config = TrainConfig(iterations=300, batch_size=4, lr=0.02, lr_step=1000, checkpoint_every=50, loss="mavg",
                         mavg_lr=0.05)
    gen = ConstantGenerator()
    losses = train_generator(gen, Identity(4), target, config, conditional=False, device="cpu")
    assert losses[0] == pytest.approx(float((target ** 2).sum()))
    assert losses[-1] < 1e-2 * losses[0]
    gen2 = ConstantGenerator()
    train_generator(gen2, Identity(4), target, TrainConfig(**{**config.__dict__, "iterations": 120}),
                    conditional=False, checkpoint_dir=tmp_path, device="cpu")
    gen3 = ConstantGenerator()
    again = train_generator(gen3, Identity(4), target, config, conditional=False, checkpoint_dir=tmp_path,
                            resume=True, device="cpu")
    assert torch.allclose(gen3.c, gen.c, atol=1e-6) and again == pytest.approx(losses, abs=1e-6)
    with pytest.raises(UnknownNameError, match="generator loss"):
        TrainConfig(loss="wasserstein").validate()


def test_generator_adam_beta1_is_a_setting_that_changes_training_and_is_checked(tmp_path):
    """beta1 reaches the generator's Adam (the DP-MEPF authors use 0.5), is saved with the model and
    refused outside [0, 1)."""
    target = torch.tensor([0.5, -0.2, 0.9, 0.1])
    runs = {}
    for beta1 in (0.9, 0.5):
        gen = ConstantGenerator()
        config = TrainConfig(iterations=40, batch_size=4, lr=0.02, lr_step=1000, beta1=beta1)
        runs[beta1] = train_generator(gen, Identity(4), target, config, conditional=False, device="cpu")
    assert runs[0.9][:1] == runs[0.5][:1] and runs[0.9][-1] != pytest.approx(runs[0.5][-1], rel=1e-3)
    assert DPMEPF(1.0, encoder="x", beta1=0.5).train_config().beta1 == 0.5
    assert DPMEPF(1.0, encoder="x", beta1=0.5).fit_params()["beta1"] == 0.5
    for bad in (1.0, -0.1):
        with pytest.raises(InvalidParameterError, match="beta1"):
            TrainConfig(beta1=bad).validate()


# -- the method ---------------------------------------------------------------------------------------
def test_tiny_dpmepf_on_digits_beats_chance_and_noise_shows(encoder, digits, tmp_path):
    """eps 10 learns the classes; at eps 0.01 the released embedding is mostly noise, so accuracy must
    fall clearly below it (silently disabled noise would not)."""
    model = assert_learns_digits_and_noise_shows(
        lambda eps: DPMEPF(eps, 1e-5, encoder=encoder, n_classes=10, iterations=150, batch_size=200, select_every=50,
                           select_samples=500, noise_seed=1), digits)
    model.save(tmp_path / "m")
    again = load(tmp_path / "m")
    assert np.array_equal(again.sample(20, seed=1)[0], model.sample(20, seed=1)[0])
    assert np.array_equal(again.sample(20, seed=1, checkpoint="final")[0],
                          model.sample(20, seed=1, checkpoint="final")[0])
    assert again.selection_["best_iteration"] == model.selection_["best_iteration"]


def test_unlabelled_generation(encoder, digits):
    model = DPMEPF(1.0, encoder=encoder, conditional=False, iterations=2, batch_size=10, select_every=1,
                   select_samples=10, noise_seed=0).fit(digits.x_train, digits.y_train, dataset="digits")
    assert model.release_.tensors["embedding"].shape == (2 * 3584,)
    assert model.release_.ledger.entries[0].description.startswith("mean embedding under perceptual")
    x, y = model.sample(5, seed=0)
    assert x.shape == (5, 1, 8, 8) and y is None


def test_errors_name_the_problem(encoder, digits, tmp_path):
    with pytest.raises(InvalidParameterError, match="encoder trained on PUBLIC data"):
        DPMEPF(1.0, n_classes=10).fit(digits.x_train, digits.y_train, dataset="digits")
    with pytest.raises(ArtifactError, match="pretrain-encoder"):
        DPMEPF(1.0, encoder=str(tmp_path / "nope.safetensors"), n_classes=10).fit(digits.x_train, digits.y_train)
    net = build_encoder("vgg_small", 1, 10)
    leaky = tmp_path / "leaky.safetensors"
    save_encoder(net, {"arch": "vgg_small", "in_channels": 1, "n_classes": 10, "dataset": "digits"}, leaky)
    with pytest.raises(InvalidParameterError, match="depend on the private data"):
        DPMEPF(1.0, encoder=str(leaky), n_classes=10).fit(digits.x_train, digits.y_train, dataset="digits")
    with pytest.raises(InvalidParameterError, match="images"):
        DPMEPF(1.0, encoder=encoder, n_classes=10).fit(digits.x_train.reshape(len(digits.y_train), -1),
                                                       digits.y_train)
    with pytest.raises(InvalidParameterError, match="moments"):
        PerceptualFeatures(encoder, (1, 8, 8), moments=(1, 3))
    # a release's features are pinned to the encoder file's bytes
    fmap = PerceptualFeatures(encoder, (1, 8, 8))
    spec = {**fmap.spec(), "encoder_sha256": "0" * 64}
    from mmdsynth.features import build_feature_map
    with pytest.raises(ArtifactError, match="not the one"):
        build_feature_map(spec)


def test_early_stopping_is_shared_machinery_a_method_opts_into(encoder, digits):
    """DP early stopping lives in the shared training loop; DP-MEPF exposes its options (issue 46 item 7: DP-NTK's
    signature no longer lists them). A method that declares them in its own signature gets the same three-part
    machinery (embedding + proxy): here a DP-NTK with a public proxy network."""
    from mmdsynth import DPNTK

    class NTKWithProxy(DPNTK):
        def __init__(self, epsilon=None, delta=1e-5, *, early_stopping=True, proxy_encoder=None, select_every=None,
                     select_samples=2000, **kwargs):
            super().__init__(epsilon, delta, **kwargs)
            self.early_stopping, self.proxy_encoder = early_stopping, proxy_encoder
            self.select_every, self.select_samples = select_every, select_samples

    with pytest.raises(TypeError, match="early_stopping"):
        DPNTK(1.0, early_stopping=True)
    model = NTKWithProxy(1.0, n_classes=10, iterations=4, batch_size=50, proxy_encoder=encoder,
                         select_every=2, select_samples=20, noise_seed=0)
    model.fit(digits.x_train, digits.y_train, dataset="digits")
    assert [e.description[:10] for e in model.release_.ledger.entries] == ["class-cond", "DP early-s"]
    assert model.release_.ledger.entries[0].plan == {"multipliers": [1.0, 10.0]}
    assert model.selection_["best_iteration"] in (2, 4)
    with pytest.raises(InvalidParameterError, match="proxy_encoder"):
        NTKWithProxy(1.0, n_classes=10).fit(digits.x_train, digits.y_train)


def test_release_refuses_a_plan_that_misses_a_release(encoder, digits):
    fmap = PerceptualFeatures(encoder, (1, 8, 8), moments=(1, 2))
    with pytest.raises(InvalidParameterError, match="is not in the plan"):
        release_mean_embedding(fmap, digits.x_train, digits.y_train, n_classes=10,
                               engine=PrivacyEngine(1.0, 1e-5, PrivacyPlan((1.0,)), multipliers={"embedding": 1.0}))


def test_encoders_are_found_by_name_in_the_encoder_folder(encoder, tmp_path):
    from mmdsynth.features.encoders import encoder_dir, resolve_encoder

    named = encoder_dir() / "public-vgg_small.safetensors"       # MMDSYNTH_CACHE_DIR is per test
    named.parent.mkdir(parents=True)
    for suffix in (".safetensors", ".json"):
        named.with_suffix(suffix).write_bytes(open(encoder.replace(".safetensors", suffix), "rb").read())
    assert resolve_encoder("public-vgg_small") == named
    assert PerceptualFeatures("public-vgg_small", (1, 8, 8)).spec()["encoder"] == str(named)
    with pytest.raises(ArtifactError, match="nor a named encoder") as info:
        resolve_encoder("no-such-encoder")
    assert "pretrain-encoder --dataset" in str(info.value)


@pytest.mark.parametrize("dataset", ["", "digits"])
def test_the_ledger_says_what_the_encoder_check_establishes(encoder, digits, dataset):
    """The check compares dataset NAMES only: the ledger says so, and that with no name nothing was compared."""
    model = DPMEPF(1.0, encoder=encoder, n_classes=10, iterations=1, batch_size=10, select_every=1,
                   select_samples=20, noise_seed=0).fit(digits.x_train[:60], digits.y_train[:60], dataset=dataset)
    for entry in model.release_.ledger.entries:
        note = " ".join(entry.notes)
        assert "cannot show that the encoder never saw these records" in note
        assert ("no dataset name was given, so nothing was compared" in note) == (dataset == "")
        assert dataset == "" or "(random-init) differs from this dataset's name ('digits')" in note
    assert "note: encoder check" in model.release_.ledger.format()
