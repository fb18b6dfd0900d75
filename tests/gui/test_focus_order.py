"""Tab and Shift+Tab through the whole window: every control once, in the README's order (model bar → text →
run row (Run, Examples, BOS, Auto, Chat format: the window's model has a chat template) → token strip → grid → tabs → the tab's controls → the notes' buttons, top to bottom, each left to
right → back)."""
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtWidgets  # noqa: E402

from helpers import WAIT_MS  # noqa: E402


def tab_stops(window) -> list[QtWidgets.QWidget]:
    """Every control the user can Tab to, found here without the app's focus code: shown, enabled, taking Tab
    focus, not standing in for another widget (a combo box's line edit)."""
    return [w for w in window.findChildren(QtWidgets.QWidget)
            if w.isVisible() and w.isEnabled() and w.focusPolicy() & QtCore.Qt.FocusPolicy.TabFocus
            and w.focusProxy() is None and w.window() is window]


def walk(qtbot, window, start, key, limit=80) -> list[QtWidgets.QWidget]:
    """Press ``key`` (a real key event to the focused widget) from ``start`` until the focus is back on it."""
    app = QtWidgets.QApplication.instance()
    start.setFocus()
    app.processEvents()
    seen = []
    for _ in range(limit):
        focused = QtWidgets.QApplication.focusWidget()
        qtbot.keyClick(focused, key)
        app.processEvents()
        focused = QtWidgets.QApplication.focusWidget()
        if focused is start:
            return seen
        seen.append(focused)
    raise AssertionError(f"the focus never came back: {[type(w).__name__ for w in seen[-12:]]}")


@pytest.fixture
def window(qtbot, tmp_path, chat_model_dir):
    from gui.chrome.downloads import offer_gpt2_download
    from gui.qt import ensure_qapp
    from gui.chrome.window import MainWindow

    ensure_qapp()
    w = MainWindow(QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.resize(1366, 740)
    w.show()
    with qtbot.waitSignal(w.model_ready, timeout=WAIT_MS):
        w.load_model(str(chat_model_dir))
    offer_gpt2_download(w)  # the first start's note and its buttons: Tab must not lose the model bar there
    w.set_text("The cat sat on the mat")
    with qtbot.waitSignal(w.result_shown, timeout=WAIT_MS):
        w.run_text()
    w.tabs.setCurrentWidget(w.head_tab)
    w.activateWindow()
    qtbot.wait(50)
    return w


def test_tab_walks_the_whole_window_in_the_readme_order_each_control_once(qtbot, window):
    bar, text, grid, note = window.model_bar, window.text_input, window.grid_panel, window.note
    box = text.text_edit
    forward = walk(qtbot, window, box, QtCore.Qt.Key.Key_Tab)
    cycle = [box] + forward
    assert len(cycle) == len(set(cycle))  # each control once
    assert set(cycle) == set(tab_stops(window))  # … and every one of them
    model_bar = [bar.model_choice, bar.device_choice, bar.load_button]
    assert all(w in cycle for w in model_bar + note.action_buttons())  # Tab reaches them too
    # README: model bar → text → Run/Examples/BOS/Auto/Chat format → token strip → grid → Badges → tabs → the tab's
    # controls → a note's buttons → back to the model bar. The cycle read from the model bar:
    first = cycle.index(bar.model_choice)
    from_bar = cycle[first:] + cycle[:first]
    readme = model_bar + [box, text.run_button, text.examples_button, text.bos_box, text.auto_box, text.chat_box,
                          text.token_strip, grid.plot, grid.badge_choice, window.tabs.tabBar(),
                          window.head_tab.plot]
    positions = [from_bar.index(w) for w in readme]
    assert positions == sorted(positions)
    assert from_bar[: len(model_bar) + 1] == model_bar + [box]  # the model bar, then straight to the text
    tab_bar = from_bar.index(window.tabs.tabBar())
    head_tab = [w for w in from_bar[tab_bar + 1:] if window.head_tab.isAncestorOf(w)]
    assert from_bar[tab_bar + 1: tab_bar + 1 + len(head_tab)] == head_tab  # the tab's controls follow the tab bar
    # then the note's buttons as they sit on screen, left to right (✕ after "Download GPT-2" at its left)
    note_stops = sorted((w for w in cycle if note.isAncestorOf(w)), key=lambda w: w.mapTo(window, QtCore.QPoint()).x())
    assert len(note_stops) >= 2 and note_stops[-1] is note.close_button
    assert from_bar[tab_bar + 1 + len(head_tab):] == note_stops
    backward = walk(qtbot, window, box, QtCore.Qt.Key.Key_Backtab)
    assert backward == list(reversed(forward))  # Shift+Tab walks the same stops the other way


@pytest.mark.slow  # a whole window with a model loaded (~0.9 s)
def test_tab_visits_the_notes_top_to_bottom_each_left_to_right(qtbot, window):
    from gui.chrome.downloads import offer_gpt2_download

    window.text_input.auto_box.setChecked(False)
    offer_gpt2_download(window)  # the first-start note, at the top
    window.set_max_tokens(3)  # the cap note, at the bottom (the text on screen has more tokens)
    window.show_error("Something failed.", [("Retry", lambda: None)])  # between them, and shown last
    window.activateWindow()
    qtbot.wait(50)
    notes = [window.note, window.error, window.cap_note]
    assert all(n.isVisible() for n in notes) and [n.y() for n in notes] == sorted(n.y() for n in notes)
    cycle = walk(qtbot, window, window.model_bar.model_choice, QtCore.Qt.Key.Key_Tab)
    in_notes = [w for w in cycle if any(n.isAncestorOf(w) for n in notes)]
    expected = [w for n in notes for w in n.action_buttons() + [n.close_button]]
    assert in_notes == expected and cycle[-len(expected):] == expected  # the last stops, then the model bar
