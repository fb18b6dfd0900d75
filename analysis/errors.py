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


class PickleWeightsError(ModelLoadError):
    """The folder holds only pickle weights (``*.bin``), refused unless the user opts in.

    The UI offers "Load anyway (I trust it)" on this class, never by reading the message.
    """

    def __init__(self, message: str, source: str = ""):
        super().__init__(message)
        self.source = source


class HubUnreachableError(ModelLoadError):
    """A hub model is not in the local cache and the hub cannot be reached (offline, no network).

    The UI offers Retry on this class; ``source`` is the hub id.
    """

    def __init__(self, message: str, source: str = ""):
        super().__init__(message)
        self.source = source


class WeightsMismatchError(ModelLoadError):
    """The weights file does not hold the tensors the config asks for (missing or foreign keys)."""


class ModelCheckError(ModelLoadError):
    """The model loads but cannot run correctly (bad config, tokenizer ids past the embedding, non-finite output)."""
