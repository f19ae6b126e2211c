"""Tables on real data: a tiny adult fit beats the majority baseline; the CLI keeps a preset's numeric
encoding (slow)."""
import json

import pytest

from mmdsynth import DPMERF
from mmdsynth.cli import main

from conftest import require_data


@pytest.mark.slow
def test_tiny_fit_on_adult_beats_majority_baseline():
    require_data("adult")
    from mmdsynth.data import load_preset
    from mmdsynth.evaluation.tabular import table_classifier_scores

    d = load_preset("adult", seed=0)
    m = DPMERF(epsilon=1, iterations=300, batch_size=200, n_features=500).fit(d.train, label="income",
                                                                              schema=d.schema)
    r = table_classifier_scores(m.sample(5000, seed=0), d.test, m.encoder_,
                                classifiers=["logistic_regression", "gaussian_nb"])
    assert 0.6 < r["mean"]["roc_auc"] < 0.95  # majority-class baseline: 0.5


@pytest.mark.slow
def test_cli_keeps_the_presets_numeric_encoding_unless_the_flag_overrides_it(tmp_path, capsys):
    # DP-NTK's epileptic preset keeps min-max columns; the CLI used to drop that choice (quantile ran)
    require_data("epileptic")
    base = ["fit", "--method", "dp-ntk", "--dataset", "epileptic", "--iterations", "1"]
    assert main(base + ["--out", str(tmp_path / "preset")]) == 0
    assert main(base + ["--numeric-encoding", "quantile", "--out", str(tmp_path / "flag")]) == 0
    encoding = {name: json.loads((tmp_path / name / "model.json").read_text())["params"]["numeric_encoding"]
                for name in ("preset", "flag")}
    assert encoding == {"preset": "minmax", "flag": "quantile"}


@pytest.mark.slow
def test_the_adult_preset_converges_at_its_own_defaults(tmp_path, capsys):
    """Issue 35: `mmdsynth fit --method dp-ntk --dataset adult` used to end "not converged" at its own defaults."""
    require_data("adult")
    assert main(["fit", "--method", "dp-ntk", "--dataset", "adult", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "converged" in out and "not converged" not in out, out
