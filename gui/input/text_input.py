"""The text input: the text box with Run / BOS / Auto / Chat format, Examples and Recent texts, the warning and
stale lines, the next-token predictions and the token strip.

It asks for runs through ``run_requested(text, bos, explicit)`` (explicit: Run, Ctrl+Enter, an
example or a recent text; not an auto-run or a BOS or Chat format toggle) and shows what the view state holds:
the result's tokens and predictions, and whether the text still matches the result shown. An
example that names a head asks for it with ``head_requested(layer, head)`` once its result is shown.

*Chat format* is the view state's ``chat`` (the window sends ``state.chat_used`` with each run): the text runs as
one user turn of the model's chat template. It is disabled, the reason as its tooltip, while the loaded model has
no chat template (``state.chat_problem``); while it is used the template decides the special tokens, and BOS is
disabled.

A text with a line longer than LONG_LINE_CHARS (gui/input/text_box.py; a 5 MB one-line paste, a --text) is
held here, not put in the box: Qt lays a line out whole at every change and paints it whole at every blink of the
cursor (5 MB: 0.8 s to set, a 2 s freeze at the first paint, then 0.45 s every 0.5 s). The box shows
its first PREVIEW_CHARS characters, read-only, a note says so, and runs take the whole text (the
worker analyses only its token-capped start).

It is laid out to leave the plots room on a laptop: the text box is two lines (it grows when the
window's splitter gives the input area more), the buttons sit in two rows beside it, the
predictions take one line and the token strip two.
"""
from __future__ import annotations

import html
import re

from PySide6 import QtCore, QtWidgets

from analysis.display import head_name

from ..state.view_state import ViewState
from .examples import EXAMPLE_MODELS, Example, example_texts
from .notes import NoteBar
from .text_box import TextBox, has_long_line
from .token_strip import TokenStrip

AUTO_RUN_MS = 600
MAX_RECENT_TEXTS = 10
MAX_RECENT_CHARS = 2000  # a recent text longer than this is saved cut (a 5 MB paste never reaches the settings file)
MENU_CHARS = 70  # menu entries are elided to this many characters
PREDICTIONS_WIDTH = 250  # pixels: the next-token line, in two lines beside the token strip
PREVIEW_CHARS = 20_000  # what the box shows of a held text: more than 2,048 tokens of prose


def fit_lines(pieces: list[str], metrics, width: int, max_lines: int = 2) -> str:
    """``pieces`` as rich text in at most ``max_lines`` lines of at most ``width`` pixels, breaking only between
    pieces (a piece wider than a line is elided; pieces that do not fit are left out); escaped, spaces kept."""
    lines, line = [], ""
    for piece in pieces:
        piece = metrics.elidedText(piece, QtCore.Qt.TextElideMode.ElideRight, width)
        candidate = f"{line} {piece}" if line else piece
        if line and metrics.horizontalAdvance(candidate) > width:
            lines.append(line)
            if len(lines) == max_lines:
                line = ""
                break
            candidate = piece
        line = candidate
    if line:
        lines.append(line)
    return "<br>".join(html.escape(text).replace(" ", "&nbsp;") for text in lines)


def menu_label(text: str, limit: int = MENU_CHARS) -> str:
    """One line, at most ``limit`` characters (an ellipsis marks the cut); ``&`` shown as itself."""
    line = " ".join(text.split())
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line.replace("&", "&&")


RECENT_TIP = ("Recent texts: the texts you ran with Run or Ctrl+Enter (and examples you picked), newest first; "
              "texts that only ran automatically while you typed are not kept")


EMPTY_TEXT_HINT = "Type a sentence to see its attention."  # shown only while the box is empty

