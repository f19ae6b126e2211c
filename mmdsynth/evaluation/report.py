"""``mmdsynth report RUN``: one self-contained HTML file about a fitted model.

Tables: per-column marginals real vs synthetic, the pairwise-dependence heatmaps (real, synthetic,
their difference), the fidelity numbers, the utility table of ``mmdsynth evaluate`` (when it ran),
and the privacy ledger in plain words. Images: the sample grid, the utility numbers and the ledger.
Every picture is an inline PNG (base64); the file loads nothing from the network. Plots need
matplotlib (``pip install 'mmdsynth[report]'``).
"""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np

from .._io import atomic_write
from ..errors import InvalidParameterError
from .fidelity import category_counts, category_labels, dates_as_seconds, table_fidelity

EVALUATION_FILE = "evaluation.json"
REPORT_FILE = "report.html"
MAX_MARGINALS = 40           # columns plotted (the fidelity table lists all of them)


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:
        raise InvalidParameterError("the report draws its plots with matplotlib: pip install 'mmdsynth[report]'.") \
            from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _png(fig, alt: str = "plot") -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    _pyplot().close(fig)
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _marginal_plot(name: str, kind: str, real, synth, categories=None, ordered: bool = False) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(3.6, 2.7))           # three to a row of the page
    if kind == "numeric":
        r, s = np.asarray(real, float), np.asarray(synth, float)
        r, s = r[~np.isnan(r)], s[~np.isnan(s)]             # present values (missing rates: the table)
        r, s = (r, s) if len(r) else (np.zeros(1), s)
        lo, hi = np.quantile(r, [0.01, 0.99])
        hi = hi if hi > lo else lo + 1
        bins = np.linspace(lo, hi, 31)
        ax.hist(np.clip(r, lo, hi), bins=bins, density=True, histtype="step", lw=1.6, label="real")
        ax.hist(np.clip(s, lo, hi), bins=bins, density=True, histtype="step", lw=1.6, label="synthetic")
        ax.set_xlabel("value (real 1st-99th percentile; tails clipped)", fontsize=7)
    else:
        cats = category_labels(categories, missing=bool(real.isna().any() or synth.isna().any()))
        p, q = category_counts(real, cats) / len(real), category_counts(synth, cats) / len(synth)
        top = (p + q).sort_values(ascending=False).index[:12] if not ordered else [c for c in cats if p[c] + q[c] > 0]
        x = np.arange(len(top))
        ax.bar(x - 0.2, p[top], 0.4, label="real")
        ax.bar(x + 0.2, q[top], 0.4, label="synthetic")
        ax.set_xticks(x, [t if len(t) <= 20 else t[:19] + "…" for t in top], rotation=40, ha="right",
                      rotation_mode="anchor", fontsize=7)
    ax.set_title(name, fontsize=10)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    return _png(fig, f"{name}: real vs synthetic")


#: the widest a picture may be (inches at the PNG's 100 dpi) to fit the page's column without scaling
PAGE_INCHES = 11.0


def _short(name: str) -> str:
    return name if len(name) <= 18 else name[:17] + "…"


def heatmap_figure(pair: dict):
    """The three dependence matrices (real, synthetic, difference) as one matplotlib figure at most
    ``PAGE_INCHES`` wide, sized by the number of columns so that no two tick labels overlap: side by
    side (one set of row labels) while three panels fit with labels of at least 6.5 pt, else one under
    the other with labels of 8 pt down to 5 pt, and every k-th column labelled when even 5 pt labels
    would not fit."""
    plt = _pyplot()
    real, synth = np.asarray(pair["real"], float), np.asarray(pair["synthetic"], float)
    names = [_short(str(c)) for c in pair["columns"]]
    n = max(len(names), 1)
    per_pt = 1.5 / 72                                        # inches per column per point of label: a label and a gap
    label = max((len(c) for c in names), default=4) * 8 * 0.62 / 72 + 0.15    # the longest label at 8 pt
    row_side = (PAGE_INCHES - label - 1.0) / 3 - 0.15        # three panels, one set of row labels, a colour bar
    side_by_side = n * 6.5 * per_pt <= row_side
    widest = row_side if side_by_side else PAGE_INCHES - label - 1.1
    fs = float(np.clip(widest / (n * per_pt), 5, 8))
    side = min(max(n * fs * per_pt, 2.6), widest)
    step = int(np.ceil(n * fs * per_pt / side))              # 1 unless labels must be thinned
    panels = [("real", real), ("synthetic", synth), ("|real - synthetic|", np.abs(real - synth))]
    if side_by_side:
        fig, axes = plt.subplots(1, 3, figsize=(label + 3 * side + 1.2, side + label + 0.5), layout="constrained")
    else:
        fig, axes = plt.subplots(3, 1, figsize=(label + side + 1.1, 3 * (side + label + 0.5)), layout="constrained")
    ticks = list(range(0, len(names), step))
    tick_names = [names[i] for i in ticks]
    for i, (ax, (title, m)) in enumerate(zip(axes, panels)):
        im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
        ax.set_title(title, fontsize=11)
        ax.set_xticks(ticks, tick_names, rotation=90, fontsize=fs)
        ax.set_yticks(ticks, tick_names if (i == 0 or not side_by_side) else [], fontsize=fs)
    fig.colorbar(im, ax=list(axes), shrink=0.8 if side_by_side else 0.3)
    return fig


