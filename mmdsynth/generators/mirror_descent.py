"""The graphical model's mirror descent in numpy (post-processing of a release; nothing here reads private rows).

The same estimator as mbi 2.x's ``MirrorDescent`` with its Armijo line search (Algorithm 1 of McKenna, Sheldon,
Miklau 2019): the potentials on the measurements' maximal cliques, the step size ``2 / (L * total)`` with mbi's
Lipschitz constant, grown by 1.01 on a step of sufficient decrease and halved otherwise, the steps run in blocks of
:data:`BLOCK`, the loss ``0.5 * sum ||(Q mu - y) / std||^2``. mbi compiles the step with XLA for each model: on the
small models of the marginal methods (a tree of pairs, a few triangles) the compile is most of the fit (about 2.4 s
of a 5 s fit on a 3,700-row table, 7 s on adult) and the steps are a few hundred microseconds here. So each step
is written as a handful of array operations: the loss and its gradient as one sparse matrix over the flat marginals,
the potentials spread onto the junction tree's cliques by another, and the tree calibrated in probability space,
each message scaled by its largest value (sum-product with the collect pass's products kept for the distribute
pass); in log space, as mbi does, where potentials far apart make all of a clique's products underflow. The
iterates are the same up to rounding (a near-tie of the line search can fall the other way), so the
model is the one mbi would give to the precision its iterations reach.
"""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import scipy.sparse as sp

#: steps run in blocks of this many (mbi's ``CALLBACK_EVERY``): ``iters`` rounds up to a multiple, as in mbi
BLOCK = 50


class _Layout:
    """Cliques laid end to end in one flat vector: each clique's slice and shape."""

    def __init__(self, cliques, sizes: dict):
        self.cliques, self.sizes = list(cliques), sizes
        self.shapes = [tuple(sizes[a] for a in c) for c in self.cliques]
        cells = [int(np.prod(s)) for s in self.shapes]
        self.starts = np.concatenate([[0], np.cumsum(cells)]).astype(np.int64)
        self.size = int(self.starts[-1])

    def views(self, flat: np.ndarray) -> list[np.ndarray]:
        return [flat[a:b].reshape(s) for a, b, s in zip(self.starts[:-1], self.starts[1:], self.shapes)]

    def host(self, clique) -> int:
        """The first clique holding every attribute of ``clique``."""
        for k, c in enumerate(self.cliques):
            if set(clique) <= set(c):
                return k
        raise ValueError(f"no clique of the model holds {tuple(clique)}")

    def cell_map(self, k: int, clique) -> np.ndarray:
        """For each cell of clique ``k`` (flat, C order), the index of its cell in ``clique``'s flat table."""
        host = self.cliques[k]
        grid = np.indices(self.shapes[k]).reshape(len(host), -1)
        if not clique:
            return np.zeros(grid.shape[1], dtype=np.int64)
        return np.ravel_multi_index([grid[host.index(a)] for a in clique], [self.sizes[a] for a in clique])


class _Calibration:
    """The junction tree's clique marginals from its potentials: one collect pass to a root per component, one
    distribute pass back, in probability space (each clique's potential shifted by its largest value, each message
    by its own), so a step is about ten array operations per edge."""

    def __init__(self, jtree: nx.Graph, layout: _Layout):
        self.layout = layout
        index = {c: k for k, c in enumerate(layout.cliques)}
        self.post, self.parent = [], {}
        for part in nx.connected_components(jtree):
            root = min(part, key=index.get)
            self.post += [index[c] for c in nx.dfs_postorder_nodes(jtree, root)]
            self.parent.update({index[b]: index[a] for a, b in nx.dfs_edges(jtree, root)})
        self.children = {k: [] for k in range(len(layout.cliques))}
        for k, p in self.parent.items():
            self.children[p].append(k)
        self.up = {k: self._message(k, p) for k, p in self.parent.items()}
        self.down = {k: self._message(p, k) for k, p in self.parent.items()}
        self.counts = np.diff(layout.starts)

    def _message(self, src: int, dst: int):
        """How a message from clique ``src`` to ``dst`` is made: the axes summed, the separator's axes put in
        ``dst``'s order, and its shape broadcast on ``dst``."""
        a, b = self.layout.cliques[src], self.layout.cliques[dst]
        sep = [x for x in a if x in b]                           # in a's order, as the sum leaves them
        perm = tuple(sep.index(x) for x in b if x in sep)
        return (tuple(k for k, x in enumerate(a) if x not in sep),
                None if perm == tuple(range(len(perm))) else perm,
                tuple(self.layout.sizes[x] if x in sep else 1 for x in b))

    @staticmethod
    def _send(x: np.ndarray, how) -> np.ndarray:
        axes, perm, shape = how
        m = x.sum(axis=axes) if axes else x
        if perm is not None:
            m = m.transpose(perm)
        m = m.reshape(shape)
        return m / m.max()

    @staticmethod
    def _send_logs(x: np.ndarray, how) -> np.ndarray:
        """:meth:`_send` in log space."""
        from scipy.special import logsumexp

        axes, perm, shape = how
        m = logsumexp(x, axis=axes) if axes else x
        m = (m.transpose(perm) if perm is not None else m).reshape(shape)
        return m - m.max()

    def _beliefs(self, psi: list, times, send, over) -> dict:
        """The collect and distribute passes over the potentials ``psi``: ``times`` combines two factors, ``send``
        makes a message (:meth:`_message`), ``over`` takes a child's message out of its parent's belief (in
        probability space a product, a sum and a quotient; in log space a sum, a log-sum-exp and a difference)."""
        up, prod = {}, {}
        for k in self.post:
            x = psi[k]
            for c in self.children[k]:
                x = times(x, up[c])
            prod[k] = x
            if k in self.parent:
                up[k] = send(x, self.up[k])
        belief = {}
        for k in reversed(self.post):
            b = prod[k]
            if k in self.parent:
                b = times(b, send(over(belief[self.parent[k]], up[k]), self.down[k]))
            belief[k] = b
        return belief

    def __call__(self, theta: np.ndarray, total: float) -> np.ndarray:
        """The flat clique marginals (each summing to ``total``) of the flat potentials ``theta``."""
        lay = self.layout
        top = np.maximum.reduceat(theta, lay.starts[:-1])
        psi = lay.views(np.exp(theta - np.repeat(top, self.counts)))
        with np.errstate(divide="ignore", invalid="ignore"):   # an underflowed product: checked below
            belief = self._beliefs(psi, np.multiply, self._send, lambda b, u: b / np.maximum(u, 1e-300))
        sums = [float(belief[k].sum()) for k in range(len(lay.cliques))]
        if not all(math.isfinite(t) and t > 0 for t in sums):  # a clique's products all underflowed: exact in logs
            return self._in_logs(theta, total)
        return np.concatenate([(belief[k] * (total / t)).reshape(-1) for k, t in enumerate(sums)])

    def _in_logs(self, theta: np.ndarray, total: float) -> np.ndarray:
        """The same passes in log space, where no product underflows (as mbi calibrates): used where the potentials
        are so far apart that a clique's belief is zero in probability space, which would make the step's loss NaN
        and the line search reject a step mbi takes."""
        from scipy.special import logsumexp

        with np.errstate(invalid="ignore"):                    # -inf - -inf where the separator has no mass
            belief = self._beliefs(self.layout.views(theta), np.add, self._send_logs,
                                   lambda b, u: np.where(np.isneginf(u), -np.inf, b - u))
        return np.concatenate([(np.exp(belief[k] - logsumexp(belief[k])) * total).reshape(-1)
                               for k in range(len(self.layout.cliques))])


