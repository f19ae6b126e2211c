"""The statistic of a DP-SGD step: each drawn record's KIP gradient, made finite, clipped and summed
(:class:`ClippedGradientSums`; :func:`~mmdsynth.privacy.dpsgd.private_gradient` runs it through the engine's step).
Two exact ways to the sum: the ``torch.func`` reference (:func:`clipped_gradients`, any kernel) and the closed,
factored form below (FC ReLU NTK only; the default).

Per-record KIP gradients in closed, factored form: the fast path of the DP-SGD step.

For one target record (x_t, y_t) the KIP loss is L = 0.5 mean_c (k alpha - y_t)^2 with
k = K(x_t, X) (1 x m), alpha = (K_ss + lambda tr(K_ss)/m I)^-1 Y_s. Its cotangents are

    r = (k alpha - y_t) / n_classes,   c = alpha r   (dL/dk, m),   b = K_reg^-1 k^T   (m),
    dL/dK_ss = -b c^T - (lambda/m) (b . c) I.

The FC ReLU NTK is an element-wise function F(S, s1, s2) of S = a' <x, x'> + b_std^2 and the
rows' / columns' s = a' |x|^2 + b_std^2 (a' = W_std^2 / d), so with its element-wise partials
P, Q1, Q2 (support x support) and P', Q2' (target x support) the record's gradient w.r.t. the
support inputs X (m x d) is exactly

    g = R X + v x_t^T,
    R = -a' (D_b P D_c + D_c P^T D_b) + D_u,       v = a' c * P'_t,
    u = -2a' (b * (Q1 c) + c * (Q2^T b)) - (lambda/m)(b . c) t + 2a' c * Q2'_t,
    t = 2a' (diag P + diag Q1 + diag Q2)            (the gradient of tr K_ss is D_t X),

an m x m matrix and an m vector per record instead of an m x d gradient. Its norm needs only
G = X X^T and h = X x_t:  |g|^2 = tr(R G R^T) + |v|^2 |x_t|^2 + 2 v^T R h,  and the clipped
sum is (sum_i w_i R_i) X + sum_i w_i v_i x_t,i^T with w_i = min(1, C / |g_i|). Cost per step
O(B m^3 + B m d) instead of O(B m^2 d), in float64. Every rule is applied to each record on
its own (clip; a record whose factors or norm are not finite contributes 0), so adding or
removing one record moves the sum by at most C, as for the ``torch.func`` reference
(:func:`clipped_gradients`), which the tests compare it with.

**When the closed form is not trusted.** The norm formula subtracts large terms when the support
set is ill-conditioned (support points that coincide, e.g. a public start of one image repeated,
make K_reg nearly singular: R's entries reach 1e3-1e4 while |g| is 1e-3). Its result can then be
wrong by orders of magnitude or <= 0, and the old code added such a record unclipped (851 C on
digits at lambda 1e-7). Each record's formula is therefore checked against a cancellation-free
magnitude of everything it sums, M^2 = |R|abs|_F^2 |X|_F^2 + |v|^2 |x_t|^2 (|R|abs the entrywise
absolute terms that form R): if |g|^2 < TRUST M^2 the record's gradient is formed explicitly
(R X + v x_t^T, an m x d matrix), clipped by :func:`~mmdsynth.statistics.bounds.bounded_rows` and
added as it is, so its contribution is <= C by construction whatever the rounding. Above the
threshold the formula's relative error is below ~m u / TRUST (u = 2^-53) and the sum's rounding
below u C / sqrt(TRUST), both negligible. Benign support sets never take the explicit path.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch.func import grad, vmap

from ..kip.kernels import FCReLUKernel
from ..kip.krr import centred_one_hot, krr_loss, ridge_cholesky, to_kernel_space
from ..validation import check_features, check_labels
from .bounds import bounded_rows
from .rows import kept, unweighted

CHUNK_BYTES = 64 * 2 ** 20          # bound on the (records x m x m) float64 factors held at once
#: |g|^2 below TRUST x (the magnitude of its terms)^2: the closed-form norm may have cancelled;
#: such a record's gradient is formed explicitly and clipped as it is
TRUST = 1e-6


def _support_terms(kernel: FCReLUKernel, x_s, y_s, reg: float) -> dict:
    """Everything that depends on the support set only (public within a step)."""
    m, d = x_s.shape
    a = kernel.W_std ** 2 / d
    k_ss, p, q1, q2 = kernel.ntk_partials(x_s)
    chol = ridge_cholesky(k_ss, reg)
    return {"a": a, "m": m, "reg": reg, "X": x_s, "P": p, "Q1": q1, "Q2": q2, "chol": chol,
            "alpha": torch.cholesky_solve(y_s, chol), "G": x_s @ x_s.T,
            "t": 2 * a * (p.diagonal() + q1.diagonal() + q2.diagonal())}


def per_record_factors(kernel: FCReLUKernel, s: dict, x_t, y_t):
    """(b, c, u, v) of each target record (B, m) each: its gradient is R X + v x_t^T with
    R = -a' (D_b P D_c + D_c P^T D_b) + D_u."""
    a, m = s["a"], s["m"]
    k_ts, p_t, _, q2_t = kernel.ntk_partials(x_t, s["X"])
    r = (k_ts @ s["alpha"] - y_t) / y_t.shape[1]
    c = r @ s["alpha"].T
    b = torch.cholesky_solve(k_ts.T, s["chol"]).T
    trace_coef = -(s["reg"] / m) * (b * c).sum(1, keepdim=True)
    u = -2 * a * (b * (c @ s["Q1"].T) + c * (b @ s["Q2"])) + trace_coef * s["t"] + 2 * a * c * q2_t
    return b, c, u, a * c * p_t


