"""DP-MEPF building blocks: encoders (mmdsynth's and torchvision's layouts) and perceptual features."""
import json

import numpy as np
import pytest
import torch

from mmdsynth.errors import ArtifactError, InvalidParameterError
from mmdsynth.features import build_feature_map
from mmdsynth.features.encoders import build_encoder, conv_layers, load_encoder, save_encoder
from mmdsynth.features.perceptual import PerceptualFeatures


@pytest.fixture(scope="module")
def small_vgg(tmp_path_factory):
    torch.manual_seed(0)
    net = build_encoder("vgg_small", 1, 10)
    path = tmp_path_factory.mktemp("enc") / "vgg_small.safetensors"
    save_encoder(net, {"arch": "vgg_small", "in_channels": 1, "n_classes": 10, "image_size": 28}, path)
    return net, path


def test_both_moments_have_unit_norm_and_rebuild_from_spec(small_vgg):
    _, path = small_vgg
    x = torch.rand(7, 1, 28, 28)
    for moment in (1, 2):
        fmap = PerceptualFeatures(str(path), (1, 28, 28), moments=moment)
        phi = fmap(x)
        assert phi.shape == (7, fmap.out_dim) and fmap.out_dim == 32 * 28 * 28 + 64 * 14 * 14 \
            + 128 * 7 * 7
        assert torch.allclose(phi.norm(dim=1), torch.ones(7), atol=1e-5)
        again = build_feature_map(fmap.spec())
        assert torch.equal(again(x), phi)
    phi1 = PerceptualFeatures(str(path), (1, 28, 28), moments=1)(x)
    phi2 = PerceptualFeatures(str(path), (1, 28, 28), moments=2)(x)
    both = PerceptualFeatures(str(path), (1, 28, 28), moments=(1, 2))
    assert both.parts() == [("phi1", phi1.shape[1], 1.0), ("phi2", phi1.shape[1], 1.0)]
    assert both.norm_bound == 2 ** 0.5 and torch.equal(both(x), torch.cat([phi1, phi2], 1))
    ratio = phi2 / (phi1 * phi1)                       # phi2 is phi1 squared, renormalised
    ok = phi1.abs() > 1e-4
    assert torch.allclose(ratio[0][ok[0]], ratio[0][ok[0]][0].expand(int(ok[0].sum())), rtol=1e-3)


def test_hooks_capture_exactly_the_declared_layers(small_vgg):
    _, path = small_vgg
    fmap = PerceptualFeatures(str(path), (1, 28, 28), layers=["features.3"])
    acts = fmap.activations(torch.rand(2, 1, 28, 28))
    assert list(acts) == ["features.3"] and acts["features.3"].shape == (2, 64, 14, 14)
    assert fmap.out_dim == 64 * 14 * 14
    assert conv_layers(fmap.encoder) == ["features.0", "features.3", "features.6"]
    # hooks are removed after each call
    assert not fmap.encoder.get_submodule("features.3")._forward_hooks
    with pytest.raises(InvalidParameterError, match="Conv2d layers"):
        PerceptualFeatures(str(path), (1, 28, 28), layers=["features.1"])


