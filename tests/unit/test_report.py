"""`mmdsynth report`: a self-contained HTML file, rendered in a real headless browser (issue 14)."""
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from mmdsynth import DPMERF
from mmdsynth.cli import main

from support import WIDE, heavy_table

pytest.importorskip("matplotlib", reason="the report needs the 'report' extra (matplotlib)")
BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    heavy_table(600, seed=1).to_csv(root / "test.csv", index=False)
    heavy_table(600, seed=2).to_csv(root / "train.csv", index=False)
    DPMERF(epsilon=2, iterations=60, batch_size=200, n_features=300, noise_seed=0).fit(
        heavy_table(1500), label="y", schema=WIDE, out=root / "m")
    (root / "schema.json").write_text(json.dumps(WIDE))
    return root


def _report(capsys, root):
    assert main(["evaluate", str(root / "m"), "--test", str(root / "test.csv"), "--real", "--real-train",
                 str(root / "train.csv"), "--json"]) == 0
    evaluation = json.loads(capsys.readouterr().out)
    assert main(["report", str(root / "m"), "--test", str(root / "test.csv")]) == 0
    assert "report.html" in capsys.readouterr().out
    return evaluation, (root / "m" / "report.html").read_text()


def test_table_report_is_self_contained_and_says_what_it_shows(table_run, capsys):
    evaluation, page = _report(capsys, table_run)
    # evaluate: fidelity beside the classifiers; the real block has the synthetic block's layout
    assert set(evaluation["real"]) == {"binary", "mean", "classifiers", "failures"}
    fid = evaluation["fidelity"]
    assert set(fid["marginals"]) == {"amount", "month", "rate", "y"} and fid["reference"].startswith("the real test")
    assert 0 <= fid["mean_numeric_tv"] < 0.3 and 0 <= fid["pairwise"]["mean_abs_error"] <= 1
    # the page: inline images only, no network
    assert not re.search(r"(src|href)=[\"']?(https?:|//)", page)
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 4 + 1                    # 4 marginals (label included) + the heatmaps
    for needle in ("shares of that one budget", "epsilon = 2", "numeric-column distributions",
                   "logistic_regression", "Pairwise dependence", "Marginals, real vs synthetic"):
        assert needle in page, needle
    # issue 80: scores of classifiers trained on the private rows are not shown as what the release supports: the
    # page says up front which sections are real data outside the guarantee, and the real-trained scores sit in
    # their own section, after the synthetic ones
    assert page.index("Not covered by the privacy guarantee") < page.index("<h2>Fidelity (real data")
    assert "and the real training rows" in page.split("<h2>")[0] + page.split("<h2>")[1]
    utility = page.split("<h2>Utility (real data")[1].split("<h2>")[0]
    synthetic, real = utility.split("Reference, real data: classifiers trained on the real training rows (not private)")
    assert f"<td><b>{evaluation['mean'][next(iter(evaluation['mean']))]:.3f}</b></td>" in synthetic
    assert f"<td><b>{evaluation['real']['mean'][next(iter(evaluation['mean']))]:.3f}</b></td>" in real


def test_the_privacy_section_names_each_release_by_its_mechanism():
    """Issue 80: the report called the exponential mechanism's selections "Gaussian noise"."""
    from types import SimpleNamespace

    from mmdsynth.evaluation.report import _entry_in_words

    base = dict(description="d", noise_std=2.0, noise_multiplier=1.5, sensitivity=3.0, neighbouring="replace_one",
                privacy_unit="one row")
    said = {m: _entry_in_words(SimpleNamespace(mechanism=m, **base)) for m in ("gaussian", "exponential", "dp-sgd")}
    assert "Gaussian noise with standard deviation 2" in said["gaussian"]
    assert "exponential mechanism" in said["exponential"] and "Gaussian" not in said["exponential"]
    assert "DP-SGD" in said["dp-sgd"]


def test_report_without_test_rows_for_a_user_table_says_how(table_run, capsys):
    assert main(["report", str(table_run / "m")]) == 2
    assert "--test FILE" in capsys.readouterr().err


