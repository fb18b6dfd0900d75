"""Errors whose message is meant for the user, as is: one line, says what to do."""
from __future__ import annotations


class AttnScopeError(Exception):
    """Base class: ``str(error)`` is a complete, user-facing sentence."""


class ModelLoadError(AttnScopeError):
    """The model could not be found, read, or is not supported."""


class DeviceError(AttnScopeError):
    """The requested device or dtype is not available on this machine."""


class InputError(AttnScopeError):
    """The text or matrices given by the user cannot be analysed."""


class ExportError(AttnScopeError):
    """Something could not be written."""
