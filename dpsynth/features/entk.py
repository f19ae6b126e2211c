"""Empirical neural-tangent-kernel features (DP-NTK).

phi(x) = g(x) / ||g(x)||, g(x) = d/d theta sum_k f_k(x; theta) for a randomly
initialised network f; ||phi(x)|| = 1 exactly, so a mean embedding of phi times
a one-hot label has sensitivity 2/m.

Two implementations behind one interface:

* generic, for any ``nn.Module``: per-sample gradients with ``torch.func``
  (``vmap(grad(...))``), in chunks of ``chunk_size`` records;
* a fast structured path for ``fc_1l`` (Linear -> ReLU -> LayerNorm -> Linear)
  from per-sample factors: with v = W2^T 1, h = LN(relu(a)), a = W1 x + b1,
  u = LN'(a)^T v masked by a > 0, the gradient is [u x^T, u, 1 h^T, 1]. Sums
  of features weighted per sample (mean embeddings, the MMD loss and its
  gradient) then need only (n x w) and (w x d) matrices, never n x P.
"""
from __future__ import annotations


import torch
from torch.func import functional_call, grad, vmap

from ..validation import check_positive
from .base import FeatureMap, register
from .networks import build_network, n_params


@register
class ENTKFeatures(FeatureMap):
    name = "entk"
    norm_bound = 1.0

    def __init__(self, input_dim: int, arch: str = "fc_1l", widths=(800,), n_outputs: int = 10,
                 seed: int = 0, chunk_size: int = 256, fast: bool = True):
        self.input_dim = int(check_positive(input_dim, "input_dim", integer=True))
        self.arch, self.widths, self.n_outputs, self.seed = arch, tuple(int(w) for w in widths), int(n_outputs), int(seed)
        self.chunk_size = int(check_positive(chunk_size, "chunk_size", integer=True))
        self.net = build_network(arch, self.input_dim, self.widths, self.n_outputs, self.seed)
        for p in self.net.parameters():
            p.requires_grad_(False)
        self.fast = bool(fast) and arch == "fc_1l"
        self._names = [n for n, _ in self.net.named_parameters()]
        self._params = {n: p.detach() for n, p in self.net.named_parameters()}

    @property
    def out_dim(self) -> int:
        return n_params(self.net)

    def to(self, device) -> "ENTKFeatures":
        self.net.to(device)
        self._params = {n: p.detach() for n, p in self.net.named_parameters()}
        return self

    def spec(self) -> dict:
        return {"name": self.name, "input_dim": self.input_dim, "arch": self.arch, "widths": list(self.widths),
                "n_outputs": self.n_outputs, "seed": self.seed, "chunk_size": self.chunk_size, "fast": self.fast}

    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        """Records as (n, d) rows in the network's dtype (both paths start here)."""
        return x.reshape(x.shape[0], -1).to(next(self.net.parameters()).dtype)

    # -- generic path ------------------------------------------------------------------
    def _raw_gradients(self, x: torch.Tensor) -> torch.Tensor:
        def summed(params, xi):
            return functional_call(self.net, params, (xi.unsqueeze(0),)).sum()

        g = vmap(grad(summed), in_dims=(None, 0))(self._params, x)
        return torch.cat([g[n].reshape(x.shape[0], -1) for n in self._names], dim=1)

    def generic(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised e-NTK features (n, P) for any architecture (materialised)."""
        x = self._flat(x)
        out = []
        for start in range(0, x.shape[0], self.chunk_size):
            g = self._raw_gradients(x[start:start + self.chunk_size])
            out.append(g / g.norm(dim=1, keepdim=True))
        return torch.cat(out)

    # -- fast fc_1l path -----------------------------------------------------------------
    def factors(self, x: torch.Tensor):
        """Per-sample factors (u, h, inv_norm) of the fc_1l gradient; differentiable in x."""
        lin1, _, ln, lin2 = self.net
        x = self._flat(x)
        a = torch.nn.functional.linear(x, lin1.weight, lin1.bias)
        r = torch.relu(a)
        mu = r.mean(1, keepdim=True)
        sd = torch.sqrt(r.var(1, unbiased=False, keepdim=True) + ln.eps)
        h = (r - mu) / sd
        v = lin2.weight.sum(0)  # W2^T 1, the same for every x
        g_r = (v - v.mean() - h * (h * v).mean(1, keepdim=True)) / sd
        u = g_r * (a > 0).to(g_r.dtype)
        sq = (u * u).sum(1) * ((x * x).sum(1) + 1.0) + self.n_outputs * ((h * h).sum(1) + 1.0)
        return u, h, x, torch.rsqrt(sq)

    def fast_features(self, x: torch.Tensor) -> torch.Tensor:
        """Materialised features from the factors (same layout as ``generic``)."""
        u, h, x, inv = self.factors(x)
        n, C = x.shape[0], self.n_outputs
        parts = [(u[:, :, None] * x[:, None, :]).reshape(n, -1), u,
                 h[:, None, :].expand(n, C, -1).reshape(n, -1), torch.ones(n, C, dtype=u.dtype, device=u.device)]
        return torch.cat(parts, 1) * inv[:, None]

    def weighted_sum(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sum_i phi(x_i) weights_i^T as a (P, K) matrix, without materialising phi.

        ``weights`` is (n, K) (e.g. one-hot labels divided by m). Differentiable in x.
        """
        if not self.fast:
            return self.generic(x).T.to(weights.dtype) @ weights
        u, h, x, inv = self.factors(x)
        cw = weights.to(u.dtype) * inv[:, None]                   # (n, K)
        K, C = cw.shape[1], self.n_outputs
        # (K, w*d): per column k only the samples with a non-zero weight contribute, so
        # one-hot (class-conditional) weights cost one n x w x d product in total.
        w1 = []
        for k in range(K):
            idx = torch.nonzero(cw[:, k], as_tuple=True)[0]
            w1.append(((u[idx] * cw[idx, k, None]).T @ x[idx]).reshape(-1))
        w1 = torch.stack(w1)
        b1 = cw.T @ u                                            # (K, w)
        hs = cw.T @ h                                            # (K, w)
        w2 = hs[:, None, :].expand(K, C, -1).reshape(K, -1)      # (K, C*w)
        b2 = cw.sum(0)[:, None].expand(K, C)                      # (K, C)
        return torch.cat([w1, b1, w2, b2], 1).T

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fast_features(x) if self.fast else self.generic(x)