@pytest.mark.skipif(BROWSER is None, reason="no headless browser (apt-get install chromium); CI installs it")
def test_report_renders_in_headless_chromium_and_is_not_blank(table_run, capsys, tmp_path):
    _report(capsys, table_run)
    shot = tmp_path / "shot.png"
    subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1300,2400",
                    (table_run / "m" / "report.html").as_uri()], check=True, capture_output=True, timeout=120)
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)[..., :3]
    assert img.shape[0] >= 2000 and img.shape[1] >= 1200
    non_white = (img < 0.9).any(-1).mean()
    coloured = (np.ptp(img, axis=-1) > 0.2).mean()        # the plots' colours, not only black text
    assert non_white > 0.03 and coloured > 0.005, (non_white, coloured)
    # the page has margins: nothing is drawn in the outer 24 px on either side
    assert (img[:, :24] > 0.95).all() and (img[:, -24:] > 0.95).all()


def _tick_label_overlaps(fig) -> list[str]:
    """Pairs of tick labels whose drawn boxes overlap, and labels drawn over another panel."""
    import itertools

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.images]
    labels = [(ax, t.get_text(), t.get_window_extent(renderer)) for ax in panels
              for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text() and t.get_visible()]
    bad = []
    for (_, a, box_a), (_, b, box_b) in itertools.combinations(labels, 2):
        if box_a.overlaps(box_b) and min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 0.5 \
                and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 0.5:
            bad.append(f"{a!r} over {b!r}")
    for ax, a, box in labels:
        bad += [f"{a!r} over another panel" for other in panels if other is not ax
                and box.overlaps(other.get_window_extent(renderer))]
    return bad


@pytest.mark.parametrize("n", [4, 15, 40, 179])
def test_dependence_heatmap_labels_never_overlap_and_fit_the_page(n):
    """adult's 15 columns drew each panel's row labels over the panel beside it; 30 columns made a 2,850 px
    wide picture. Now: labels apart at any column count, within the page's width, at least 5 pt."""
    from matplotlib import pyplot as plt

    from mmdsynth.evaluation.report import PAGE_INCHES, heatmap_figure

    names = [f"a-rather-long-column-name-{i}" if i % 3 == 0 else f"col{i}" for i in range(n)]
    m = np.random.default_rng(0).random((n, n))
    fig = heatmap_figure({"columns": names, "real": m, "synthetic": m.T})
    try:
        assert _tick_label_overlaps(fig) == []
        assert fig.get_size_inches()[0] <= PAGE_INCHES + 1e-9
        sizes = {t.get_fontsize() for ax in fig.axes if ax.images for t in ax.get_xticklabels()}
        assert min(sizes) >= 5
        shown = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
        assert len(shown) == n if n <= 60 else len(shown) >= n // 3       # every column named while they fit
    finally:
        plt.close(fig)


def test_image_model_report_has_the_sample_grid(digits, tmp_path, capsys):
    from mmdsynth import DPNTK

    DPNTK(epsilon=1, n_classes=10, ntk_width=20, iterations=5, batch_size=50, noise_seed=0).fit(
        digits.x_train[:300], digits.y_train[:300], dataset="digits", out=tmp_path / "img")
    assert main(["report", str(tmp_path / "img")]) == 0
    page = (tmp_path / "img" / "report.html").read_text()
    assert "<h2>Samples</h2>" in page and page.count("data:image/png;base64,") == 1
    assert "run <code>mmdsynth evaluate RUN</code> first" in page
    # the grid is labelled: one row per class, its name written in the left margin, tiles of >= 56 px
    import base64
    import io

    import numpy as np
    from PIL import Image

    png = page.split("data:image/png;base64,")[1].split("'")[0]
    grid = np.asarray(Image.open(io.BytesIO(base64.b64decode(png))).convert("L"))
    assert grid.shape[1] >= 600 and grid.shape[0] >= 10 * 56
    row_h = grid.shape[0] // 10
    assert all((grid[r * row_h:(r + 1) * row_h, :60] < 128).any() for r in range(10))     # a label on every row
    # after `evaluate`, the report shows its numbers
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "img"), "--n", "200"]) == 0
    logreg = json.loads((tmp_path / "img" / "evaluation.json").read_text())["logreg_acc"]
    assert main(["report", str(tmp_path / "img")]) == 0
    page = (tmp_path / "img" / "report.html").read_text()
    utility = page.split("<h2>Utility")[1].split("<h2>")[0]
    assert "No utility numbers yet" not in utility
    assert f"<td>LogisticRegression accuracy</td><td><b>{logreg:.3f}</b></td>" in utility
