"""Random Fourier features of a Gaussian kernel (DP-MERF).

phi(x) = sqrt(2/D) [cos(W x), sin(W x)], rows of W ~ N(0, I / l^2), D/2 rows:
||phi(x)||^2 = (2/D) * sum_j (cos^2 + sin^2) = 1 exactly, for every x.

The length scale ``l`` is a user choice or a fixed data-independent default
(never a median heuristic on private data, which would leak).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import InvalidParameterError
from ..validation import check_positive
from .base import FeatureMap, register


@register
class RandomFourierFeatures(FeatureMap):
    name = "rff"
    norm_bound = 1.0

    def __init__(self, input_dim: int, n_features: int = 1000, length_scale: float | None = None,
                 seed: int = 0):
        self.input_dim = int(check_positive(input_dim, "input_dim", integer=True))
        n_features = int(check_positive(n_features, "n_features", integer=True))
        self.n_features = n_features + (n_features % 2)  # cos/sin pairs
        # Default: sqrt(d)/2, data-independent; suits inputs scaled to [0, 1].
        self.length_scale = float(check_positive(length_scale, "length_scale")) if length_scale is not None \
            else math.sqrt(self.input_dim) / 2
        self.seed = int(seed)
        g = torch.Generator().manual_seed(self.seed)
        self.weights = torch.randn(self.n_features // 2, self.input_dim, generator=g,
                                   dtype=torch.float64) / self.length_scale

    @property
    def out_dim(self) -> int:
        return self.n_features

    def to(self, device) -> "RandomFourierFeatures":
        self.weights = self.weights.to(device)
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        w = self.weights.to(dtype=x.dtype, device=x.device)
        proj = x @ w.T
        scale = math.sqrt(2.0 / self.n_features)
        if proj.requires_grad:                      # a generator's rows: differentiable
            return _CosSin.apply(proj, scale)
        return _cos_sin(proj, scale)

    def spec(self) -> dict:
        return {"name": self.name, "input_dim": self.input_dim, "n_features": self.n_features,
                "length_scale": self.length_scale, "seed": self.seed}


def _cos_sin(proj: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * [cos(proj), sin(proj)]``, written in place: no concatenated copy."""
    half = proj.shape[1]
    out = torch.empty((proj.shape[0], 2 * half), dtype=proj.dtype, device=proj.device)
    torch.cos(proj, out=out[:, :half])
    torch.sin(proj, out=out[:, half:])
    return out.mul_(scale)


class _CosSin(torch.autograd.Function):
    """``scale * [cos(p), sin(p)]`` whose backward reuses the forward's cosines and sines (autograd's cos and sin
    would compute both again): d/dp = scale * (cos(p) g_sin - sin(p) g_cos). Same values as the two-op form; the
    gradient equal up to rounding (tested); about a third less time a DP-MERF step at 10,000 features."""

    @staticmethod
    def forward(ctx, proj: torch.Tensor, scale: float) -> torch.Tensor:
        out = _cos_sin(proj, scale)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (out,) = ctx.saved_tensors
        half = out.shape[1] // 2
        return out[:, :half] * grad[:, half:] - out[:, half:] * grad[:, :half], None


