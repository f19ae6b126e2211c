"""A second, independent view of ML efficacy for the synthetic CSVs that ``evaluate_peers.py`` scores.

``evaluate_peers.py`` trains mmdsynth's 12 classifiers on one min-max / one-hot encoding
(:func:`mmdsynth.evaluation.tabular.table_classifier_scores`). A result that beats a peer there could come from
that encoding or from one fragile classifier (issue 47: Gaussian naive Bayes decided intrusion). This script
shares none of that code: pandas and scikit-learn only, two model families on their own encodings,

* ``hgb``: ``HistGradientBoostingClassifier`` on raw numbers and native categorical codes (no scaling, no one-hot);
* ``logreg``: ``LogisticRegression`` on standardised numbers and one-hot categories,

each trained on the synthetic rows and scored on the real test split (binary: ROC AUC; several classes: weighted
and macro F1). The same files, so every method is scored the same way.

    .venv/bin/python benchmarks/peers/second_evaluator.py benchmarks/out/splits/intrusion_s0 \\
        --csv synth_hybrid_eps1.csv synth_mmdsynth-aim_eps1.csv train.csv --out benchmarks/out/second_evaluator.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score, roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _rows import emit  # noqa: E402


def frame(path: Path, schema: dict) -> tuple[pd.DataFrame, np.ndarray]:
    """Features (numbers as float, categories as codes of the schema's categories, -1 outside them) and label codes,
    each column read by itself from the schema."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    out = {}
    for col in schema["columns"]:
        if col["type"] == "numeric":
            out[col["name"]] = pd.to_numeric(df[col["name"]], errors="coerce").astype(float)
        elif col["type"] == "categorical":
            lookup = {str(c): i for i, c in enumerate(col["categories"])}
            out[col["name"]] = df[col["name"]].map(lookup).fillna(-1).astype(int)
    labels = {str(c): i for i, c in enumerate(schema["label_categories"])}
    return pd.DataFrame(out), df[schema["label"]].map(labels).to_numpy()


def one_hot(X: pd.DataFrame, schema: dict) -> np.ndarray:
    parts = []
    for col in schema["columns"]:
        if col["type"] == "categorical":
            parts.append(np.eye(len(col["categories"]) + 1)[X[col["name"]].to_numpy() + 1][:, 1:])
        elif col["type"] == "numeric":
            parts.append(X[[col["name"]]].fillna(0.0).to_numpy())
    return np.concatenate(parts, 1)


def scores(model, Xs, ys, Xt, yt, n_classes: int) -> dict:
    classes = np.unique(ys)
    model.fit(Xs, np.searchsorted(classes, ys))
    if n_classes == 2:
        return {"roc_auc": float(roc_auc_score(yt, model.predict_proba(Xt)[:, 1]))}
    pred = classes[model.predict(Xt)]
    return {"f1_weighted": float(f1_score(yt, pred, average="weighted")),
            "f1_macro": float(f1_score(yt, pred, average="macro"))}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folder", help="a split folder (schema.json, test.csv) written by export_splits.py")
    p.add_argument("--csv", nargs="+", required=True, help="CSVs in the folder to score (train.csv: the real rows)")
    p.add_argument("--out", default="benchmarks/out/second_evaluator.jsonl")
    args = p.parse_args()
    folder = Path(args.folder)
    schema = json.loads((folder / "schema.json").read_text())
    cat_mask = [c["type"] == "categorical" for c in schema["columns"] if c["type"] in ("numeric", "categorical")]
    n_classes = len(schema["label_categories"])
    Xt, yt = frame(folder / "test.csv", schema)
    for name in args.csv:
        t = time.perf_counter()
        Xs, ys = frame(folder / name, schema)
        numeric = [c["name"] for c in schema["columns"] if c["type"] == "numeric"]
        mu, sd = Xs[numeric].mean(), Xs[numeric].std().replace(0, 1).fillna(1)   # the training rows' own scaling
        Zs, Zt = Xs.copy(), Xt.copy()
        Zs[numeric], Zt[numeric] = (Xs[numeric] - mu) / sd, (Xt[numeric] - mu) / sd
        row = {"folder": folder.name, "csv": name,
               "hgb": scores(HistGradientBoostingClassifier(categorical_features=cat_mask, random_state=0),
                             Xs.to_numpy(), ys, Xt.to_numpy(), yt, n_classes),
               "logreg": scores(LogisticRegression(max_iter=2000), one_hot(Zs, schema), ys, one_hot(Zt, schema), yt,
                                n_classes),
               "seconds": round(time.perf_counter() - t, 1)}
        emit(row, args.out)


if __name__ == "__main__":
    main()
