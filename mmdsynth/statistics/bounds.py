"""How each record's part of a sum is bounded before it is summed (feature rows, clipped gradients)."""
from __future__ import annotations

import torch


def bounded_rows(rows: torch.Tensor, bound: float) -> torch.Tensor:
    """Each record's contribution (one row per record), made safe for a sum whose L2
    sensitivity is ``bound`` per record (feature rows of a mean embedding, clipped DP-SGD
    gradients).

    A rule applied to every record on its own (it never looks at other records): a row with a
    non-finite norm (a non-finite entry, e.g. an input so large that its features overflowed, or
    a norm that overflows) becomes 0, and a row whose norm exceeds ``bound`` (by clipping,
    floating-point rounding, or a map whose bound is not exact) is scaled back to norm ``bound``.
    Rows within the bound are unchanged; the dtype is kept. One pass for the norms, one for the
    scaling (the finite test is on the n norms, not on every entry). A 3-D ``rows`` (record,
    block, feature) bounds every block of every record on its own.
    """
    norms = torch.linalg.vector_norm(rows, dim=-1, keepdim=True)
    ok = torch.isfinite(norms)
    if not bool(ok.all()):
        rows, norms = torch.where(ok, rows, 0.0), torch.where(ok, norms, 0.0)
    return rows * torch.clamp(bound / norms, max=1.0)          # norm 0: bound / 0 = inf -> factor 1


def padded(x: torch.Tensor, rows: int) -> torch.Tensor:
    """``x`` (at most ``rows`` records) with zero records after it up to ``rows``: a batch of one shape whatever its
    records' count, so a float32 network or product computes each record alike
    (:meth:`~mmdsynth.features.base.FeatureMap.released_rows`)."""
    if x.shape[0] >= rows:
        return x
    return torch.cat([x, x.new_zeros((rows - x.shape[0], *x.shape[1:]))])
