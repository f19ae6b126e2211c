"""The graphical model of measured marginals: this library's adapter of the maintained **mbi 2.x** library
(McKenna et al.; estimation by mirror descent and sampling), post-processing of a release only.

The marginal methods (:mod:`mmdsynth.methods.marginal`: MST, AIM, the hybrid's marginal half) hand it noisy clique
counts with their noise std and the public record count; it returns mbi's model, any 1- or 2-way marginal of that
model computed in numpy (:class:`ModelMarginals`), and rows drawn from it (:func:`draw_codes`, randomized rounding
along the junction tree, the same rows for a seed in every process). Nothing here reads
private rows. The adapter uses parts of mbi beyond its documented path (:data:`MBI_INTERNALS`): pyproject pins mbi's
minor version and a test fails naming any of them a new mbi moves.
"""
from __future__ import annotations

import dataclasses

import networkx as nx
import numpy as np
from scipy.special import logsumexp

from ..data.discrete import Domain
from ..errors import InvalidParameterError


#: the parts of mbi this adapter uses beyond its documented estimate path (the junction tree, the Shafer-Shenoy oracle,
#: the weighted query, and what the numpy estimate of mirror_descent.py reads: the loss's cliques and Lipschitz
#: constant, the model's classes): pyproject pins mbi's minor version, and tests/unit/test_mst.py fails naming any of
#: these that a new mbi moves, before the pin is widened
MBI_INTERNALS = ("Domain.fromdict", "LinearMeasurement", "CliqueVector", "Factor", "MarkovRandomField",
                 "clique_utils.maximal_subset", "estimation.MirrorDescent",
                 "junction_tree.hypothetical_model_size", "junction_tree.make_junction_tree",
                 "junction_tree.maximal_cliques", "junction_tree.message_passing_order", "marginal_loss.WeightedQuery",
                 "marginal_loss.DatavectorQuery", "marginal_loss.calculate_l2_lipschitz_from_metadata",
                 "marginal_loss.from_linear_measurements", "marginal_oracles.message_passing_shafer_shenoy")


def mbi_internals_missing(lib) -> list[str]:
    """The names of :data:`MBI_INTERNALS` that the installed ``lib`` (mbi) does not have where the adapter reads them."""
    import importlib

    missing = []
    for name in MBI_INTERNALS:
        head, *rest = name.split(".")
        try:
            obj = getattr(lib, head) if hasattr(lib, head) else importlib.import_module(f"{lib.__name__}.{head}")
            for part in rest:
                obj = getattr(obj, part)
        except (AttributeError, ImportError):
            missing.append(name)
    return missing


def mbi():
    """The mbi package (2.x), with JAX in float64 on the CPU; refused with the install line when missing."""
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_enable_compilation_cache", False)     # mbi compiles many small programs
        import mbi as _mbi
    except ImportError:
        raise InvalidParameterError("the marginal methods (hybrid, mst, aim) need the mbi library, a dependency of "
                                    "mmdsynth that is missing here: pip install 'mbi>=2'") from None
    major = int(str(getattr(_mbi, "__version__", "2")).split(".")[0] or 2)
    if major < 2:
        raise InvalidParameterError("mst needs mbi 2.x (1.x had a sampling regression): pip install 'mbi>=2'")
    return _mbi


def estimate(domain: Domain, measurements: list, n_records: int, iters: int, warm_start=None):
    """The graphical model (mbi's MarkovRandomField) of noisy clique counts (post-processing): mirror descent on
    ``measurements`` [(clique, noisy counts, noise std, fine)], each weighted by its noise std, with the public
    record count as the known total (``warm_start``: a model of earlier measurements to start from). A ``fine``
    1-way measurement (counted on :meth:`Domain.fine`) enters as its sums over each cell of ``domain``, whitened:
    a cell that sums k fine cells has noise variance k std^2. Models whose junction tree holds at most
    :data:`NUMPY_CELLS` cells run the same steps in numpy (:mod:`.mirror_descent`: no compiling), larger ones in
    mbi's compiled estimator."""
    lib = mbi()
    items = []
    for clique, y, std, fine in measurements:
        y, weights = np.asarray(y, dtype=np.float64), None
        if fine:
            (name,) = clique
            parent = domain.coarse_of_fine(name)
            k = np.bincount(parent, minlength=domain.size(name)).astype(np.float64)
            weights = 1.0 / np.sqrt(np.maximum(k, 1.0))
            y = np.bincount(parent, weights=y, minlength=domain.size(name)) * weights
        items.append((tuple(clique), y, float(std or 1.0), weights))
    mbi_domain = lib.Domain.fromdict(domain.sizes)
    if not items:                                          # nothing measured: mbi's model of the known total alone
        return _mbi_model(lib, mbi_domain, items, n_records, iters, warm_start)
    jtree = lib.junction_tree.make_junction_tree(mbi_domain, lib.clique_utils.maximal_subset([c for c, *_ in items]))[0]
    sizes = [mbi_domain.size(c) for c in lib.junction_tree.maximal_cliques(jtree)]
    if sum(sizes) <= min(NUMPY_CELLS, NUMPY_MEAN_CELLS * len(sizes)):
        return _numpy_model(lib, mbi_domain, jtree, items, n_records, iters, warm_start)
    return _mbi_model(lib, mbi_domain, items, n_records, iters, warm_start)


