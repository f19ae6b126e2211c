"""The hybrid: measured marginals and a kernel mean embedding in one plan, and rows that match both.

One zCDP plan (:class:`~mmdsynth.privacy.engine.ZCDPEngine`, its total calibrated from (epsilon, delta) and charged
before any read) holds two parts:

* MST's releases (:class:`~mmdsynth.methods.marginal.MST`) with ``marginal_share`` of rho: the 1-way marginals of
  every column, a private spanning tree of pairs (by default scored by each pair's dependence, ``tree_score``), their
  2-way marginals, and (``label_pairs``, the default) the label's 2-way marginals with every column;
* DP-MERF's table release (:class:`~mmdsynth.methods.kernel.DPMERF`, no generator trained) with the rest: the
  class-conditional random-feature embedding (numeric columns' random Fourier features, per-class category
  frequencies, pairwise marginals and numeric x categorical histograms), the class proportions and the numeric
  columns' released CDFs, each at its usual share of the kernel part.

Post-processing only from there: the graphical model of the marginals (mbi 2.x) draws a pool of ``pool`` rows per
training row (public seed); the pool is reweighted (:mod:`mmdsynth.generators.reweight`) so that its statistics
match the kernel embedding and every measured marginal at once, each weighted by its noise,
stopping where the fit reaches the releases' noise level or (``stall_stop``, the default) where it stops improving
by more than that noise can tell apart; every (class, category) the weighted pool holds at less
than one record's weight then gets ``cover`` rows of its own at one record's weight (:func:`covering_rows`); synthetic
rows are drawn from the weighted pool, stratified along its cells (:func:`draw_order`). The
marginals carry fidelity (1-, 2-way structure), the kernel embedding carries what a tree of pairs misses (the
label's dependence on every column jointly, numeric joint structure).
"""
from __future__ import annotations

import itertools
import logging
import math
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp
from safetensors.numpy import load_file, save_file

from ..data.discrete import DEFAULT_CELLS
from ..data.encoding import TableEncoder
from ..embedding import embedding_stages, release_plan
from ..errors import InvalidParameterError
from ..features import build_feature_map
from ..generators.reweight import Targets, reweight, systematic
from ..privacy.marginals import TREE_SCORES, Measure, pair_dependence
from ..runtime import mapped_zeros, phase
from ..validation import check_positive, user_stacklevel
from .base import read_model_folder, write_model_folder
from .contract import register
from .kernel import DPMERF
from .marginal import AIM, MST, MarginalMethod
from .tables import encoder_of, table_shares, table_stages

logger = logging.getLogger(__name__)

POOL_FILE = "pool.safetensors"
#: the kernel part's tensors and ledger entries are kept under their own names in the release
KERNEL_SPEC = "kernel"
#: rows whose features are computed at once (memory: chunk x the Gaussian kernel's features, float64, and the one-hot
#: parts' non-zeros)
CHUNK = 4096
#: a column of the one-hot parts of the kernel features non-zero in more than this fraction of rows is kept dense (the
#: Gaussian kernel's features always are)
DENSE_FRACTION = 0.2
#: the covering rows (``cover``) weigh one record each, together at most this share of the synthetic rows
MAX_COVER_SHARE = 0.05


#: memory of the reweighted pool: about this many 4-byte floats per pool row and kernel feature. Measured
#: (benchmarks/log/2026-12-04.md#plan-outline): doctorcontacts' default fit, 100,930 pool rows x 2,000 features, peaked
#: at 2.30 GB resident, 1.85 GB above a fit's base
POOL_FLOATS = 2.3