def test_features_are_differentiable_for_the_generator(small_vgg):
    _, path = small_vgg
    x = torch.rand(3, 1, 28, 28, requires_grad=True)
    PerceptualFeatures(str(path), (1, 28, 28))(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


@pytest.mark.parametrize("moments", [(1,), (2,), (1, 2)])
@pytest.mark.parametrize("layers", [None, ["features.3"]])
def test_weighted_sum_equals_the_materialised_features_in_value_and_gradient(small_vgg, moments, layers):
    """The generator's side never builds phi: e^T (W / ||e||) layer by layer must equal phi^T W, and
    so must the gradient that reaches the generated images."""
    from mmdsynth.features.base import FeatureMap
    _, path = small_vgg
    fmap = PerceptualFeatures(str(path), (1, 28, 28), moments=moments, layers=layers)
    x = torch.rand(6, 1, 28, 28, requires_grad=True)
    w = torch.rand(6, 3)
    x.data[2] = 0.0                                             # a black image: the encoder's -1 input
    fast = fmap.weighted_sum(x, w)
    slow = FeatureMap.weighted_sum(fmap, x, w)
    assert fast.shape == slow.shape == (fmap.out_dim, 3)
    assert torch.allclose(fast, slow, rtol=1e-5, atol=1e-7)
    g = torch.randn(fmap.out_dim, 3)
    gf, = torch.autograd.grad((fast * g).sum(), x)
    gs, = torch.autograd.grad((slow * g).sum(), x)
    assert torch.allclose(gf, gs, rtol=1e-4, atol=1e-6 * float(gs.abs().max()))


@pytest.mark.parametrize("moments", [(1,), (2,), (1, 2)])
@pytest.mark.parametrize("adversary", [1e39, -1e39, 3e38, 0.0, float("nan")])
def test_worst_case_record_moves_each_moment_block_by_at_most_one(small_vgg, moments, adversary):
    """Replace-one: each record's contribution to each block has norm <= 1, so each released block's
    sum moves by <= 2 (the sensitivity 2/m of its mean), whatever the record."""
    _, path = small_vgg
    fmap = PerceptualFeatures(str(path), (1, 28, 28), moments=moments)
    x = torch.rand(20, 1, 28, 28, dtype=torch.float64)
    y = torch.arange(20) % 2
    base = fmap.class_sums(x, y, 2)
    bad = torch.full((1, 1, 28, 28), adversary, dtype=torch.float64)     # 1e39: inf in float32
    more = fmap.class_sums(torch.cat([x, bad]), torch.cat([y, torch.tensor([1])]), 2)
    swapped = fmap.class_sums(torch.cat([x[:-1], bad]), y, 2)
    assert torch.isfinite(more).all() and torch.isfinite(swapped).all()
    start = 0
    for _, width, bound in fmap.parts():
        block = slice(start, start + width)
        assert float((more - base)[:, block].norm()) <= bound + 1e-6
        assert float((swapped - base)[:, block].norm()) <= 2 * bound + 1e-6
        start += width


def test_torchvision_state_dicts_load_and_give_features(tmp_path):
    torch.manual_seed(1)
    vgg = build_encoder("vgg19", 3, 1000)
    state = {k: v for k, v in vgg.state_dict().items() if k.startswith("features.")}
    # torchvision's head (ignored for features): classifier.0/3/6
    state.update({"classifier.0.weight": torch.zeros(4, 25088), "classifier.6.bias": torch.zeros(1000)})
    torch.save(state, tmp_path / "vgg19.pth")
    net, spec = load_encoder(tmp_path / "vgg19.pth")
    assert spec["arch"] == "vgg19" and len(conv_layers(net)) == 16
    assert torch.equal(net.features[0].weight, vgg.features[0].weight)
    res = build_encoder("resnet18", 3, 1000)
    torch.save(res.state_dict(), tmp_path / "r18.pth")
    net, spec = load_encoder(tmp_path / "r18.pth")
    assert spec["arch"] == "resnet18" and "layer4.1.conv2" in conv_layers(net)
    phi = PerceptualFeatures(net, (1, 28, 28), layers=["layer1.0.conv1", "layer4.1.conv2"], input_size=32,
                             spec=spec)(torch.rand(2, 1, 28, 28))
    assert phi.shape[0] == 2 and torch.allclose(phi.norm(dim=1), torch.ones(2), atol=1e-5)
    bad = dict(state)
    bad.pop("features.0.weight")
    bad["features.0.weightx"] = torch.zeros(1)
    torch.save(bad, tmp_path / "bad.pth")
    with pytest.raises(ArtifactError):
        load_encoder(tmp_path / "bad.pth", arch="vgg19")
    with pytest.raises(ArtifactError, match="nothing is downloaded"):
        load_encoder(tmp_path / "missing.safetensors")


def test_resnet_small_trains_shapes():
    net = build_encoder("resnet_small", 1, 10)
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert net(torch.zeros(2, 1, 32, 32)).shape == (2, 10)
    assert len(conv_layers(net)) == 1 + 2 + 3 + 3      # stem, stage 1, stages 2-3 with a downsample each
    assert np.isfinite(PerceptualFeatures(net, (1, 28, 28)).out_dim)


def test_pretrain_encoder_cli_saves_spec_with_accuracy_and_resumes_exactly(tmp_path, monkeypatch, capsys):
    from safetensors.torch import load_file

    from mmdsynth.cli import main
    from mmdsynth.encoders import pretrain

    args = ["pretrain-encoder", "--dataset", "digits", "--arch", "vgg_small", "--epochs", "2", "--batch-size", "256",
            "-q", "--device", "cpu"]
    assert main(args + ["--out", str(tmp_path / "full.safetensors")]) == 0
    spec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert spec["arch"] == "vgg_small" and spec["dataset"] == "digits" and 0.3 < spec["test_acc"] <= 1
    assert json.loads((tmp_path / "full.json").read_text())["test_acc"] == spec["test_acc"]
    net, _ = load_encoder(tmp_path / "full.safetensors")
    assert net(torch.zeros(1, 1, 8, 8)).shape == (1, 10)

    real_save = pretrain._save_checkpoint
    calls = {"n": 0}

    def interrupt_after_first_epoch(*a, **k):
        real_save(*a, **k)
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(pretrain, "_save_checkpoint", interrupt_after_first_epoch)
    assert main(args + ["--out", str(tmp_path / "cut.safetensors")]) == 130       # Ctrl-C: exit 130, no traceback
    assert (tmp_path / "cut.ckpt.json").exists() and not (tmp_path / "cut.safetensors").exists()
    assert main(args + ["--out", str(tmp_path / "cut.safetensors")]) == 2       # refuses without --resume
    assert main(args + ["--out", str(tmp_path / "cut.safetensors"), "--resume"]) == 0
    a, b = load_file(str(tmp_path / "full.safetensors")), load_file(str(tmp_path / "cut.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "cut.ckpt.json").exists()


def test_random_encoder_cli_saves_a_seeded_untrained_public_encoder(tmp_path, capsys):
    from mmdsynth.cli import main

    out = tmp_path / "rand.safetensors"
    args = ["pretrain-encoder", "--random", "--arch", "vgg_small", "--channels", "3", "--image-size", "32"]
    assert main(args + ["--out", str(out)]) == 0
    spec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert spec["dataset"] is None and spec["test_acc"] is None and spec["in_channels"] == 3
    net, saved = load_encoder(out)
    assert saved["image_size"] == 32 and net(torch.zeros(1, 3, 32, 32)).shape == (1, 10)
    assert main(args + ["--out", str(tmp_path / "again.safetensors")]) == 0          # the seed alone fixes it
    a, b = load_encoder(tmp_path / "again.safetensors")[0].state_dict(), net.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert main(args + ["--out", str(out)]) == 2                                      # no overwrite
    assert main(args + ["--dataset", "digits", "--out", str(tmp_path / "x.safetensors")]) == 2
    assert "--dataset PUBLIC" in capsys.readouterr().err
    assert main(["pretrain-encoder", "--arch", "vgg_small", "--out", str(tmp_path / "y.safetensors")]) == 2
    capsys.readouterr()
    # options of the other mode are refused by name, not silently ignored, and nothing is written
    assert main(args + ["--epochs", "3", "--resume", "--out", str(tmp_path / "z.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "--epochs, --resume" in err and "nothing is trained" in err
    assert main(["pretrain-encoder", "--dataset", "digits", "--arch", "vgg_small", "--channels", "1",
                 "--out", str(tmp_path / "w.safetensors")]) == 2
    assert "--channels" in capsys.readouterr().err
    assert not (tmp_path / "z.safetensors").exists() and not (tmp_path / "w.safetensors").exists()
