"""Rows reweighted to match released statistics (post-processing: reads released tensors and public rows only).

A pool of N public rows (drawn from a model of a release) and several released statistics, each a mean of per-row
vectors plus Gaussian noise of a known std (a class-conditional kernel embedding, measured marginals, class
proportions). The weights w on the simplex minimise the whitened residual

    F(w) = sum_b || sum_i w_i a_b(x_i) - t_b ||^2 / s_b^2

(each block b: the rows' vectors a_b, the released target t_b, its noise std s_b per entry): the Gaussian
log-likelihood of the given releases (in the hybrid: the kernel embedding and the measured marginals) under the
reweighted pool. At the truth F is about the number of released entries
(each whitened noise entry has variance 1), so fitting below that fits noise: the iterations stop there (the
discrepancy principle), or after ``steps``; with ``stall=True`` also when ``STALL_WINDOW`` iterations together lower F
by less than F's own standard deviation at the truth, sqrt(2 x entries) (a chi-square's: the releases cannot tell
that progress from noise. On epileptic's 178 numeric columns the kernel embedding's residual stays above its noise
level, and the 100 iterations that chase it concentrate the weights on 3 % of the pool and worsen the 2- and 3-way
marginals; on census the same rule stops iterations that would have reached the noise level). The weights are a
softmax of free logits, minimised by L-BFGS from
uniform weights (:func:`reweight`); exponentiated gradient (mirror descent with the entropy, :func:`reweight_eg`) is
the slower first-order alternative (adult at eps 10: L-BFGS reaches the kernel embedding's noise level in 71
iterations, 20 s, where 1,000 exponentiated-gradient steps, 322 s, leave it 1.2x above).

The rows' vectors are one sparse matrix (one-hots, a few non-zeros a row; scipy CSR) and one dense float32 block
(columns that most rows touch: random Fourier features), class-conditional blocks as ``phi(x_i) e_{y_i}^T``."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import minimize


#: with ``stall``: iterations over which F must fall by at least its standard deviation at the truth, or the
#: reweighting stops
STALL_WINDOW = 10


@dataclass
class Targets:
    """The pooled rows' statistics and the released targets, every column already divided by its noise std."""

    dense: np.ndarray | None          # (N, Dd) float32, class-conditional: column block chosen by ``labels``
    labels: np.ndarray | None         # (N,) int64: each row's class, for the dense block
    n_classes: int
    dense_target: np.ndarray | None   # (Dd, C) float64
    sparse: sp.csr_matrix = field(repr=False, default=None)   # (N, Ds) float64
    sparse_target: np.ndarray | None = None                   # (Ds,) float64
    entries: int = 0                  # released entries in all blocks: F's expected value at the truth
    #: (name, sparse column start, stop, entries, with the dense block): each group of releases, stopped on by itself
    groups: tuple = ()
    #: where the dense and the sparse kernel columns sit in the release's embedding (rows of its (D, C) layout)
    dense_cols: np.ndarray | None = None
    sparse_cols: np.ndarray | None = None
    #: (class, start, stop) of each class's rows when every class's rows are one run (the hybrid orders its pool by
    #: class): the dense block is then read once per pass, class by class (matrix-vector products), not as an (N, C)
    #: product; None otherwise
    runs: list | None = field(init=False, repr=False, default=None)

    def __post_init__(self):
        if self.dense is not None and len(self.labels):
            starts = np.r_[0, np.nonzero(np.diff(self.labels))[0] + 1]
            if len(np.unique(self.labels[starts])) == len(starts):
                stops = np.r_[starts[1:], len(self.labels)]
                self.runs = [(int(self.labels[a]), int(a), int(b)) for a, b in zip(starts, stops)]

    def statistics(self, w: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(sum_i w_i dense_i e_{y_i}^T, sum_i w_i sparse_i)."""
        d = s = None
        if self.runs is not None:      # torch's matrix-vector products: 1.3x numpy's on the transposed block here
            dense, w32 = torch.from_numpy(self.dense), torch.from_numpy(w.astype(np.float32))
            d = np.zeros((self.dense.shape[1], self.n_classes))
            for c, a, b in self.runs:
                d[:, c] = torch.mv(dense[a:b].T, w32[a:b]).numpy()
        elif self.dense is not None:
            W = np.zeros((len(w), self.n_classes), dtype=np.float32)
            W[np.arange(len(w)), self.labels] = w
            d = (W.T @ self.dense).T.astype(np.float64)
        if self.sparse is not None:
            s = self.sparse.T @ w
        return d, s

    def residual(self, w: np.ndarray):
        d, s = self.statistics(w)
        rd = None if d is None else d - self.dense_target
        rs = None if s is None else s - self.sparse_target
        f = (0.0 if rd is None else float((rd ** 2).sum())) + (0.0 if rs is None else float((rs ** 2).sum()))
        return f, rd, rs

    def within_noise(self, rd, rs) -> bool:
        """Whether every group's residual is at most its released entries (each group at its noise level: the
        discrepancy principle per release); without groups, the whole residual against all entries."""
        if not self.groups:
            f = (0.0 if rd is None else float((rd ** 2).sum())) + (0.0 if rs is None else float((rs ** 2).sum()))
            return f <= self.entries
        for _, start, stop, entries, with_dense in self.groups:
            f = float((rs[start:stop] ** 2).sum()) if rs is not None else 0.0
            if with_dense and rd is not None:
                f += float((rd ** 2).sum())
            if f > entries:
                return False
        return True

    @property
    def n_rows(self) -> int:
        """N, the pooled rows."""
        return len(self.labels) if self.labels is not None else self.sparse.shape[0]

    def inner(self, rd, rs) -> np.ndarray:
        """<a(x_i), r> for every row, (N,) float64."""
        out = np.zeros(self.n_rows)
        if rd is not None and self.runs is not None:
            dense, r32 = torch.from_numpy(self.dense), torch.from_numpy(np.ascontiguousarray(rd.T, dtype=np.float32))
            for c, a, b in self.runs:
                out[a:b] += torch.mv(dense[a:b], r32[c]).numpy()
        elif rd is not None:
            prod = self.dense @ rd.astype(np.float32)
            out += prod[np.arange(len(out)), self.labels]
        if rs is not None:
            out += self.sparse @ rs
        return out

    def max_row_norm2(self) -> float:
        n = 0.0
        if self.dense is not None:
            n += float(np.einsum("ij,ij->i", self.dense, self.dense).max())
        if self.sparse is not None:
            n += float(np.asarray(self.sparse.multiply(self.sparse).sum(1)).max())
        return n


@dataclass
class Fit:
    weights: np.ndarray
    objective: list
    entries: int
    steps: int
    stopped: str

    @property
    def effective_fraction(self) -> float:
        """The effective sample size over N (1: uniform weights)."""
        return float(1.0 / (self.weights ** 2).sum()) / len(self.weights)


def _softmax(z: np.ndarray) -> np.ndarray:
    w = np.exp(z - z.max())
    return w / w.sum()


def reweight(t: Targets, *, steps: int, stall: bool = False, progress=False) -> Fit:
    """Weights on the simplex minimising F (module doc): w = softmax(z), L-BFGS on the logits z from uniform
    weights (the gradient in z: w * (g - <w, g>), g = dF/dw), until every group of releases is fitted to its noise
    level (:meth:`Targets.within_noise`, the discrepancy principle, checked after each iteration), with ``stall``
    until the last ``STALL_WINDOW`` iterations lowered F by less than sqrt(2 x entries) ("stalled"), or after
    ``steps`` iterations; a line search that finds no decrease ends it as converged. ``progress``: a bar of the
    iterations on a terminal (:func:`~mmdsynth.runtime.phases_shown`; False: none)."""
    from tqdm import tqdm

    from ..runtime import phases_shown

    bar = tqdm(total=max(int(steps), 0), disable=not phases_shown(progress),
               desc="reweighting the pool toward the releases", unit="step", leave=True)
    z0 = np.zeros(t.n_rows)
    f0, rd, rs = t.residual(_softmax(z0))
    fitted = t.within_noise(rd, rs)
    if fitted or steps < 1:
        bar.close()
        return Fit(_softmax(z0), [f0], int(t.entries), 0, "discrepancy" if fitted else "steps")
    last: dict = {}

    def objective(z):
        w = _softmax(z)
        f, rd, rs = t.residual(w)
        g = 2.0 * t.inner(rd, rs)
        last.update(z=z.copy(), f=f, r=(rd, rs))
        return f, w * (g - w @ g)

    trace, stop = [f0], []
    floor = math.sqrt(2.0 * t.entries)

    def each_iteration(intermediate_result):
        bar.update(1)
        z = intermediate_result.x
        if np.array_equal(z, last["z"]):
            f, r = last["f"], last["r"]
        else:
            f, *r = t.residual(_softmax(z))
        trace.append(float(f))
        if t.within_noise(*r):
            stop.append("discrepancy")
            raise StopIteration
        if stall and len(trace) > STALL_WINDOW and trace[-1 - STALL_WINDOW] - trace[-1] < floor:
            stop.append("stalled")
            raise StopIteration

    try:
        res = minimize(objective, z0, jac=True, method="L-BFGS-B", callback=each_iteration,
                       options={"maxiter": int(steps), "maxfun": 3 * int(steps) + 20, "maxcor": 10, "ftol": 0.0,
                                "gtol": 0.0})
    finally:
        bar.close()
    stopped = stop[0] if stop else ("steps" if len(trace) - 1 >= steps else "converged")
    return Fit(_softmax(res.x), trace, int(t.entries), len(trace) - 1, stopped)


def reweight_eg(t: Targets, *, steps: int) -> Fit:
    """F's minimiser by exponentiated gradient from uniform weights (the step grown after a decrease and halved, the
    step retried, otherwise), until every group of releases is fitted to its noise level or after ``steps`` gradient
    steps: the first-order alternative to :func:`reweight`, kept for comparisons."""
    n = t.n_rows
    logw = np.full(n, -math.log(n))
    f, rd, rs = t.residual(np.exp(logw))
    trace, eta = [f], 1.0 / (2.0 * max(t.max_row_norm2(), 1e-12))
    stopped, k = "steps", 0
    for k in range(1, steps + 1):
        if t.within_noise(rd, rs):
            stopped, k = "discrepancy", k - 1
            break
        grad = 2.0 * t.inner(rd, rs)
        while True:
            new = logw - eta * grad
            new -= np.logaddexp.reduce(new)
            f_new, rd_new, rs_new = t.residual(np.exp(new))
            if f_new <= f or eta < 1e-12:
                break
            eta /= 2
        if f_new > f:                       # no step decreases F: a (numerical) minimum, keep the weights
            stopped, k = "converged", k - 1
            break
        logw, f, rd, rs = new, f_new, rd_new, rs_new
        eta *= 1.5
        trace.append(f)
    else:
        if t.within_noise(rd, rs):
            stopped = "discrepancy"
    return Fit(np.exp(logw), trace, int(t.entries), k, stopped)


def systematic(w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` indices drawn by systematic resampling of weights ``w`` (one uniform offset from ``rng``)."""
    u = (rng.random() + np.arange(n)) / n
    c = np.cumsum(w / w.sum())
    c[-1] = 1.0
    return np.searchsorted(c, u, side="right").clip(0, len(w) - 1)
