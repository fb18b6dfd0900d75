"""The generic widgets (gui/widgets.py): an elided label is cut between words and keeps an escaped token."""
import pytest

pytest.importorskip("pytestqt")


def format_at(doc, position: int):
    """The character format of ``doc``'s character at ``position``."""
    from PySide6 import QtGui

    cursor = QtGui.QTextCursor(doc)
    cursor.setPosition(position + 1)  # a cursor's format is the one of the character before it
    return cursor.charFormat()


def test_an_elided_label_is_cut_between_words(qtbot):
    from PySide6 import QtGui

    from gui.widgets import ElidedLabel

    label = ElidedLabel()
    qtbot.addWidget(label)
    label.setText("<b>L0 H0</b> — <i>value-weighted view: this model family has no value view at all</i>")
    label.resize(label.fontMetrics().horizontalAdvance("L0 H0 — value-weighted view: this mod"), 30)
    doc = label.shown_document()
    shown = doc.toPlainText()
    assert shown.endswith("…") and doc.idealWidth() <= label.contentsRect().width()
    words = shown[:-1].split()
    assert words and words == label.plain_text().split()[:len(words)]  # whole words only
    assert not shown[:-1].rstrip().endswith(("—", ":", ","))
    # the cut text keeps its markup: the head in bold, the rest in italics (it lost both when it was re-read as HTML)
    assert format_at(doc, 0).fontWeight() == QtGui.QFont.Weight.Bold
    assert format_at(doc, shown.index("value")).fontItalic() and not format_at(doc, shown.index("value")).fontWeight() \
        == QtGui.QFont.Weight.Bold


def test_an_elided_label_keeps_an_escaped_token(qtbot, qtlog):
    """Tokens are user text, HTML-escaped in the label: the cut must not read "&lt;pad&gt;" back as a tag (it
    printed "QTextCursor::setPosition: Position … out of range" and painted "…" before the whole text)."""
    from gui.widgets import ElidedLabel

    label = ElidedLabel()
    qtbot.addWidget(label)
    label.setText("<b>L1 H2</b> — <i>value-weighted view: a &lt;pad&gt; token &amp; more words to make it long "
                  "enough to cut here and there.</i>")
    whole = label.plain_text()
    assert "a <pad> token & more" in whole
    label.resize(label.fontMetrics().horizontalAdvance("L1 H2 — value-weighted view: a <pad> token & mo"), 30)
    doc = label.shown_document()
    shown = doc.toPlainText()
    assert shown.endswith("…") and doc.idealWidth() <= label.contentsRect().width()
    assert shown.startswith("L1 H2 — value-weighted view: a <pad>") and whole.startswith(shown[:-1].rstrip())
    assert not shown[:-1].rstrip().endswith("&")  # "… token &…" reads as a half sentence
    assert not [m for m in qtlog.records if "out of range" in m.message]
