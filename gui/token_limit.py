"""Run → Token limit…: the saved cap on the tokens a run analyses, its menu text and its dialog."""
from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from analysis.inference import DEFAULT_MAX_TOKENS

MAX_TOKENS_LIMIT = 1_000_000  # the most the dialog accepts (the model's context caps it anyway)


class TokenLimit:
    """The cap, saved as ``run/max_tokens`` in ``settings``, shown in ``action``'s text."""

    def __init__(self, settings: QtCore.QSettings, action: QtGui.QAction):
        self.settings, self.action = settings, action
        self.action.setToolTip("The most tokens a run analyses (the model's context may hold fewer); "
                               "the attention takes layers × heads × tokens² × 4 bytes")
        self._show()

    def value(self) -> int:
        """The saved cap; the default when none, or a bad one, is saved."""
        try:
            value = int(self.settings.value("run/max_tokens", DEFAULT_MAX_TOKENS))
        except (TypeError, ValueError):
            return DEFAULT_MAX_TOKENS
        return value if 1 <= value <= MAX_TOKENS_LIMIT else DEFAULT_MAX_TOKENS

    def set(self, value: int) -> None:
        self.settings.setValue("run/max_tokens", int(value))
        self._show()

    def ask(self, parent: QtWidgets.QWidget) -> None:
        """Ask for a new cap in a dialog over ``parent``; keep it unless cancelled."""
        value, ok = QtWidgets.QInputDialog.getInt(
            parent, "Token limit", "Analyse at most this many tokens of a text (a longer text is cut;\n"
            "the model's own context may hold fewer):", self.value(), 1, MAX_TOKENS_LIMIT, 64)
        if ok:
            self.set(value)

    def _show(self) -> None:
        self.action.setText(f"Token limit ({self.value():,})…")
