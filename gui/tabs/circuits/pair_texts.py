"""The clean and corrupted prompts the Patching and Compare pages share: one object both pages' boxes write to and
follow, so a pair typed (or picked from the examples) on one page is the pair the other compares."""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets


class PairTexts(QtCore.QObject):
    """``clean`` and ``corrupted`` as typed; ``changed(clean, corrupted)`` after either changes."""

    changed = QtCore.Signal(str, str)
    example_used = QtCore.Signal(object)  # pair_examples.PromptPair: its answers are the Patching page's

    def __init__(self, clean: str = "", corrupted: str = "", parent=None):
        super().__init__(parent)
        self.clean, self.corrupted = clean, corrupted

    def set(self, clean: str, corrupted: str) -> None:
        if (clean, corrupted) != (self.clean, self.corrupted):
            self.clean, self.corrupted = clean, corrupted
            self.changed.emit(clean, corrupted)

    def use(self, example) -> None:
        """Both prompts from ``example`` (a pair_examples.PromptPair); ``example_used`` says which."""
        self.set(example.clean, example.corrupted)
        self.example_used.emit(example)


def bind(pair: PairTexts, clean_edit: QtWidgets.QLineEdit, corrupted_edit: QtWidgets.QLineEdit) -> None:
    """The two boxes show ``pair`` and write their edits back to it."""
    following = [False]  # the boxes are being set from the pair: nothing to write back

    def follow(clean: str, corrupted: str) -> None:
        following[0] = True
        try:
            for edit, text in ((clean_edit, clean), (corrupted_edit, corrupted)):
                if edit.text() != text:
                    edit.setText(text)
        finally:
            following[0] = False

    def write_back(_text: str) -> None:
        if not following[0]:
            pair.set(clean_edit.text(), corrupted_edit.text())

    pair.changed.connect(follow)
    for edit in (clean_edit, corrupted_edit):
        edit.textChanged.connect(write_back)
    follow(pair.clean, pair.corrupted)


def prompts_to_run(page) -> tuple[str, str] | None:
    """The page's (clean, corrupted) prompts when it can run them, else None after saying why on the page: a
    decoder's text run with the model now loaded (``page.tie``), and both prompts typed. ``page``: a Patching or
    Compare page (its ``state``, ``tie``, ``clean_edit``, ``corrupted_edit``, ``show_message``)."""
    r = page.state.result
    if r is None or not r.causal or page.tie.bundle_generation != page.tie.generation:
        page.show_message(page.tie.why_not() or "Run a text first.", error=True)
        return None
    clean, corrupted = page.clean_edit.text(), page.corrupted_edit.text()
    if not clean.strip() or not corrupted.strip():
        page.show_message("Type both a clean and a corrupted prompt (or pick an example).", error=True)
        return None
    return clean, corrupted


def mark_edited(page, sentence: str) -> None:
    """Show ``sentence`` in ``page.stale`` while the boxes hold other prompts than ``page.shown`` was made of."""
    s = page.shown
    edited = s is not None and (page.clean_edit.text(), page.corrupted_edit.text()) != (s.clean, s.corrupted)
    page.stale.setText(sentence if edited else "")
    page.stale.setVisible(edited)
