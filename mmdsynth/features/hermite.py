"""Hermite polynomial features of a Gaussian kernel (DP-HP, Vinaroz et al., ICML 2022).

Per input dimension, the Gaussian kernel k(x, y) = exp(-(x - y)^2 / (2 s^2)) is expanded with
Mehler's formula. With alpha = 1 / (2 s^2) and rho = (sqrt(1 + 4 alpha^2) - 1) / (2 alpha) in
(0, 1) (the root of alpha rho^2 + rho - alpha = 0, so rho / (1 - rho^2) = alpha), the functions

    phi_k(x) = (1 - rho^2)^(1/4) sqrt(rho^k / (2^k k!)) H_k(x) exp(-rho x^2 / (1 + rho))

(H_k the physicists' Hermite polynomials) satisfy, by Mehler's formula
sum_k (rho^k / (2^k k!)) H_k(x) H_k(y) = (1 - rho^2)^(-1/2) exp(-(rho^2 (x^2 + y^2) - 2 rho x y) / (1 - rho^2)),

    sum_{k >= 0} phi_k(x) phi_k(y) = exp(-rho (x - y)^2 / (1 - rho^2)) = k(x, y).

**Norm bound.** Taking y = x: sum_{k >= 0} phi_k(x)^2 = k(x, x) = 1, a series of non-negative
terms, so the truncation at order C has sum_{k <= C} phi_k(x)^2 <= 1 for every real x. The sum
kernel concatenates the D per-dimension vectors divided by sqrt(D) (norm^2 = (1/D) sum_d (<= 1)
<= 1); the product kernel over p dimensions is the outer product of p such vectors (norm = the
product of the norms <= 1). Every block therefore has norm <= 1, and its mean embedding has
sensitivity 2/m under replace-one; rows are still passed through ``bounded_rows`` (rounding,
non-finite input), as for every map.

**Truncation error.** Cramer's inequality (DLMF 18.14.9), exp(-x^2/2) |H_k(x)| <= sqrt(2^k k!),
gives phi_k(x)^2 <= sqrt(1 - rho^2) rho^k exp(x^2 (1 - rho) / (1 + rho)), hence the tail
T_C(x) = sum_{k > C} phi_k(x)^2 <= sqrt(1 - rho^2) rho^(C+1) / (1 - rho) exp(x^2 (1 - rho) / (1 + rho))
and, by Cauchy-Schwarz, |k(x, y) - sum_{k <= C} phi_k(x) phi_k(y)| <= sqrt(T_C(x) T_C(y)):
geometric in C (:func:`truncation_bound`).

**Computation.** The three-term recursion phi_0 as above, phi_1 = sqrt(2 rho) x phi_0,
phi_{k+1} = sqrt(2 rho / (k + 1)) x phi_k - rho sqrt(k / (k + 1)) phi_{k-1}, in float64,
vectorised over records and dimensions (a loop over the C orders only). Inputs are clamped to
|x| <= 1e6 first (beyond it every phi_k is 0 in float64 for any usable length scale), so a huge
finite value cannot overflow; NaN rows become 0 in ``bounded_rows``.
"""
from __future__ import annotations

import math

import torch

from ..errors import InvalidParameterError
from ..statistics.bounds import bounded_rows
from ..validation import check_positive
from .base import FeatureMap, register

X_MAX = 1e6


def mehler_rho(length_scale) -> torch.Tensor:
    """rho in (0, 1) of Mehler's formula for k(x, y) = exp(-(x - y)^2 / (2 length_scale^2))."""
    s2 = torch.as_tensor(length_scale, dtype=torch.float64) ** 2
    alpha = 1.0 / (2.0 * s2)
    # (sqrt(1 + 4 a^2) - 1) / (2 a) written without cancellation for small alpha
    return 2.0 * alpha / (torch.sqrt(1.0 + 4.0 * alpha ** 2) + 1.0)


