"""Evaluation: downstream classifiers trained on synthetic data, tested on real data;
image grids; Frechet distances on a named feature network."""
from .downstream import IMAGE_CLASSIFIERS, image_classifier_scores
from .grid import save_image_grid

__all__ = ["IMAGE_CLASSIFIERS", "image_classifier_scores", "save_image_grid"]
