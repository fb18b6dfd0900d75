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

    The text is plain text (never HTML): messages quote file names and tokens as they are."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.label = QtWidgets.QLabel()
        self.label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.buttons = QtWidgets.QHBoxLayout()
        close = QtWidgets.QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addLayout(self.buttons)
        layout.addWidget(close)
        self.hide()

    def show_note(self, text: str, kind: str = "info", actions=()) -> None:
        """Show ``text``; ``actions`` is a list of (button label, callback)."""
        bg, fg = NOTE_COLOURS[kind]
        self.setStyleSheet(f"NoteBar {{ background: {bg}; border: 1px solid {fg}33; border-radius: 4px; }}"
                           f"QLabel {{ color: {fg}; }}")
        self.label.setText(text)
        while self.buttons.count():
            item = self.buttons.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        for label, callback in actions:
            button = QtWidgets.QPushButton(label)
            button.clicked.connect(lambda _=False, c=callback: c())
            self.buttons.addWidget(button)
        self.show()

    def action_buttons(self) -> list[QtWidgets.QPushButton]:
        return [self.buttons.itemAt(i).widget() for i in range(self.buttons.count())
                if isinstance(self.buttons.itemAt(i).widget(), QtWidgets.QPushButton)]
