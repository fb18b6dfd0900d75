"""Run → Token limit…: the saved cap on the tokens a run analyses, its menu text and its dialog.

A run analyses at most ``min(cap, the model's context)`` tokens (``analysis.inference.token_limit``);
the menu shows that number, and says which of the two it is when the model's context is the smaller."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6 import QtCore, QtGui, QtWidgets

from analysis.inference import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    from analysis.loading import ModelInfo

MAX_TOKENS_LIMIT = 1_000_000  # the most the dialog accepts (the model's context caps it anyway)


class TokenLimit:
    """The cap, saved as ``run/max_tokens`` in ``settings``, shown in ``action``'s text together with the
    loaded model's context (:meth:`set_context`, e.g. connected to the window's ``model_ready``)."""

    def __init__(self, settings: QtCore.QSettings, action: QtGui.QAction):
        self.settings, self.action = settings, action
        self.context: int | None = None  # the loaded model's context in tokens; None before a model is loaded
        self._show()

    def value(self) -> int:
        """The saved cap; the default when none, or a bad one, is saved."""
        try:
            value = int(self.settings.value("run/max_tokens", DEFAULT_MAX_TOKENS))
        except (TypeError, ValueError):
            return DEFAULT_MAX_TOKENS
        return value if 1 <= value <= MAX_TOKENS_LIMIT else DEFAULT_MAX_TOKENS

    def applies(self) -> int:
        """The most tokens a run analyses now: the smaller of the cap and the model's context (the cap
        alone before a model is loaded)."""
        return self.value() if self.context is None else min(self.value(), self.context)

    def set(self, value: int) -> None:
        self.settings.setValue("run/max_tokens", int(value))
        self._show()

    def set_context(self, model: ModelInfo) -> None:
        """The loaded model's context (its ``context_length``, in tokens)."""
        self.context = int(model.context_length)
        self._show()

    def ask(self, parent: QtWidgets.QWidget) -> None:
        """Ask for a new cap in a dialog over ``parent``; keep it unless cancelled."""
        value, ok = QtWidgets.QInputDialog.getInt(
            parent, "Token limit", "Analyse at most this many tokens of a text (a longer text is cut;\n"
            f"{self._context_line()}):", self.value(), 1, MAX_TOKENS_LIMIT, 64)
        if ok:
            self.set(value)

    def _context_line(self) -> str:
        if self.context is None:
            return "the model's own context may hold fewer"
        return f"this model's context holds {self.context:,}, so a run analyses at most {self.applies():,}"

    def _show(self) -> None:
        cap = self.value()
        if self.context is not None and self.context < cap:
            self.action.setText(f"Token limit ({self.context:,}: the model's context; your cap {cap:,})…")
        else:
            self.action.setText(f"Token limit ({cap:,})…")
        self.action.setToolTip(f"The most tokens a run analyses: your cap ({cap:,}) or the model's context"
                               + ("" if self.context is None else f" ({self.context:,})")
                               + ", whichever is smaller; the attention takes layers × heads × tokens² × 4 bytes")
