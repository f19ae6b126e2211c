"""Generators trained against a release: image (conv, ResNet) generators."""
from .image import GENERATORS, ConvGenerator, ResNetGenerator, build_generator

__all__ = ["GENERATORS", "ConvGenerator", "ResNetGenerator", "build_generator"]
