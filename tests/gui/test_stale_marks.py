"""Never a stale number (issue 21 item 1): while a newer text runs, or waits for the worker, or a new model loads,
every view that shows the previous result carries the stale mark — the token strip, the predictions, the grid,
every tab and its pages, the Head map dimmed, the status bar saying what is shown and what is running — and
nothing is marked once the new result is on screen. From scratch marks its pages while they show another head."""
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtWidgets  # noqa: E402

from helpers import WAIT_MS, run, worker_held  # noqa: E402


def marks_over(window) -> dict:
    """Each StaleMark of the window by the widget it covers, and whether it shows."""
    return {mark.target: mark.marked for mark in window.stale_marks.marks}


def covered(window, widget) -> bool:
    """``widget`` carries a mark that shows (it or one of its parents is a mark's target, the mark placed on it)."""
    marked = {mark.target for mark in window.stale_marks.marks if mark.marked}
    while widget is not None:
        if widget in marked:
            return True
        widget = widget.parentWidget()
    return False


def test_every_view_of_the_previous_text_is_marked_while_the_new_one_queues_and_runs(qtbot, window):
    run(qtbot, window, "The cat sat on the mat")
    assert not any(marks_over(window).values())
    shown_tokens = window.status.tokens.text()
    with worker_held(window.worker):
        window.set_text("A different text entirely, and longer")
        window.run_text()
        assert window.state.running and window.bundle.result.text == "The cat sat on the mat"
        views = [window.text_input.token_strip, window.grid_panel.plot, window.head_tab.plot]
        for index in range(window.tabs.count()):  # every tab, each page of it
            window.tabs.setCurrentIndex(index)
            page = window.tabs.widget(index)
            views.append(page)
            views += [w for w in page.findChildren(QtWidgets.QWidget) if w.isVisible()][:20]
        assert all(covered(window, view) for view in views)
        words = {mark.text for mark in window.stale_marks.marks}
        assert len(words) == 1 and "previous text" in words.pop()
        for mark in window.stale_marks.marks:  # on its view, in sight
            assert mark.isVisible() and mark.target.rect().contains(mark.geometry())
        assert window.head_tab.plot.image.opacity() < 1 and window.grid_panel.plot.image.opacity() < 1  # maps dimmed
        assert not window.text_input.predictions.isEnabled()  # the previous text's predictions greyed
        assert window.status.tokens.text().startswith(f"shown: {shown_tokens}, the previous text")
        assert window.status.run.text().startswith("running")
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        pass
    assert window.bundle.result.text == "A different text entirely, and longer"
    assert not any(marks_over(window).values()) and not window.state.running
    assert window.head_tab.plot.image.opacity() == 1 and window.grid_panel.plot.image.opacity() == 1
    assert window.text_input.predictions.isEnabled()
    assert not window.status.tokens.text().startswith("shown:") and window.status.run.text().startswith("last run")


def test_a_new_model_loading_marks_the_previous_models_result(qtbot, window, tiny_model_dir):
    run(qtbot, window, "The cat sat on the mat")
    label = window.model_info.label
    with worker_held(window.worker):
        window.load_model(str(tiny_model_dir))
        assert all(marks_over(window).values())
        assert all(mark.text.startswith(f"{label}'s result — loading") for mark in window.stale_marks.marks)
        assert "the previous model's" in window.status.tokens.text()
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        pass  # the model loads, the text runs again on it
    assert not any(marks_over(window).values())


def test_from_scratch_marks_its_pages_while_they_show_another_head(qtbot, window):
    run(qtbot, window, "The cat sat on the mat")
    from gui.tabs.scratch.scratch_tab import ScratchTab

    scratch = window.tab(ScratchTab)
    window.tabs.setCurrentWidget(scratch)
    with qtbot.waitSignal(scratch.data_shown, timeout=WAIT_MS):
        pass
    assert not scratch.stale.marked
    with worker_held(window.worker):
        window.state.select(1, 2)
        assert scratch.stale.marked and "computing L1H2" in scratch.stale.text
        assert scratch.stale.text.startswith("L0H0 of this text")
    with qtbot.waitSignal(scratch.data_shown, timeout=WAIT_MS):
        pass
    assert not scratch.stale.marked


def test_a_run_shows_its_phase_layers_and_an_estimate_in_the_status_bar(qtbot, window):
    run(qtbot, window, "The cat sat on the mat")
    with worker_held(window.worker):
        window.set_text("A different text entirely, and longer")
        window.run_text()
        rid = window.latest_analyse_id
        window._analysis_sized(rid, 9, None)
        window.worker.forward_progress.emit(rid, 1, 3)
        window.worker.forward_progress.emit(rid, 2, 3)
        status = window.status
        assert status.bar.isVisible() and (status.bar.value(), status.bar.maximum()) == (2, 3)
        assert "forward layer 2 of 3, about" in status.run.text() and "left" in status.run.text()
        window.worker.analysis_progress.emit(rid, 1, 3)
        assert "streaming layer 1 of 3" in status.run.text() and "about" not in status.run.text()  # a new phase
        window.worker.forward_progress.emit(rid - 1, 3, 3)  # an older request's: not shown
        assert "streaming layer 1 of 3" in status.run.text()
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        pass
    assert not window.status.bar.isVisible() and window.status.run.text().startswith("last run")
