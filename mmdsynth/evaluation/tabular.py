"""The papers' 12 downstream classifiers for tables, each with one fixed setting.

Trained on synthetic rows, tested on the real test split (nothing is selected
on the test set, unlike the reference code). Features: the table encoding
with numeric columns min-max scaled by the declared bounds (whatever encoding the model used),
one-hot categoricals.
Binary labels: ROC-AUC and PR-AUC (average precision) from probabilities or
decision scores (not hard labels); multi-class: weighted F1.
"""
from __future__ import annotations

import logging
import time
import warnings

import numpy as np
import pandas as pd
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.ensemble import AdaBoostClassifier, BaggingClassifier, GradientBoostingClassifier, RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score
from sklearn.naive_bayes import BernoulliNB, GaussianNB
from sklearn.neural_network import MLPClassifier
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

from ..data.encoding import TableEncoder

logger = logging.getLogger(__name__)


def _xgboost(seed):
    try:
        from xgboost import XGBClassifier
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the XGBoost classifier needs the 'eval' extra: pip install 'mmdsynth[eval]' "
                          "(xgboost-cpu).") from exc
    return XGBClassifier(n_estimators=100, random_state=seed, n_jobs=2, verbosity=0)


TABLE_CLASSIFIERS = {
    "logistic_regression": lambda s: LogisticRegression(solver="lbfgs", max_iter=1000),
    "gaussian_nb": lambda s: GaussianNB(),
    "bernoulli_nb": lambda s: BernoulliNB(),
    "linear_svc": lambda s: LinearSVC(random_state=s),
    "decision_tree": lambda s: DecisionTreeClassifier(random_state=s),
    "lda": lambda s: LinearDiscriminantAnalysis(),
    "adaboost": lambda s: AdaBoostClassifier(random_state=s),
    "bagging": lambda s: BaggingClassifier(random_state=s),
    "random_forest": lambda s: RandomForestClassifier(random_state=s),
    "gradient_boosting": lambda s: GradientBoostingClassifier(subsample=0.1, n_estimators=50, random_state=s),
    "mlp": lambda s: MLPClassifier(random_state=s, early_stopping=True),  # defaults took 60 s on adult
    "xgboost": _xgboost,
}


def _scores(clf, X) -> np.ndarray:
    if hasattr(clf, "predict_proba"):
        return clf.predict_proba(X)[:, 1]
    return clf.decision_function(X)


def table_classifier_scores(train: pd.DataFrame, test: pd.DataFrame, encoder: TableEncoder, *,
                            classifiers=None, seed: int = 0) -> dict:
    """Per-classifier metrics and their mean: {'binary': bool, 'classifiers': {...}, 'mean': {...}}.

    A classifier that cannot be trained (e.g. the synthetic labels hold a single class)
    scores as chance (ROC 0.5, PR = positive rate, F1 from predicting the majority),
    and the failure is named in ``failures``: nothing is silently dropped from the mean. By default
    every installed classifier runs; one whose package is missing (XGBoost is the ``eval`` extra)
    is named in ``skipped`` with the install command, and the mean is over those that ran.
    """
    skipped = {}
    if classifiers is None:           # every classifier that is installed; the others are named, not dropped
        names = []
        for name in TABLE_CLASSIFIERS:
            try:
                TABLE_CLASSIFIERS[name](seed)
                names.append(name)
            except ImportError as exc:
                skipped[name] = str(exc)
    else:
        names = list(classifiers)
    encoder = encoder.minmax()        # one feature encoding for every method and peer
    Xs, ys = encoder.encode(train)
    Xt, yt = encoder.encode(test)
    # float64: GaussianNB's likelihoods in float32 round to 0 / 1 and its ROC falls to chance (0.51 vs 0.72)
    Xs, Xt = Xs.astype(np.float64), Xt.astype(np.float64)
    n_classes = encoder.schema.n_classes
    binary = n_classes == 2
    per, failures = {}, {}
    for name in names:
        t = time.perf_counter()
        try:
            if len(np.unique(ys)) < 2:
                raise ValueError("the training labels hold a single class")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                warnings.simplefilter("ignore", UserWarning)
                # xgboost wants labels 0..k-1 present: remap to the classes seen
                classes, yfit = np.unique(ys, return_inverse=True)
                clf = TABLE_CLASSIFIERS[name](seed).fit(Xs, yfit)
            if binary:
                s = _scores(clf, Xt)
                per[name] = {"roc_auc": float(roc_auc_score(yt, s)), "pr_auc": float(average_precision_score(yt, s))}
            else:
                pred = classes[clf.predict(Xt)]
                per[name] = {"f1": float(f1_score(yt, pred, average="weighted"))}
        except ValueError as exc:
            failures[name] = str(exc)
            if binary:
                per[name] = {"roc_auc": 0.5, "pr_auc": float(np.mean(yt == 1))}
            else:
                major = np.bincount(ys, minlength=n_classes).argmax() if len(ys) else 0
                per[name] = {"f1": float(f1_score(yt, np.full_like(yt, major), average="weighted"))}
        logger.info("%s: %s (%.1f s)", name, per[name], time.perf_counter() - t)
    keys = ["roc_auc", "pr_auc"] if binary else ["f1"]
    mean = {k: float(np.mean([per[n][k] for n in names])) for k in keys}
    if skipped:
        logger.warning("classifiers skipped (not installed): %s", "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    return {"binary": binary, "classifiers": per, "mean": mean, "failures": failures, "skipped": skipped}
