"""The text box, which keeps a line longer than LONG_LINE_CHARS out of itself (gui/input/text_input.py holds
such a text outside the box)."""
from __future__ import annotations

import re

from PySide6 import QtCore, QtWidgets

LONG_LINE_CHARS = 100_000  # a text with a longer line is held outside the box (a line this long: ≤ 0.03 s a paint)
# Qt's block separators (QTextCursor.insertText): a run of more than LONG_LINE_CHARS others is one long line
_LONG_LINE = re.compile("[^\n\r\u2029]{%d}" % (LONG_LINE_CHARS + 1))


def has_long_line(text: str) -> bool:
    """Whether ``text`` has a line (a block of the box) longer than LONG_LINE_CHARS characters."""
    return len(text) > LONG_LINE_CHARS and _LONG_LINE.search(text) is not None


class TextBox(QtWidgets.QPlainTextEdit):
    """The text box: Tab moves the focus (a tab character is never typed into it). Two lines high at
    least; it takes any height the input area is given. A paste or drop that would make a line longer
    than LONG_LINE_CHARS is not inserted: ``long_text`` carries the text the box would then hold."""

    long_text = QtCore.Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setTabChangesFocus(True)
        self.setPlaceholderText("Type a sentence and press Ctrl+Enter (it also runs when you stop typing)")
        self.setToolTip("The text to analyse. Ctrl+Enter runs it; Ctrl+L comes back here from anywhere. "
                        "Drag the bar below the token strip to make this box taller.")
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding, QtWidgets.QSizePolicy.Policy.Expanding)
        self.setMinimumHeight(self.lines_height(2))

    def lines_height(self, lines: int) -> int:
        """The height that shows ``lines`` lines of text: the lines, the document margin and the frame."""
        margin = self.document().documentMargin()
        return int(lines * self.fontMetrics().lineSpacing() + 2 * margin + 2 * self.frameWidth())

    def sizeHint(self) -> QtCore.QSize:  # noqa: N802
        return QtCore.QSize(super().sizeHint().width(), self.minimumHeight())

    def insertFromMimeData(self, source) -> None:  # noqa: N802 (Qt's name: paste and drop)
        pasted = source.text() if source.hasText() else ""
        if len(pasted) > LONG_LINE_CHARS // 2 or len(pasted) + self.document().characterCount() > LONG_LINE_CHARS:
            cursor = self.textCursor()
            units = self.toPlainText().encode("utf-16-le")  # Qt's positions count UTF-16 code units
            start, end = 2 * cursor.selectionStart(), 2 * cursor.selectionEnd()
            after = units[:start].decode("utf-16-le") + pasted + units[end:].decode("utf-16-le")
            if has_long_line(after):
                self.long_text.emit(after)
                return
        super().insertFromMimeData(source)