#: the junction trees whose model is estimated in numpy: at most this many cells over the cliques, and at most
#: :data:`NUMPY_MEAN_CELLS` a clique on average. Measured on 2026-12-05 (one thread, the estimate alone, numpy
#: against mbi's compiled steps): the hybrid's models of spam7 (5 cliques, 6,084 cells) 1.4 s against 3.4 s, adult
#: (12, 5,130) 2.2 against 9.5, census (38, 27,000) 6.9 against 30.1, epileptic (177, 89,384) 27 against 55; a
#: chain of 59 pairs of 40 x 40 cells 6.0 against 7.7; but larger cliques favour the compiled steps: 8 triples of
#: 20^3 cells 3.4 s against 1.5, 6 of 30^3 6.2 against 1.4, 5 quadruples of 12^4 4.6 against 1.3 (1,000 steps)
NUMPY_CELLS = 2_000_000
NUMPY_MEAN_CELLS = 4_000


def _numpy_model(lib, mbi_domain, jtree, items, n_records, iters, warm_start):
    """:func:`.mirror_descent.estimate`'s potentials and marginals as mbi's model (its arrays, no compiling)."""
    from . import mirror_descent

    warm = None
    if warm_start is not None:
        warm = {tuple(c): np.asarray(warm_start.potentials[c].values) for c in warm_start.potentials.cliques}
    cliques, potentials, marginals = mirror_descent.estimate(lib, jtree, dict(mbi_domain.config), items,
                                                             float(n_records), iters, warm)

    def vector(arrays):                  # numpy arrays: JAX's operations take them, and nothing is put on a device
        return lib.CliqueVector(mbi_domain, cliques, {c: lib.Factor(mbi_domain.project(c), v)
                                                      for c, v in zip(cliques, arrays)})
    return lib.MarkovRandomField(potentials=vector(potentials), marginals=vector(marginals),
                                 total=float(n_records))


def _mbi_model(lib, mbi_domain, items, n_records, iters, warm_start):
    """mbi's compiled mirror descent (Shafer-Shenoy messages) on the whitened measurements."""
    import jax

    # each estimate compiles programs for the model's cliques, and JAX keeps every one: AIM's rounds on a wide table
    # (census, 41 columns) reached the kernel's 65,530 memory-mapping limit and died in LLVM (signal 11) after about
    # 23 minutes. Dropping the compiled programs before each estimate changes no result, only recompiles
    jax.clear_caches()
    ms = []
    for clique, y, std, weights in items:
        # mbi's WeightedQuery (not a closure): its operator norm is known, so mbi takes the loss's Lipschitz
        # constant from the measurements' metadata instead of 50 power iterations (about 11 s of compiling)
        ms.append(lib.LinearMeasurement(y, clique, std) if weights is None else
                  lib.LinearMeasurement(y, clique, std, query=lib.marginal_loss.WeightedQuery(weights)))
    loss = lib.marginal_loss.from_linear_measurements(ms, mbi_domain)
    # the loss as one compiled program: mbi evaluates it once outside its compiled steps, op by op, and each op
    # on each clique's shape compiled separately (about 7 s on adult); inside the steps it is traced as before
    loss = dataclasses.replace(loss, loss_fn=jax.jit(loss.loss_fn))
    # Shafer-Shenoy message passing, not mbi's CPU default (HUGIN): the same marginals (to 1e-11 after 2 steps), a
    # little slower a step, but XLA compiles its step much faster on a long junction tree (epileptic's 177 cliques:
    # 144 s against 244 s; adult's: 20 s against 24 s), and the compile is most of a wide table's estimate
    oracle = lib.marginal_oracles.message_passing_shafer_shenoy
    return lib.estimation.MirrorDescent(marginal_oracle=oracle).estimate(
        mbi_domain, loss, known_total=float(n_records), iters=int(iters), warm_start=warm_start)


