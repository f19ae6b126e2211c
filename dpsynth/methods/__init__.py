"""Methods by name: fit / sample / save / load."""
from .base import KernelGeneratorMethod, load
from .contract import METHODS, Method, register
from .kernel import DPHP, DPMERF, DPNTK
from .kip import DPKIP
from .mepf import DPMEPF

__all__ = ["DPHP", "DPKIP", "DPMEPF", "DPMERF", "DPNTK", "KernelGeneratorMethod", "METHODS", "Method", "load",
           "register"]
