"""Marginal-based methods: MST (McKenna, Miklau, Sheldon 2021), through this library's engine.

The table is a discrete domain (:class:`~mmdsynth.data.discrete.Domain`: declared categories, numeric columns on a
public grid from their bounds). MST's plan, as stages the engine runs (:mod:`mmdsynth.privacy.marginals`), in zCDP
(:class:`~mmdsynth.privacy.engine.ZCDPEngine`: the total rho from (epsilon, delta), charged before any read):

1. every attribute's 1-way marginal, one Gaussian release with a third of rho;
2. a graphical model of those (post-processing), then a maximum spanning tree of attribute pairs chosen one edge
   at a time by the exponential mechanism (score: the L1 distance of the pair's counts from the model's), a third;
3. the chosen pairs' 2-way marginals, one Gaussian release with the last third.

The graphical model of all measurements (estimation and sampling) is the maintained **mbi 2.x** library
(``pip install 'mmdsynth[mbi]'``): post-processing of the release, with the public record count m as the known
total. Differences from the authors' script (`mechanisms/mst.py` of private-pgm): replace-one neighbours with m
public, as every release here (the authors' add/remove relation has half the sensitivities), secure noise and
selection randomness, no compression of rare cells (the public grid has at most ``max_cells`` cells).
"""
from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..data.discrete import DEFAULT_CELLS, Domain
from ..data.encoding import TableEncoder
from ..data.private_schema import require_complete
from ..errors import ArtifactError, InvalidParameterError
from ..privacy.budget import BudgetFile
from ..privacy.engine import ZCDPEngine
from ..privacy.ledger import PRIVACY_UNIT
from ..privacy.marginals import Measure, SelectTree, clique_key, run_stages
from ..release import META_FILE, Release
from ..validation import check_delta, check_epsilon, check_positive
from .base import _as_schema, read_model_folder, write_model_folder
from .contract import Method, register
from .tables import encoder_of

logger = logging.getLogger(__name__)

#: tensor names of the released counts: MARGINAL_PREFIX + "a|b"
MARGINAL_PREFIX = "marginal/"


def mbi():
    """The mbi package (2.x), with JAX in float64 on the CPU; refused with the install line when missing."""
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_enable_compilation_cache", False)     # mbi compiles many small programs
        import mbi as _mbi
    except ImportError:
        raise InvalidParameterError("mst needs the mbi library (graphical-model estimation): pip install "
                                    "'mmdsynth[mbi]'") from None
    major = int(str(getattr(_mbi, "__version__", "2")).split(".")[0] or 2)
    if major < 2:
        raise InvalidParameterError("mst needs mbi 2.x (1.x had a sampling regression): pip install 'mbi>=2'")
    return _mbi


def estimate(domain: Domain, measured: dict, stds: dict, n_records: int, iters: int):
    """The graphical model (mbi's MarkovRandomField) of noisy clique counts (post-processing): mirror descent on
    the measurements, each weighted by its noise std, with the public record count as the known total."""
    lib = mbi()
    sizes = domain.sizes
    measurements = [lib.LinearMeasurement(np.asarray(y, dtype=np.float64), tuple(clique), float(stds[clique] or 1.0))
                    for clique, y in measured.items()]
    return lib.estimation.MirrorDescent().estimate(lib.Domain.fromdict(sizes), measurements,
                                                   known_total=float(n_records), iters=int(iters))


def simplex_projection(y) -> np.ndarray:
    """The probability vector closest (L2) to ``y`` divided by its sum's scale: the maximum-likelihood model of one
    noisy marginal alone under Gaussian noise (what mirror descent converges to on 1-way measurements), computed
    exactly (sort and threshold: Duchi et al. 2008). Post-processing."""
    y = np.asarray(y, dtype=np.float64)
    total = max(float(y.sum()), 1.0)
    v = y / total
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.nonzero(u - css / np.arange(1, len(u) + 1) > 0)[0][-1]
    return np.maximum(v - css[k] / (k + 1), 0.0)