def gradient_matrices(s: dict, b, c, u) -> torch.Tensor:
    """R (B, m, m) of each record (symmetric: D_c P^T D_b is the transpose of D_b P D_c)."""
    R = b[:, :, None] * (s["P"] * (-s["a"] * c)[:, None, :])
    R = R + R.transpose(1, 2)
    R.diagonal(dim1=1, dim2=2).add_(u)
    return R


def magnitude_matrices(s: dict, b, c, u) -> torch.Tensor:
    """The entrywise absolute values of the terms that form each R (B, m, m): a cancellation-free
    bound on every product the closed form and the sum compute."""
    A = (b.abs()[:, :, None] * (s["P"].abs() * (s["a"] * c.abs())[:, None, :]))
    A = A + A.transpose(1, 2)
    A.diagonal(dim1=1, dim2=2).add_(u.abs())
    return A


def squared_norms(s: dict, R, v, x_t) -> torch.Tensor:
    """|R X + v x_t^T|^2 per record = tr(R G R^T) + |v|^2 |x_t|^2 + 2 v^T R (X x_t)."""
    B, m = v.shape
    RG = R @ s["G"]
    quad = torch.bmm(RG.reshape(B, 1, m * m), R.reshape(B, m * m, 1)).reshape(B)
    h = x_t @ s["X"].T
    return quad + (v * v).sum(1) * (x_t * x_t).sum(1) + 2 * (v * (R @ h[:, :, None])[..., 0]).sum(1)


