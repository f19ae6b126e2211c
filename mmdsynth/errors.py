"""Typed exceptions. Each subclasses a built-in so generic handlers still work.

Messages name the parameter, what is allowed, what was given, and the fix.
"""


class MmdsynthError(Exception):
    """Base class of every error mmdsynth raises on purpose."""


class InvalidParameterError(MmdsynthError, ValueError):
    """A parameter is outside its allowed range or has the wrong type."""


class DataValidationError(MmdsynthError, ValueError):
    """The data handed in cannot be used (NaN, empty, one class, bad shapes...)."""


class SchemaError(MmdsynthError, ValueError):
    """A table schema is malformed or does not match the data."""


class PrivacyBudgetError(MmdsynthError, ValueError):
    """A release would exceed the declared privacy budget."""


class UnknownParameterError(InvalidParameterError, TypeError):
    """A method was given a keyword it does not take (a TypeError, as Python's own, and an InvalidParameterError)."""


class UnknownNameError(MmdsynthError, LookupError):
    """A registry lookup (dataset, method, accountant, feature map) failed."""


class DatasetNotFoundError(MmdsynthError, LookupError):
    """A dataset's files are not on disk and could not be downloaded."""


class ArtifactError(MmdsynthError, ValueError):
    """A saved release or model on disk is missing, corrupt or of another version."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training: the state was checkpointed in ``checkpoint_dir`` (when there is one)."""

    def __init__(self, iteration: int, checkpoint_dir):
        super().__init__(iteration, checkpoint_dir)
        self.iteration, self.checkpoint_dir = iteration, checkpoint_dir


def one_of(value, allowed) -> bool:
    """Whether ``value`` is one of a closed list ``allowed``, compared by value and type (``True`` is not ``1``, ``1``
    not ``1.0``): a parameter's declared choices, checked by the methods and by the command line alike."""
    return any(value == a and type(value) is type(a) for a in allowed)


def unknown_name(kind: str, given: str, known) -> UnknownNameError:
    """Build the standard 'unknown NAME' error listing what is allowed."""
    known = sorted(known)
    return UnknownNameError(
        f"unknown {kind} {given!r}; choose one of: {', '.join(known)}"
    )
