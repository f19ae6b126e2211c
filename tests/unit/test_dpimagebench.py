"""DPImageBench's utility protocol (issue 33): its three classifiers, its split, EMA and selection rule."""
import json

import numpy as np
import pytest
import torch

from mmdsynth.errors import InvalidParameterError, UnknownNameError
from mmdsynth.evaluation import dpimagebench as dib

TINY = {"resnet": {"depth": 8}, "wrn": {"depth": 10, "widen": 1}, "resnext": {"depth": 11, "cardinality": 2,
                                                                             "widen": 2}}


@pytest.mark.parametrize("family,channels,size,expected", [
    ("small", 1, 28, {"resnet": 1_730_426, "wrn": 8_948_922, "resnext": 34_425_546}),
    ("cifar", 3, 32, {"resnet": 2_605_658, "wrn": 36_479_194, "resnext": 40_559_690}),
])
def test_the_benchmark_architectures_have_its_exact_sizes(family, channels, size, expected):
    """Parameter counts of the benchmark's own classes (ResNet-110 / WRN-40-4 / ResNeXt-29 for 28x28 grey,
    ResNet-164 / WRN-28-10 / ResNeXt-28 for CIFAR-10), counted from 2019ChenGong/DPImageBench@565f8d7; the
    outputs were also checked equal to theirs with shared weights when this was written."""
    for name, count in expected.items():
        net = dib.build_classifier(name, channels, size, 10, **dib.SETTINGS[family]["architectures"][name])
        assert sum(p.numel() for p in net.parameters()) == count, name
        assert net.eval()(torch.rand(2, channels, size, size)).shape == (2, 10)


def test_selection_keeps_the_test_accuracy_of_the_best_validation_epoch_ties_to_the_later():
    history = [(0.5, 0.70), (0.6, 0.80), (0.6, 0.75), (0.4, 0.90)]
    assert dib.select_by_validation(history) == (2, 0.75)
    assert dib.select_by_validation([(0.0, 0.1)]) == (0, 0.1)


def test_the_parameter_average_follows_the_benchmark_schedule():
    net = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        net.weight.fill_(0.0)
    ema = dib._EMA(net)
    with torch.no_grad():
        net.weight.fill_(1.0)
    ema.update(net)                                  # decay min(0.9999, 2/11): shadow = 1 - 2/11
    assert ema.shadow[0][0, 0].item() == pytest.approx(9 / 11)
    assert torch.equal(ema.averaged(net).weight, ema.shadow[0]) and net.weight[0, 0].item() == 1.0


def test_a_short_run_on_digits_scores_every_classifier_and_says_it_is_not_the_protocol(digits):
    x, y = digits.x_train[:600], digits.y_train[:600]
    r = dib.dpimagebench_scores(x, y, digits.x_test, digits.y_test, dataset="digits", epochs=3, architectures=TINY,
                                device="cpu")
    assert r["protocol"]["n_val"] == 50 and r["protocol"]["n_train"] == 550 and r["protocol"]["family"] == "small"
    assert r["protocol"]["faithful"] is False and r["protocol"]["epochs"] == 3
    accs = []
    for name in dib.CLASSIFIERS:
        block = r["dpimagebench"][name]
        assert len(block["history"]) == 3 and block["architecture"] == {**dib.SETTINGS["small"]["architectures"][name],
                                                                        **TINY[name]}
        assert block["test_acc_at_best_val"] == block["history"][block["best_epoch"]][1]
        accs.append(block["test_acc_at_best_val"])
    assert r["dpimagebench_acc"] == pytest.approx(np.mean(accs))
    assert 0.3 < r["dpimagebench_acc"] <= 1.0          # 10 classes: chance is 0.1


def test_bad_input_is_refused():
    with pytest.raises(InvalidParameterError, match=r"\(n, C, H, W\)"):
        dib.dpimagebench_scores(np.zeros((30, 64)), np.zeros(30), np.zeros((5, 64)), np.zeros(5))
    with pytest.raises(UnknownNameError, match="vgg"):
        dib.dpimagebench_scores(np.zeros((30, 1, 8, 8)), np.zeros(30), np.zeros((5, 1, 8, 8)), np.zeros(5),
                                classifiers=("vgg",))
    with pytest.raises(InvalidParameterError, match="6n \\+ 4"):
        dib.build_classifier("wrn", 1, 28, 10, depth=12)


def test_cli_protocol_flag_runs_the_benchmark_protocol_and_saves_it(tmp_path, digits, capsys, monkeypatch):
    """`evaluate SET --protocol dpimagebench` (no --cnn needed) reaches the protocol with the real test split and
    the epochs override, and the result lands in the evaluation file and in the printed summary."""
    from mmdsynth.cli import main

    calls = {}

    def fake(x_syn, y_syn, x_test, y_test, **kw):
        calls.update(kw, n=len(y_syn), n_test=len(y_test))
        return {"dpimagebench_acc": 0.5, "dpimagebench_acc_std": 0.1,
                "dpimagebench": {c: {"test_acc_at_best_val": 0.5} for c in dib.CLASSIFIERS},
                "protocol": {"name": "dpimagebench", "faithful": False}}
    monkeypatch.setattr(dib, "dpimagebench_scores", fake)
    run_dir, out_set = tmp_path / "run", tmp_path / "set.npz"
    assert main(["fit", "--method", "dp-ntk", "--dataset", "digits", "--epsilon", "5", "--iterations", "5",
                 "--batch-size", "100", "--ntk-width", "100", "--out", str(run_dir)]) == 0
    assert main(["distill", str(run_dir), "--images-per-class", "3", "--iterations", "5", "--out", str(out_set)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out_set), "--protocol", "dpimagebench", "--cnn-epochs", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert calls["epochs"] == 2 and calls["dataset"] == "digits" and calls["n"] == 30
    assert calls["n_test"] == len(digits.y_test)
    assert result["cnn_acc"] == 0.5 and result["cnn_protocol"]["name"] == "dpimagebench"
    assert json.loads((tmp_path / "set.evaluation.json").read_text())["cnn_accs"] == [0.5, 0.5, 0.5]
    assert main(["evaluate", str(out_set), "--protocol", "dpimagebench", "--cnn-epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert "CNN accuracy 0.500" in out and "CNN protocol: dpimagebench" in out and "not the protocol" in out
    assert main(["evaluate", str(out_set), "--cnn-epochs", "0"]) == 2
    assert "--cnn-epochs must be >= 1" in capsys.readouterr().err
