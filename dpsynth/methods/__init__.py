"""Methods by name: fit / sample / save / load."""
from .base import METHODS, KernelGeneratorMethod, load
from .kernel import DPMERF, DPNTK
from .kip import DPKIP

__all__ = ["DPKIP", "DPMERF", "DPNTK", "KernelGeneratorMethod", "METHODS", "load"]
