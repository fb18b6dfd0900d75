"""Fixes from the fourth newcomer walk (n4): the empty-text hint goes once the box has text, and a figure that
still shows the previous text's result while a new text runs is dimmed and says so."""
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtWidgets  # noqa: E402


class FakeWorker(QtCore.QObject):
    """The worker's signals that the tabs listen to, emitted by hand."""
    analysis_started = QtCore.Signal(int)
    analysis_ready = QtCore.Signal(object)
    failed = QtCore.Signal(object)
    task_done = QtCore.Signal(int, str, object)

    def submit(self, *_args):
        return 0


@pytest.fixture
def text_input(qtbot, tmp_path):
    from gui.input.text_input import TextInput
    from gui.state.view_state import ViewState

    settings = QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)
    widget = TextInput(ViewState(), settings)
    qtbot.addWidget(widget)
    widget.auto_box.setChecked(False)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_the_empty_text_hint_goes_once_the_box_has_text(qtbot, text_input):
    """n4 #6: "Type a sentence to see its attention." stayed while the box held text and a run was going."""
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


def test_rollout_and_head_maps_are_dimmed_while_a_new_text_runs(qtbot):
    """n4 #6: Rollout showed the previous map with no sign it was out of date while the new run ran."""
    from gui.tabs.head.head_tab import HeadTab
    from gui.plots.plot_items import DIM_OPACITY
    from gui.tabs.rollout.rollout_tab import UPDATING, RolloutTab
    from gui.state.view_state import ViewState

    worker, state = FakeWorker(), ViewState()
    rollout, head = RolloutTab(state, worker), HeadTab(state, worker)
    for tab in (rollout, head):
        qtbot.addWidget(tab)
    rollout.stack.setCurrentWidget(rollout.plot)  # as when a map is shown
    for _ in range(2):
        state.set_running(True)  # the window: the newest text's analysis started
        for figure in (rollout.plot, head.plot):
            effect = figure.graphicsEffect()
            assert isinstance(effect, QtWidgets.QGraphicsOpacityEffect) and effect.opacity() == DIM_OPACITY
        assert rollout.status.text() == UPDATING
        state.set_running(False)  # its result or its failure: the map is current again (or the newest there is)
        assert rollout.plot.graphicsEffect() is None and head.plot.graphicsEffect() is None
        assert rollout.status.text() == " "


@pytest.mark.slow  # a whole window
def test_the_window_says_running_for_the_newest_text_only(qtbot, tmp_path):
    """The maps once dimmed for any analysis the worker started and lit up for any failure (a lens's, an
    export's) or a stale result; now the window sets ``ViewState.running`` for the newest request only."""
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
