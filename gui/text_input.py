"""The text input: the text box with Run / BOS / Auto, Examples and Recent texts, the warning and
stale lines, the next-token predictions and the token strip.

It asks for runs through ``run_requested(text, bos, explicit)`` (explicit: Run, Ctrl+Enter, an
example or a recent text; not an auto-run or a BOS toggle) and shows what the view state holds:
the result's tokens and predictions, and whether the text still matches the result shown.
"""
from __future__ import annotations

import html
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from .view_state import ViewState

EXAMPLES_FILE = Path(__file__).resolve().parent.parent / "resources" / "texts" / "examples.txt"
AUTO_RUN_MS = 600
MAX_RECENT_TEXTS = 10
MAX_RECENT_CHARS = 2000  # a recent text longer than this is saved cut (a 5 MB paste never reaches the settings file)
MENU_CHARS = 70  # menu entries are elided to this many characters


def example_texts() -> list[tuple[str, str]]:
    """(label, text) pairs from resources/texts/examples.txt: one example a line, ``label | text``
    (a line without `` | `` is its own label); ``\\n`` in a text is a line break."""
    try:
        lines = EXAMPLES_FILE.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = ["The cat sat on the mat because it was tired."]
    examples = []
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        label, sep, text = line.partition(" | ")
        text = (text if sep else label).replace("\\n", "\n")
        examples.append(((label if sep else "").strip(), text))
    return examples


def menu_label(text: str, limit: int = MENU_CHARS) -> str:
    """One line, at most ``limit`` characters (an ellipsis marks the cut); ``&`` shown as itself."""
    line = " ".join(text.split())
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line.replace("&", "&&")