def hermite_functions(x: torch.Tensor, order: int, rho: torch.Tensor, dim: int = -1, scale: float = 1.0,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """``scale`` times phi_0..phi_order of every entry of ``x`` in float64 (float32 on the
    differentiable path for float32 input), the orders along a new
    axis ``dim`` (default last: shape (*x.shape, order + 1)); ``rho`` broadcasts against ``x`` (one
    per dimension, or a scalar). Written in place into one tensor (``out`` when given, of that
    shape), with no per-order copies; differentiable with the closed-form derivative
    phi_k' = sqrt(2 rho k) phi_{k-1} - 2 rho x / (1 + rho) phi_k (:class:`_HermiteFunctions`)."""
    if torch.is_grad_enabled() and x.requires_grad:
        # the generator's side: float32 input stays float32 (the recursion is stable: 1.4e-7 from
        # float64 at order 100), anything else is computed in float64
        dtype = torch.float32 if x.dtype == torch.float32 else torch.float64
        x = x.to(dtype).clamp(-X_MAX, X_MAX)
        return _HermiteFunctions.apply(x, rho.to(device=x.device, dtype=dtype), order, dim, scale)
    x = x.to(torch.float64).clamp(-X_MAX, X_MAX)
    return _recursion(x, order, rho.to(device=x.device, dtype=torch.float64), dim, scale, out)


def _recursion(x, order, rho, dim, scale, out=None) -> torch.Tensor:
    phi0 = scale * (1.0 - rho ** 2) ** 0.25 * torch.exp(-rho * x ** 2 / (1.0 + rho))   # the recursion is linear
    shape = list(x.shape)
    dim = dim % (x.dim() + 1)
    shape.insert(dim, order + 1)
    out = torch.empty(shape, dtype=x.dtype, device=x.device) if out is None else out.view(shape)
    out.select(dim, 0).copy_(phi0)
    ks = torch.arange(order + 1, dtype=x.dtype, device=x.device).view((-1,) + (1,) * rho.dim())
    up = torch.sqrt(2.0 * rho / ks[1:])                        # phi_{k+1} = up_k x phi_k - back_k phi_{k-1}
    back = rho * torch.sqrt(ks[:-1] / ks[1:])
    tmp = torch.empty_like(x)
    for k in range(order):
        nxt = out.select(dim, k + 1)
        torch.mul(out.select(dim, k), x, out=nxt)
        nxt.mul_(up[k])
        if k:
            nxt.sub_(torch.mul(out.select(dim, k - 1), back[k], out=tmp))
    return out


class _HermiteFunctions(torch.autograd.Function):
    """The recursion's output, with d phi_k / dx = sqrt(2 rho k) phi_{k-1} - (2 rho x / (1 + rho)) phi_k
    (from H_k' = 2k H_{k-1} and the Gaussian factor): no graph through the C steps."""

    @staticmethod
    def forward(ctx, x, rho, order, dim, scale):
        out = _recursion(x, order, rho, dim, scale)
        ctx.save_for_backward(x, rho, out)
        ctx.dim = dim % (x.dim() + 1)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, rho, phi = ctx.saved_tensors
        d, c = ctx.dim, phi.shape[ctx.dim]
        shape = [1] * phi.dim()
        shape[d] = c
        k = torch.arange(c, dtype=x.dtype, device=x.device).view(shape)
        rho_x = rho.expand_as(x).unsqueeze(d)                                    # broadcasts along the orders
        lower = (grad.narrow(d, 1, c - 1) * phi.narrow(d, 0, c - 1) * torch.sqrt(2.0 * rho_x * k.narrow(d, 1, c - 1))
                 ).sum(d)
        own = (grad * phi).sum(d) * (2.0 * rho_x.squeeze(d) * x / (1.0 + rho_x.squeeze(d)))
        return lower - own, None, None, None, None


def truncation_bound(x, y, order: int, length_scale: float) -> torch.Tensor:
    """Upper bound on |k(x, y) - sum_{k <= order} phi_k(x) phi_k(y)| (module docstring)."""
    rho = mehler_rho(length_scale)
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)

    def tail(v):
        return torch.sqrt(1 - rho ** 2) * rho ** (order + 1) / (1 - rho) * torch.exp(v ** 2 * (1 - rho) / (1 + rho))
    return torch.sqrt(tail(x) * tail(y))


