"""DP-KIP: infinite-width NTK kernels, kernel ridge regression, DP-SGD on a support set."""
from .dpsgd import clipped_sum, private_gradient
from .kernels import FCReLUKernel
from .krr import centred_one_hot, krr_accuracy, krr_loss, krr_predict, krr_weights

__all__ = ["FCReLUKernel", "centred_one_hot", "clipped_sum", "krr_accuracy", "krr_loss", "krr_predict",
           "krr_weights", "private_gradient"]