@register
class MST(Method):
    """MST (McKenna, Miklau, Sheldon 2021, the NIST 2018 winner generalised): 1-way marginals of every column,
    a maximum spanning tree of column pairs chosen privately, their 2-way marginals, and the graphical model of
    them all (mbi 2.x). Tables only. ``max_cells``: numeric columns' cells on their public grid; ``iters``: the
    model's mirror-descent iterations (post-processing); ``seed``: the synthetic rows' draw (public).
    ``noise_seed`` fixes the privacy noise and the selection (tests only: the ledger says it voids the
    guarantee)."""

    method = "mst"
    summary = "1-way marginals, a private spanning tree of 2-way marginals, a graphical model (MST, mbi 2.x)"
    data_kinds = ("table",)
    kind_defaults = {"table": {"epsilon": 1.0}}
    param_help = {
        "max_cells": "numeric columns' cells on their public grid (from the declared bounds)",
        "iters": "mirror-descent iterations of the graphical model (post-processing)",
    }
    #: the release is made once at fit; sampling reads only the release (and the model estimated from it)
    releases_once = False
    generative = True

    def __init__(self, epsilon: float | None = None, delta: float = 1e-5, *, max_cells: int = DEFAULT_CELLS,
                 iters: int = 3000, seed: int = 0, noise_seed: int | None = None, progress: bool | None = None):
        self.epsilon, self.delta, self.max_cells, self.iters = epsilon, delta, max_cells, iters
        self.seed, self.noise_seed, self.progress = seed, noise_seed, progress

    @classmethod
    def dataset_defaults(cls, dataset: str, kind: str) -> dict:
        """The tabular benchmarks' privacy level (epsilon 1, delta 1e-5); MST has no per-dataset settings."""
        return {"epsilon": 1.0, "delta": 1e-5}

    # -- fit --------------------------------------------------------------------------------------------
    def fit(self, X, y=None, *, label: str | None = None, schema=None, dataset: str = "", out=None,
            budget: BudgetFile | None = None, resume: bool = False, public_facts: dict | None = None,
            privacy_unit: str = PRIVACY_UNIT):
        """Fit on a table: ``fit(df, label=..., schema=...)``. ``out``: the model folder (release, model.json).
        Returns self."""
        if y is not None or not isinstance(X, pd.DataFrame):
            raise InvalidParameterError("mst takes a table: fit(df, label=..., schema=...), no y.")
        if resume:
            raise InvalidParameterError("mst has no training to resume: its model is estimated from the release "
                                        "when it is loaded.")
        out = Path(out) if out is not None else None
        if out is not None and (out / "release" / META_FILE).exists():
            raise ArtifactError(f"{out} already holds a release; use a new folder.")
        s = self.settings_ = self.settings_for("table")
        schema = _as_schema(schema, label)
        require_complete(schema)
        check_epsilon(s.epsilon)
        check_delta(s.delta)
        check_positive(s.iters, "iters", integer=True)
        mbi()                                              # the extra is there before anything is read or charged
        domain = Domain.of(schema, s.max_cells)
        encoder = TableEncoder(schema, [str(c) for c in X.columns])
        engine = ZCDPEngine(s.epsilon, s.delta, budget=budget, noise_seed=s.noise_seed, dataset=dataset,
                            privacy_unit=privacy_unit)           # calibrated, the budget checked: nothing read yet
        clean = encoder.clean(X)                           # every refusal before the charge
        n = len(clean)
        engine.open(f"mst fit on {dataset or 'user data'}")
        measured, stds = run_stages(engine, clean, domain, encoder, self._planner(domain, engine.rho, n),
                                    assumed={"n_classes": schema.n_classes})
        facts = {"name": dataset, "n_records": n, "n_classes": schema.n_classes, "conditional": False,
                 "method": self.method, "table": encoder.to_dict(), "numeric_encoding": "minmax",
                 **(public_facts or {})}
        pairs = sum(len(c) == 2 for c in measured)
        spec = {"name": "marginals", "kind": "counts of cliques of a discrete domain", "domain": domain.to_dict(),
                "captures": f"{len(measured) - pairs} 1-way marginals (every column) and {pairs} 2-way marginals "
                            f"(a privately chosen spanning tree); numeric columns on a public grid of at most "
                            f"{domain.max_cells} cells",
                "cliques": [list(c) for c in measured], "stddev": {clique_key(c): stds[c] for c in measured}}
        self.release_ = Release({MARGINAL_PREFIX + clique_key(c): torch.as_tensor(v) for c, v in measured.items()},
                                spec, facts, engine.ledger)
        self._model = None
        self.model_()                                      # estimated once now: sampling reads it
        if out is not None:
            self.release_.save(out / "release")
            self.save(out)
        return self

    def _planner(self, domain: Domain, rho: float, n: int):
        """MST's stages (a generator the engine runs): the 1-way marginals, the tree, its 2-way marginals; returns
        ({clique: noisy counts}, {clique: noise std})."""
        attrs = tuple(domain.attributes)
        one, std1 = yield Measure(tuple((a,) for a in attrs), rho / 3, "1-way marginals of every column")
        stds = {c: std1 for c in one}
        p = {a: simplex_projection(one[(a,)]) for a in attrs}        # the model of the 1-way marginals alone
        pairs = tuple(itertools.combinations(attrs, 2))
        tree = yield SelectTree(attrs, pairs, {(a, b): n * np.outer(p[a], p[b]).reshape(-1) for a, b in pairs}, rho / 3)
        two, std2 = yield Measure(tuple(tree), rho / 3, "2-way marginals of the tree's pairs")
        stds.update({c: std2 for c in two})
        return {**one, **two}, stds

    def fit_summary(self, dataset: str, out) -> list[str]:
        eps, delta = self.release_.ledger.total()
        pairs = [c for c in self.release_.feature_spec["cliques"] if len(c) == 2]
        return [f"fitted {self.method} on {dataset or 'user data'}: epsilon={eps:g}, delta={delta:g}; "
                f"{len(self.release_.feature_spec['cliques']) - len(pairs)} 1-way and {len(pairs)} 2-way marginals "
                f"released; saved to {out}"]

    # -- outputs ----------------------------------------------------------------------------------------
    @property
    def encoder_(self) -> TableEncoder | None:
        return encoder_of(self.release_) if hasattr(self, "release_") else None

    def domain_(self) -> Domain:
        return Domain.of(self.encoder_.schema, int(self.release_.feature_spec["domain"]["max_cells"]))

    def model_(self):
        """The graphical model of the release (estimated once, post-processing)."""
        if not hasattr(self, "release_"):
            raise InvalidParameterError("this MST is not fitted; call fit() or mmdsynth.load().")
        if getattr(self, "_model", None) is None:
            spec = self.release_.feature_spec
            measured = {tuple(c): self.release_.tensors[MARGINAL_PREFIX + clique_key(c)].numpy() for c in spec["cliques"]}
            stds = {tuple(c): spec["stddev"][clique_key(c)] for c in spec["cliques"]}
            self._model = estimate(self.domain_(), measured, stds, self.release_.dataset["n_records"], self._s.iters)
        return self._model

    def sample(self, n: int, *, seed: int | None = None, **_) -> pd.DataFrame:
        """``n`` synthetic rows (post-processing): drawn from the graphical model, each numeric cell's value
        uniform inside it, typed by the schema."""
        check_positive(n, "n", integer=True)
        model, domain = self.model_(), self.domain_()
        seed = self._s.seed if seed is None else seed
        state = np.random.get_state()                    # mbi draws from numpy's global generator: public, seeded
        try:
            np.random.seed(seed)
            rows = model.synthetic_data(rows=int(n)).to_dict()
        finally:
            np.random.set_state(state)
        codes = np.stack([np.asarray(rows[a], dtype=np.int64) for a in domain.attributes], 1)
        rng = np.random.default_rng(seed)
        X, labels = domain.encoded(codes, rng)
        return self.encoder_.minmax().decode(X, labels, categorical="argmax", rng=rng)

    # -- persistence --------------------------------------------------------------------------------------
    def save(self, directory) -> Path:
        if not hasattr(self, "release_"):
            raise InvalidParameterError("this MST is not fitted; call fit() first.")
        return write_model_folder(directory, self, {})

    @classmethod
    def _from_folder(cls, directory: Path, meta: dict):
        return read_model_folder(cls, directory, meta)
