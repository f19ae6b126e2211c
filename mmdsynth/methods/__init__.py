"""Methods by name: fit / sample / save / load."""
from .base import KernelGeneratorMethod, load
from .contract import METHODS, Method, register
from .kernel import DPHP, DPMERF, DPNTK, DPRandConv
from .kip import DPKIP
from .mepf import DPMEPF
from .marginal import AIM, MST
from .hybrid import Hybrid

__all__ = ["AIM", "DPHP", "DPKIP", "DPMEPF", "DPMERF", "DPNTK", "DPRandConv", "Hybrid", "KernelGeneratorMethod", "METHODS", "MST", "Method",
           "load", "register"]