def factored_clipped_sum(kernel: FCReLUKernel, x_s, y_s, x_b, y_b, reg: float, clip: float,
                         weights: torch.Tensor | None = None) -> torch.Tensor:
    """Sum over the batch of the per-record KIP gradients w.r.t. ``x_s``, each made finite and
    clipped to norm <= ``clip`` (then times its ``weights`` entry, in [0, 1], when given: a person's rows
    at 1 / their count): equal (to float64 rounding) to summing :func:`clipped_gradients`,
    without forming them. Returns float64 (m, d)."""
    x_s, y_s = x_s.detach().double(), y_s.double()
    x_b, y_b = x_b.reshape(x_b.shape[0], -1).double(), y_b.double()
    rows = torch.ones(x_b.shape[0], dtype=torch.float64, device=x_b.device) if weights is None else \
        torch.as_tensor(weights, dtype=torch.float64, device=x_b.device)
    s = _support_terms(kernel, x_s, y_s, reg)
    m = s["m"]
    bc_sum = torch.zeros_like(s["G"])                 # sum_i w_i b_i c_i^T
    u_sum = torch.zeros(m, dtype=torch.float64, device=x_s.device)
    total = torch.zeros_like(x_s)
    chunk = max(1, CHUNK_BYTES // (8 * m * m))
    for start in range(0, x_b.shape[0], chunk):
        x_t, y_t, r_t = x_b[start:start + chunk], y_b[start:start + chunk], rows[start:start + chunk]
        ok = torch.isfinite(x_t).all(1) & torch.isfinite(y_t).all(1)
        b, c, u, v = per_record_factors(kernel, s, x_t, y_t)
        for f in (b, c, u, v):
            ok &= torch.isfinite(f).all(1)
        b, c, u, v, x_t = (torch.where(ok[:, None], f, 0.0) for f in (b, c, u, v, x_t))
        R = gradient_matrices(s, b, c, u)
        norm2 = squared_norms(s, R, v, x_t)
        scale2 = (magnitude_matrices(s, b, c, u).square().sum((1, 2)) * s["G"].diagonal().sum()
                  + (v * v).sum(1) * (x_t * x_t).sum(1))
        ok &= torch.isfinite(norm2) & torch.isfinite(scale2)
        exact = ok & (norm2 < TRUST * scale2)          # the closed-form norm may have cancelled
        fast = ok & ~exact
        w = (torch.where(fast, torch.clamp(clip / norm2.clamp_min(0).sqrt(), max=1.0), 0.0) * r_t)[:, None]
        bc_sum += (w * b).T @ c
        u_sum += (w * u).sum(0)
        total += (w * v).T @ x_t
        if bool(exact.any()):
            total += explicit_clipped_sum(s, R[exact], v[exact], x_t[exact], clip, r_t[exact])
    n = -s["a"] * bc_sum * s["P"]
    return (n + n.T + torch.diag(u_sum)) @ x_s + total


def explicit_clipped_sum(s: dict, R, v, x_t, clip: float, weights: torch.Tensor) -> torch.Tensor:
    """Weighted sum of the records' gradients R X + v x_t^T formed explicitly, each clipped as it is
    (norm <= ``clip`` by construction; a non-finite one contributes 0)."""
    g = R @ s["X"] + v[:, :, None] * x_t[:, None, :]
    return (weights[:, None] * bounded_rows(g.reshape(g.shape[0], -1), clip)).sum(0).reshape(s["X"].shape)


def clipped_gradients(kernel, x_s: torch.Tensor, y_s: torch.Tensor, x_b: torch.Tensor, y_b: torch.Tensor,
                      reg: float, clip: float) -> torch.Tensor:
    """(B, *x_s.shape) per-record gradients of the KIP loss w.r.t. ``x_s``, each made finite (a
    non-finite one becomes 0) and clipped to norm <= ``clip``."""
    def loss_one(xs, xt, yt):
        return krr_loss(kernel, xs, y_s, xt[None], yt[None], reg)

    g = vmap(grad(loss_one), in_dims=(None, 0, 0))(x_s, x_b, y_b)
    return bounded_rows(g.reshape(g.shape[0], -1), clip).reshape(g.shape)


def person_rows(persons, chosen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the rows one DP-SGD step reads, their weights): the sampled records themselves (weights None), or with a
    person as the unit every row of each sampled person, weighted by 1 / that person's rows."""
    if persons is None:
        return chosen, None
    rows = np.flatnonzero(np.isin(persons.codes, chosen.numpy()))
    return torch.from_numpy(rows), torch.from_numpy(persons.data.weights[rows])


def clipped_sum(kernel, x_s, y_s, x_b, y_b, reg: float, clip: float, *, factored: bool = True,
                weights: torch.Tensor | None = None) -> torch.Tensor:
    """Sum of the clipped per-record gradients, each times its ``weights`` entry when given (zeros for an
    empty batch). Without noise this is NOT private: the engine's step
    (:func:`~mmdsynth.privacy.dpsgd.private_gradient`, through :class:`ClippedGradientSums`) is the only caller on
    private data.
    ``factored=False`` (or a kernel other than the FC ReLU NTK) uses the torch.func reference."""
    if not x_b.shape[0]:
        return torch.zeros_like(x_s)
    if factored and isinstance(kernel, FCReLUKernel):
        return factored_clipped_sum(kernel, x_s, y_s, x_b, y_b, reg, clip, weights)     # float64
    g = clipped_gradients(kernel, x_s.detach(), y_s, x_b.to(x_s.dtype), y_b.to(x_s.dtype), reg, clip)
    if weights is not None:
        g = g * torch.as_tensor(weights, dtype=g.dtype, device=g.device).reshape(-1, *([1] * (g.dim() - 1)))
    return g.sum(0)


class ClippedGradientSums:
    """The statistic of one DP-SGD step, for :meth:`~mmdsynth.privacy.engine.PrivacyEngine.step`: given the records
    the engine drew (indices into ``x_all`` / ``y_all``; with a person as the unit, ``persons``, the rows'
    :class:`~mmdsynth.engines.persons.PersonTable`, indices of persons, whose every row is read at weight 1 / that
    person's rows: :func:`person_rows`), the sum of their clipped gradients (:func:`clipped_sum`). ``size`` keeps the
    realised batch (rows, or the persons' weights) of the last call, which only a non-private run reads."""

    def __init__(self, kernel, x_s: torch.Tensor, y_s: torch.Tensor, x_all: torch.Tensor | None = None,
                 y_all: torch.Tensor | None = None, *, reg: float, clip: float, persons=None, records=None):
        self.kernel, self.x_s, self.y_s, self.x_all, self.y_all = kernel, x_s, y_s, x_all, y_all
        self.reg, self.clip, self.persons, self.records = reg, clip, persons, records
        self._size = [0]

    @property
    def size(self):
        """The realised batch of the last call (rows, or the persons' weights): what a non-private run divides by."""
        return self._size[0]

    def on(self, source) -> "ClippedGradientSums":
        """This statistic bound to the run's records (``records``, a :class:`KernelRecords`: read from ``source``
        once) and, when it is a person table, to its persons: a copy, so the planner's statistic never holds them
        (it shares the realised batch's size); a statistic given its records already, itself."""
        if self.records is None:
            return self
        bound = copy.copy(self)
        bound.x_all, bound.y_all = self.records.of(source)
        bound.persons = source if source.persons else None
        return bound

    def __call__(self, chosen: torch.Tensor) -> torch.Tensor:
        idx, w = person_rows(self.persons, chosen)
        idx = idx.to(self.x_all.device)
        self._size[0] = len(idx) if w is None else float(w.sum())
        return clipped_sum(self.kernel, self.x_s, self.y_s, self.x_all[idx], self.y_all[idx], self.reg, self.clip,
                           weights=w)


class KernelRecords:
    """How a DP-KIP run reads its records (public: the table ``encoder`` or None for arrays, ``n_classes``, the
    ``device``): each record by itself, a table row through the encoder (checked against its schema), an array's
    values checked finite and its label in 0..n_classes-1; in the kernel's space, the labels one-hot and centred.
    As a statistic (:meth:`~mmdsynth.engines.Source.total`) it checks every batch and sums nothing (the run's check
    before the charge); :meth:`of` reads the run's records once for its steps."""

    def __init__(self, encoder, n_classes: int, device: str = "cpu"):
        self.encoder, self.n_classes, self.device = encoder, int(n_classes), device

    def _read(self, batch) -> tuple[np.ndarray, np.ndarray]:
        rows, _ = unweighted(batch)                  # a person table's rows (each person's weight is the step's)
        if self.encoder is not None:
            return self.encoder.encode(rows)
        X, y = rows
        Xa = check_features(X)
        return Xa, check_labels(y, Xa.shape[0], n_classes=self.n_classes)

    def __call__(self, batch) -> dict:
        self._read(batch)
        return {}

    def of(self, source) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_all, y_all) of ``source``'s records, read once per source and kept with it (:func:`~.rows.kept`), never
        with the planner."""
        def read(batch):
            Xa, ya = self._read(batch)
            return (to_kernel_space(torch.as_tensor(np.asarray(Xa, dtype=np.float32))).to(self.device),
                    centred_one_hot(torch.tensor(np.asarray(ya)), self.n_classes).to(self.device))
        return kept(source, ("kip", id(self.encoder), self.n_classes, str(self.device)), read)