def _heatmaps(pair: dict) -> str:
    return _png(heatmap_figure(pair))


def _entry_in_words(e) -> str:
    """One ledger entry as a sentence: what was released, by which mechanism (Gaussian noise, a private selection
    by the exponential mechanism, or noisy DP-SGD steps), and the most one record can move it."""
    unit = (f"neighbouring datasets: {html.escape(e.neighbouring.replace('_', ' '))}; one record is "
            f"{html.escape(e.privacy_unit)}")
    if e.mechanism == "exponential":
        how = (f"chosen privately by the exponential mechanism (Gumbel noise of scale {e.noise_std:.4g} on scores whose "
               f"sensitivity, the most one record can move a score, is {e.sensitivity:.4g})" if e.noise_multiplier
               else "chosen by an exact argmax (no noise)")
    elif e.mechanism == "dp-sgd":
        how = (f"learned by noisy gradient steps (DP-SGD: each step's clipped gradient sum got Gaussian noise, noise "
               f"multiplier {e.noise_multiplier:.4g} times the clip {e.sensitivity:.4g})")
    else:
        how = (f"Gaussian noise with standard deviation {e.noise_std:.4g} was added (noise multiplier "
               f"{e.noise_multiplier:.4g} times sensitivity {e.sensitivity:.4g}, the most one record can move this "
               f"statistic)")
    return f"<li><b>{html.escape(e.description)}</b>: {how}; {unit}.</li>"


def ledger_in_words(release) -> str:
    """The ledger as sentences a reader without DP training can follow."""
    eps, delta = release.ledger.total()
    entries = release.ledger.entries
    items = [_entry_in_words(e) for e in entries]
    shared = len({e.budget_id for e in entries}) == 1 and len(entries) > 1
    head = (f"<p>This model was trained on {len(entries)} private release(s) of the private data and on nothing else. "
            f"Together they are differentially private with <b>epsilon = {eps:g}, delta = {delta:g}</b>: no one "
            f"looking at the model or its samples can tell with confidence beyond this bound whether any one "
            f"record was in the data.")
    if shared:
        head += (" The releases below are <b>shares of that one budget</b>, calibrated together; they are not "
                 "separate charges.")
    return head + "</p><ul>" + "".join(items) + "</ul>"


#: what the report says above everything computed from real rows (the test split, a real training split)
REAL_DATA_NOTE = ("<p class='real'><b>Not covered by the privacy guarantee.</b> The sections marked <i>real data</i> "
                  "compare the synthetic data with real rows you passed to <code>evaluate</code> or "
                  "<code>report</code> (the test split{train}): their plots and numbers are computed from those rows "
                  "directly, without noise. Use them to judge the model; do not publish them with the model. The "
                  "model, its samples and the Privacy section below depend on the private training data only through "
                  "the releases listed there.</p>")


#: image evaluation scores, as the report names them
IMAGE_SCORES = {"logreg_acc": "LogisticRegression accuracy", "mlp_acc": "MLP accuracy",
                "logreg_f1": "LogisticRegression macro F1", "mlp_f1": "MLP macro F1",
                "cnn_acc": "ConvNet accuracy (CNN protocol)", "krr_acc": "kernel ridge regression accuracy",
                "fd": "Frechet distance (mmdsynth's CNN)", "fid": "FID (Inception-v3)"}


