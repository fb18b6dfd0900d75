"""Picking an answer token: one of the run's top predictions, or typed.

A token is shown as the app shows tokens everywhere (``␣`` a leading space, ``↵`` a newline); typed, those two
marks stand for the characters they show, so " Mary" can be typed as ``␣Mary`` (a leading space in a text box
cannot be seen). The id of a typed token is found on the worker (``analysis.measures.attribution.single_token``,
which refuses a text of more than one token in one sentence).
"""
from __future__ import annotations

from dataclasses import dataclass

from PySide6 import QtCore, QtWidgets

NONE_TEXT = "(none)"


def typed_text(shown: str) -> str:
    """The text a token box holds, as the tokenizer reads it: ``␣`` → space, ``↵`` → newline."""
    return shown.replace("␣", " ").replace("↵", "\n")


def shown_text(text: str) -> str:
    """A token's text as a box shows it: a space → ``␣``, a newline → ``↵``."""
    return text.replace(" ", "␣").replace("\n", "↵")


@dataclass(frozen=True)
class Answer:
    """A token the user picked: its id when it came from the predictions (``token_id``), else the text typed."""

    shown: str  # as the box shows it ("␣Mary")
    token_id: int | None = None

    @property
    def text(self) -> str:
        return typed_text(self.shown)

    def resolve(self, loaded, what: str) -> int:
        """The token id, on the worker (a typed token must be a single token)."""
        if self.token_id is not None:
            return self.token_id
        from analysis.measures.attribution import single_token

        return single_token(loaded, self.text, what)

    def code(self) -> str:
        """How a snippet names it: the id, or ``single_token(loaded, ' Mary', …)``."""
        if self.token_id is not None:
            return str(self.token_id)
        return f"single_token(loaded, {self.text!r}, 'answer')"


class AnswerPicker(QtWidgets.QComboBox):
    """An editable list of the run's top predictions (with their p); typing names any other token. ``optional``
    adds "(none)" first: no wrong token. ``picked`` after a choice from the list or Enter."""

    picked = QtCore.Signal()

    def __init__(self, optional: bool = False, parent=None):
        super().__init__(parent)
        self.optional = optional
        self.setEditable(True)
        self.setInsertPolicy(QtWidgets.QComboBox.InsertPolicy.NoInsert)
        self.setMinimumContentsLength(10)
        self.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.lineEdit().setPlaceholderText("a token, ␣ for a space")
        self.activated.connect(lambda _i: self.picked.emit())
        self.lineEdit().returnPressed.connect(self.picked.emit)
        self._ids: dict[str, int] = {}

    def set_predictions(self, predictions, keep: bool = True) -> None:
        """Offer ``predictions`` (analysis.run.inference.Prediction, top first); ``keep`` the typed text when it is
        one of the new ones or was typed (not picked from the old list), else pick the first (the top prediction; "(none)" when optional)."""
        before = self.currentText()
        typed = bool(before) and before not in self._ids and before != NONE_TEXT  # not one of the old text's
        self.blockSignals(True)
        self.clear()
        self._ids = {}
        if self.optional:
            self.addItem(NONE_TEXT)
        for p in predictions:
            self._ids[p.token] = int(p.token_id)
            self.addItem(p.token)
            self.setItemData(self.count() - 1, f"p = {p.probability:.3f} (the run's next-token probability)",
                             QtCore.Qt.ItemDataRole.ToolTipRole)
        if keep and (typed or before in self._ids or (before == NONE_TEXT and self.optional)):
            self.setEditText(before)
        else:
            self.setCurrentIndex(0)
        self.blockSignals(False)

    def set_shown(self, shown: str) -> None:
        self.setEditText(shown)

    def answer(self) -> Answer | None:
        """The token picked (None: "(none)" or empty)."""
        shown = self.currentText()
        if not shown or shown == NONE_TEXT:
            return None
        return Answer(shown, self._ids.get(shown))
