"""Generators trained against a release: image (conv, ResNet) and tabular (mixed heads)."""
from ..errors import unknown_name
from .base import ConditionalGenerator
from .image import ConvGenerator, FCGenerator, ResNetGenerator, default_generator_spec
from .table import TableGenerator

GENERATORS = {"conv": ConvGenerator, "fc": FCGenerator, "resnet": ResNetGenerator, "table": TableGenerator}


def build_generator(spec: dict, *, saved: bool = False) -> ConditionalGenerator:
    """The generator ``spec`` describes. A key the spec leaves out takes the class's default, except with
    ``saved=True`` (a spec read back from a model or checkpoint file): there a key in the class's ``LEGACY_SPEC``
    takes its legacy value, since a file without it was written before the option existed."""
    spec = dict(spec)
    kind = spec.pop("name", None)
    if kind not in GENERATORS:
        raise unknown_name("generator", str(kind), GENERATORS)
    cls = GENERATORS[kind]
    return cls(**{**(getattr(cls, "LEGACY_SPEC", {}) if saved else {}), **spec})


__all__ = ["ConditionalGenerator", "ConvGenerator", "FCGenerator", "GENERATORS", "ResNetGenerator", "TableGenerator",
           "build_generator", "default_generator_spec"]