def draw_codes(model, calibrated: "ModelMarginals", n: int) -> dict:
    """``n`` rows of codes drawn from ``model`` by randomized rounding along its junction tree (numpy's global
    generator, seeded by the caller): the first column of the elimination order (reversed) rounded to its counts,
    then each next column, within every group of rows sharing its parents (the columns drawn so far that share one of
    the tree's cliques with it), at evenly spaced points of its conditional distribution (each row's rank in a random
    order of its group plus a uniform jitter, over the group's size): a group's counts follow the model's conditional
    to within two rows, as in mbi's sampler. The counts come from ``calibrated`` (:class:`ModelMarginals`: the tree
    calibrated in numpy, nothing compiled). Unlike mbi's sampler (which orders a column's parents by iterating a
    Python set of column names: another process, another string hash, other rows for the same seed), the parents
    are taken in the domain's order, so a seed gives the same rows in every process. Post-processing. Models fitted
    under mbi constraints (none here) take mbi's own path."""
    if model.constraints:
        return model.synthetic_data(rows=int(n)).to_dict()
    total = int(n)
    attributes = list(calibrated.sizes)
    cliques = [set(c) for c in calibrated.tree.nodes]
    order = list(calibrated.order)[::-1]
    data: dict = {}
    for col in order:
        near = set().union(*[c for c in cliques if col in c])
        parents = tuple(a for a in attributes if a in near and a in data)      # drawn already, in the domain's order
        counts = calibrated.inside_a_clique(parents + (col,))
        data[col] = _rounded_column(counts, total) if not parents else \
            _conditional_column(counts, np.stack([data[a] for a in parents], -1), total)
    return data


def _rounded_column(counts: np.ndarray, total: int) -> np.ndarray:
    """``total`` codes whose counts are ``counts`` scaled to ``total``, each rounded down or up (the units left over
    drawn by the fractional parts, without replacement), in a random order."""
    counts = np.asarray(counts, dtype=np.float64).reshape(-1)
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    scaled = counts * (total / counts.sum())
    whole = np.floor(scaled).astype(np.int64)
    left = total - int(whole.sum())
    if left > 0:
        frac = scaled - whole
        whole[np.random.choice(len(counts), left, replace=False, p=frac / frac.sum())] += 1
    out = np.repeat(np.arange(len(counts)), whole)
    np.random.shuffle(out)
    return out


def _conditional_column(joint: np.ndarray, parents: np.ndarray, total: int) -> np.ndarray:
    """A column drawn for rows whose parents' codes are ``parents`` (total x p) from the model's ``joint`` counts
    (axes: the parents, then the column): within each group of rows sharing their parents' codes, evenly spaced
    points (rank in a random order of the group, plus a uniform jitter, over the group's size) read through the
    column's conditional CDF given those codes."""
    joint = np.asarray(joint, dtype=np.float64)
    given = joint.sum(-1, keepdims=True)
    cdf = np.cumsum(np.divide(joint, given, out=np.zeros_like(joint), where=given != 0), -1)
    groups, which, sizes = np.unique(parents, axis=0, return_inverse=True, return_counts=True)
    which = which.reshape(-1)
    rows = np.argsort(which, kind="stable")
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    for g in range(len(sizes)):
        np.random.shuffle(rows[starts[g]:starts[g] + sizes[g]])
    ranks = np.empty(total, dtype=np.int64)
    ranks[rows] = np.arange(total) - np.repeat(starts, sizes)
    u = (ranks + np.random.rand(total)) / sizes[which]
    out = np.empty(total, dtype=np.int64)
    last = joint.shape[-1] - 1
    for g, key in enumerate(groups):
        members = rows[starts[g]:starts[g] + sizes[g]]
        out[members] = np.minimum(np.searchsorted(cdf[tuple(key)], u[members], side="right"), last)
    return out


class _Factor:
    """A probability table: attributes and an array with one axis each (numpy; post-processing)."""

    def __init__(self, attrs, values):
        self.attrs, self.values = tuple(attrs), np.asarray(values, dtype=np.float64)

    def expand(self, attrs, sizes: dict) -> np.ndarray:
        """The values on ``attrs``' axes (ours transposed into their order, size 1 where an attribute is not ours)."""
        order = [self.attrs.index(a) for a in attrs if a in self.attrs]
        v = np.transpose(self.values, order) if order else self.values
        return v.reshape([sizes[a] if a in self.attrs else 1 for a in attrs])

    def reduce(self, keep, fn=np.sum) -> "_Factor":
        axes = tuple(k for k, a in enumerate(self.attrs) if a not in keep)
        return _Factor([a for a in self.attrs if a in keep], fn(self.values, axis=axes) if axes else self.values)


