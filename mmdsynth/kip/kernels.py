"""Infinite-width NTK and NNGP kernels of fully connected ReLU networks (closed form).

Network: ``depth`` blocks of Dense(width) -> ReLU, then Dense(outputs), in the NTK
parameterisation with weight / bias standard deviations ``W_std`` / ``b_std`` (DP-KIP:
depth 1, W_std = sqrt(2), b_std = 0.1). As width -> infinity the kernels do not depend on the
width and are the identity across outputs. The arc-cosine recursion (Cho & Saul 2009; Jacot et
al. 2018; Lee et al. 2019), as neural-tangents computes it:

    Sigma_0(x, x') = <x, x'> / d
    Dense:  Sigma <- W_std^2 * E[phi(u) phi(v)] + b_std^2,
            Theta <- Sigma_new + W_std^2 * E[phi'(u) phi'(v)] * Theta
            (first Dense: phi = identity, so E[phi phi] = Sigma and Theta = Sigma_new)
    ReLU:   E[phi phi]   = sqrt(Sxx Syy) (sin t + (pi - t) cos t) / (2 pi)
            E[phi' phi'] = (pi - t) / (2 pi),     t = arccos(Sxy / sqrt(Sxx Syy))

Batched over both sets of points, differentiable in both (the DP-KIP support set is learned
through it), float32 by default and float64 on request. Checked against neural-tangents
(``../shared/fixtures/ntk_reference.npz``) and against the empirical NTK of a wide network.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..validation import check_positive


@dataclass(frozen=True)
class FCReLUKernel:
    """Infinite-width kernels of Dense -> ReLU (x ``depth``) -> Dense, NTK parameterisation."""

    depth: int = 1
    W_std: float = math.sqrt(2.0)
    b_std: float = 0.1

    def __post_init__(self):
        check_positive(self.depth, "depth", integer=True)
        check_positive(self.W_std, "W_std")
        check_positive(self.b_std, "b_std", allow_zero=True)

    def spec(self) -> dict:
        return {"name": "fc_relu", "depth": self.depth, "W_std": self.W_std, "b_std": self.b_std}

    def __call__(self, x1: torch.Tensor, x2: torch.Tensor | None = None, kind: str = "ntk") -> torch.Tensor:
        """(n1, n2) kernel matrix between the rows of ``x1`` and ``x2`` (flattened; ``x2`` defaults
        to ``x1``). ``kind``: ``"ntk"`` or ``"nngp"``."""
        ntk, nngp = self.both(x1, x2)
        if kind == "ntk":
            return ntk
        if kind == "nngp":
            return nngp
        raise ValueError(f"kind must be 'ntk' or 'nngp'; got {kind!r}")

    def both(self, x1: torch.Tensor, x2: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(NTK, NNGP), each (n1, n2)."""
        s12, s11, s22, diag = self._layer0(x1, x2)
        return self._recursion(s12, s11, s22, diag)

    def ntk_partials(self, x1: torch.Tensor, x2: torch.Tensor | None = None):
        """The NTK K (n1, n2) as an element-wise function F(S, s1, s2) of the first layer's
        quantities S = W_std^2 <x1, x2> / d + b_std^2, s1 = W_std^2 |x1|^2 / d + b_std^2 (per
        row) and s2 (per column), and F's element-wise partials (dF/dS, dF/ds1, dF/ds2), each
        (n1, n2): what a closed-form gradient w.r.t. x1 and x2 needs. Returns (K, P, Q1, Q2),
        detached."""
        s12, s11, s22, diag = self._layer0(x1.detach(), None if x2 is None else x2.detach())
        with torch.enable_grad():
            leaves = [s12.clone().requires_grad_(True), s11.expand_as(s12).clone().requires_grad_(True),
                      s22.expand_as(s12).clone().requires_grad_(True)]
            theta, _ = self._recursion(*leaves, diag)
            partials = torch.autograd.grad(theta.sum(), leaves)     # element-wise map: the sum's gradient
        return (theta.detach(), *partials)

    def _layer0(self, x1, x2):
        """First Dense layer (phi = identity): S (n1, n2), s1 (n1, 1), s2 (1, n2), diagonal mask."""
        x1 = x1.reshape(x1.shape[0], -1)
        same = x2 is None
        x2 = x1 if same else x2.reshape(x2.shape[0], -1)
        diag = torch.eye(x1.shape[0], dtype=torch.bool, device=x1.device) if same else None
        d = x1.shape[1]
        w2, b2 = self.W_std ** 2, self.b_std ** 2
        s12 = w2 * (x1 @ x2.T) / d + b2
        s11 = (w2 * (x1 * x1).sum(1) / d + b2)[:, None]
        s22 = (w2 * (x2 * x2).sum(1) / d + b2)[None, :]
        return s12, s11, s22, diag

    def _recursion(self, s12, s11, s22, diag):
        """The ReLU -> Dense blocks, element-wise in (S, s1, s2) (broadcastable shapes)."""
        # cos t is clamped a few ulps inside [-1, 1] (arccos' derivative is infinite at +-1); on the
        # diagonal of a symmetric kernel (x = x', t = 0) the exact values are used instead
        lim = 1 - 4 * torch.finfo(s12.dtype).eps
        w2, b2 = self.W_std ** 2, self.b_std ** 2
        theta = s12
        for _ in range(self.depth):
            norm = torch.sqrt(s11 * s22)
            cos = torch.clamp(s12 / norm, -lim, lim)
            t = torch.arccos(cos)
            e_phi = norm * (torch.sqrt(1 - cos * cos) + (math.pi - t) * cos) / (2 * math.pi)
            e_dphi = (math.pi - t) / (2 * math.pi)
            if diag is not None:                                  # t = 0: E[phi phi] = S/2, E[phi' phi'] = 1/2
                e_phi = torch.where(diag, norm / 2, e_phi)
                e_dphi = torch.where(diag, torch.full_like(e_dphi, 0.5), e_dphi)
            s12 = w2 * e_phi + b2
            s11, s22 = w2 * s11 / 2 + b2, w2 * s22 / 2 + b2     # E[relu(u)^2] = Sxx / 2
            theta = s12 + w2 * e_dphi * theta
        return theta, s12