def _utility_html(evaluation: dict | None) -> str:
    if not evaluation:
        return ("<p>No utility numbers yet: run <code>mmdsynth evaluate RUN</code> first (it writes "
                "evaluation.json, which this report reads).</p>")
    rows = []
    if "classifiers" in evaluation and isinstance(evaluation["classifiers"], dict):
        keys = list(evaluation["mean"])
        for name, scores in evaluation["classifiers"].items():
            rows.append(f"<tr><td>{html.escape(name)}</td>{''.join(f'<td>{scores[k]:.3f}</td>' for k in keys)}</tr>")
        mean = "".join(f"<td><b>{evaluation['mean'][k]:.3f}</b></td>" for k in keys)
        head = "".join(f"<th>{k}</th>" for k in keys)
        out = (f"<p>Classifiers trained on {evaluation.get('n_synthetic')} synthetic rows, tested on the real test "
               f"split.</p><table><tr><th>classifier</th>{head}</tr>{''.join(rows)}"
               f"<tr><td><b>mean</b></td>{mean}</tr></table>")
        real = evaluation.get("real") or {}
        if real.get("classifiers"):
            rows = "".join(f"<tr><td>{html.escape(name)}</td>{''.join(f'<td>{v[k]:.3f}</td>' for k in keys)}</tr>"
                           for name, v in real["classifiers"].items())
            mean = "".join(f"<td><b>{real['mean'][k]:.3f}</b></td>" for k in keys)
            out += (f"<h3>Reference, real data: classifiers trained on the real training rows (not private)</h3>"
                    f"<p>The same classifiers trained on the <b>real</b> training rows (<code>evaluate --real</code>), "
                    f"tested on the same split: the ceiling the synthetic rows are measured against. These scores "
                    f"are computed from the private rows without noise and are not covered by the guarantee.</p>"
                    f"<table><tr><th>classifier</th>{head}</tr>{rows}<tr><td><b>mean</b></td>{mean}</tr></table>")
        return out
    named = [(label, evaluation[k]) for k, label in IMAGE_SCORES.items() if isinstance(evaluation.get(k), (int, float))]
    rest = [(k, v) for k, v in evaluation.items() if k not in IMAGE_SCORES and k not in ("epsilon", "delta", "n_synthetic")
            and isinstance(v, (int, float)) and not isinstance(v, bool)]
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td><b>{v:.3f}</b></td></tr>" for k, v in named) + \
        "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.4g}</td></tr>" for k, v in rest)
    return (f"<p>Classifiers trained on {evaluation.get('n_synthetic')} synthetic images, tested on the real test "
            f"split.</p><table><tr><th>score</th><th>value</th></tr>{rows}</table>")


def _table_sections(model, test, seed: int, n: int) -> str:
    encoder = model.encoder_
    real = encoder.clean(test)
    synth = model.sample(n, seed=seed)          # as `mmdsynth evaluate` draws them: the same numbers
    fid = table_fidelity(real, synth, encoder.schema, seed=seed)
    marg = fid["marginals"]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    real, synth = dates_as_seconds(real, encoder.schema), dates_as_seconds(synth, encoder.schema)   # dates as seconds
    missing = lambda v: ("-" if "missing_rate" not in v else      # noqa: E731
                         f"{v['missing_rate']['real']:.3f} / {v['missing_rate']['synthetic']:.3f}")
    rows = "".join(
        f"<tr><td>{html.escape(c)}</td><td>{v['kind']}</td><td>{v['tv']:.3f}</td>"
        f"<td>{fmt(v.get('wasserstein'))}</td><td>{missing(v)}</td></tr>" for c, v in marg.items())
    kinds = {c.name: c for c in encoder.schema.columns}
    plots = []
    for name in list(marg)[:MAX_MARGINALS]:
        col = kinds.get(name)
        cats = col.categories if col is not None else encoder.schema.label_categories
        plots.append(_marginal_plot(name, marg[name]["kind"], real[name], synth[name], cats))
    return (
        f"<h2>Fidelity (real data: the test split)</h2><p>Against {len(real)} real rows ({html.escape(fid['reference'])}). Mean numeric "
        f"TV {fmt(fid['mean_numeric_tv'])}, mean numeric W1 {fmt(fid['mean_numeric_wasserstein'])}, mean categorical TV "
        f"{fmt(fid['mean_categorical_tv'])}, pairwise dependence error {fid['pairwise']['mean_abs_error']:.3f} "
        f"(max {fid['pairwise']['max_abs_error']:.3f}).</p>"
        f"<h3>Marginals, real vs synthetic</h3><div class='grid'>{''.join(plots)}</div>"
        f"<table><tr><th>column</th><th>kind</th><th>TV</th><th>W1 / std</th><th>missing rate, real / synthetic</th>"
        f"</tr>{rows}</table>"
        f"<h3>Pairwise dependence ({html.escape(fid['pairwise']['measure'])})</h3>"
        f"<div class='wide'>{_heatmaps(fid['pairwise'])}</div>")


