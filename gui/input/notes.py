"""Notes and banners across the top of the window, and the light/dark question."""
from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

NOTE_COLOURS = {"info": ("#e7f1ff", "#0b3d91"), "warning": ("#fff4d6", "#6b4e00"), "error": ("#ffe3e3", "#8a1020")}


def is_dark() -> bool:
    """Whether the desktop asks for a dark theme (Qt's colour scheme, else the palette's window colour)."""
    hints = QtGui.QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is not None and scheme() != QtCore.Qt.ColorScheme.Unknown:
        return scheme() == QtCore.Qt.ColorScheme.Dark
    return QtWidgets.QApplication.palette().color(QtGui.QPalette.ColorRole.Window).lightness() < 128


class NoteBar(QtWidgets.QFrame):
    """A note across the window (info, warning or error) with optional action buttons.

    The text is plain text (never HTML): messages quote file names and tokens as they are. With
    ``one_line`` the note takes one line, elided ("…") to the width it has, and its tooltip holds the
    whole text (the first-start note must not take the plots' room on a laptop); otherwise it wraps."""

    def __init__(self, parent=None, one_line: bool = False):
        super().__init__(parent)
        self.one_line = one_line
        self._text = ""
        self.about: str | None = None  # the model source the note is about (see show_note)
        self.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.label = QtWidgets.QLabel(self)
        self.label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.label.setWordWrap(not one_line)
        self.label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        if one_line:
            self.label.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.buttons = QtWidgets.QHBoxLayout()
        self.close_button = close = QtWidgets.QToolButton(self)
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(8, 1, 2, 1)
        layout.addWidget(self.label, 1)
        layout.addLayout(self.buttons)
        layout.addWidget(close)
        self.hide()

    def show_note(self, text: str, kind: str = "info", actions=(), about: str | None = None) -> None:
        """Show ``text``; ``actions`` is a list of (button label, callback). ``about``: the model source the
        note describes (the window hides the note once another model is loaded), None for any."""
        self.about = about
        bg, fg = NOTE_COLOURS[kind]
        self.setStyleSheet(f"NoteBar {{ background: {bg}; border: 1px solid {fg}33; border-radius: 4px; }}"
                           f"QLabel {{ color: {fg}; }}")
        self._text = text
        self.label.setToolTip(text if self.one_line else "")
        self._fit_text()
        while self.buttons.count():
            item = self.buttons.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        for label, callback in actions:
            button = QtWidgets.QPushButton(label)
            button.clicked.connect(lambda _=False, c=callback: c())
            self.buttons.addWidget(button)
        self._chain_buttons()
        self.show()

    def _chain_buttons(self) -> None:
        """Tab visits the buttons as they sit, left to right, then ✕, where ✕ was in the window's focus chain (so
        notes keep their top-to-bottom order). New buttons join the chain at its end: Tab reached ✕ first."""
        buttons = self.action_buttons()
        before = self.close_button.previousInFocusChain()
        while before in buttons:
            before = before.previousInFocusChain()
        chain = [before, *buttons, self.close_button]
        for first, second in zip(chain, chain[1:]):
            QtWidgets.QWidget.setTabOrder(first, second)

    def text(self) -> str:
        """The whole text of the note (the label may show it elided)."""
        return self._text

    def _fit_text(self) -> None:
        if not self.one_line:
            self.label.setText(self._text)
            return
        line = " ".join(self._text.split())
        self.label.setText(self.label.fontMetrics().elidedText(line, QtCore.Qt.TextElideMode.ElideRight,
                                                               max(40, self.label.width())))

    def resizeEvent(self, event):  # noqa: N802
        super().resizeEvent(event)
        QtCore.QTimer.singleShot(0, self, self._fit_text)  # after the layout has given the label its width

    def action_buttons(self) -> list[QtWidgets.QPushButton]:
        return [self.buttons.itemAt(i).widget() for i in range(self.buttons.count())
                if isinstance(self.buttons.itemAt(i).widget(), QtWidgets.QPushButton)]
