"""DP-KIP's public mathematics: infinite-width NTK kernels and kernel ridge regression (the step's clipped gradients
are a statistic, :mod:`mmdsynth.statistics.gradients`; the step itself runs in :mod:`mmdsynth.privacy.dpsgd`)."""
from .kernels import FCReLUKernel
from .krr import centred_one_hot, krr_accuracy, krr_loss, krr_predict, krr_weights

__all__ = ["FCReLUKernel", "centred_one_hot", "krr_accuracy", "krr_loss", "krr_predict", "krr_weights"]
