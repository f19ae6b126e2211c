"""Kernel ridge regression of a target batch on a support set (the KIP loss).

Labels are centred one-hot vectors (one-hot minus 1/C). The regulariser is scaled by the
kernel's size, as DP-KIP's code does: K_ss + lambda * trace(K_ss) / m * I, solved by Cholesky.
"""
from __future__ import annotations

import torch


def to_kernel_space(x: torch.Tensor) -> torch.Tensor:
    """The fixed public map from data in [0, 1] to the kernel's inputs."""
    return (x.reshape(x.shape[0], -1).to(torch.float32) - 0.5) / 0.5


def centred_one_hot(y: torch.Tensor, n_classes: int, dtype=torch.float32) -> torch.Tensor:
    return torch.nn.functional.one_hot(y.long(), n_classes).to(dtype) - 1.0 / n_classes


def ridge_cholesky(k_ss: torch.Tensor, reg: float) -> torch.Tensor:
    """Cholesky factor of the regularised support kernel K_ss + reg * tr(K_ss)/m * I."""
    m = k_ss.shape[0]
    eye = torch.eye(m, dtype=k_ss.dtype, device=k_ss.device)
    return torch.linalg.cholesky(k_ss + reg * torch.trace(k_ss) / m * eye)


def krr_weights(k_ss: torch.Tensor, y_s: torch.Tensor, reg: float) -> torch.Tensor:
    """alpha = (K_ss + reg * tr(K_ss)/m * I)^-1 y_s, by a Cholesky solve (differentiable)."""
    return torch.cholesky_solve(y_s.to(k_ss.dtype), ridge_cholesky(k_ss, reg))


def krr_predict(kernel, x_s: torch.Tensor, y_s: torch.Tensor, x_t: torch.Tensor, reg: float) -> torch.Tensor:
    """Predictions (n_t, C) for ``x_t`` of the KRR fitted on the support set (x_s, y_s)."""
    return kernel(x_t, x_s) @ krr_weights(kernel(x_s), y_s, reg)


def krr_loss(kernel, x_s, y_s, x_t, y_t, reg: float) -> torch.Tensor:
    """0.5 * mean over targets and classes of (prediction - y_t)^2."""
    return 0.5 * ((krr_predict(kernel, x_s, y_s, x_t, reg) - y_t) ** 2).mean()


def krr_accuracy(kernel, x_s, y_s, x_t, labels_t, reg: float, batch: int = 2000) -> float:
    """Test accuracy of the KRR classifier (argmax of the prediction), in batches of targets."""
    with torch.no_grad():
        alpha = krr_weights(kernel(x_s), y_s, reg)
        correct = 0
        for start in range(0, x_t.shape[0], batch):
            pred = kernel(x_t[start:start + batch].to(x_s.dtype), x_s) @ alpha
            correct += int((pred.argmax(1) == labels_t[start:start + batch]).sum())
    return correct / x_t.shape[0]
