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


class ChatFormatError(InputError):
    """The text cannot be run in the model's chat format (``--chat``, the app's *Chat format*): the model has
    no chat template, or its template does not render a user turn."""


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


class Interrupted(AttnScopeError):
    """The user stopped the work (Ctrl+C, SIGTERM); raised only at a safe point, never inside a paint.

    ``signum`` is the signal's number; a command line exits with ``128 + signum`` (130, 143).
    """

    def __init__(self, message: str, signum: int = 2):
        super().__init__(message)
        self.signum = signum


class AnalysisCancelled(AttnScopeError):
    """The user cancelled a long analysis (a scan, an importance map) between two of its steps.

    ``partial``: what was finished before the Cancel, for the caller to show as partial (None: nothing kept)."""

    def __init__(self, message: str, partial: object = None):
        super().__init__(message)
        self.partial = partial


_ANSI = None


def one_line(text: object, limit: int = 400) -> str:
    """A message fit for one line: ANSI colour codes removed, the first non-empty line (joined with the
    next when it ends in ":", as "Validation error for field 'n_head':" does), and, when that is longer
    than ``limit``, cut after its last whole sentence (or word) with "…" — never mid-word."""
    import re

    global _ANSI
    if _ANSI is None:
        _ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
    lines = [line.strip() for line in _ANSI.sub("", str(text)).splitlines() if line.strip()]
    line = lines[0] if lines else ""
    if line.endswith(":") and len(lines) > 1:  # what the colon announces is on the next line
        line = f"{line} {lines[1]}"
    line = "".join(ch if ch.isprintable() else " " for ch in line)
    if len(line) <= limit:
        return line
    head = line[:limit]
    for end in (". ", "; ", ", ", " "):
        cut = head.rfind(end)
        if cut > limit // 2:
            return head[: cut + (1 if end != " " else 0)].rstrip() + ("" if end == ". " else " …")
    return head.rstrip() + "…"
