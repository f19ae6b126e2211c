"""Downstream utility: train scikit-learn classifiers on synthetic data, test on real.

Each classifier has one fixed setting (the papers' evaluation settings); nothing is
selected on the test set.
"""
from __future__ import annotations

import logging
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.neural_network import MLPClassifier

logger = logging.getLogger(__name__)

# Images (DP-NTK / DP-MERF evaluation): LogReg (lbfgs, max_iter 5000) and the default MLP.
IMAGE_CLASSIFIERS = {
    "logreg": lambda seed: LogisticRegression(solver="lbfgs", max_iter=5000),
    "mlp": lambda seed: MLPClassifier(random_state=seed),
}


def _flat(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x.reshape(x.shape[0], -1)


def image_classifier_scores(x_syn, y_syn, x_test, y_test, *, classifiers=("logreg", "mlp"),
                            seed: int = 0) -> dict:
    """{name}_acc and {name}_f1 (macro) for each classifier trained on (x_syn, y_syn)."""
    xs, xt = _flat(x_syn), _flat(x_test)
    ys, yt = np.asarray(y_syn), np.asarray(y_test)
    out = {}
    for name in classifiers:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf = IMAGE_CLASSIFIERS[name](seed).fit(xs, ys)
        pred = clf.predict(xt)
        out[f"{name}_acc"] = float(accuracy_score(yt, pred))
        out[f"{name}_f1"] = float(f1_score(yt, pred, average="macro"))
        logger.info("%s: acc %.4f (%.1f s)", name, out[f"{name}_acc"], time.perf_counter() - t)
    return out
