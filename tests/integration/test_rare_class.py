"""Issue 32: a rare class does not wreck the other classes (3 seeds; slow). The rare class's handling (released
proportions floored at 1e-3, each class weighted by its proportion squared in the loss, labels drawn from the
proportions) is :class:`~mmdsynth.methods.base.KernelGeneratorMethod`'s, shared by every kernel method on tables, so
one method, the table default's kernel (DP-MERF), checks it; DP-HP's copy (about 45 s) ran the same lines."""
import numpy as np
import pytest

from mmdsynth import DPMERF, Schema
from mmdsynth.data.encoding import TableEncoder
from mmdsynth.evaluation import tabular

from support import FIVE_SCHEMA, five_class_table


@pytest.mark.slow
def test_a_five_class_table_with_a_one_row_class_keeps_its_other_classes():
    """Weighted F1 at most 0.05 below the same table without the class, 3 seeds. The claim is one-sided
    (the rare class must not cost the others); the noise is seeded (testing only) so the comparison is
    reproducible: with secure noise a CI run measured DP-MERF 0.899 with vs 0.817 without, which the old
    two-sided bound failed. (Measured before: DP-MERF 0.873 vs 0.868, DP-HP 0.851 vs 0.808; the old
    weighting: DP-MERF 0.774 vs 0.857.)"""
    cls = DPMERF

    def f1(rare):
        out = []
        for seed in range(3):
            train, test = five_class_table(4000, seed, rare), five_class_table(2000, 100 + seed, False)
            params = {**cls.defaults_for("table"), "iterations": 500, "seed": seed, "noise_seed": 1000 + seed}
            m = cls(**params).fit(train, label="y", schema=FIVE_SCHEMA)
            enc = TableEncoder(Schema.from_dict(FIVE_SCHEMA), list(train.columns))
            s = tabular.table_classifier_scores(m.sample(4000, seed=seed), test, enc, seed=seed,
                                                classifiers=["logistic_regression", "random_forest", "gaussian_nb"])
            out.append(s["mean"]["f1"])
        return float(np.mean(out))
    with_rare, without = f1(True), f1(False)
    print(f"{cls.__name__}: with the rare class {with_rare:.3f}, without {without:.3f}")
    assert with_rare >= without - 0.05 and without > 0.6
