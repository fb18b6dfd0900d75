"""Run → Token limit…: the saved cap on the tokens a run analyses, its menu text and its dialog.

A run analyses at most ``min(cap, the model's context)`` tokens (``analysis.run.inference.token_limit``),
special tokens included; the menu shows that number, and says which of the two it is when the model's
context is the smaller. The dialog accepts no cap smaller than :meth:`TokenLimit.minimum`: room for the
model's special tokens and one token of text."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6 import QtCore, QtGui, QtWidgets

from analysis.run.tokenize import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    from analysis.model.loaded import ModelInfo

MAX_TOKENS_LIMIT = 1_000_000  # the most the dialog accepts (the model's context caps it anyway)
MIN_TOKENS_NO_MODEL = 2  # before a model is loaded: a BOS and one token of text


class TokenLimit(QtCore.QObject):
    """The cap, saved as ``run/max_tokens`` in ``settings``, shown in ``action``'s text together with the
    loaded model's context (:meth:`set_context`, e.g. connected to the window's ``model_ready``).
    ``changed(cap)`` is emitted when :meth:`set` saves another cap (not when the model changes)."""

    changed = QtCore.Signal(int)

    def __init__(self, settings: QtCore.QSettings, action: QtGui.QAction, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.settings, self.action = settings, action
        self.context: int | None = None  # the loaded model's context in tokens; None before a model is loaded
        self.n_special: int | None = None  # the special tokens it puts around a text (BOS on); None: no model
        self.launch_cap: int | None = None  # main.py --max-tokens: this session's cap, not saved (None: the saved one)
        self._show()

    def value(self) -> int:
        """The cap: the launch option's for this session (:meth:`use_for_session`), else the saved one; the
        default when none, or a bad one, is saved."""
        if self.launch_cap is not None:
            return self.launch_cap
        try:
            value = int(self.settings.value("run/max_tokens", DEFAULT_MAX_TOKENS))
        except (TypeError, ValueError):
            return DEFAULT_MAX_TOKENS
        return value if 1 <= value <= MAX_TOKENS_LIMIT else DEFAULT_MAX_TOKENS

    def applies(self) -> int:
        """The most tokens a run analyses now: the smaller of the cap and the model's context (the cap
        alone before a model is loaded)."""
        return self.value() if self.context is None else min(self.value(), self.context)

    def minimum(self) -> int:
        """The smallest cap the dialog accepts: the loaded model's special tokens (``ModelInfo.n_special``)
        plus one token of text; :data:`MIN_TOKENS_NO_MODEL` before a model is loaded."""
        return MIN_TOKENS_NO_MODEL if self.n_special is None else self.n_special + 1

    def use_for_session(self, value: int) -> None:
        """``main.py --max-tokens N``: cap runs at ``value`` tokens until the app closes or the cap is set in the
        dialog, without saving it (the next launch has the saved cap again). At least 1, at most MAX_TOKENS_LIMIT."""
        if not 1 <= int(value) <= MAX_TOKENS_LIMIT:
            raise ValueError(f"the token limit must be between 1 and {MAX_TOKENS_LIMIT:,}")
        before = self.value()
        self.launch_cap = int(value)
        self._show()
        if self.value() != before:
            self.changed.emit(self.value())

    def set(self, value: int) -> None:
        """Save ``value`` as the cap (it replaces a launch option's); emit ``changed`` when the cap changes."""
        before = self.value()
        self.launch_cap = None
        self.settings.setValue("run/max_tokens", int(value))
        self._show()
        if self.value() != before:
            self.changed.emit(self.value())

    def set_context(self, model: ModelInfo) -> None:
        """The loaded model's context (its ``context_length``, in tokens) and special tokens."""
        self.context = int(model.context_length)
        self.n_special = int(model.n_special)
        self._show()

    def dialog(self, parent: QtWidgets.QWidget) -> QtWidgets.QInputDialog:
        """The dialog that asks for a cap: from :meth:`minimum` to :data:`MAX_TOKENS_LIMIT`, the cap first.
        Its text holds whatever number is typed: it names the model's context and says the smaller applies."""
        dialog = QtWidgets.QInputDialog(parent)
        dialog.setWindowTitle("Token limit")
        dialog.setInputMode(QtWidgets.QInputDialog.InputMode.IntInput)
        dialog.setIntRange(self.minimum(), MAX_TOKENS_LIMIT)
        dialog.setIntStep(64)
        dialog.setIntValue(max(self.minimum(), self.value()))
        dialog.setLabelText(self._dialog_text())
        return dialog

    def ask(self, parent: QtWidgets.QWidget) -> None:
        """Ask for a new cap in a dialog over ``parent``; keep it unless cancelled."""
        dialog = self.dialog(parent)
        if dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted:
            self.set(dialog.intValue())

    def _dialog_text(self) -> str:
        lines = ["Analyse at most this many tokens of a text, special tokens included (a longer text is cut)."]
        if self.context is None:
            lines.append("The model's own context may hold fewer: a run analyses the smaller of the two.")
        else:
            lines.append(f"This model's context holds {self.context:,} tokens: a run analyses the smaller of the two.")
        if self.n_special:
            s = "" if self.n_special == 1 else "s"
            lines.append(f"At least {self.minimum():,}: room for the model's {self.n_special} special token{s} "
                         "(BOS on) and one token of text.")
        return "\n".join(lines)

    def _show(self) -> None:
        cap = self.value()
        if self.context is not None and self.context < cap:
            self.action.setText(f"Token limit ({self.context:,}: the model's context; your cap {cap:,})…")
        else:
            self.action.setText(f"Token limit ({cap:,})…")
        if self.launch_cap is not None:
            self.action.setText(self.action.text()[:-1] + " — from --max-tokens, not saved…")
        self.action.setToolTip(f"The most tokens a run analyses: your cap ({cap:,}) or the model's context"
                               + ("" if self.context is None else f" ({self.context:,})")
                               + ", whichever is smaller; the attention takes layers × heads × tokens² × 4 bytes")
