"""The papers' per-dataset settings for tables (epsilon=1, delta=1e-5).

DP-NTK: Table 5 of the DP-NTK paper ("iter" read as generator iterations, batch 200,
lr 0.01, decayed x0.9 every 100 iterations as in all mmdsynth table results; NTK network
and widths; code size ``d_code``), except adult: 100 iterations at lr 0.005 (``DPNTK_TABLE_LR``),
and epileptic: min-max numeric columns (``DPNTK_TABLE_ENCODING``).
DP-MERF: the paper gives no per-dataset table for these runs; mmdsynth uses one fixed setting for all tables (2,000 random features, a
data-independent length scale, batch 200, 2,000 iterations).
"""
from __future__ import annotations

from ..errors import unknown_name

DPNTK_TABLE = {
    #            iterations, d_code, arch, widths
    "adult": (100, 11, "cnn_2l", (30, 200)),     # paper: 50; see DPNTK_TABLE_LR
    "census": (2000, 21, "cnn_2l", (30, 20)),
    "cervical": (500, 11, "cnn_2l", (800, 1000)),
    "credit": (500, 11, "fc_1l", (1500,)),
    "epileptic": (2000, 101, "cnn_2l", (50, 20)),
    "isolet": (1000, 21, "cnn_2l", (10, 20)),
    "covtype": (1000, 101, "cnn_2l", (100, 20)),
    "intrusion": (1000, 21, "fc_2l", (30, 1000)),
}

#: where mmdsynth departs from the paper's lr 0.01 / iterations: adult with quantile-encoded numeric
#: columns (the default) needs 100 iterations at lr 0.005 to be level with the paper's 50 at 0.01 on
#: min-max columns (held-out seeds 5-9: 0.771 / 0.694 against 0.768 / 0.698; benchmarks/RESULTS.md)
DPNTK_TABLE_LR = {"adult": 0.005}

#: where DP-NTK keeps min-max numeric columns instead of the quantile encoding (the default): epileptic's
#: 178 numeric columns. Measured, 5 seeds: quantile 0.617 / 0.386 against min-max 0.669 / 0.489; the
#: sketch's share split over 178 columns is what costs (share 0.02: 0.625 / 0.399 on seed 0, but numeric
#: TV 0.54, as poor as min-max's 0.58); benchmarks/RESULTS.md, "DP-NTK with quantile encoding"
DPNTK_TABLE_ENCODING = {"epileptic": "minmax"}


DPHP_TABLE = {
    #            sum order, product order, product dims, gamma (product weight), epochs (product releases)
    "adult": (100, 5, 5, 0.1, 20),
    "census": (100, 5, 5, 0.1, 50),
    "cervical": (20, 13, 5, 1.0, 20),
    "credit": (20, 7, 5, 1e-5, 200),
    "epileptic": (10, 5, 7, 0.1, 20),
    "isolet": (10, 13, 5, 1.0, 20),
    "covtype": (10, 7, 2, 1.0, 200),
    "intrusion": (7, 5, 5, 1.0, 200),
}
HP_TABLE_LENGTH_SCALE = 0.3
MAX_PRODUCT_WIDTH = 8000


#: DP-HP on images: the authors' README settings (s^2 = kernel length squared; gamma weights the sum
#: kernel's loss; their FC generator for MNIST, which scored 0.806 / 0.807 against the conv
#: generator's 0.753 / 0.756 at eps 1, benchmarks/RESULTS.md); the rest are DPHP's defaults
#: (C = 100 / 20, 2 product dimensions, 10 releases)
DPHP_IMAGE = {"mnist": {"length_scale": 0.005 ** 0.5, "sum_weight": 20.0, "generator": "fc"},
              "fashion-mnist": {"length_scale": 0.15 ** 0.5, "sum_weight": 10.0}}


def _known(dataset: str) -> None:
    if dataset not in DPNTK_TABLE:
        raise unknown_name("tabular preset", dataset, DPNTK_TABLE)


def dpntk_table(dataset: str) -> dict:
    """DP-NTK on a tabular benchmark: the paper's Table 5 (with mmdsynth's two departures above)."""
    _known(dataset)
    iters, code, arch, widths = DPNTK_TABLE[dataset]
    encoding = {"numeric_encoding": DPNTK_TABLE_ENCODING[dataset]} if dataset in DPNTK_TABLE_ENCODING else {}
    return {"iterations": iters, "code_dim": code, "arch": arch, "widths": list(widths), "ntk_width": None,
            "batch_size": 200, "lr": DPNTK_TABLE_LR.get(dataset, 0.01), "lr_step": 100, "epsilon": 1.0,
            "delta": 1e-5, **encoding}


def dpmerf_table(dataset: str) -> dict:
    """DP-MERF on a tabular benchmark: one fixed setting for all tables."""
    _known(dataset)
    return {"iterations": 2000, "code_dim": DPNTK_TABLE[dataset][1], "n_features": 2000, "batch_size": 200,
            "lr": 0.01, "lr_step": 100, "epsilon": 1.0, "delta": 1e-5}


def dphp_table(dataset: str) -> dict:
    """DP-HP on a tabular benchmark: the authors' per-dataset orders, dimensions and weights."""
    _known(dataset)
    order, p_order, p_dims, gamma, epochs = DPHP_TABLE[dataset]
    while (p_order + 1) ** p_dims > MAX_PRODUCT_WIDTH:         # keep the authors' dimensions, lower the order
        if p_order > 5:
            p_order -= 1
        else:
            p_dims -= 1
    return {"order": order, "product_order": p_order, "product_dims": p_dims, "product_weight": gamma,
            "sum_weight": 1.0, "n_product": min(epochs, 20), "sum_share": 0.6, "length_scale": HP_TABLE_LENGTH_SCALE,
            "iterations": 2000, "code_dim": DPNTK_TABLE[dataset][1], "batch_size": 200, "lr": 0.01, "lr_step": 100,
            "epsilon": 1.0, "delta": 1e-5}


def dpkip_table(dataset: str) -> dict:
    """DP-KIP on a tabular benchmark: the paper's Table 3 setting (10 points per class; the rest not
    published), batch 200 except cervical, whose training split (about 190 rows) is smaller than that."""
    _known(dataset)
    return {"images_per_class": 10, "epochs": 10, "batch_size": 50 if dataset == "cervical" else 200,
            "lr": 1e-2, "clip": 1e-2, "reg": 1e-6, "epsilon": 1.0, "delta": 1e-5}


def dphp_image(dataset: str) -> dict:
    """DP-HP on an image dataset: the authors' settings ({} when none)."""
    return dict(DPHP_IMAGE.get(dataset, {}))


def image_preset(method: str, dataset: str) -> dict:
    """Per-dataset constructor arguments of the registered ``method`` for an image dataset ({} when none)."""
    from .contract import METHODS

    return _registered(METHODS, method).dataset_defaults(dataset, "image")


def method_preset(method: str, dataset: str) -> dict:
    """Constructor arguments of the registered ``method`` for a tabular benchmark ``dataset``."""
    from .contract import METHODS

    return _registered(METHODS, method).dataset_defaults(dataset, "table")


def _registered(methods: dict, method: str):
    if method not in methods:
        raise unknown_name("method", method, methods)
    return methods[method]