def _image_section(model, seed: int) -> str:
    """A labelled grid: one row per class, its name on the left, 10 samples each."""
    from .grid import image_grid

    x, y = model.sample(100, seed=seed) if model.generative else model.sample()
    x = np.asarray(x)
    if x.ndim != 4:
        return "<p>(records are not images: no sample grid)</p>"
    y = np.asarray(y) if y is not None else None
    from ..data.images import IMAGE_CLASSES

    classes = IMAGE_CLASSES.get(model.release_.dataset.get("name") or "")
    grid = image_grid(np.clip(x, 0, 1), y, classes=list(classes) if classes else None)
    buf = io.BytesIO()
    grid.save(buf, format="PNG")
    return (f"<h2>Samples</h2><p>Ten samples per class, one class per row.</p><img alt='samples, one row per class' "
            f"src='data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}'>")


STYLE = ("*{box-sizing:border-box}body{font-family:system-ui,sans-serif;line-height:1.45;max-width:1200px;"
         "margin:0 auto;padding:24px 40px 48px;color:#222;background:#fff}h1{font-size:24px;margin-top:0}"
         "h2{font-size:20px;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:16px}"
         "p,li{max-width:75em}img{max-width:100%;height:auto}table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #ccc;padding:3px 10px;font-size:13px;text-align:left}"
         ".grid{display:flex;flex-wrap:wrap;gap:12px}.grid img{flex:0 1 auto}"
         ".wide{overflow-x:auto}.wide img{max-width:none}"
         "@media (max-width:700px){body{padding:12px 14px}}")


def _write_page(parts: list, out, model_dir: Path) -> Path:
    """The report's sections as one self-contained HTML page, written whole to ``out`` (default
    ``model_dir/report.html``)."""
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>mmdsynth report</title><style>{STYLE}"
            f"</style></head><body>{''.join(parts)}</body></html>")
    out = Path(out) if out is not None else model_dir / REPORT_FILE
    with atomic_write(out) as tmp:
        tmp.write_text(page)
    return out


def build_report(model, model_dir, *, test=None, out=None, seed: int = 0, data_dir=None) -> Path:
    """Write the HTML report of ``model`` (a fitted model object, e.g. ``mmdsynth.load(model_dir)``),
    saved in ``model_dir`` (default output ``model_dir/report.html``). ``test``: the real rows to
    compare a table model against (a DataFrame); presets find their own."""
    model_dir = Path(model_dir)
    facts = model.release_.dataset
    eval_path = model_dir / EVALUATION_FILE
    evaluation = json.loads(eval_path.read_text()) if eval_path.exists() else None
    eps, delta = model.release_.ledger.total()
    parts = [f"<h1>mmdsynth report: {html.escape(model.method)} on {html.escape(str(facts.get('name') or 'user data'))}"
             f"</h1><p>epsilon = {eps:g}, delta = {delta:g}; model folder {html.escape(str(model_dir))}</p>"]
    if model.encoder_ is not None:
        if test is None and facts.get("preset"):
            from ..data import load_preset
            test = load_preset(facts["preset"], seed=facts.get("split_seed", 0), data_dir=data_dir).test
        if test is None:
            raise InvalidParameterError("this model was fitted on a user table: pass test=DataFrame (CLI: --test "
                                        "FILE) with real rows to compare against.")
        n = int((evaluation or {}).get("n_synthetic") or facts["n_records"])
        parts.append(_table_sections(model, test, seed, n))
    else:
        parts.append(_image_section(model, seed))
    trained_on_real = bool(((evaluation or {}).get("real") or {}).get("classifiers"))
    if model.encoder_ is not None or evaluation:
        parts.insert(1, REAL_DATA_NOTE.format(train=" and the real training rows" if trained_on_real else ""))
    parts.append(f"<h2>Utility (real data: the test split{', and the real training rows' if trained_on_real else ''})"
                 f"</h2>{_utility_html(evaluation)}")
    parts.append(f"<h2>Privacy</h2>{ledger_in_words(model.release_)}")
    return _write_page(parts, out, model_dir)