def _per_dim(value, dim: int, name: str) -> list[float]:
    values = [float(value)] * dim if isinstance(value, (int, float)) else [float(v) for v in value]
    if len(values) != dim or not all(v > 0 and math.isfinite(v) for v in values):
        raise InvalidParameterError(f"{name} must be a positive number or {dim} positive numbers (one per input "
                                    f"dimension); got {value!r}.")
    return values


def hermite_noise_multipliers(n_product: int, sum_share: float) -> dict[str, float]:
    """Relative noise multipliers of DP-HP's blocks: 1/sigma^2 of the sum block is ``sum_share`` of
    the blocks' total, each product block (1 - sum_share) / n_product of it."""
    if not n_product:
        return {"hermite_sum": 1.0}
    prod = math.sqrt(n_product * sum_share / (1.0 - sum_share))
    return {"hermite_sum": 1.0, **{f"hermite_product_{j}": prod for j in range(n_product)}}


@register
class HermiteFeatures(FeatureMap):
    """DP-HP's features: the sum kernel over all dimensions (block ``hermite_sum``, width D (C+1))
    and ``n_product`` product kernels, each over ``product_dims`` dimensions drawn with the public
    ``seed`` (blocks ``hermite_product_j``, width (C_p+1)^p). Each block is its own Gaussian
    release (norm <= 1, sensitivity 2/m); :meth:`noise_multipliers` gives the sum kernel
    ``sum_share`` of the blocks' privacy and the product releases the rest, equally.

    The generator loss is ``sum_weight ||d_sum||^2 + product_weight ||d_product_j||^2``. The
    authors release one product subset per epoch and match it during that epoch; here all
    ``n_product`` releases are made before training (release once, the same privacy) and the
    training loop (:meth:`at_iteration`) matches release j during the j-th of ``n_product``
    equal parts of the iterations, the authors' schedule at one block's cost per step. Outside
    training the loss averages all product blocks.

    ``length_scale`` (s of exp(-(x-y)^2 / (2 s^2))): a number or one per input dimension,
    data-independent (inputs in [0, 1]); ``product_length_scale`` defaults to it.
    """

    name = "hermite"

    def __init__(self, input_dim: int, order: int = 100, length_scale=0.0707, n_product: int = 0,
                 product_dims: int = 2, product_order: int = 20, product_length_scale=None,
                 sum_share: float = 0.8, sum_weight: float = 1.0, product_weight: float = 1.0, seed: int = 0):
        self.input_dim = int(check_positive(input_dim, "input_dim", integer=True))
        self.order = int(check_positive(order, "order", integer=True))
        self.length_scale = _per_dim(length_scale, self.input_dim, "length_scale")
        self.n_product = int(n_product)
        if self.n_product < 0:
            raise InvalidParameterError(f"n_product must be >= 0 (product-kernel releases); got {n_product!r}.")
        self.product_dims = int(check_positive(product_dims, "product_dims", integer=True))
        if self.n_product and self.product_dims > self.input_dim:
            raise InvalidParameterError(f"product_dims={product_dims} exceeds the {self.input_dim} input dimensions.")
        self.product_order = int(check_positive(product_order, "product_order", integer=True))
        self.product_length_scale = _per_dim(length_scale if product_length_scale is None else product_length_scale,
                                             self.input_dim, "product_length_scale")
        self.sum_share = float(sum_share)
        if self.n_product and not 0 < self.sum_share < 1:
            raise InvalidParameterError(f"sum_share must lie in (0, 1) with product releases; got {sum_share!r}.")
        self.sum_weight = float(check_positive(sum_weight, "sum_weight"))
        self.product_weight = float(check_positive(product_weight, "product_weight"))
        self.seed = int(seed)
        g = torch.Generator().manual_seed(self.seed)      # public: which dimensions each product release uses
        self.subsets = torch.stack([torch.randperm(self.input_dim, generator=g)[:self.product_dims]
                                    for _ in range(self.n_product)]) if self.n_product else \
            torch.zeros((0, self.product_dims), dtype=torch.long)
        self.rho = mehler_rho(self.length_scale)
        self.rho_product = mehler_rho(self.product_length_scale)
        self.active: int | None = None       # the product block the loss matches (None: all)

    @property
    def sum_width(self) -> int:
        return self.input_dim * (self.order + 1)

    @property
    def product_width(self) -> int:
        return (self.product_order + 1) ** self.product_dims

    @property
    def out_dim(self) -> int:
        return self.sum_width + self.n_product * self.product_width

    @property
    def norm_bound(self) -> float:
        return math.sqrt(1 + self.n_product)       # the whole row; each block (parts()) is <= 1

    def parts(self) -> list[tuple[str, int, float]]:
        return [("hermite_sum", self.sum_width, 1.0)] + \
            [(f"hermite_product_{j}", self.product_width, 1.0) for j in range(self.n_product)]

    def noise_multipliers(self) -> dict[str, float]:
        return hermite_noise_multipliers(self.n_product, self.sum_share)

    def to(self, device) -> "HermiteFeatures":
        self.rho, self.rho_product = self.rho.to(device), self.rho_product.to(device)
        self.subsets = self.subsets.to(device)
        return self

    def row_floats(self) -> int:
        # float64 sum block (x2 with its bounded copy; 4-byte units) and the product factors
        return 4 * self.sum_width + 2 * self.n_product * (self.product_order + 1) ** max(self.product_dims - 1, 1) * 2

    def sum_features(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """(n, (C+1) D) float64, order-major: phi_k of every dimension, divided by sqrt(D)."""
        h = hermite_functions(x, self.order, self.rho, dim=1, scale=1.0 / math.sqrt(self.input_dim), out=out)
        return h.reshape(x.shape[0], -1)                                     # (n, C+1, D) -> flat

    def product_features(self, x: torch.Tensor, blocks=None) -> torch.Tensor:
        """(n, len(blocks) * (C_p+1)^p): the outer products over each release's dimensions
        (``blocks``: which product releases, default all)."""
        subsets = self.subsets if blocks is None else self.subsets[list(blocks)]
        xs = x[:, subsets]                                                   # (n, k, p)
        h = hermite_functions(xs, self.product_order, self.rho_product[subsets])   # (n, k, p, C_p+1)
        prod = h[:, :, 0]
        for i in range(1, self.product_dims):
            prod = (prod[..., :, None] * h[:, :, i, None, :]).reshape(x.shape[0], subsets.shape[0], -1)
        return prod.reshape(x.shape[0], -1)

    def class_sums(self, X: torch.Tensor, y: torch.Tensor | None = None, n_classes: int | None = None,
                   batch_size: int | None = None, weights: torch.Tensor | None = None) -> torch.Tensor:
        """sum_i w_i phi(x_i) e_{y_i}^T as (C, out_dim) float64 (``weights``: see :meth:`FeatureMap.class_sums`;
        they scale each record's one-hot row), every record's block bounded on its own
        (:func:`bounded_rows` on the sum block; the product blocks through their factors: the norm of
        an outer product is the product of the factors' norms, so a record's block is scaled, or
        zeroed when not finite, by scaling its first factor). The product blocks are never
        materialised per record: sum_i (e_{y_i} h_p(x_i)) outer (h_1 ... h_{p-1})(x_i) is one batched
        matrix product per batch."""
        batch_size = batch_size or self.batch_rows()
        classes = n_classes if y is not None else 1
        acc = torch.zeros((classes, self.out_dim), dtype=torch.float64)
        with torch.no_grad():
            for start in range(0, X.shape[0], batch_size):
                x = X[start:start + batch_size].reshape(-1, self.input_dim)
                dev = x.device
                onehot = torch.ones((x.shape[0], 1), dtype=torch.float64, device=dev) if y is None else \
                    torch.nn.functional.one_hot(y[start:start + batch_size].to(dev), classes).to(torch.float64)
                if weights is not None:
                    onehot = onehot * weights[start:start + batch_size].to(dev, torch.float64)[:, None]
                acc = acc.to(dev)
                acc[:, :self.sum_width] += onehot.T @ bounded_rows(self.sum_features(x), 1.0)
                if self.n_product:
                    acc[:, self.sum_width:] += self._product_class_sums(x, onehot)
        return acc.cpu()

    def _product_class_sums(self, x: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        h = hermite_functions(x[:, self.subsets], self.product_order, self.rho_product[self.subsets])  # (b,k,p,c)
        norms = torch.linalg.vector_norm(h, dim=-1).prod(-1)                                    # (b, k)
        ok = torch.isfinite(norms)
        h = torch.where(ok[..., None, None], h, 0.0)
        scale = torch.where(ok, torch.clamp(1.0 / norms, max=1.0), 0.0)
        b, k, c = x.shape[0], self.n_product, self.product_order + 1
        left = h[:, :, 0] * scale[..., None]                                                     # (b, k, c)
        for i in range(1, self.product_dims - 1):
            left = (left[..., :, None] * h[:, :, i, None, :]).reshape(b, k, -1)
        if self.product_dims == 1:
            left, last = torch.ones((b, k, 1), dtype=h.dtype, device=h.device), left
        else:
            last = h[:, :, -1]
        right = (onehot[:, None, :, None] * last[:, :, None, :]).reshape(b, k, -1)              # (b, k, C c)
        sums = torch.bmm(left.permute(1, 2, 0), right.permute(1, 0, 2))                         # (k, W', C c)
        n_cls = onehot.shape[1]
        return sums.reshape(k, -1, n_cls, c).permute(2, 0, 1, 3).reshape(n_cls, -1)

    def at_iteration(self, iteration: int, total: int) -> None:
        if self.n_product:
            self.active = min(self.n_product - 1, iteration * self.n_product // max(total, 1))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """phi(x) as (n, out_dim) float64 (the sum block, then the product blocks); float32 for
        float32 input that requires grad (the generator's side)."""
        x = x.reshape(x.shape[0], -1)
        if x.shape[1] != self.input_dim:
            raise InvalidParameterError(f"records have {x.shape[1]} values; this map expects {self.input_dim}.")
        if torch.is_grad_enabled() and x.requires_grad:
            blocks = [self.sum_features(x)] + ([self.product_features(x)] if self.n_product else [])
            return torch.cat(blocks, 1)
        phi = torch.empty((x.shape[0], self.out_dim), dtype=torch.float64, device=x.device)
        self.sum_features(x, out=phi[:, :self.sum_width])
        if self.n_product:
            phi[:, self.sum_width:] = self.product_features(x)
        return phi

    def mmd_loss(self, target: torch.Tensor, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        w = weights.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
        d_sum = target[:self.sum_width] - (self.sum_features(x).T @ w).to(target.dtype)
        loss = self.sum_weight * (d_sum ** 2).sum()
        if not self.n_product:
            return loss
        blocks = range(self.n_product) if self.active is None else [self.active]
        width = self.product_width
        d_prod = torch.cat([target[self.sum_width + j * width:self.sum_width + (j + 1) * width] for j in blocks]) \
            - (self.product_features(x, blocks).T @ w).to(target.dtype)
        return loss + self.product_weight / len(blocks) * (d_prod ** 2).sum()

    def spec(self) -> dict:
        def compact(values):
            return values[0] if len(set(values)) == 1 else values
        return {"name": self.name, "input_dim": self.input_dim, "order": self.order,
                "length_scale": compact(self.length_scale), "n_product": self.n_product,
                "product_dims": self.product_dims, "product_order": self.product_order,
                "product_length_scale": compact(self.product_length_scale), "sum_share": self.sum_share,
                "sum_weight": self.sum_weight, "product_weight": self.product_weight, "seed": self.seed}