class TextBox(QtWidgets.QPlainTextEdit):
    """The text box: Tab moves the focus (a tab character is never typed into it)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setTabChangesFocus(True)
        self.setPlaceholderText("Type a sentence and press Ctrl+Enter (it also runs when you stop typing)")
        self.setToolTip("The text to analyse. Ctrl+Enter runs it; Ctrl+L comes back here from anywhere.")


class TokenStrip(QtWidgets.QListWidget):
    """Every token with its index; hover shows the id; a click highlights that query row (in the state)."""

    def __init__(self, state: ViewState, parent=None):
        super().__init__(parent)
        self.state = state
        self.setFlow(QtWidgets.QListView.Flow.LeftToRight)
        self.setWrapping(False)
        self.setHorizontalScrollMode(QtWidgets.QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSpacing(2)
        self.setFixedHeight(62)
        self.setUniformItemSizes(False)
        self.setToolTip("The tokens the model saw; click one to highlight its row in the head map")
        self.itemClicked.connect(lambda item: state.toggle_query_row(self.row(item)))
        state.bundle_changed.connect(self._bundle_changed)
        state.query_row_changed.connect(self._query_row_changed)

    def _bundle_changed(self, bundle) -> None:
        self.clear()
        if bundle is None:
            return
        r = bundle.result
        for i, (token, token_id) in enumerate(zip(r.tokens, r.token_ids)):
            item = QtWidgets.QListWidgetItem(f"{i}\n{token}")
            item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
            item.setToolTip(f"token {i}: '{html.escape(token)}' — id {int(token_id)}")  # tooltips are rich text
            self.addItem(item)

    def _query_row_changed(self, row) -> None:
        if row is None:
            self.clearSelection()
        else:
            self.setCurrentRow(row)


class TextInput(QtWidgets.QWidget):
    run_requested = QtCore.Signal(str, bool, bool)  # text, bos, explicit

    def __init__(self, state: ViewState, settings: QtCore.QSettings, parent=None):
        super().__init__(parent)
        self.state = state
        self.settings = settings
        self.text_edit = TextBox()
        self.text_edit.setFixedHeight(64)
        self.text_edit.textChanged.connect(self._text_changed)
        self.run_button = QtWidgets.QPushButton("Run")
        self.run_button.setToolTip("Run the text (Ctrl+Enter)")
        self.run_button.clicked.connect(lambda: self.run(explicit=True))
        self.bos_box = QtWidgets.QCheckBox("BOS")
        self.bos_box.setToolTip("Prepend <|endoftext|> as the first token")
        self.bos_box.toggled.connect(lambda _: self.run(explicit=False))
        self.auto_box = QtWidgets.QCheckBox("Auto")
        self.auto_box.setChecked(str(settings.value("texts/auto", "true")).lower() != "false")
        self.auto_box.setToolTip("Run again shortly after typing stops")
        self.auto_box.toggled.connect(lambda on: (settings.setValue("texts/auto", "true" if on else "false"),
                                                  self._update_stale()))
        self.examples_button = QtWidgets.QToolButton()
        self.examples_button.setText("Examples")
        self.examples_button.setToolTip("Texts that show typical heads, and your recent texts")
        self.examples_button.setPopupMode(QtWidgets.QToolButton.ToolButtonPopupMode.InstantPopup)
        self.examples_menu = QtWidgets.QMenu(self)
        self.examples_menu.setToolTipsVisible(True)
        for label, text in example_texts():
            action = self.examples_menu.addAction(
                f"{label} — {menu_label(text, max(24, MENU_CHARS + 17 - len(label)))}" if label else menu_label(text))
            action.setToolTip(html.escape(text))
            action.triggered.connect(lambda _=False, t=text: self.set_text(t, run=True))
        self.examples_menu.addSeparator()
        self.recent_menu = self.examples_menu.addMenu("Recent texts")
        self.recent_menu.setToolTipsVisible(True)
        self.examples_button.setMenu(self.examples_menu)
        self.auto_timer = QtCore.QTimer(self)
        self.auto_timer.setSingleShot(True)
        self.auto_timer.setInterval(AUTO_RUN_MS)
        self.auto_timer.timeout.connect(lambda: self.run(explicit=False))

        self.warning = QtWidgets.QLabel()
        self.warning.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.warning.setStyleSheet("color: #b35c00;")
        self.warning.setWordWrap(True)
        self.warning.hide()
        self.stale = QtWidgets.QLabel("The text has changed since this result: press Run (Ctrl+Enter) to update it.")
        self.stale.setStyleSheet("color: #b35c00; font-style: italic;")
        self.stale.hide()
        self.predictions = QtWidgets.QLabel()
        self.predictions.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.predictions.setToolTip("The model's most likely next tokens after the text")
        self.token_strip = TokenStrip(state)

        buttons = QtWidgets.QVBoxLayout()
        buttons.addWidget(self.run_button)
        row = QtWidgets.QHBoxLayout()
        row.addWidget(self.bos_box)
        row.addWidget(self.auto_box)
        buttons.addLayout(row)
        buttons.addWidget(self.examples_button)
        text_row = QtWidgets.QHBoxLayout()
        text_row.addWidget(self.text_edit, 1)
        text_row.addLayout(buttons)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(text_row)
        layout.addWidget(self.warning)
        layout.addWidget(self.stale)
        layout.addWidget(self.predictions)
        layout.addWidget(self.token_strip)
        self.setFocusProxy(self.text_edit)
        state.bundle_changed.connect(self._bundle_changed)
        self._refresh_recent_menu()

    # ----------------------------------------------------------------- text and runs
    def text(self) -> str:
        return self.text_edit.toPlainText()

    def set_text(self, text: str, run: bool = False) -> None:
        """Put ``text`` in the box without an auto-run; ``run`` runs it (an explicit run)."""
        self.text_edit.blockSignals(True)
        self.text_edit.setPlainText(text)
        self.text_edit.blockSignals(False)
        self._update_stale()
        if run:
            self.run(explicit=True)

    def set_bos(self, bos: bool) -> None:
        """Set BOS without running (the model's default when it loads)."""
        self.bos_box.blockSignals(True)
        self.bos_box.setChecked(bool(bos))
        self.bos_box.blockSignals(False)

    def run(self, explicit: bool = True) -> bool:
        """Ask for a run of the current text; an empty text shows a hint instead. Returns whether a run was asked."""
        self.auto_timer.stop()
        text = self.text()
        if not text.strip():
            self.warning.setText("Type a sentence to see its attention.")
            self.warning.show()
            return False
        if explicit:
            self.remember(text)
        self.run_requested.emit(text, self.bos_box.isChecked(), explicit)
        return True

    def _text_changed(self) -> None:
        if self.auto_box.isChecked():
            self.auto_timer.start()
        self._update_stale()

    def _bundle_changed(self, bundle) -> None:
        if bundle is None:
            self.predictions.setText("")
            self._update_stale()
            return
        r = bundle.result
        self.warning.setText(" ".join(r.warnings))
        self.warning.setVisible(bool(r.warnings))
        preds = " ".join(f"<code>{html.escape(p.token)}</code>&nbsp;{p.probability:.1%}" for p in r.predictions)
        self.predictions.setText(f"Next token: {preds}")
        self._update_stale()

    def is_stale(self) -> bool:
        """The result shown is of another text than the one in the box (and no auto-run will follow)."""
        bundle = self.state.bundle
        return bundle is not None and not self.auto_box.isChecked() and self.text() != bundle.result.text

    def _update_stale(self) -> None:
        self.stale.setVisible(self.is_stale())

    # ----------------------------------------------------------------- recent texts
    def recent_texts(self) -> list[str]:
        value = self.settings.value("texts/recent", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def remember(self, text: str) -> None:
        """Save an explicitly run text first in Recent texts: at most MAX_RECENT_CHARS of it, no duplicates."""
        text = text[:MAX_RECENT_CHARS]
        recent = [t for t in self.recent_texts() if t != text]
        recent.insert(0, text)
        self.settings.setValue("texts/recent", recent[:MAX_RECENT_TEXTS])
        self._refresh_recent_menu()

    def _refresh_recent_menu(self) -> None:
        self.recent_menu.clear()
        recent = self.recent_texts()
        for text in recent:
            action = self.recent_menu.addAction(menu_label(text))
            action.setToolTip(html.escape(text[:500]))
            action.triggered.connect(lambda _=False, t=text: self.set_text(t, run=True))
        self.recent_menu.setEnabled(bool(recent))