@register
class MixedRFF(FeatureMap):
    """DP-MERF's features for heterogeneous tables (Harder et al. 2021, Sec. 4.3), with interactions.

    Input: encoded rows (numeric columns in [0, 1] first, then one-hot blocks).
    phi(x) = [sqrt(a) RFF(x_rff), sqrt(1 - a) x_cat / max(||x_cat||, sqrt(k))] with k categorical
    columns and a = 1/2 when both parts exist: a sum of a Gaussian kernel and a linear kernel on the
    one-hot part (per-class category frequencies, exactly). ``rff_inputs`` says what the Gaussian
    kernel sees: ``"all"`` (default) the whole encoded row, so the embedding also holds the
    dependence between columns (numeric-numeric, numeric-categorical, categorical-categorical:
    pairwise and higher), ``"numeric"`` only the numeric columns (the paper's choice: categorical
    columns then enter through first-order per-class frequencies only, and an all-categorical table
    releases nothing beyond them). Both parts have norm <= 1 for every input (exactly 1 for encoded
    records), so ||phi(x)|| <= 1 and the embedding has the usual sensitivity 2/m (the reference's
    2 sqrt(2)/m came from not weighting the parts).
    """

    name = "mixed_rff"
    norm_bound = 1.0

    def __init__(self, n_numeric: int, n_categorical_columns: int, onehot_dim: int, n_features: int = 1000,
                 length_scale: float | None = None, seed: int = 0, rff_inputs: str = "numeric",
                 category_sizes=None, captures: str | None = None, cross_sizes=None, cross_bins: int = 0):
        del captures    # in the spec for readers; derived from the other arguments
        self.n_numeric, self.n_cat, self.onehot_dim = int(n_numeric), int(n_categorical_columns), int(onehot_dim)
        if self.n_numeric + self.onehot_dim < 1 or (self.n_cat == 0) != (self.onehot_dim == 0):
            raise InvalidParameterError("mixed_rff needs numeric columns and/or categorical columns with one-hot width.")
        if rff_inputs not in ("numeric", "all"):
            raise InvalidParameterError(f"rff_inputs must be 'numeric' or 'all'; got {rff_inputs!r}.")
        self.rff_inputs = rff_inputs
        width = self.n_numeric + (self.onehot_dim if rff_inputs == "all" else 0)
        self.rff = RandomFourierFeatures(width, n_features, length_scale, seed) if width else None
        self.a = 0.5 if (self.rff is not None and self.n_cat) else (1.0 if self.rff is not None else 0.0)
        # pairwise marginals: with the sizes of the one-hot blocks, the outer product of every pair of blocks
        self.category_sizes = [int(k) for k in category_sizes] if category_sizes else None
        if self.category_sizes is not None and (len(self.category_sizes) != self.n_cat
                                                or sum(self.category_sizes) != self.onehot_dim):
            raise InvalidParameterError(f"category_sizes {self.category_sizes} must list the {self.n_cat} one-hot "
                                        f"blocks, {self.onehot_dim} wide in all.")
        # numeric x categorical: per numeric column, B hat functions on [0, 1] (a linear-interpolation
        # histogram, differentiable for the generator) times every one-hot block
        self.cross_bins = int(cross_bins or 0)
        self.cross_sizes = [int(k) for k in cross_sizes] if cross_sizes and self.cross_bins and self.n_numeric else None
        if self.cross_sizes is not None and (len(self.cross_sizes) != self.n_cat or sum(self.cross_sizes) != self.onehot_dim
                                             or self.cross_bins < 2):
            raise InvalidParameterError(f"cross_sizes {self.cross_sizes} must list the {self.n_cat} one-hot blocks, "
                                        f"{self.onehot_dim} wide in all, and cross_bins be >= 2; got {self.cross_bins}.")
        self.n_cross = self.n_numeric * self.n_cat if self.cross_sizes else 0
        self.cross_dim = self.n_numeric * self.cross_bins * self.onehot_dim if self.cross_sizes else 0
        self.n_pairs = self.n_cat * (self.n_cat - 1) // 2 if self.category_sizes else 0
        self.pair_dim = sum(a * b for i, a in enumerate(self.category_sizes or [])
                            for b in (self.category_sizes or [])[i + 1:])

    @property
    def captures(self) -> str:
        """What the released embedding holds, in words (recorded in the spec)."""
        parts = []
        if self.n_cat:
            parts.append("per-class category frequencies of every categorical column")
        if self.n_pairs:
            parts.append("per-class pairwise marginals of every two categorical columns")
        if self.n_cross:
            parts.append(f"per-class joint histograms ({self.cross_bins} bins) of every numeric column with every "
                         f"categorical column")
        if self.rff is not None and self.rff_inputs == "all":
            parts.append("a Gaussian kernel over all columns: the dependence between columns (pairwise and higher)")
        elif self.rff is not None:
            parts.append("a Gaussian kernel over the numeric columns (their joint distribution)")
        if self.n_cat > 1 and not self.n_pairs and self.rff_inputs != "all":
            parts.append("no dependence between categorical columns beyond the label")
        if self.n_cat and self.n_numeric and not self.n_cross and self.rff_inputs != "all":
            parts.append("no dependence between numeric and categorical columns beyond the label")
        return "; ".join(parts)

    @property
    def out_dim(self) -> int:
        return (self.rff.out_dim if self.rff is not None else 0) + self.onehot_dim + self.pair_dim + self.cross_dim

    def to(self, device) -> "MixedRFF":
        if self.rff is not None:
            self.rff.to(device)
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        parts = []
        if self.rff is not None:
            inputs = x if self.rff_inputs == "all" else x[:, :self.n_numeric]
            parts.append(math.sqrt(self.a) * self.rff(inputs))
        if self.n_cat:
            cat = x[:, self.n_numeric:]
            denom = torch.clamp(cat.norm(dim=1, keepdim=True), min=math.sqrt(self.n_cat))
            share = (1.0 - self.a) / (1 + bool(self.n_pairs) + bool(self.n_cross))   # the parts split the rest
            parts.append(math.sqrt(share) * cat / denom)
            if self.n_pairs:
                pairs = self._pairs(cat)
                denom = torch.clamp(pairs.norm(dim=1, keepdim=True), min=math.sqrt(self.n_pairs))
                parts.append(math.sqrt(share) * pairs / denom)
            if self.n_cross:
                parts.append(math.sqrt(share) * self._cross(x[:, :self.n_numeric], cat))
        return torch.cat(parts, 1)

    @property
    def input_dim(self) -> int:
        """Encoded values a record has: the numeric columns, then the one-hot blocks."""
        return self.n_numeric + self.onehot_dim

    def records(self, n: int, rng: np.random.Generator, low: float = 0.0, high: float = 1.0) -> np.ndarray:
        """Encoded records (:meth:`FeatureMap.records`): numeric values uniform on [low, high], one category of
        every one-hot block at 1 (blocks of ``category_sizes`` or ``cross_sizes``; without them, ``onehot_dim``
        cut into ``n_categorical_columns`` near-equal blocks)."""
        n = int(n)
        out = np.zeros((n, self.input_dim))
        out[:, :self.n_numeric] = rng.uniform(low, high, (n, self.n_numeric))
        sizes = []
        if self.n_cat:
            sizes = self.category_sizes or self.cross_sizes or \
                [len(b) for b in np.array_split(np.arange(self.onehot_dim), self.n_cat)]
        start = self.n_numeric
        for size in sizes:
            out[np.arange(n), start + rng.integers(0, size, n)] = 1.0
            start += size
        return out

    def sparse_split(self, x: np.ndarray) -> tuple[np.ndarray, sp.csr_matrix]:
        """``bounded(self(x))`` in two parts, without the dense (n, out_dim) array: the Gaussian kernel's features
        dense ((n, R) float64) and the one-hot parts (category frequencies, pairs, numeric x categorical
        histograms: a few non-zeros a row) as a CSR matrix (n, out_dim - R), built from each row's categories.
        For rows whose one-hot blocks hold at most one non-zero each (encoded records; anything else is refused).
        The hybrid's pool features and :meth:`class_sums` (the release's sums over the private rows) go through it:
        each row is bounded by :func:`~mmdsynth.statistics.bounds.bounded_rows`' rule from that row alone."""
        x = np.asarray(x)
        x = x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)
        n = len(x)
        dense = np.zeros((n, 0), dtype=x.dtype)
        if self.rff is not None:                        # in the input's precision, as ``self(x)`` computes it
            inputs = x if self.rff_inputs == "all" else x[:, :self.n_numeric]
            dense = self.rff(torch.from_numpy(np.ascontiguousarray(inputs))).mul_(math.sqrt(self.a)).numpy()
        x = x.astype(np.float64, copy=False)
        width = self.out_dim - dense.shape[1]
        entries, sq = [], np.zeros(n)                  # (rows, columns, values) of each part; squared row norms
        # a row holding inf or a huge value makes inf / NaN here; bounded_rows' rule below zeroes that row, so numpy's
        # warnings about it say nothing
        with np.errstate(over="ignore", invalid="ignore"):
            if self.n_cat:
                cat = x[:, self.n_numeric:]
                rows, cols = np.nonzero(cat)
                vals = cat[rows, cols]
                share = (1.0 - self.a) / (1 + bool(self.n_pairs) + bool(self.n_cross))
                entries.append(_scaled(rows, cols, vals, n, math.sqrt(self.n_cat), share, sq))
                offset = self.onehot_dim
                sizes = self.category_sizes or self.cross_sizes
                if sizes:
                    starts = np.cumsum([0] + list(sizes[:-1]))
                    idx, val = _one_per_block(rows, cols, vals, n, sizes, starts)
                    if self.n_pairs:
                        entries.append(self._sparse_pairs(idx, val, offset, share, sq))
                        offset += self.pair_dim
                    if self.n_cross:
                        entries.append(self._sparse_cross(x[:, :self.n_numeric], idx, val, starts, offset, share, sq))
        rows, cols, vals = (np.concatenate(p) for p in zip(*entries)) if entries else (np.zeros(0, int),) * 3
        # bounded_rows' rule: a non-finite row is 0, a long one scaled (the squared norms summed in float64)
        norm = np.sqrt(np.einsum("ij,ij->i", dense, dense, dtype=np.float64) + sq)
        ok = np.isfinite(norm)
        factor = np.where(ok, np.minimum(self.norm_bound / np.where(ok & (norm > 0), norm, 1.0), 1.0), 0.0)
        rest = sp.csr_matrix((np.where(ok[rows], vals * factor[rows], 0.0), (rows, cols)), shape=(n, width))
        rest.eliminate_zeros()
        if not ok.all():
            dense[~ok] = 0.0                           # NaN x 0 is NaN: a non-finite row is set, not scaled
        dense *= factor[:, None].astype(dense.dtype, copy=False)
        return dense, rest

    #: records a batch of :meth:`class_sums`' sparse route (its memory: a batch x the Gaussian kernel's features)
    SPARSE_ROWS = 4096

    def released_split(self, x: np.ndarray) -> tuple[np.ndarray, sp.csr_matrix]:
        """:meth:`sparse_split` of at most :attr:`SPARSE_ROWS` records as the release computes it: the rows padded
        with zero rows to exactly that many, so the Gaussian kernel's float32 product has one shape whatever the
        batch, and each record's features are a function of that record alone, bit for bit (a product of another
        shape rounds a record's features by up to 1e-5 apart, and a batch's size follows the data: a person's rows,
        a stream's shards; measured 2026-12-07). Zero rows hold no category and are cut off again."""
        x = np.asarray(x)
        n = len(x)
        if n > self.SPARSE_ROWS:
            raise ValueError(f"released_split takes at most {self.SPARSE_ROWS} rows, got {n}")
        if n < self.SPARSE_ROWS:
            x = np.concatenate([x, np.zeros((self.SPARSE_ROWS - n, x.shape[1]), dtype=x.dtype)])
        dense, rest = self.sparse_split(x)
        return dense[:n], rest[:n]

    def class_sums(self, X: torch.Tensor, y: torch.Tensor | None = None, n_classes: int | None = None,
                   batch_size: int | None = None, weights: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`FeatureMap.class_sums` (every record's row bounded first; float64 sums) through
        :meth:`sparse_split`: the one-hot parts are added from their non-zeros, never materialised dense (on
        intrusion's 21,370 features about 4x faster). Tensors on another device, and rows that are not encoded
        records (two non-zeros in a one-hot block), take the generic route; both give the same sums. ``batch_size``
        is the generic route's; the sparse route reads :attr:`SPARSE_ROWS` records at a time."""
        if X.device.type != "cpu" or self.n_cat == 0:
            return super().class_sums(X, y, n_classes, batch_size, weights)
        K = n_classes if y is not None else 1
        acc = np.zeros((K, self.out_dim))
        rows = self.SPARSE_ROWS
        for start in range(0, X.shape[0], rows):
            try:
                gauss, rest = self.released_split(X[start:start + rows].detach().numpy())
            except InvalidParameterError:                       # not encoded records: the generic route
                return super().class_sums(X, y, n_classes, batch_size, weights)
            n, R = gauss.shape
            cls = np.zeros(n, dtype=np.int64) if y is None else y[start:start + rows].numpy()
            w = np.ones(n) if weights is None else weights[start:start + rows].double().numpy()
            each = sp.csr_matrix((w, (cls, np.arange(n))), shape=(K, n))         # row i into its class, weighted
            acc[:, :R] += each @ gauss.astype(np.float64, copy=False)
            acc[:, R:] += (each @ rest).toarray()
        return torch.from_numpy(acc)

    def _sparse_pairs(self, idx, val, offset: int, share: float, sq: np.ndarray):
        """The pairs part's entries: block i's category a and block j's b at a * size_j + b of pair (i, j)."""
        n, sizes, parts = len(idx), self.category_sizes, []
        for i in range(self.n_cat):
            for j in range(i + 1, self.n_cat):
                rows = np.nonzero((idx[:, i] >= 0) & (idx[:, j] >= 0))[0]
                parts.append((rows, offset + idx[rows, i] * sizes[j] + idx[rows, j], val[rows, i] * val[rows, j]))
                offset += sizes[i] * sizes[j]
        rows, cols, vals = (np.concatenate(p) for p in zip(*parts))
        return _scaled(rows, cols, vals, n, math.sqrt(self.n_pairs), share, sq)

    def _sparse_cross(self, num, idx, val, starts, offset: int, share: float, sq: np.ndarray):
        """The numeric x categorical part's entries: hat (j, b) of numeric column j times one-hot column k at
        (j B + b) onehot_dim + k (:meth:`_cross`'s layout); at most two hats a column are non-zero."""
        B, n = self.cross_bins, len(num)
        pos = num * (B - 1)
        low = np.floor(pos)
        bins = np.stack([low, low + 1], -1)                                   # (n, J, 2)
        hat = np.where((bins >= 0) & (bins < B), np.maximum(1.0 - np.abs(pos[..., None] - bins), 0.0), 0.0)
        hcol = (np.arange(self.n_numeric)[None, :, None] * B + np.clip(np.nan_to_num(bins), 0, B - 1).astype(np.int64))
        kcol = np.where(idx >= 0, starts[None, :] + idx, -1)                 # (n, K)
        keep = (hat[..., None] > 0) & (kcol[:, None, None, :] >= 0)           # (n, J, 2, K)
        # every (row, column, hat, block) at once, then the kept ones in row-major order (rows ascending), as
        # np.nonzero(keep) would list them: one pass each instead of gathers by four index arrays
        cols = (offset + hcol[..., None] * self.onehot_dim + kcol[:, None, None, :])[keep]
        vals = (hat[..., None] * val[:, None, None, :])[keep]
        r = np.repeat(np.arange(n), keep.reshape(n, -1).sum(1))
        return _scaled(r, cols, vals, n, math.sqrt(self.n_cross), share, sq)

    def _pairs(self, cat: torch.Tensor) -> torch.Tensor:
        """Every two one-hot blocks' outer product, pair (i, j) for i < j in order, block i's category a and block
        j's b at a * size_j + b (:meth:`_sparse_pairs`' layout): the rows' outer products gathered in that layout,
        one product and one gather in place of one product per pair (the same values; about 4x faster forward and
        backward on cervical's 253 pairs)."""
        outer = (cat[:, :, None] * cat[:, None, :]).reshape(len(cat), -1)
        return outer.index_select(1, self._pair_cells(cat.device))

    def _pair_cells(self, device) -> torch.Tensor:
        """The pairs' layout as positions in the flattened (onehot_dim, onehot_dim) outer product of a row's one-hot
        part: pair (i, j), i < j, entry (a, b) at (start_i + a) * onehot_dim + start_j + b (public: the sizes)."""
        cells = getattr(self, "_cells", None)
        if cells is None:
            sizes, D = self.category_sizes, self.onehot_dim
            starts = np.cumsum([0] + sizes[:-1])
            cells = self._cells = torch.from_numpy(np.concatenate([
                ((starts[i] + np.arange(a))[:, None] * D + starts[j] + np.arange(b)[None, :]).ravel()
                for i, a in enumerate(sizes) for j, b in enumerate(sizes) if j > i]))
        return cells.to(device)

    def weighted_sum(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sum_i phi(x_i) weights_i^T as a (D, K) matrix without materialising the products: the pairs part is
        (W_k-scaled one-hot part)^T x (one-hot part) gathered at :meth:`_pair_cells`, the numeric x categorical
        part (W_k-scaled hat histograms)^T x (one-hot part), each row's scale from its squared norm in closed form
        (||a (x) b|| = ||a|| ||b||; clamped before the root: a zero row gets a zero gradient). The generator's side
        of the loss (never a release: :meth:`class_sums` bounds rows through :meth:`sparse_split`); same value and
        gradient as ``phi.T @ W`` up to rounding (tested). On cervical's 7,193 features a DP-MERF step's map went
        from 59 to 9.5 ms (benchmarks/log/2026-11-28.md#dpmerf-speed)."""
        if not self.n_cat:
            return super().weighted_sum(x, weights)
        w = weights.to(x.dtype)
        K = w.shape[1]
        out = []
        if self.rff is not None:
            inputs = x if self.rff_inputs == "all" else x[:, :self.n_numeric]
            out.append(math.sqrt(self.a) * (self.rff(inputs).T @ w))
        cat = x[:, self.n_numeric:]
        cat2 = cat * cat
        if self.n_pairs:                   # each block's squared norm: the pairs' norms need them, and they add up
            blocks = torch.stack([b.sum(1) for b in torch.split(cat2, self.category_sizes, dim=1)], 1)
            cat_sq = blocks.sum(1)
        else:
            cat_sq = cat2.sum(1)
        share = math.sqrt((1.0 - self.a) / (1 + bool(self.n_pairs) + bool(self.n_cross)))
        out.append(cat.T @ (w * (share / torch.clamp(cat_sq, min=self.n_cat).sqrt())[:, None]))
        if self.n_pairs:
            pair_sq = (blocks.sum(1) ** 2 - (blocks * blocks).sum(1)) / 2          # sum over i < j of s_i s_j
            scale = share / torch.clamp(pair_sq, min=self.n_pairs).sqrt()
            full = (cat.T[None] * (w.T * scale)[:, None, :]) @ cat                 # (K, D1, D1)
            out.append(full.reshape(K, -1).index_select(1, self._pair_cells(x.device)).T)
        if self.n_cross:
            hat = self._hats(x[:, :self.n_numeric]).reshape(len(x), -1)            # (n, J B)
            scale = share / torch.clamp((hat * hat).sum(1) * cat_sq, min=self.n_cross).sqrt()
            cross = (hat.T[None] * (w.T * scale)[:, None, :]) @ cat                # (K, J B, D1)
            out.append(cross.reshape(K, -1).T)
        return torch.cat(out, 0)

    def _hats(self, num: torch.Tensor) -> torch.Tensor:
        """(n, J, B): every numeric column's ``cross_bins`` hat functions on [0, 1] (a linear-interpolation
        histogram, differentiable)."""
        steps = torch.arange(self.cross_bins, dtype=num.dtype, device=num.device)
        return torch.clamp(1.0 - (num[:, :, None] * (self.cross_bins - 1) - steps).abs(), min=0.0)

    def _cross(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        """Every numeric column's hat-function histogram times every one-hot block, scaled to norm <= 1
        (each product has norm <= 1; divided by max(norm, sqrt(numeric x categorical columns)))."""
        hat = self._hats(num)                                                   # (n, J, B)
        cross = (hat[:, :, :, None] * cat[:, None, None, :]).reshape(len(num), -1)   # one product for all blocks
        return cross / torch.clamp(cross.norm(dim=1, keepdim=True), min=math.sqrt(self.n_cross))

    def spec(self) -> dict:
        return {"name": self.name, "n_numeric": self.n_numeric, "n_categorical_columns": self.n_cat,
                "onehot_dim": self.onehot_dim, "n_features": self.rff.n_features if self.rff else 0,
                "length_scale": self.rff.length_scale if self.rff else None,
                "seed": self.rff.seed if self.rff else 0, "rff_inputs": self.rff_inputs,
                "category_sizes": self.category_sizes, "captures": self.captures, "cross_sizes": self.cross_sizes,
                "cross_bins": self.cross_bins}


def _scaled(rows, cols, vals, n: int, floor: float, share: float, sq: np.ndarray):
    """One part's entries scaled as :meth:`MixedRFF.__call__` scales it (sqrt(share) / max(row norm, floor));
    adds the scaled rows' squared norms to ``sq``."""
    norm = np.sqrt(np.bincount(rows, vals ** 2, minlength=n))
    scale = math.sqrt(share) / np.maximum(norm, floor)
    out = vals * scale[rows]
    sq += np.bincount(rows, out ** 2, minlength=n)
    return rows, cols, out


def _one_per_block(rows, cols, vals, n: int, sizes, starts) -> tuple[np.ndarray, np.ndarray]:
    """Each row's category (index within its block, -1 for none) and value in every one-hot block (of ``sizes``,
    starting at ``starts``), (n, K) each; refuses a row holding two non-zeros in one block (not an encoded record)."""
    block = np.repeat(np.arange(len(sizes)), sizes)[cols]
    if len(rows) and np.bincount(rows * len(sizes) + block, minlength=n * len(sizes)).max() > 1:
        raise InvalidParameterError("sparse_split needs rows with at most one non-zero in each one-hot block "
                                    "(encoded records).")
    idx, val = np.full((n, len(sizes)), -1, dtype=np.int64), np.zeros((n, len(sizes)))
    idx[rows, block], val[rows, block] = cols - starts[block], vals
    return idx, val
