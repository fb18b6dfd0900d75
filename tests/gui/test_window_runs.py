"""Running texts in the window, offscreen with a small test model: empty and overlong texts, stale results,
the error banner, auto-run off, recent texts, examples, a 5 MB one-line text, and which request the window
says is running."""
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import WAIT_MS, run  # noqa: E402


def test_empty_and_overlong_text(qtbot, window):
    window.set_text("   ")
    assert window.run_text() is None and window.text_input.warning.isVisible()
    r = run(qtbot, window, "word " * 200)
    assert r.truncated and "64" in window.text_input.warning.text()
    assert "truncated" in window.status_tokens.text()


def test_a_newer_request_makes_older_results_stale(qtbot, window):
    window.set_text("first text")
    first = window.run_text()
    window.set_text("second text here")
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS,
                          check_params_cb=lambda rid: rid == window.latest_analyse_id):
        second = window.run_text()
    assert second > first and window.bundle.result.text == "second text here"
    # a late answer to the first request is dropped, never shown
    from gui.state.worker import AnalysisBundle

    late = AnalysisBundle(first, window.bundle.result, window.bundle.scores, 0.0)
    shown_before = window.bundle
    window._analysis_ready(late)
    assert window.bundle is shown_before


def test_notes_are_plain_text(qtbot, window):
    window.show_error("Cannot download 'gpt2': <b>offline</b> & more")
    assert window.error.label.text() == "Cannot download 'gpt2': <b>offline</b> & more"
    assert window.error.label.textFormat() == QtCore.Qt.TextFormat.PlainText


def test_a_successful_run_clears_the_error_banner(qtbot, window):
    window.show_error("Something failed earlier.")
    run(qtbot, window, "a fresh run")
    assert not window.error.isVisible()


def test_with_auto_off_a_changed_text_marks_the_result_stale(qtbot, window):
    text_input = window.text_input
    text_input.auto_box.setChecked(False)
    run(qtbot, window, "The cat sat")
    assert not text_input.stale.isVisible()
    strip = text_input.token_strip
    before = (strip.geometry(), text_input.height(), window.grid_panel.size())
    qtbot.keyClicks(text_input.text_edit, " down")
    assert text_input.stale.isVisible()
    qtbot.wait(20)  # any relayout it caused has happened
    # drawn over the token strip's right end, outside the layout: nothing below moves when it shows (a relayout of
    # every plot, 26 ms at 512 tokens, in the turn a result arrives)
    assert (strip.geometry(), text_input.height(),
            window.grid_panel.size()) == before
    assert strip.geometry().contains(text_input.stale.geometry().center())
    assert text_input.stale.geometry().right() <= strip.geometry().right()
    run(qtbot, window, text_input.text())
    assert not text_input.stale.isVisible()


@pytest.mark.slow
def test_recent_texts_keep_explicit_runs_only_deduplicated_capped_and_elided(qtbot, window):
    text_input = window.text_input
    text_input.set_text("")
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        qtbot.keyClicks(text_input.text_edit, "typed and paused")  # an auto-run
    assert text_input.recent_texts() == []
    run(qtbot, window, "first")
    run(qtbot, window, "second")
    run(qtbot, window, "first")
    assert text_input.recent_texts() == ["first", "second"]
    huge = "x" * 5_000_000
    text_input.remember(huge)
    assert len(text_input.recent_texts()[0]) == 2000
    labels = [a.text() for a in text_input.recent_menu.actions()]
    assert max(len(label) for label in labels) <= 70 and labels[0].endswith("…")


def test_examples_say_what_to_look_for(qtbot, window):
    from gui.input.examples import example_texts

    examples = example_texts()
    assert len(examples) >= 5 and all(e.label for e in examples)
    assert any("induction" in e.label for e in examples)
    menu_texts = [a.text() for a in window.text_input.examples_menu.actions() if a.text()]
    assert all(len(t) <= 90 for t in menu_texts)


def longest_block(box) -> int:
    doc = box.document()
    return max(len(doc.findBlockByNumber(i).text()) for i in range(doc.blockCount()))


@pytest.mark.slow
def test_a_5_mb_one_line_text_is_held_outside_the_box_and_runs_whole(qtbot, window):
    """The window froze 1.6 s when a 5 MB one-line text was run, then ~0.4 s every 0.5 s: Qt laid the line out
    whole at every change and painted it whole at every blink of the cursor. Such a text is held by the text
    input: the box holds only its start (read-only, a note says so), and a run sends the whole text."""
    from gui.input.text_box import LONG_LINE_CHARS
    from gui.input.text_input import PREVIEW_CHARS

    text = "word " * 1_000_000
    sent = []

    def record(t, *_args):
        sent.append(t)

    window.text_input.run_requested.connect(record)
    window.set_text(text)
    box = window.text_input.text_edit
    assert longest_block(box) == PREVIEW_CHARS <= LONG_LINE_CHARS and box.isReadOnly()
    assert window.text_input.held() and window.text_input.held_note.isVisible()
    assert "5,000,000 characters" in window.text_input.held_note.label.toolTip()
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        window.run_text()
    window.text_input.run_requested.disconnect(record)
    assert sent == [text] and window.bundle.result.truncated
    qtbot.mouseClick(window.text_input.held_note.buttons.itemAt(0).widget(), QtCore.Qt.MouseButton.LeftButton)
    assert not window.text_input.held() and not box.isReadOnly() and window.text_input.text() == text[:PREVIEW_CHARS]
    assert not window.text_input.held_note.isVisible()


