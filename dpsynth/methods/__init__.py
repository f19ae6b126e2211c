"""Methods by name: fit / sample / save / load."""
from .base import METHODS, KernelGeneratorMethod, load
from .kernel import DPMERF, DPNTK

__all__ = ["DPMERF", "DPNTK", "KernelGeneratorMethod", "METHODS", "load"]