class ModelMarginals:
    """Any 1- or 2-way marginal of an mbi graphical model, exactly, in numpy (post-processing).

    mbi's ``model.project`` compiles one JAX program per (model cliques, query) pair, and AIM's selection asks for
    every candidate after every round: on adult that was about 1.7 s a candidate, most of a round. Here the model's
    junction tree is calibrated once (Hugin message passing in log space), and a pair (a, b) in no common clique
    is carried along the tree's path from the clique holding a nearest to one holding b: P(a, S) times each next
    clique's conditional P(C | S_in), summed down to (a, S_out), ending on (a, b). Nothing is compiled."""

    def __init__(self, model):
        lib = mbi()
        pot = model.potentials
        dom = pot.domain
        self.total = float(model.total)
        self.sizes = {a: dom.size(a) for a in dom.attributes}
        self.tree, self.order = lib.junction_tree.make_junction_tree(dom, pot.cliques)
        cliques = lib.junction_tree.maximal_cliques(self.tree)
        logb = {c: np.zeros([self.sizes[a] for a in c]) for c in cliques}
        for cl in pot.cliques:
            host = next(c for c in cliques if set(cl) <= set(c))
            logb[host] = logb[host] + _Factor(cl, pot[cl].values).expand(host, self.sizes)
        messages = {}
        for i, j in lib.junction_tree.message_passing_order(self.tree):
            tau = logb[i] - messages[(j, i)].expand(i, self.sizes) if (j, i) in messages else logb[i]
            messages[(i, j)] = _Factor(i, tau).reduce(set(i) & set(j), logsumexp)
            logb[j] = logb[j] + messages[(i, j)].expand(j, self.sizes)
        self.beliefs = {c: _Factor(c, np.exp(v - logsumexp(v))) for c, v in logb.items()}

    def __call__(self, clique) -> np.ndarray:
        """The model's counts on ``clique`` (1 or 2 attributes), flattened in the clique's order."""
        clique = tuple(clique)
        return self.total * self._probabilities(clique).reshape(-1)

    def inside_a_clique(self, clique) -> np.ndarray:
        """The model's counts on ``clique`` (attributes inside one of the junction tree's cliques), one axis per
        attribute in ``clique``'s order; refused otherwise."""
        probabilities = self._inside(tuple(clique))
        if probabilities is None:
            raise InvalidParameterError(f"{clique} lies in no clique of the model's junction tree.")
        return self.total * probabilities

    def _inside(self, clique) -> np.ndarray | None:
        for c, f in self.beliefs.items():
            if set(clique) <= set(c):
                return f.reduce(set(clique)).expand(clique, self.sizes)
        return None

    def _probabilities(self, clique) -> np.ndarray:
        sizes, bel = self.sizes, self.beliefs
        inside = self._inside(clique)
        if inside is not None:
            return inside
        if len(clique) != 2:
            raise InvalidParameterError(f"ModelMarginals answers 1- and 2-way queries (asked {clique}).")
        a, b = clique
        best = None
        for x in (c for c in bel if a in c):
            lengths = nx.single_source_shortest_path_length(self.tree, x)
            for y in (c for c in bel if b in c):
                if y in lengths and (best is None or lengths[y] < best[0]):
                    best = (lengths[y], x, y)
        if best is None:                                  # a and b in different components: independent
            pa, pb = (next(f for c, f in bel.items() if v in c).reduce({v}).values for v in (a, b))
            return np.outer(pa, pb)
        path = nx.shortest_path(self.tree, best[1], best[2])   # a only in the first clique, b only in the last
        sep = set(path[0]) & set(path[1])
        cur = bel[path[0]].reduce(sep | {a})
        for k in range(1, len(path)):
            c, f = path[k], bel[path[k]]
            keep = set(c) & set(path[k + 1]) if k + 1 < len(path) else {b}
            marg = f.reduce(sep).expand(c, sizes)
            cond = f.values / np.where(marg > 0, marg, 1.0)
            attrs = (a,) + c
            cur = _Factor(attrs, cur.expand(attrs, sizes) * cond[None]).reduce(keep | {a})
            sep = keep
        return cur.expand((a, b), sizes)
