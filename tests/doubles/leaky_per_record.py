"""TEST DOUBLE: the factored clipping as it was before issue 30 (kept to show that the audit and the
tests catch it). Its norm formula cancels catastrophically on an ill-conditioned support set
(coinciding points), returns <= 0, and the record is then added unclipped. The closed-form helpers
are the library's; only the loop that trusted the formula is the old one. Never import this outside
the tests and benchmarks/dpsgd_attacks.py.
"""
import torch

from mmdsynth.kip.kernels import FCReLUKernel
from mmdsynth.statistics.gradients import (CHUNK_BYTES, _support_terms, gradient_matrices, per_record_factors,
                                    squared_norms)


def factored_clipped_sum(kernel: FCReLUKernel, x_s, y_s, x_b, y_b, reg: float, clip: float,
                         weights=None) -> torch.Tensor:
    """Sum over the batch of the per-record KIP gradients w.r.t. ``x_s``, each made finite and
    clipped to norm <= ``clip``: equal (to float64 rounding) to summing
    :func:`mmdsynth.statistics.gradients.clipped_gradients`, without forming them. Returns float64 (m, d)."""
    assert weights is None, "the old clipping knew rows only"
    x_s, y_s = x_s.detach().double(), y_s.double()
    x_b, y_b = x_b.reshape(x_b.shape[0], -1).double(), y_b.double()
    s = _support_terms(kernel, x_s, y_s, reg)
    m = s["m"]
    bc_sum = torch.zeros_like(s["G"])                 # sum_i w_i b_i c_i^T
    u_sum = torch.zeros(m, dtype=torch.float64, device=x_s.device)
    total = torch.zeros_like(x_s)
    chunk = max(1, CHUNK_BYTES // (8 * m * m))
    for start in range(0, x_b.shape[0], chunk):
        x_t, y_t = x_b[start:start + chunk], y_b[start:start + chunk]
        ok = torch.isfinite(x_t).all(1) & torch.isfinite(y_t).all(1)
        b, c, u, v = per_record_factors(kernel, s, x_t, y_t)
        for f in (b, c, u, v):
            ok &= torch.isfinite(f).all(1)
        b, c, u, v, x_t = (torch.where(ok[:, None], f, 0.0) for f in (b, c, u, v, x_t))
        norm2 = squared_norms(s, gradient_matrices(s, b, c, u), v, x_t)
        ok &= torch.isfinite(norm2)
        w = torch.where(ok, torch.clamp(clip / norm2.clamp_min(0).sqrt(), max=1.0), 0.0)[:, None]
        bc_sum += (w * b).T @ c
        u_sum += (w * u).sum(0)
        total += (w * v).T @ x_t
    n = -s["a"] * bc_sum * s["P"]
    return (n + n.T + torch.diag(u_sum)) @ x_s + total
