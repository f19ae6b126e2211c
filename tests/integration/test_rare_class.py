"""Issue 32: a rare class does not wreck the other classes (3 seeds per method; slow)."""
import numpy as np
import pytest

from dpsynth import DPHP, DPMERF, Schema
from dpsynth.data.encoding import TableEncoder
from dpsynth.evaluation import tabular

from support import FIVE_SCHEMA, five_class_table


@pytest.mark.slow
@pytest.mark.parametrize("cls", [DPMERF, DPHP])
def test_a_five_class_table_with_a_one_row_class_keeps_its_other_classes(cls):
    """Weighted F1 within 0.05 of the same table without the class, 3 seeds (measured: DP-MERF 0.873 vs
    0.868, DP-HP 0.851 vs 0.808; the old weighting: DP-MERF 0.774 vs 0.857)."""
    def f1(rare):
        out = []
        for seed in range(3):
            train, test = five_class_table(4000, seed, rare), five_class_table(2000, 100 + seed, False)
            m = cls(**{**cls.defaults_for("table"), "iterations": 500, "seed": seed}).fit(train, label="y",
                                                                                        schema=FIVE_SCHEMA)
            enc = TableEncoder(Schema.from_dict(FIVE_SCHEMA), list(train.columns))
            s = tabular.table_classifier_scores(m.sample(4000, seed=seed), test, enc, seed=seed,
                                                classifiers=["logistic_regression", "random_forest", "gaussian_nb"])
            out.append(s["mean"]["f1"])
        return float(np.mean(out))
    with_rare, without = f1(True), f1(False)
    assert abs(with_rare - without) <= 0.05 and without > 0.6
