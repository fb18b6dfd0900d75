"""The text input: the empty-text hint goes once the box has text, and another warning stays while typing."""
import pytest

pytest.importorskip("pytestqt")


def test_the_empty_text_hint_goes_once_the_box_has_text(qtbot, text_input):
    """"Type a sentence to see its attention." shows for a run of an empty box only, and goes with any text."""
    from gui.input.text_input import EMPTY_TEXT_HINT

    asked = []
    text_input.run_requested.connect(lambda *a: asked.append(a))
    assert text_input.run() is False and asked == []
    assert text_input.warning.isVisible() and text_input.warning.text() == EMPTY_TEXT_HINT
    qtbot.keyClicks(text_input.text_edit, "The cat")
    assert not text_input.warning.isVisible()
    text_input.set_text("")
    text_input.run()
    assert text_input.warning.isVisible()
    text_input.set_text("A pasted text")  # no textChanged: set_text blocks it
    assert not text_input.warning.isVisible()
    assert text_input.run() is True and asked


def test_a_warning_that_is_not_the_hint_stays_while_typing(qtbot, text_input):
    text_input.warning.setText("The text was cut to 256 tokens.")
    text_input.warning.show()
    qtbot.keyClicks(text_input.text_edit, "x")
    assert text_input.warning.isVisible()
