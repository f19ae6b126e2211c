"""Inception-v3 for the FID: architecture, weight loading from user files, errors, CLI wiring."""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from mmdsynth.errors import ArtifactError, InvalidParameterError
from mmdsynth.evaluation.inception import InceptionV3, inception_report, load_inception


def _weights(tmp_path, variant="fid", suffix=".safetensors", extra=None):
    torch.manual_seed(0)
    net = InceptionV3(variant)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    state.update(extra or {})
    path = tmp_path / f"inception{suffix}"
    if suffix == ".safetensors":
        save_file(state, str(path))
    else:
        torch.save(state, path)
    return path, net


def test_architecture_is_torchvisions_inception3_without_the_aux_classifier():
    # torchvision's inception_v3 has 27,161,264 parameters, 3,326,696 of them in AuxLogits
    assert sum(p.numel() for p in InceptionV3("torchvision").parameters()) == 27_161_264 - 3_326_696
    fid = InceptionV3("fid")
    assert fid.fc.out_features == 1008 and fid.Mixed_7c.pool == "max" and fid.Mixed_7b.pool == "avg_tf"
    with pytest.raises(InvalidParameterError, match="'fid' or 'torchvision'"):
        InceptionV3("resnet")


def test_loads_user_weights_and_reports_the_variant(tmp_path):
    aux = {"AuxLogits.fc.weight": torch.zeros(1000, 768)}  # ignored, as in torchvision files
    path, net = _weights(tmp_path, "torchvision", ".pth", extra=aux)
    loaded = load_inception(path)
    assert loaded.variant == "torchvision"
    x = np.random.default_rng(0).random((3, 1, 28, 28)).astype(np.float32)
    f = loaded.features(x)
    assert f.shape == (3, 2048) and np.allclose(f, net.eval().features(x), atol=1e-5)
    path, _ = _weights(tmp_path, "fid")
    rep = inception_report(path, x, x)
    assert rep["fid_network"] == "inception-v3/fid" and abs(rep["fid"]) < 1e-3


def test_bad_weight_files_are_refused_clearly(tmp_path):
    with pytest.raises(ArtifactError, match="does not exist. mmdsynth never downloads it"):
        load_inception(tmp_path / "missing.pth")
    save_file({"fc.weight": torch.zeros(10, 2048)}, str(tmp_path / "small.safetensors"))
    with pytest.raises(ArtifactError, match="expected fc.weight with 1008 \\(FID\\) or 1000"):
        load_inception(tmp_path / "small.safetensors")
    path, _ = _weights(tmp_path, "fid", extra={"Mixed_9z.conv.weight": torch.zeros(1)})
    with pytest.raises(ArtifactError, match="unexpected \\['Mixed_9z.conv.weight'\\]"):
        load_inception(path)
    (tmp_path / "w.h5").write_bytes(b"x")
    with pytest.raises(InvalidParameterError, match="must be .safetensors, .pth or .pt"):
        load_inception(tmp_path / "w.h5")


def test_cli_evaluate_adds_the_inception_fid(tmp_path, capsys, monkeypatch):
    from mmdsynth.cli import main

    assert main(["fit", "--method", "dp-merf", "--dataset", "digits", "--epsilon", "10", "--iterations", "5",
                 "--batch-size", "100", "--n-features", "200", "-q", "--out", str(tmp_path / "m")]) == 0
    path, _ = _weights(tmp_path, "fid")
    # the real network on 299 x 299 inputs is slow on CPU: same wiring, cheap features
    monkeypatch.setattr(InceptionV3, "features", lambda self, x: np.asarray(x).reshape(len(x), -1)[:, :20]
                        .astype(np.float64))
    capsys.readouterr()
    args = ["evaluate", str(tmp_path / "m"), "--n", "200", "--inception-weights", str(path), "--frechet"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fid_network"] == "inception-v3/fid" and out["fid"] > 0 and out["fd_network"] == "mmdsynth-cnn/digits"
    # the summary a person reads shows both distances (the CNN's was computed and never printed before)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"FID (Inception-v3) {out['fid']:.3f}" in text and f"Frechet distance (CNN features) {out['fd']:.3f}" in text