@register
class Hybrid(MarginalMethod):
    """MST's measured marginals (``marginal_share`` of the budget) and DP-MERF's kernel embedding (the rest) in one
    zCDP plan; synthetic rows drawn from the marginals' graphical model, reweighted to match both releases within
    their noise. Tables only. ``pool``: model rows drawn per training row (at most ``max_pool``); ``steps``: the
    reweighting's most iterations; ``n_features``, ``rff_seed``, ``proportions_share``, ``numeric_share``: the
    kernel part's (DP-MERF's table setting); ``max_cells``, ``iters``, ``label_pairs``: the marginal part's;
    ``cover``: rows per (class, category) the reweighted rows would otherwise miss; ``stall_stop`` (on by default): also
    stop the reweighting when it stalls above the releases' noise level
    (:func:`~mmdsynth.generators.reweight.reweight`), before it piles the weight onto a few rows;
    ``tree_score``: how MST's tree scores a pair (:class:`~mmdsynth.privacy.marginals.SelectTree`), by default its
    distance from independence, not MST's distance from the model of the 1-way marginals (on wide numeric tables
    MST's score can put most of the tree's edges on the column whose 1-way estimate is worst: slow fits, no better
    marginals; benchmarks/log/2026-11-29.md#tree-hubs)."""

    #: the fit's time on 2 cores (one thread): a rate per term of :meth:`time_terms` (per learned attribute, per
    #: record and attribute (the reading, the measurements and the kernel embedding), per pool row at 2,000 kernel
    #: features (the pool's features and reweighting), and per cell of the attributes times the label's classes (the
    #: model's cliques)), fitted by ``benchmarks/time_estimate.py`` (non-negative least squares on the relative error)
    #: to the median fit of each hybrid cell of the suite since the numpy estimate (31 cells, 2026-12-05,
    #: benchmarks/log/2026-12-05.md#numpy-estimate: in sample 0.25-1.73x, median |log ratio| 0.28; census at eps 10
    #: took 4x the estimate)
    TIME_RATES = {"start": 0.0, "attribute": 0.129, "record_attribute": 8.17e-6, "pool_row": 3.8e-5, "cell": 0.00664}
    TIME_SPREAD = "expect 0.5-2x; up to 4x longer at epsilon 10 on a wide table"
    method = "hybrid"
    summary = "MST's marginals and DP-MERF's kernel embedding in one plan; model rows reweighted to match both"
    param_help = {
        "marginal_share": "the marginals' share of the budget (the kernel embedding gets the rest)",
        "pool": "rows drawn from the marginals' model per training row, then reweighted",
        "max_pool": "the most rows in the reweighted pool (memory: about 4 bytes x rows x the dense features)",
        "steps": "the reweighting's most iterations (it stops earlier at the releases' noise level)",
        "stall_stop": "also stop the reweighting once 10 iterations improve its fit by less than the releases' "
                      "noise can tell apart (on by default: where it acts, closer 2-way marginals and fewer repeated "
                      "rows; see the tables tutorial)",
        "n_features": "the kernel part's random Fourier features",
        "rff_seed": "the random features' draw (public)",
        "proportions_share": "the class proportions' share of the kernel part",
        "numeric_share": "the numeric columns' released CDFs' share of the kernel part",
        "marginals": '"mst" (a private spanning tree of 2-way marginals) or "aim" (AIM\'s rounds, at AIM\'s defaults)',
        "pairs": '"tree" (MST\'s private tree of pairs and the label\'s pairs) or "all" (the 2-way marginal of every pair '
                 "of columns in one release, no selection: the model takes a tree of them and the label's pairs, the "
                 "reweighting matches them all)",
        "tree_score": '"dependence" (a pair\'s distance from independence: no column gathers the tree\'s edges '
                      'because its own 1-way estimate is poor) or "model" (MST\'s) for the tree of pairs (with '
                      'marginals "mst")',
        "label_pairs": "also measure the label's 2-way marginal with every column (default: with marginals \"mst\"; "
                       "the marginal part's budget then splits in four parts instead of three)",
        "cover": "rows added for every category the reweighted rows hold in a class at less than one record's "
                 "weight (a row of the class with that category set), each at one record's weight (together at most "
                 "0.05 of the rows): no category goes missing from a class (0: none)",
    }
    param_choices = {"marginals": ("mst", "aim"), "pairs": ("tree", "all"), "tree_score": TREE_SCORES}

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, marginal_share: float = 0.5,
                 pool: int = 5, max_pool: int = 120_000, steps: int = 100, n_features: int = 2000, rff_seed: int = 0,
                 proportions_share: float = 0.1, numeric_share: float = 0.1, max_cells: int = DEFAULT_CELLS,
                 iters: int = 3000, marginals: str = "mst", label_pairs: bool | None = None, cover: int = 1,
                 grid: str = "public", tree_score: str = "dependence", stall_stop: bool = True, pairs: str = "tree",
                 seed: int = 0,
                 noise_seed: int | None = None, progress: bool | None = None):
        self.epsilon, self.delta, self.max_cells, self.iters = epsilon, delta, max_cells, iters
        self.label_pairs, self.grid, self.tree_score = label_pairs, grid, tree_score
        self.seed, self.noise_seed, self.progress = seed, noise_seed, progress
        self.marginals = marginals
        self.marginal_share, self.pool, self.max_pool, self.steps = marginal_share, pool, max_pool, steps
        self.n_features, self.rff_seed = n_features, rff_seed
        self.proportions_share, self.numeric_share = proportions_share, numeric_share
        self.cover = cover
        self.stall_stop = stall_stop
        self.pairs = pairs

    # -- the plan -----------------------------------------------------------------------------------------
    def _kernel(self, schema) -> DPMERF:
        """The kernel part's configuration (a DP-MERF object that never fits: its plan and feature map only)."""
        s = self._s
        return DPMERF(s.epsilon, s.delta, n_features=s.n_features, rff_seed=s.rff_seed,
                      proportions_share=s.proportions_share, numeric_share=s.numeric_share, noise_seed=s.noise_seed,
                      n_classes=schema.n_classes, progress=False).configured("table")

    def marginal_part(self) -> MST | AIM:
        """The marginal part's planner (a method object that never fits: its stages only), configured from the
        hybrid's settings: MST's tree with the hybrid's cells, grid, tree score and label pairs, or (``marginals="aim"``)
        AIM's rounds at AIM's own settings with the hybrid's cells and grid."""
        s = self._s
        if s.marginals == "aim":
            part = AIM(s.epsilon, s.delta, max_cells=s.max_cells, grid=s.grid, noise_seed=s.noise_seed)
        else:
            part = MST(s.epsilon, s.delta, max_cells=s.max_cells, iters=s.iters, label_pairs=self._label_pairs(),
                       grid=s.grid, tree_score=s.tree_score, noise_seed=s.noise_seed, progress=s.progress)
        part.settings_ = part.settings_for("table")
        return part

    def planner(self, domain, rho: float, n: int):
        """The marginal part's stages: MST's (default) or AIM's rounds (:meth:`marginal_part`), or with ``pairs="all"``
        every pair at once."""
        if self._s.pairs == "all":
            return self._every_pair(domain, rho)
        return self.marginal_part().planner(domain, rho, n)

    def _every_pair(self, domain, rho: float):
        """``pairs="all"``: the 1-way marginals (a third of the marginal part, numeric columns on the fine grid), then
        the 2-way marginal of every pair of columns in one Gaussian release (the rest): no private selection. Which of
        them the graphical model is estimated from is post-processing (:meth:`_modelled`); the reweighting matches
        them all."""
        one, std1, domain = yield from self._one_way(domain, rho / 3)
        two, std2 = yield Measure(tuple(itertools.combinations(domain.attributes, 2)), 2 * rho / 3,
                                  "2-way marginals of every pair of columns", domain=domain)
        return [(c, y, std1, True) for c, y in one.items()] + [(c, y, std2, False) for c, y in two.items()]

    def _modelled(self, measurements: list) -> list:
        """With ``pairs="all"`` the model is estimated from the 1-way marginals, the label's pairs and a maximum
        spanning tree of the other pairs by their noisy counts' distance from independence (post-processing of the
        release: the same junction tree as the default's); the reweighting matches every measured pair."""
        if self._s.pairs != "all" or self._s.marginals != "mst":
            return measurements
        import networkx as nx

        domain = self.domain_()
        label = domain.schema.label
        graph = nx.Graph()
        graph.add_nodes_from(a for a in domain.attributes if a != label)
        keep = set()
        for clique, y, _, _ in measurements:
            if len(clique) != 2:
                continue
            if label in clique:
                keep.add(clique)
                continue
            a, b = clique
            C = np.maximum(np.asarray(y, dtype=np.float64), 0.0).reshape(domain.size(a), domain.size(b))
            total = max(C.sum(), 1e-12)
            graph.add_edge(a, b, weight=pair_dependence(C, total) / total, clique=clique)
        keep |= {d["clique"] for _, _, d in nx.maximum_spanning_tree(graph).edges(data=True)}
        return [m for m in measurements if len(m[0]) == 1 or m[0] in keep]

    def stage_outline(self, domain):
        """The marginal part's stages in words (MST's, or AIM's rounds with ``marginals="aim"``)."""
        if self._s.pairs == "all":
            return [("1-way marginals of every column (numeric ones on their full public grid)", 1 / 3),
                    (f"2-way marginals of all {len(domain.attributes) * (len(domain.attributes) - 1) // 2} pairs of "
                     f"columns", 2 / 3)]
        return self.marginal_part().stage_outline(domain)

    def _pool_rows(self, n: int) -> int:
        """The reweighted pool's rows for ``n`` public records (``pool`` per record, at most ``max_pool``)."""
        return int(min(self._s.pool * max(n, 1), self._s.max_pool))

    def _memory(self, schema, n, domain) -> int:
        """MST's estimate and the reweighted pool's features: :data:`POOL_FLOATS` floats of 4 bytes per kernel
        feature and pool row (the dense features, their one-hot columns and the reweighting's buffers)."""
        return int(super()._memory(schema, n, domain) + 4 * POOL_FLOATS * self._s.n_features * self._pool_rows(n))

    def time_terms(self, schema, n: int, domain) -> dict:
        """The quantities the time estimate charges a rate for (:attr:`TIME_RATES`), public: the domain, the record
        count and the settings."""
        sizes = domain.sizes
        classes = sizes.get(schema.label, 1) if schema.label else 1
        return {**super().time_terms(schema, n, domain), "attribute": len(sizes),
                "pool_row": self._pool_rows(n) * self._s.n_features / 2000, "cell": sum(sizes.values()) * classes}

    def _memory_advice(self) -> str:
        s = self._s
        return (f"Lower the pool (max_pool=, CLI --max-pool; now {s.max_pool:,} rows, {s.pool} per record) or the "
                f"kernel's features (n_features=, --n-features; now {s.n_features:,}): the pool's memory is about "
                f"{4 * POOL_FLOATS * s.n_features / 2 ** 10:.0f} KB a row.")

    def _label_pairs(self):
        """``label_pairs`` resolved: None (the default) measures the label's pairs with MST's tree (issue 47: the
        classifiers read each column given the label), not with AIM's rounds (AIM chooses its own pairs)."""
        s = self._s
        return s.marginals == "mst" if s.label_pairs is None else s.label_pairs

    def _check_plan(self, domain) -> None:
        s = self._s
        if s.pairs == "all" and s.marginals != "mst":
            raise InvalidParameterError('pairs="all" measures every pair instead of MST\'s tree: it needs '
                                        'marginals="mst" (AIM chooses its own cliques).')
        if s.label_pairs is True and s.marginals != "mst":
            raise InvalidParameterError("label_pairs adds the label's pairs to MST's tree: it needs marginals='mst' "
                                        "(AIM chooses its own pairs).")
        if not (isinstance(s.marginal_share, (int, float)) and 0 < s.marginal_share < 1):
            raise InvalidParameterError(f"marginal_share must be in (0, 1) (the kernel embedding gets the rest); "
                                        f"got {s.marginal_share!r}.")
        for name in ("pool", "max_pool", "steps", "n_features"):
            check_positive(getattr(s, name), name, integer=True)
        if not (isinstance(s.cover, int) and not isinstance(s.cover, bool) and s.cover >= 0):
            raise InvalidParameterError(f"cover must be a whole number >= 0 (rows per class and category); "
                                        f"got {s.cover!r}.")
        if not isinstance(s.stall_stop, bool):
            raise InvalidParameterError(f"stall_stop must be true or false (stop the reweighting once it stalls); "
                                        f"got {s.stall_stop!r}.")
        self.marginal_part()._check_plan(domain)      # the part's own checks (label_pairs, AIM's rounds), then shared

    def _shares(self, schema) -> dict:
        """One filter for both parts: the kernel part's Gaussian releases declared as shares of rho (each at its
        usual relative weight: a release with noise multiplier s costs in proportion to 1 / s^2), the marginal
        stages spend the rest."""
        k = self._kernel(schema)
        shares = table_shares(schema, schema_share=None, numeric_encoding=k.settings_.numeric_encoding,
                              numeric_share=k.settings_.numeric_share)
        _, mults = release_plan(blocks=k.block_multipliers(),
                                shares={**shares, "class_proportions": k.settings_.proportions_share})
        inverse = {name: 1.0 / m ** 2 for name, m in mults.items()}
        kernel = 1.0 - float(self._s.marginal_share)
        return {name: kernel * v / sum(inverse.values()) for name, v in inverse.items()}

    def _more_stages(self, engine, facts, schema, dataset):
        """The kernel part's stages, after the marginals, in the same plan and run: DP-MERF's table release (numeric
        CDFs, class proportions, the embedding). Returns (its tensors, its spec entries, its public facts)."""
        with phase("measuring the kernel embedding", self._s.progress):
            table_facts, kernel = yield from self._kernel_stages(self._kernel(schema), engine, facts, schema, dataset)
        spec = {KERNEL_SPEC: kernel.feature_spec,
                "captures": kernel.feature_spec.get("captures", "a kernel mean embedding"),
                "kernel_noise_std": float(_embedding_entry(engine).noise_std)}
        return kernel.tensors, spec, {**table_facts, "conditional": True}

    def _more_spec(self, spec: dict, more: dict) -> dict:
        return {**spec, **more, "name": "hybrid", "captures": spec["captures"] + "; " + more["captures"]}

    def _kernel_stages(self, k, engine, facts, schema, dataset):
        """DP-MERF's table release in the hybrid's plan, as stages: returns (its table facts, the release, which
        carries the table's tensors)."""
        encoder, prior, table_facts = yield from table_stages(engine, facts, schema)
        kernel = yield from embedding_stages(
            k.table_feature_map(encoder, schema.n_classes), facts, engine, conditional=True,
            n_classes=schema.n_classes, encoder=encoder, dataset=dataset,
            proportions_share=engine.shares.get("class_proportions"),   # its share of the whole plan
            prior_tensors=prior, public_facts={"record_shape": [encoder.dim]})
        return table_facts, kernel

    # -- post-processing ----------------------------------------------------------------------------------
    def _fitted(self) -> None:
        """The graphical model, then the pool drawn from it and reweighted toward every release."""
        self.model_()
        self._reweight()

    def _reweight(self) -> None:
        s, release = self._s, self.release_
        m = int(release.dataset["n_records"])
        size = int(min(s.pool * m, s.max_pool))
        self.model_()                                                  # estimated first: a phase of its own
        with phase(f"sampling a pool of {size:,} rows from the model", s.progress):
            codes = by_class(self._model_codes(size, s.seed), self.domain_())
            pool = self._decode(codes, s.seed)
        with phase("the releases' statistics of the pool", s.progress):
            targets = self.targets(pool)
        fit = reweight(targets, steps=int(s.steps), stall=bool(s.stall_stop), progress=s.progress)   # its own bar
        weights = fit.weights
        if s.cover:
            extra = covering_rows(codes, weights, self.domain_(), int(s.cover), m, np.random.default_rng(s.seed))
            if len(extra):
                pool = pd.concat([pool, self._decode(extra, s.seed + 1)], ignore_index=True)
                weights = cover_floor(np.r_[weights, np.zeros(len(extra))], size, m)
                codes = np.concatenate([codes, extra])
        logger.info("hybrid: %d model rows reweighted in %d steps (%s), residual %.4g of %d released entries, "
                    "effective size %.2f of the pool; %d covering rows added", size, fit.steps, fit.stopped,
                    fit.objective[-1], fit.entries, fit.effective_fraction, len(pool) - size)
        X, y = encoder_of(release).minmax().encode(pool)               # the minmax encoder checks no IDs
        self.pool_ = {"X": np.asarray(X, dtype=np.float64), "y": np.asarray(y, dtype=np.int64), "w": weights,
                      "order": draw_order(codes, self.domain_())}
        self.reweighting_ = {"pool": len(pool), "covering_rows": len(pool) - size,
                             "covering_share": float(weights[size:].sum()), "steps": fit.steps, "stopped": fit.stopped,
                             "objective_first": fit.objective[0], "objective_last": fit.objective[-1],
                             "released_entries": fit.entries, "effective_fraction": fit.effective_fraction}

    def fit_summary(self, dataset: str, out) -> list[str]:
        r = getattr(self, "reweighting_", None)
        if not r:
            return super().fit_summary(dataset, out)
        rows = f"{r['pool'] - r.get('covering_rows', 0):,} model rows reweighted in {r['steps']} steps ({r['stopped']})"
        if r.get("covering_rows"):
            rows += (f"; {r['covering_rows']:,} covering rows for categories a class would miss "
                     f"({100 * r['covering_share']:.2g} % of the weight)")
        return super().fit_summary(dataset, out) + [rows]

    def targets(self, rows: pd.DataFrame) -> Targets:
        """The whitened statistics of ``rows`` and the release's targets (:class:`Targets`): the kernel embedding
        (each entry over its noise std) and every measured marginal (cell shares over the count noise std / m).
        Post-processing: reads the release and the given (public) rows."""
        release = self.release_
        encoder = self._generated_encoder()
        mu = release.tensors["embedding"].double().numpy()             # (D, C)
        dense, dense_cols, sparse_cols, kernel, y = self._kernel_rows(rows, encoder)
        marginals, targets = self._marginal_rows(encoder.clean(rows))
        sigma = float(release.feature_spec["kernel_noise_std"])
        k, n_marg = kernel.shape[1], marginals.shape[1]
        return Targets(dense=dense if len(dense_cols) else None, labels=y, n_classes=mu.shape[1],
                       dense_target=mu[dense_cols] / sigma if len(dense_cols) else None,
                       sparse=sp.hstack([kernel, marginals]).tocsr(),
                       sparse_target=np.concatenate([mu[sparse_cols].reshape(-1) / sigma, targets]),
                       entries=int(mu.size) + n_marg, dense_cols=dense_cols, sparse_cols=sparse_cols,
                       groups=(("kernel embedding", 0, k, int(mu.size), True),
                               ("marginals", k, k + n_marg, n_marg, False)))

    def _kernel_rows(self, rows: pd.DataFrame, encoder: TableEncoder):
        """Each row's class-conditional kernel features over the embedding's noise std, split by columns: the
        Gaussian kernel's features and the one-hot parts' columns non-zero in more than ``DENSE_FRACTION`` of the
        first chunk's rows dense (float32, N x dense), the rest sparse in the (D, C) layout's row-major order (column
        j of class c at j C + c). Built from :meth:`~mmdsynth.features.rff.MixedRFF.sparse_split`, never as the dense
        (N, D) array. Returns (dense, dense columns, sparse columns, sparse matrix, labels)."""
        spec = self.release_.feature_spec
        C = int(self.release_.dataset["n_classes"])
        fmap = build_feature_map(spec[KERNEL_SPEC])
        sigma = float(spec["kernel_noise_std"])
        X, y = encoder.encode(rows)
        # float32, the dense block's precision: the Gaussian kernel's features computed at half the cost (generated
        # rows, post-processing; the release's sums stay in float64)
        X, y = np.asarray(X, dtype=np.float32), np.asarray(y, dtype=np.int64)
        n = len(y)
        dense_rest = sparse_rest = dense = None
        blocks = []
        for s in range(0, n, CHUNK):
            gauss, rest = fmap.sparse_split(X[s:s + CHUNK])
            if dense_rest is None:
                frac = np.bincount(rest.indices, minlength=rest.shape[1]) / rest.shape[0]
                dense_rest, sparse_rest = np.nonzero(frac > DENSE_FRACTION)[0], np.nonzero(frac <= DENSE_FRACTION)[0]
                # one copy: N x dense, on small pages (its first write on huge pages waits for compaction here)
                dense = mapped_zeros((n, gauss.shape[1] + len(dense_rest)), np.float32)
            np.multiply(gauss, np.float32(1.0 / sigma), out=dense[s:s + len(gauss), :gauss.shape[1]])
            dense[s:s + len(gauss), gauss.shape[1]:] = rest[:, dense_rest].toarray() / sigma
            part = (rest[:, sparse_rest] / sigma).tocoo()
            yy = y[s:s + CHUNK][part.row]
            blocks.append(sp.csr_matrix((part.data, (part.row, part.col * C + yy)),
                                        shape=(len(gauss), len(sparse_rest) * C)))
        R = dense.shape[1] - len(dense_rest)
        return dense, np.r_[np.arange(R), R + dense_rest], R + sparse_rest, sp.vstack(blocks).tocsr(), y

    def _marginal_rows(self, clean: pd.DataFrame):
        """Each row's cell in every measured clique as a one-hot at m / std (a share of rows over the count noise
        std / m), and the targets (noisy counts / std), in the release's measurement order."""
        release = self.release_
        m = int(release.dataset["n_records"])
        domain = self.domain_()
        fine = domain.fine()
        codes = {False: domain.codes(clean), True: fine.codes(clean)}
        index = {a: j for j, a in enumerate(domain.attributes)}
        n = len(clean)
        cols, vals, targets, offset = [], [], [], 0
        for meas in release.feature_spec["measurements"]:
            clique, std, is_fine = tuple(meas["clique"]), float(meas["std"]), bool(meas.get("fine"))
            sizes = (fine if is_fine else domain).sizes
            shape = [sizes[a] for a in clique]
            cols.append(offset + np.ravel_multi_index([codes[is_fine][:, index[a]] for a in clique], shape))
            vals.append(np.full(n, m / std))
            targets.append(release.tensors[meas["tensor"]].double().numpy() / std)
            offset += math.prod(shape)
        matrix = sp.csr_matrix((np.concatenate(vals), (np.tile(np.arange(n), len(cols)), np.concatenate(cols))),
                               shape=(n, offset))
        return matrix, np.concatenate(targets)

    def sample(self, n: int, *, seed: int | None = None, **_) -> pd.DataFrame:
        """``n`` synthetic rows (post-processing): drawn from the reweighted pool by systematic resampling along the
        pool's cell order (:func:`draw_order`: stratified, so the rows' marginals follow the weighted pool's instead
        of adding a random draw's error; seeded), returned in a seeded random order, typed by the schema."""
        check_positive(n, "n", integer=True)
        pool = self._pool()
        effective = 1.0 / float((pool["w"] ** 2).sum())
        if n > 2 * effective:
            m = int(self.release_.dataset["n_records"])
            warnings.warn(f"{n} rows drawn from a reweighted pool of effective size {effective:.0f}: many rows will "
                          f"repeat their categories and cells (a repeated pool row gets fresh numeric values inside its "
                          f"cells). {larger_pool(self._s.pool, self._s.max_pool, m)}", UserWarning,
                          stacklevel=user_stacklevel())
        rng = np.random.default_rng(self._s.seed if seed is None else seed)
        order = pool.get("order")                   # a model saved before the cell order: the pool's own order
        order = np.arange(len(pool["w"])) if order is None else np.asarray(order, dtype=np.int64)
        idx = rng.permutation(order[systematic(pool["w"][order], int(n), rng)])
        out = encoder_of(self.release_).minmax().decode(pool["X"][idx], pool["y"][idx], categorical="argmax", rng=rng)
        return self._fresh_copies(out, idx, rng)

    def _generated_encoder(self) -> TableEncoder:
        """The release's encoder for generated rows: their IDs (a person's under a privacy unit too) lie outside the
        real rows' range and are never encoded, so they are not checked."""
        released = encoder_of(self.release_)
        return TableEncoder(released.schema, released.columns, released.numeric_maps, check_ids=False)

    def _fresh_copies(self, rows: pd.DataFrame, idx: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
        """``rows`` drawn from the pool (``idx``: their pool rows) with every second and later copy of a pool row given
        fresh numeric values inside the same cells (the cells of every measured marginal kept, a value drawn inside
        its coarse cell by the released fine 1-way marginal, as the pool's rows are): a pool row drawn k times is k
        rows, not one row k times. Synthetic rows then repeat about as often as the model's cells do, not as often
        as the reweighting concentrates its weight (issue 81: 24 % exact repeats where the real table had 0.2 %).
        Post-processing of public rows with a public seed."""
        numeric = list(self.domain_().grids)
        _, first = np.unique(idx, return_index=True)
        again = np.ones(len(idx), dtype=bool)
        again[first] = False
        if not numeric or not again.any():
            return rows
        copies = rows.loc[again]
        codes = self.domain_().codes(self._generated_encoder().clean(copies))
        fresh = self._decode(codes, int(rng.integers(2 ** 63)))
        rows = rows.copy()
        for name in numeric:
            rows.loc[again, name] = fresh[name].to_numpy()
        return rows

    def _pool(self) -> dict:
        if getattr(self, "pool_", None) is None:
            if not hasattr(self, "release_"):
                raise InvalidParameterError("this hybrid is not fitted; call fit() or mmdsynth.load().")
            self._reweight()
        return self.pool_

    # -- persistence ----------------------------------------------------------------------------------------
    def save(self, directory):
        if not hasattr(self, "release_"):
            raise InvalidParameterError("this hybrid is not fitted; call fit() first.")
        pool = self._pool()
        return write_model_folder(directory, self, {"reweighting": self.reweighting_},
                                  payload=lambda folder: save_file(pool, str(folder / POOL_FILE)))

    @classmethod
    def _from_folder(cls, directory, meta: dict):
        model = read_model_folder(cls, directory, meta)
        model.pool_ = load_file(str(directory / POOL_FILE))
        model.reweighting_ = meta.get("reweighting")
        return model


def larger_pool(pool: int, max_pool: int, m: int) -> str:
    """The fix for a pool too small for the rows asked: whichever of ``pool`` (rows per training row, ``m`` training
    rows) and ``max_pool`` set its size."""
    if pool * m < max_pool:
        return (f"Fit with a larger pool (pool=, CLI --pool; now {pool} rows per training row: {pool * m:,} rows; "
                f"max_pool caps it at {max_pool:,}) for more distinct rows.")
    return (f"Fit with a larger max_pool (max_pool=, CLI --max-pool; now {max_pool:,} rows, below pool x training "
            f"rows) for more distinct rows.")


def covering_rows(codes: np.ndarray, w: np.ndarray, domain, k: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Codes of ``k`` rows for every (class, categorical column, category) that the weighted pool (``codes``,
    weights ``w``) holds at less than one record's weight 1 / ``m``: each a pool row of that class drawn by weight
    (any row, relabelled, when the class has no weight) with that one column set to that category. Post-processing
    of public rows with a public seed. The graphical model of noisy marginals gives a rare category within a class
    almost no mass, and the reweighting cannot weigh a row the pool lacks: drawn rows then never hold the pair,
    and a classifier trained on them treats it as impossible (Gaussian naive Bayes: every such real test row is
    pushed out of its class)."""
    if k == 0:
        return codes[:0]
    attributes, label = domain.attributes, domain.schema.label
    y = attributes.index(label) if label else None
    w = np.asarray(w, dtype=np.float64)
    classes = range(domain.size(label)) if label else [None]
    categorical = [j for j, a in enumerate(attributes) if a not in domain.grids and a != label]
    out = []
    for c in classes:
        members = np.arange(len(codes)) if c is None else np.nonzero(codes[:, y] == c)[0]
        base = members if w[members].sum() > 0 else np.arange(len(codes))
        p = w[base] / w[base].sum()
        for j in categorical:
            size = domain.size(attributes[j])
            mass = np.bincount(codes[members, j], weights=w[members], minlength=size)
            short = np.nonzero(mass < 1.0 / m)[0]
            if len(short) == 0:
                continue
            rows = codes[rng.choice(base, size=len(short) * k, p=p)]
            rows[:, j] = np.repeat(short, k)
            if c is not None:
                rows[:, y] = c
            out.append(rows)
    return np.concatenate(out) if out else codes[:0]


def draw_order(codes: np.ndarray, domain) -> np.ndarray:
    """The pool's rows sorted by their cells (``codes``): the label first, then the other columns from the fewest
    cells to the most (a public function of the schema's domain; stable). Systematic resampling along this order is
    stratified sampling: every run of rows sharing their leading cells gets its weight's share of the drawn rows to
    within one row, so the drawn rows' 1- and 2-way marginals match the weighted pool's where a plain draw of n rows
    adds a multinomial error (wvs at eps 10: 2-way TVD 0.018 for n rows against 0.009 for the weighted pool itself,
    as far from the truth as n rows resampled from the real table, 0.016). Post-processing of public rows."""
    attributes = list(domain.attributes)
    label = domain.schema.label
    rest = sorted((a for a in attributes if a != label), key=lambda a: (domain.size(a), attributes.index(a)))
    keys = ([label] if label else []) + rest
    return np.lexsort([codes[:, attributes.index(a)] for a in reversed(keys)]).astype(np.int64)


def by_class(codes: np.ndarray, domain) -> np.ndarray:
    """The model's rows (codes) in the order of their class, stable (public rows: the reweighting then reads each
    class's rows as one run, :class:`~mmdsynth.generators.reweight.Targets`)."""
    label = domain.schema.label
    if not label:
        return codes
    return codes[np.argsort(codes[:, domain.attributes.index(label)], kind="stable")]


def cover_floor(w: np.ndarray, start: int, m: int, cap: float = MAX_COVER_SHARE) -> np.ndarray:
    """Weights (summing to 1) where every row from ``start`` on (the covering rows) weighs at least one record's
    share 1 / ``m`` (all of them together at most ``cap`` of the mass at the floor), the rows before scaled to the
    rest: additive smoothing of the reweighted pool (k pseudo-records for every short class and category), so that
    n = m drawn rows hold each covering row about once. A covering row already weighing more keeps its weight."""
    w = np.asarray(w, dtype=np.float64) / float(np.sum(w))
    n_cover = len(w) - start
    if n_cover <= 0:
        return w
    cover = np.maximum(w[start:], min(1.0 / m, cap / n_cover))
    rest = w[:start]
    out = np.concatenate([rest * max(1.0 - cover.sum(), 0.0) / max(rest.sum(), 1e-300), cover])
    return out / out.sum()


def _embedding_entry(engine):
    """The ledger entry of the kernel embedding's release: the last one ``embedding_stages`` made (one block:
    DP-MERF's map has one part)."""
    entry = engine.entries[-1]
    if "mean embedding" not in entry.description:
        raise InvalidParameterError(f"the hybrid expects the kernel embedding's release last; found {entry.description!r}.")
    return entry
