"""Frechet distance between real and synthetic images on a named feature network.

The Inception-v3 network of the FID cannot be downloaded here, so the default
network is a small CNN classifier that mmdsynth trains on the dataset's real
training split (an evaluation tool, never part of a release) and caches as
safetensors. The score is always reported with the network's name
(``fd[mmdsynth-cnn/<dataset>]``) so nobody mistakes it for the Inception FID.
Any other ``feature_fn`` (a callable from images to (n, k) features) can be
plugged into :func:`frechet_distance_of`.
"""
from __future__ import annotations

import json
import logging

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .._io import atomic_write
from ..data.fetch import cache_dir

logger = logging.getLogger(__name__)
NET_VERSION = 1


class FeatureCNN(nn.Module):
    """conv(32) -> pool -> conv(64) -> pool -> FC 128 (features) -> FC classes."""

    def __init__(self, image_shape, n_classes: int):
        super().__init__()
        c, h, w = image_shape
        self.body = nn.Sequential(
            nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(64 * (h // 4) * (w // 4), 128), nn.ReLU(),
        )
        self.head = nn.Linear(128, n_classes)

    def forward(self, x):
        return self.head(self.body(x))

    @torch.no_grad()
    def features(self, x, batch_size: int = 2000) -> np.ndarray:
        self.eval()
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        return torch.cat([self.body(b) for b in x.split(batch_size)]).double().numpy()


def train_feature_cnn(x, y, n_classes: int, *, epochs: int = 3, seed: int = 0) -> FeatureCNN:
    """Plain supervised training (Adam, batch 128) on real images."""
    x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(y), dtype=torch.long)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = FeatureCNN(tuple(x.shape[1:]), n_classes)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        net.train()
        for _ in range(epochs):
            for idx in torch.randperm(len(x)).split(128):
                opt.zero_grad()
                nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
    return net.eval()


def feature_cnn_for(data, seed: int = 0) -> FeatureCNN:
    """The cached feature CNN of a registered image dataset (trained on first use)."""
    folder = cache_dir() / "feature_nets"
    stem = f"{data.name}-cnn-v{NET_VERSION}-seed{seed}"
    weights, meta_path = folder / f"{stem}.safetensors", folder / f"{stem}.json"
    net = FeatureCNN(tuple(data.x_train.shape[1:]), data.n_classes)
    if weights.exists() and meta_path.exists():
        net.load_state_dict(load_file(str(weights)))
        return net.eval()
    logger.info("training the feature CNN for %s (cached in %s)", data.name, folder)
    net = train_feature_cnn(data.x_train, data.y_train, data.n_classes, seed=seed)
    with torch.no_grad():
        acc = float((net(data.x_test).argmax(1) == data.y_test).double().mean())
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_write(weights) as tmp:
        save_file(net.state_dict(), str(tmp))
    meta_path.write_text(json.dumps({"dataset": data.name, "test_accuracy": acc, "version": NET_VERSION}))
    return net


def frechet_distance(f1: np.ndarray, f2: np.ndarray) -> float:
    """||m1 - m2||^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2)) of two feature sets (rows = samples)."""
    f1, f2 = np.asarray(f1, dtype=np.float64), np.asarray(f2, dtype=np.float64)
    m1, m2 = f1.mean(0), f2.mean(0)
    s1, s2 = np.cov(f1, rowvar=False), np.cov(f2, rowvar=False)
    return float(((m1 - m2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * trace_sqrt_product(f1, f2, s1, s2))


def trace_sqrt_product(f1: np.ndarray, f2: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> float:
    """tr((S1 S2)^(1/2)) of the covariances ``s1``, ``s2`` of the feature sets ``f1``, ``f2`` (rows = samples), from
    eigenvalues instead of a general matrix square root (which took 10 s for 2,048 Inception features and was
    ill-conditioned where a covariance is singular: dead units, fewer samples than features).

    For any factors S1 = F1 F1^T and S2 = F2 F2^T, S1 S2 has the nonzero eigenvalues of (F1^T F2)(F1^T F2)^T, so the
    trace is the sum of the singular values of F1^T F2. A set with no more samples than features is its own factor
    (its centred rows / sqrt(n - 1)), which makes the product small and the answer exact for singular covariances.
    With more samples than features on both sides, R = S1^(1/2) (symmetric) gives the eigenvalues as those of
    R S2 R, real and >= 0 (below 0 by rounding they count as 0)."""
    d = s1.shape[0]
    if len(f1) > d and len(f2) > d:
        r = _psd_sqrt(s1)
        m = r @ s2 @ r
        return float(np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2.0), 0.0, None)).sum())

    def factor(f, s):
        return (f - f.mean(0)).T / np.sqrt(max(len(f) - 1, 1)) if len(f) <= d else _psd_sqrt(s)
    return float(np.linalg.svd(factor(f1, s1).T @ factor(f2, s2), compute_uv=False).sum())


def _psd_sqrt(s: np.ndarray) -> np.ndarray:
    """The symmetric square root of a covariance (eigenvalues below 0 by rounding taken as 0)."""
    w, v = np.linalg.eigh(s)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_distance_of(feature_fn, x_real, x_fake) -> float:
    return frechet_distance(feature_fn(x_real), feature_fn(x_fake))


def frechet_report(data, x_fake, seed: int = 0) -> dict:
    """{'fd_network': name, 'fd': value} against the real test split."""
    net = feature_cnn_for(data, seed)
    name = f"mmdsynth-cnn/{data.name}"
    return {"fd_network": name, "fd": frechet_distance_of(net.features, data.x_test.numpy(), x_fake)}