class TextInput(QtWidgets.QWidget):
    run_requested = QtCore.Signal(str, bool, bool)  # text, bos, explicit
    head_requested = QtCore.Signal(int, int)  # an example named this head and its result is on screen

    def __init__(self, state: ViewState, settings: QtCore.QSettings, parent=None):
        super().__init__(parent)
        self.state = state
        self.settings = settings
        self._pending_head: tuple[str, tuple[int, int], str] | None = None  # (example text, head, model) until shown
        # Children are made with their parent: a widget reparented by a layout after a child window
        # (a menu) was made lands in a focus chain of its own, and Tab then circles inside this widget.
        self._held: str | None = None  # a text too long for the box (see the module docstring), else None
        self.text_edit = TextBox(self)
        self.text_edit.textChanged.connect(self._text_changed)
        self.text_edit.long_text.connect(self._long_text_pasted)
        self.run_button = QtWidgets.QPushButton("Run", self)
        self.run_button.setToolTip("Run the text (Ctrl+Enter)")
        self.run_button.clicked.connect(lambda: self.run(explicit=True))
        self.examples_button = QtWidgets.QToolButton(self)
        self.examples_button.setText("Examples")
        self.examples_button.setToolTip("Texts that show typical heads (picking one opens the head it names), "
                                        "and Recent texts: the texts you ran with Run or Ctrl+Enter")
        self.examples_button.setPopupMode(QtWidgets.QToolButton.ToolButtonPopupMode.InstantPopup)
        self.examples_button.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred,
                                           QtWidgets.QSizePolicy.Policy.Fixed)
        self.bos_box = QtWidgets.QCheckBox("BOS", self)
        self.bos_box.setToolTip("Prepend <|endoftext|> as the first token")
        self.bos_box.toggled.connect(lambda _: self.run(explicit=False))
        self.chat_box = QtWidgets.QCheckBox("Chat format", self)
        self.chat_box.setChecked(state.chat)
        self.chat_box.toggled.connect(self._chat_toggled)
        self.auto_box = QtWidgets.QCheckBox("Auto", self)
        self.auto_box.setChecked(str(settings.value("texts/auto", "true")).lower() != "false")
        self.auto_box.setToolTip("Run again shortly after typing stops")
        self.auto_box.toggled.connect(lambda on: (settings.setValue("texts/auto", "true" if on else "false"),
                                                  self._update_stale()))
        self.auto_timer = QtCore.QTimer(self)
        self.auto_timer.setSingleShot(True)
        self.auto_timer.setInterval(AUTO_RUN_MS)
        self.auto_timer.timeout.connect(lambda: self.run(explicit=False))

        self.warning = QtWidgets.QLabel(self)
        self.warning.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.warning.setStyleSheet("color: #b35c00;")
        self.warning.setWordWrap(True)
        self.warning.hide()
        self.stale = QtWidgets.QLabel("The text has changed since this result: press Run (Ctrl+Enter) to update it.",
                                      self)
        # Drawn over the token strip's right end, outside the layout: showing or hiding it must not move the
        # strip and the plots below (a relayout of every view, 26 ms at 512 tokens, in the turn a result arrives).
        self.stale.setStyleSheet("color: #b35c00; font-style: italic; background: palette(window);"
                                 " border: 1px solid #b35c00; border-radius: 3px; padding: 0 4px;")
        self.stale.hide()
        self.predictions = QtWidgets.QLabel(self)
        self.predictions.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.predictions.setToolTip("The model's most likely next tokens after the text")
        self.predictions.setWordWrap(False)  # fit_lines breaks it, between predictions only
        self.predictions.setAlignment(QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignVCenter)
        self.predictions.setFixedWidth(PREDICTIONS_WIDTH)
        self.predictions.hide()  # until there are predictions to show (an encoder has none)
        self.token_strip = TokenStrip(state, self)
        self.token_strip.installEventFilter(self)  # the stale line is placed over it (_place_stale)
        self.held_note = NoteBar(self, one_line=True)  # says that the text is held, not in the box

        buttons = QtWidgets.QGridLayout()
        buttons.setSpacing(2)
        buttons.addWidget(self.run_button, 0, 0)
        buttons.addWidget(self.examples_button, 0, 1, 1, 2)
        buttons.addWidget(self.bos_box, 1, 0)
        buttons.addWidget(self.auto_box, 1, 1)
        buttons.addWidget(self.chat_box, 1, 2)
        buttons.setRowStretch(2, 1)
        text_row = QtWidgets.QHBoxLayout()
        text_row.addWidget(self.text_edit, 1)
        text_row.addLayout(buttons)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(3)
        strip_row = QtWidgets.QHBoxLayout()  # the predictions beside the strip: one row less above the plots
        strip_row.addWidget(self.token_strip, 1)
        strip_row.addWidget(self.predictions)
        layout.addLayout(text_row, 1)
        layout.addWidget(self.held_note)
        layout.addWidget(self.warning)
        layout.addLayout(strip_row)

        # the menus are made last: see the note on the focus chain above
        self.examples_menu = QtWidgets.QMenu(self)
        self.examples_menu.setToolTipsVisible(True)
        model = None
        for example in example_texts():
            if example.model != model:  # a heading per model: the heads named are that model's
                model = example.model
                if self.examples_menu.actions():
                    self.examples_menu.addSeparator()
                header = self.examples_menu.addAction(f"What to look for in {EXAMPLE_MODELS[model]} (its heads "
                                                      "open with it)")
                header.setEnabled(False)
            label, text = example.label, example.text
            action = self.examples_menu.addAction(
                f"{label} — {menu_label(text, max(24, MENU_CHARS + 17 - len(label)))}" if label else menu_label(text))
            action.setToolTip(html.escape(text) + (f"<br><i>opens {head_name(*example.head)}</i>"
                                                   if example.head else ""))
            action.triggered.connect(lambda _=False, e=example: self.run_example(e))
        self.examples_menu.addSeparator()
        # made here, not by addMenu(title): a menu Qt makes has a wrapper PySide cannot track, and a later
        # object at the same address could find it marked deleted
        self.recent_menu = QtWidgets.QMenu("Recent texts (runs with Run or Ctrl+Enter)", self.examples_menu)
        self.examples_menu.addMenu(self.recent_menu)
        self.recent_menu.setToolTipsVisible(True)
        self.recent_menu.menuAction().setToolTip(RECENT_TIP)
        self.examples_button.setMenu(self.examples_menu)
        self.setFocusProxy(self.text_edit)
        state.on_bundle(self._bundle_changed, "predictions")
        state.chat_changed.connect(self._show_chat)
        state.chat_problem_changed.connect(self._show_chat)
        self._show_chat()
        self._refresh_recent_menu()

    def focus_order(self) -> list[QtWidgets.QWidget]:
        """The widgets Tab visits here, in order: the text, the run row, the token strip."""
        return [self.text_edit, self.run_button, self.examples_button, self.bos_box, self.auto_box, self.chat_box,
                self.token_strip]

    # ----------------------------------------------------------------- text and runs
    def text(self) -> str:
        """The text to run: the one held (too long for the box), else the box's."""
        return self._held if self._held is not None else self.text_edit.toPlainText()

    def held(self) -> bool:
        """Whether the text is held outside the box (a line longer than LONG_LINE_CHARS)."""
        return self._held is not None

    def set_text(self, text: str, run: bool = False) -> None:
        """Put ``text`` in the box (or hold it, when it has a line too long for the box) without an
        auto-run; ``run`` runs it (an explicit run)."""
        self._held = text if has_long_line(text) else None
        self.text_edit.blockSignals(True)
        self.text_edit.setPlainText(text if self._held is None else text[:PREVIEW_CHARS])
        self.text_edit.blockSignals(False)
        self.text_edit.setReadOnly(self._held is not None)
        self._show_held_note()
        if self.warning.text() == EMPTY_TEXT_HINT and text.strip():
            self.warning.hide()
        self._update_stale()
        if run:
            self.run(explicit=True)

    def set_bos(self, bos: bool) -> None:
        """Set BOS without running (the model's default when it loads)."""
        self.bos_box.blockSignals(True)
        self.bos_box.setChecked(bool(bos))
        self.bos_box.blockSignals(False)

    def _chat_toggled(self, on: bool) -> None:
        self.state.set_chat(on)
        self.run(explicit=False)

    def _show_chat(self, *_changed) -> None:
        """The Chat format box and BOS as the state has them: the box disabled, the reason its tooltip, while the
        model has no chat format; BOS disabled while the chat template decides the special tokens."""
        problem, state = self.state.chat_problem, self.state
        self.chat_box.blockSignals(True)
        self.chat_box.setChecked(state.chat)
        self.chat_box.blockSignals(False)
        self.chat_box.setEnabled(problem is None)
        self.chat_box.setToolTip(
            problem if problem is not None else
            "Chat format: run the text as one user turn of the model's chat template, the assistant's header after "
            "it, as an instruct model reads a chat (the template's tokens, such as <|im_start|>, are in the strip; "
            "the predictions are the reply's first token). A template may add turns of its own: SmolLM2's puts its "
            "default system prompt first")
        self.bos_box.setEnabled(not state.chat_used)
        self.bos_box.setToolTip("The chat template decides the special tokens while Chat format is on"
                                if state.chat_used else "Prepend <|endoftext|> as the first token")

    def run_example(self, example: Example) -> None:
        """Run an example (an explicit run); the head it names is asked for once its result is shown."""
        self.set_text(example.text)
        self._pending_head = (example.text, example.head, example.model) if example.head else None
        self.run(explicit=True)

    def run(self, explicit: bool = True) -> bool:
        """Ask for a run of the current text; an empty text shows a hint instead. Returns whether a run was asked."""
        self.auto_timer.stop()
        text = self.text()
        if self._pending_head is not None and self._pending_head[0] != text:
            self._pending_head = None  # another text: the example's head is no longer wanted
        if not text.strip():
            self.warning.setText(EMPTY_TEXT_HINT)
            self.warning.show()
            return False
        if self.warning.text() == EMPTY_TEXT_HINT:
            self.warning.hide()
        if explicit:
            self.remember(text)
        self.run_requested.emit(text, self.bos_box.isChecked(), explicit)
        return True

    def _show_held_note(self) -> None:
        if self._held is None:
            self.held_note.hide()
            return
        longest = max(len(line) for line in re.split("[\n\r\u2029]", self._held))
        self.held_note.show_note(
            f"This text has a line of {longest:,} characters, too long to edit here: the box shows its first "
            f"{PREVIEW_CHARS:,} characters, read-only. A run takes the whole text, up to the token limit.", "info",
            [("Edit the start", self.edit_start), ("Clear", lambda: self._replace(""))])
        self.held_note.close_button.hide()  # the note goes with the held text, not before

    def edit_start(self) -> None:
        """Keep only the start the box shows, and make it editable (it then runs as typed text does)."""
        if self._held is not None:
            self._replace(self._held[:PREVIEW_CHARS])

    def _replace(self, text: str) -> None:
        """The text becomes ``text`` as if typed: the stale line follows, and Auto runs it."""
        self.set_text(text)
        self._text_changed()
        self.text_edit.setFocus()

    def _long_text_pasted(self, text: str) -> None:
        self._replace(text)

    def _text_changed(self) -> None:
        if self.warning.text() == EMPTY_TEXT_HINT and self.text().strip():  # the hint is about an empty box
            self.warning.hide()
        if self.auto_box.isChecked():
            self.auto_timer.start()
        self._update_stale()

    def _bundle_changed(self, bundle) -> None:
        if bundle is None:
            self.predictions.setText("")
            self.predictions.hide()
            self._update_stale()
            return
        r = bundle.result
        self.warning.setText(" ".join(r.warnings))
        self.warning.setVisible(bool(r.warnings))
        pieces = [f"“{p.token}” {p.probability:.1%}" for p in r.predictions]  # quoted: a bare "." or "," is lost
        self.predictions.setText(fit_lines(["Next token:", *pieces], self.predictions.fontMetrics(),
                                           PREDICTIONS_WIDTH) if pieces else "")
        self.predictions.setToolTip("The model's most likely next tokens after the text: "
                                    + html.escape(", ".join(pieces)))
        self.predictions.setVisible(bool(pieces))
        self._update_stale()
        if self._pending_head is not None and self._pending_head[0] == r.text:
            (_, (layer, head), model), self._pending_head = self._pending_head, None
            if r.model_label == model and layer < r.n_layer and head < r.n_head:
                self.head_requested.emit(layer, head)  # the heads named are the example's model's, not another's

    def is_stale(self) -> bool:
        """The result shown is of another text than the one in the box (and no auto-run will follow)."""
        bundle = self.state.bundle
        return bundle is not None and not self.auto_box.isChecked() and self.text() != bundle.result.text

    def _update_stale(self) -> None:
        if self.is_stale():
            self._place_stale()
            self.stale.show()
            self.stale.raise_()
        else:
            self.stale.hide()

    def _place_stale(self) -> None:
        """The stale line over the token strip's right end (its tokens are the old result's), inside this widget."""
        strip = self.token_strip.geometry()
        self.stale.adjustSize()
        width = min(self.stale.sizeHint().width(), max(0, strip.width() - 8))
        self.stale.resize(width, self.stale.sizeHint().height())
        self.stale.move(strip.right() - width - 4, max(0, strip.top() + (strip.height() - self.stale.height()) // 2))

    def eventFilter(self, watched, event) -> bool:
        """The token strip moved or resized (the window, a warning shown above it): the stale line follows it."""
        if watched is self.token_strip and event.type() in (QtCore.QEvent.Type.Move, QtCore.QEvent.Type.Resize) \
                and self.stale.isVisible():
            self._place_stale()
        return super().eventFilter(watched, event)

    # ----------------------------------------------------------------- recent texts
    def recent_texts(self) -> list[str]:
        value = self.settings.value("texts/recent", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def last_text(self) -> str | None:
        """The text the box held when the app last closed (:meth:`save_last`), else the latest explicitly run one;
        None: neither."""
        last = self.settings.value("texts/last")
        if last:
            return str(last)
        recent = self.recent_texts()
        return recent[0] if recent else None

    def save_last(self) -> None:
        """Keep the box's text for the next start (an auto-run text is not a Recent text, but it is what was on
        screen: walk 5 reopened on the text run before it)."""
        self.settings.setValue("texts/last", self.text()[:MAX_RECENT_CHARS])

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