def estimate(lib, jtree: nx.Graph, sizes: dict, measurements: list, total: float, iters: int,
             warm_start: dict | None = None):
    """Mirror descent over the junction tree ``jtree`` (mbi's, of the measurements' maximal cliques) on
    ``measurements`` [(clique, y, std, weights or None)] (``y`` already whitened by ``weights``: the query is
    ``weights * counts``) over a domain of ``sizes`` ({attribute: cells}), with ``total`` known; ``warm_start``:
    {clique: potential} of an earlier model (each clique inside one of this model's). Returns (cliques,
    potentials, marginals): the measurements' maximal cliques, mbi's order, and on each its potential and its
    marginal counts (numpy)."""
    cliques = [tuple(c) for c in lib.clique_utils.maximal_subset([tuple(m[0]) for m in measurements])]
    mbi_domain = lib.Domain.fromdict(sizes)
    loss_l, tree_l = _Layout(cliques, sizes), _Layout(lib.junction_tree.maximal_cliques(jtree), sizes)
    calibrate = _Calibration(jtree, tree_l)
    # E: the potentials on the loss's cliques spread onto the tree's (each on the first tree clique holding it);
    # its transpose sums the tree's marginals down to the loss's cliques
    rows, cols = [], []
    for k, c in enumerate(cliques):
        j = tree_l.host(c)
        rows.append(tree_l.starts[j] + np.arange(tree_l.starts[j + 1] - tree_l.starts[j]))
        cols.append(loss_l.starts[k] + tree_l.cell_map(j, c))
    spread = sp.csr_matrix((np.ones(sum(len(r) for r in rows)), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(tree_l.size, loss_l.size))
    down = spread.T.tocsr()
    # A: each measurement's query (weights / std on its cells) of its first host among the loss's cliques
    rows, cols, vals, b, lms, start = [], [], [], [], [], 0
    for clique, y, std, weights in measurements:
        k = loss_l.host(clique)
        std = max(float(std), 1e-12)
        at = loss_l.cell_map(k, clique)
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
        rows.append(start + at)
        cols.append(loss_l.starts[k] + np.arange(len(at)))
        vals.append(w[at] / std)
        b.append(y / std)
        start += len(y)
        lms.append(lib.LinearMeasurement(y, tuple(clique), std, query=(
            lib.marginal_loss.WeightedQuery(w) if weights is not None else lib.marginal_loss.DatavectorQuery())))
    A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(start, loss_l.size))
    AT, A_tree, b = A.T.tocsr(), (A @ down).tocsr(), np.concatenate(b)
    lipschitz = lib.marginal_loss.calculate_l2_lipschitz_from_metadata(mbi_domain, lms)

    theta = np.zeros(loss_l.size)
    for c, v in (warm_start or {}).items():
        k = loss_l.host(c)
        theta[loss_l.starts[k]:loss_l.starts[k + 1]] += np.asarray(v, dtype=np.float64).reshape(-1)[
            loss_l.cell_map(k, tuple(c))]
    alpha = 2.0 / (lipschitz * total)
    mu = calibrate(spread @ theta, total)
    d = A_tree @ mu - b
    for _ in range(math.ceil(iters / BLOCK) * BLOCK):
        grad = AT @ d
        trial = theta - alpha * grad
        mu2 = calibrate(spread @ trial, total)
        d2 = A_tree @ mu2 - b
        if 0.5 * (d @ d - d2 @ d2) >= 0.5 * alpha * float(grad @ (down @ (mu - mu2))):
            theta, mu, d, alpha = trial, mu2, d2, 1.01 * alpha
        else:
            alpha = 0.5 * alpha
    return cliques, loss_l.views(theta), loss_l.views(down @ mu)
