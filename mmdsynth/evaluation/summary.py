"""`mmdsynth evaluate`'s result as a few lines a person reads in ten seconds (``--json``: the full object)."""
from __future__ import annotations

#: image scores shown, in this order, with their labels
IMAGE_SCORES = (("logreg_acc", "LogisticRegression accuracy"), ("mlp_acc", "MLP accuracy"),
                ("krr_acc", "KRR accuracy (the support set)"), ("cnn_acc", "CNN accuracy"),
                ("fid", "FID (Inception-v3)"), ("fd", "Frechet distance (CNN features)"))


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def evaluation_summary(result: dict, saved_to=None) -> str:
    """Plain text: what was scored, the headline numbers (beside the real-data baseline when there is one),
    fidelity for tables, the privacy spent, and where the files went."""
    what = "rows" if "mean" in result else "samples"
    lines = [f"{result.get('method')} on {result.get('dataset')}: epsilon={result.get('epsilon'):g}, "
             f"delta={result.get('delta'):g}; {result.get('n_synthetic')} synthetic {what} scored on the real test split"]
    if "mean" in result and isinstance(result.get("classifiers"), dict):
        keys = list(result["mean"])
        real = result.get("real") or {}
        head = "  ".join(f"{k:>10}" for k in keys) + ("".join(f"  {k + ' real':>14}" for k in keys) if real else "")
        lines.append(f"  {'classifier':<22}{head}")
        for name, scores in result["classifiers"].items():
            row = "  ".join(f"{_f(scores[k]):>10}" for k in keys)
            if real and name in real.get("classifiers", {}):
                row += "".join(f"  {_f(real['classifiers'][name][k]):>14}" for k in keys)
            lines.append(f"  {name:<22}{row}")
        row = "  ".join(f"{_f(result['mean'][k]):>10}" for k in keys)
        if real:
            row += "".join(f"  {_f(real['mean'][k]):>14}" for k in keys)
        lines.append(f"  {'mean':<22}{row}")
        if result.get("skipped"):
            lines.append(f"  skipped (not installed): {', '.join(result['skipped'])}")
        if result.get("failures"):
            lines.append(f"  failed: {', '.join(result['failures'])}")
        fid = result.get("fidelity") or {}
        if fid:
            pw = fid["pairwise"]
            lines.append(f"fidelity: numeric marginal TV {_f(fid.get('mean_numeric_tv'))}, categorical TV "
                         f"{_f(fid.get('mean_categorical_tv'))}, pairwise dependence error {_f(pw['mean_abs_error'])} "
                         f"(max {_f(pw['max_abs_error'])})")
            if fid.get("max_missing_rate_gap") is not None:
                lines.append(f"missing rates: largest gap to the real rows {_f(fid['max_missing_rate_gap'])}")
    else:
        shown = [f"{label} {_f(result[key])}" for key, label in IMAGE_SCORES if result.get(key) is not None]
        lines.append("  " + "; ".join(shown) if shown else "  (no scores)")
        proto = result.get("cnn_protocol") or {}
        if proto:
            note = " (settings overridden: a quick look, not the protocol)" if proto.get("faithful") is False else ""
            lines.append(f"  CNN protocol: {proto.get('name')}, epochs {proto.get('epochs', '-')}{note}")
        if result.get("selected_iteration") is not None:
            lines.append(f"  checkpoint: {result.get('checkpoint')} (iteration {result['selected_iteration']})")
        if result.get("samples_png"):
            lines.append(f"sample grid: {result['samples_png']}")
    if saved_to is not None:
        lines.append(f"all numbers: {saved_to} (or --json)")
    return "\n".join(lines)