def test_pasting_a_5_mb_line_holds_it_and_a_short_paste_goes_in_the_box(qtbot, window):
    from gui.input.text_box import LONG_LINE_CHARS

    window.set_text("Start: ")
    box = window.text_input.text_edit
    cursor = box.textCursor()
    cursor.movePosition(cursor.MoveOperation.End)
    box.setTextCursor(cursor)
    mime = QtCore.QMimeData()
    mime.setText("x" * (2 * LONG_LINE_CHARS))
    box.insertFromMimeData(mime)
    assert window.text_input.held() and window.text_input.text() == "Start: " + "x" * (2 * LONG_LINE_CHARS)
    assert longest_block(box) <= LONG_LINE_CHARS
    window.set_text("Start: ")
    mime.setText("🙂 short")
    box.setTextCursor(cursor)
    box.insertFromMimeData(mime)
    assert not window.text_input.held() and window.text_input.text() == "Start: 🙂 short"


def test_an_example_that_names_a_head_opens_it(qtbot, window):
    """"induction in code: L1H3" runs its text and then shows layer 1, head 3 — on the bundled model, whose heads
    the examples name (as the app names heads, its menu entry's tooltip too); on another model it only runs the
    text."""
    from dataclasses import replace

    from analysis.display import head_name
    from gui.input.examples import example_texts, parse_example

    assert parse_example("previous token: layer 0, head 2 | 0.2 | The cat") == \
        type(example_texts()[0])("previous token: layer 0, head 2", "The cat", (0, 2))
    assert parse_example("pipes | a | b | c").text == "a | b | c" and parse_example("pipes | a | b | c").head is None
    assert parse_example("# a comment") is None and parse_example("   ") is None
    examples = [e for e in example_texts() if e.head is not None]
    assert len(examples) >= 3 and all(head_name(*e.head) in e.label for e in examples)
    assert {e.model for e in examples} == {"bundled", "smollm2"}
    example = next(e for e in examples if e.head == (1, 3) and e.model == "bundled")
    window.tabs.setCurrentIndex(1)
    window.state.select(0, 0)
    action = next(a for a in window.text_input.examples_menu.actions() if a.text().startswith(example.label))
    assert action.toolTip().endswith("<i>opens L1H3</i>")
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        action.trigger()  # the tiny test model is not the bundled one: its heads are not the ones named
    qtbot.wait(50)
    assert (window.state.layer, window.state.head) == (0, 0) and window.tabs.currentIndex() == 1
    window.text_input.set_text("")
    as_if = replace(example, model=window.state.result.model_label)  # as if it were the example's model
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        window.text_input.run_example(as_if)
    qtbot.waitUntil(lambda: (window.state.layer, window.state.head) == (1, 3))
    assert window.tabs.currentWidget() is window.head_tab
    window.state.select(0, 0)
    run(qtbot, window, example.text + " more")  # another text: the example's head is not forced again
    assert (window.state.layer, window.state.head) == (0, 0)


def test_recent_texts_say_what_they_keep(window):
    """Recent texts holds explicit runs only; the menu says so."""
    menu_action = window.text_input.recent_menu.menuAction()
    assert "Run or Ctrl+Enter" in menu_action.text() and "Run or Ctrl+Enter" in menu_action.toolTip()
    assert "Recent texts" in window.text_input.examples_button.toolTip()


@pytest.mark.slow  # a whole window
def test_the_window_says_running_for_the_newest_text_only(qtbot, tmp_path):
    """The window sets ``ViewState.running`` (the maps dimmed) for the newest text's request only: not for any
    analysis the worker starts, and a failure (a lens's, an export's) or a stale result does not clear it."""
    from gui.chrome.window import MainWindow
    from gui.state.worker import Failure, RequestKind

    w = MainWindow(QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.latest_analyse_id = latest = 7  # as after a few runs
    w._analysis_started(latest - 1)  # a superseded request
    assert not w.state.running
    w._analysis_started(latest)
    assert w.state.running
    w._failed(Failure(latest + 5, RequestKind.TASK, "value_norms", ValueError("x"), "x"))  # not the run
    assert w.state.running
    w._failed(Failure(latest, RequestKind.ANALYSE, "analyse", ValueError("x"), "x"))
    assert not w.state.running
    w.close()