def build_database_report(model, model_dir, real: dict, *, out=None, seed: int = 0) -> Path:
    """Write the HTML report of a fitted database ``model`` (:class:`~mmdsynth.methods.database.DatabaseModel`, e.g.
    ``DatabaseModel.load(model_dir)``; default output ``model_dir/report.html``) against the
    real tables ``real`` ({table: DataFrame}, read with its schema): the scores of
    :func:`~mmdsynth.evaluation.database.database_scores` (with the downstream task when ``mmdsynth evaluate`` ran
    it with ``--test``), each table's marginals real vs synthetic, each child table's children per parent row, and
    each fitted table's privacy ledger in words with its share."""
    from .database import database_scores

    model_dir = Path(model_dir)
    db, root = model.schema, model.schema.privacy_unit
    eval_path = model_dir / EVALUATION_FILE
    evaluation = json.loads(eval_path.read_text()) if eval_path.exists() else {}
    n = int(evaluation.get("n_roots") or len(real[root]))
    synth = model.sample(n, seed=seed)
    scores = database_scores(real, synth, db, seed=seed)
    eps, delta = model.total()
    fmt = lambda v: "-" if v is None or v != v else f"{v:.3f}"  # noqa: E731
    rows = []
    for name in db.order():
        up = db.parent(name)
        rows.append(f"<tr><td>{html.escape(name)}</td><td>{len(real[name])} / {len(synth[name])}</td>"
                    f"<td>{fmt(scores[f'{name}.tvd_1way'])}</td><td>{fmt(scores[f'{name}.tvd_2way'])}</td>"
                    f"<td>{fmt(scores.get(f'{name}.children_tvd')) if up else '-'}</td>"
                    f"<td>{fmt(scores.get(f'{name}.cross_tvd_2way')) if up else '-'}</td></tr>")
    parts = [f"<h1>mmdsynth report: a database of {len(db.tables)} tables ({html.escape(model.layout)})</h1>"
             f"<p>epsilon = {eps:g}, delta = {delta:g} for the whole database, one row of {html.escape(root)} with all "
             f"its descendants the unit; model folder {html.escape(str(model_dir))}. {n} synthetic roots against "
             f"{len(real[root])} real ones; keys {'hold' if scores['keys_hold'] else '<b>do not hold</b>'}.</p>"
             f"<h2>Fidelity</h2><table><tr><th>table</th><th>rows, real / synthetic</th><th>1-way TVD</th>"
             f"<th>2-way TVD</th><th>children per parent row, TVD</th><th>cross-table 2-way TVD (with the parent)"
             f"</th></tr>{''.join(rows)}</table>"
             "<p>Numeric columns cut at the real deciles; children counts on the cells 0, 1, 2, 3, 4, 5-6, 7-9, "
             "10-14, 15-24, 25-49, 50-99, 100-199, 200-499, 500+; the cross-table TVD pairs each parent column (and "
             "the label) with each child column over the join.</p>"]
    if evaluation.get("downstream_auc") is not None:
        parts.append(f"<p>Downstream task (from <code>mmdsynth evaluate --test</code>): the root's label from its "
                     f"columns and its children's aggregates, ROC AUC on held-out real roots "
                     f"{fmt(evaluation['downstream_auc'])} trained on the synthetic database, "
                     f"{fmt(evaluation['downstream_auc_real'])} on the real one.</p>")
    parts += [_database_table_plots(name, real, synth, db) for name in db.order()]
    parts.append("<h2>Privacy</h2>")
    for name, m in model.models_.items():
        parts.append(f"<h3>{html.escape(name)} ({model.shares[name]:.0%} of the database's epsilon and delta)</h3>"
                     f"{ledger_in_words(m.release_)}")
    return _write_page(parts, out, model_dir)


def _database_table_plots(name: str, real: dict, synth: dict, db) -> str:
    """One table of a database report: its children per parent row (a child table) and its columns' marginals, real
    vs synthetic."""
    import pandas as pd

    from .database import COUNT_EDGES, children_counts

    labels = [f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in zip(COUNT_EDGES[:-1], COUNT_EDGES[1:])] + \
        [f"{COUNT_EDGES[-1]}+"]
    spec = db.tables[name].schema
    plots = []
    if db.parent(name) is not None:
        cell = lambda t: pd.Series(np.asarray(labels, dtype=object)[children_counts(t, db, name)])  # noqa: E731
        plots.append(_marginal_plot(f"{name} per {db.parent(name)[1]} row", "categorical", cell(real), cell(synth),
                                    labels, ordered=True))
    r, s = dates_as_seconds(real[name], spec), dates_as_seconds(synth[name], spec)
    for col in [c for c in spec.columns if c.kind != "id"][:MAX_MARGINALS]:
        plots.append(_marginal_plot(col.name, "numeric" if col.kind in ("numeric", "date") else "categorical",
                                    r[col.name], s[col.name], col.categories))
    if spec.label:
        plots.append(_marginal_plot(spec.label, "categorical", r[spec.label], s[spec.label], spec.label_categories))
    return f"<h2>{html.escape(name)}: marginals, real vs synthetic</h2><div class='grid'>{''.join(plots)}</div>"
