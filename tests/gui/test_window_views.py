"""The window's views, driven offscreen with a small test model: the head map and the grid, hover, the
query highlight, colours and dark mode, badges, head selection, the room on a small screen, the predictions
line and the help."""
import html
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from helpers import WAIT_MS, run  # noqa: E402


@pytest.mark.slow
def test_typing_runs_automatically_and_fills_every_view(qtbot, window):
    window.set_text("")
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        qtbot.keyClicks(window.text_input.text_edit, "The cat sat on the mat")
    r = window.bundle.result
    strip = window.text_input.token_strip
    assert r.text == "The cat sat on the mat"
    assert [strip.label(i) for i in range(strip.count())] == [f"{i}\n{t}" for i, t in enumerate(r.tokens)]
    assert r.tokens[1].startswith("␣")  # the leading-space marker is visible
    assert f"id {r.token_ids[1]}" in strip.tooltip(1)
    assert f"{r.n_tokens} tokens" in window.status_tokens.text()
    assert "tiny" in window.status_model.text() and "cpu" in window.status_model.text()
    assert "last run" in window.status_run.text()
    assert window.text_input.predictions.text().startswith("Next&nbsp;token:")
    first = r.predictions[0]  # each token quoted, so that a bare "." or "," reads as a token
    assert f"“{html.escape(first.token)}”" in window.text_input.predictions.text().replace("&nbsp;", " ")
    assert window.grid_panel.plot.shape == (3, 4)
    # an auto-run is not an explicit run: it is not saved as a recent text
    assert window.text_input.recent_texts() == []


def click_grid_cell(qtbot, window, layer, head):
    grid = window.grid_panel.plot
    qtbot.wait(200)  # let the view fit the new mosaic before mapping coordinates
    x, y = head + 0.5, layer + 0.5  # each head is a unit cell of the map
    view_point = grid.mapFromScene(grid.plot.vb.mapViewToScene(QtCore.QPointF(x, y)))
    qtbot.mouseClick(grid.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=view_point)


def test_clicking_a_grid_cell_shows_that_head_and_arrows_move(qtbot, window):
    r = run(qtbot, window, "The server rejected the request because it was overloaded.")
    click_grid_cell(qtbot, window, 2, 3)
    assert (window.state.layer, window.state.head) == (2, 3)
    shown = window.head_tab.plot.matrix
    expected = np.array(r.attentions[2, 3])
    lower = np.tril_indices(r.n_tokens)
    np.testing.assert_array_equal(shown[lower], expected[lower])
    assert np.isnan(shown[0, 1])  # future keys are masked, not drawn as 0
    assert window.head_tab.head_label.plain_text().startswith("L2H3")
    assert "Layer 2, head 3" in window.head_tab.head_label.toolTip()
    grid = window.grid_panel.plot
    grid.setFocus()
    for key in (QtCore.Qt.Key.Key_Left, QtCore.Qt.Key.Key_Up):
        qtbot.keyClick(grid, key)
    assert (window.state.layer, window.state.head) == (1, 2)
    for _ in range(3):
        qtbot.keyClick(grid, QtCore.Qt.Key.Key_Down)  # stays on the last layer
    assert (window.state.layer, window.state.head) == (2, 2)


def test_hover_line_follows_the_hovered_cell_as_plain_text_and_clears_on_a_new_result(qtbot, window):
    r = run(qtbot, window, "a <b>bold</b> move")
    window.select_head(1, 0)
    plot, line = window.head_tab.plot, window.head_tab.hover_label
    q, k = r.n_tokens - 1, 2
    plot.cell_hovered.emit((q, k, float(r.attentions[1, 0, q, k])))
    assert line.text() == f"query '{r.tokens[q]}' [{q}] → key '{r.tokens[k]}' [{k}]: {r.attentions[1, 0, q, k]:.3f}"
    assert line.textFormat() == QtCore.Qt.TextFormat.PlainText and "<b>" in "".join(r.tokens)
    plot.cell_hovered.emit((2, 5, float("nan")))
    assert line.text().endswith("masked (a future token)")
    plot.cell_hovered.emit((3, 0, float("nan")))
    assert line.text().endswith("hidden (first key)")
    plot.cell_hovered.emit((q, k, 0.5))
    run(qtbot, window, "another text")
    assert line.text().strip() == ""


def test_query_highlight_from_the_token_strip(qtbot, window):
    run(qtbot, window, "The server rejected the request")
    strip = window.text_input.token_strip
    qtbot.waitUntil(lambda: strip.item_rect(4).isValid())  # laid out in batches
    qtbot.mouseClick(strip.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=strip.item_rect(4).center())
    assert window.state.query_row == 4 and window.head_tab.plot.row_highlight.isVisible()


def test_hide_first_token_renormalises(qtbot, window):
    run(qtbot, window, "One two three four five six", bos=True)
    window.head_tab.hide_first_box.setChecked(True)
    assert window.state.hide_first
    m = window.head_tab.plot.matrix
    assert np.isnan(m[:, 0]).all()
    np.testing.assert_allclose(np.nansum(m[2:], axis=1), 1, atol=1e-5)


def test_a_tab_activating_a_head_shows_it_in_the_head_tab(qtbot, window):
    from gui.tabs.scores.scores_tab import ScoresTab

    run(qtbot, window, "a b a b a b c d c d")
    scores = window.tab(ScoresTab)
    window.tabs.setCurrentWidget(scores)
    scores.head_activated.emit(2, 1)
    assert window.tabs.currentWidget() is window.head_tab
    assert (window.state.layer, window.state.head) == (2, 1)
    assert window.head_tab.head_label.plain_text().startswith("L2H1")


def test_badges_follow_the_state(qtbot, window):
    run(qtbot, window, "The cat sat on the mat")
    panel = window.grid_panel
    from gui.plots.badges import standout_order

    panel.badge_choice.setCurrentIndex(panel.badge_choice.findData("sink"))
    assert window.state.badge_score == "sink"
    expected = standout_order(window.state.scores["sink"])  # only the heads that stand out, best first
    assert panel.plot.badge_layer.heads == expected
    assert panel.badge_note.toolTip() == panel.plot.badge_note != ""  # how many stand out, or that none does
    window.state.set_badge_score(None)
    assert panel.badge_choice.currentData() is None and panel.plot.badges == [] and panel.plot.badge_layer.heads == []


def image_items(window):
    import pyqtgraph as pg

    for view in window.findChildren(pg.GraphicsView):
        for item in view.scene().items():
            if isinstance(item, pg.ImageItem) and item.image is not None:
                yield view, item


def test_a_colormap_change_reaches_every_heatmap_in_the_window(qtbot, window):
    from gui.plots.plot_items import colormap
    from gui.tabs.scratch.scratch_tab import ScratchTab

    run(qtbot, window, "The cat sat on the mat")
    with qtbot.waitSignal(window.worker.task_done, timeout=WAIT_MS):
        window.tabs.setCurrentWidget(window.tab(ScratchTab))  # the From-scratch views draw their matrices
    qtbot.wait(100)
    magma = colormap("magma").getLookupTable(nPts=256, alpha=False)
    window.head_tab.colormap_choice.setCurrentIndex(window.head_tab.colormap_choice.findData("magma"))
    assert window.state.colormap == "magma"
    items = list(image_items(window))
    assert len(items) >= 5  # grid, head, score map, the scratch steps …
    for view, item in items:
        lut = item.lut if item.lut is not None else item.getColorMap().getLookupTable(nPts=256, alpha=False)
        lut = np.asarray(lut)[:, :3]
        sample = np.linspace(0, len(lut) - 1, 8).astype(int)
        expected = magma[np.linspace(0, 255, 8).astype(int)]
        assert np.abs(lut[sample].astype(int) - expected.astype(int)).max() <= 3, type(view).__name__


def test_dark_mode_reaches_every_figure(qtbot, window):
    import pyqtgraph as pg

    run(qtbot, window, "The cat sat on the mat")
    window.state.set_dark(True)
    views = window.findChildren(pg.GraphicsView)
    assert len(views) >= 3
    for view in views:
        assert view.backgroundBrush().color().lightness() < 80, type(view).__name__
    window.state.set_dark(False)
    assert all(v.backgroundBrush().color().lightness() > 200 for v in views)


def test_help_lists_every_shortcut_and_shows_the_model_card(qtbot, window):
    from gui.chrome.help import model_card_dialog, shortcuts_of

    keys = dict(shortcuts_of(window))
    for shortcut in ("Ctrl+E", "Ctrl+L", "Ctrl+1", "Alt+Right", "F5"):
        assert shortcut in keys, shortcut
    export_action = next(a for m in window.menuBar().findChildren(QtWidgets.QMenu) for a in m.actions()
                         if a.text() == "Export…")
    assert "Ctrl+E" in export_action.toolTip()
    dialog = model_card_dialog(window)
    qtbot.addWidget(dialog)
    text = dialog.view.toPlainText()
    assert "4-layer × 4-head" in text and "Measured heads" in text and "256-token context" in text


@pytest.mark.slow
def test_the_window_fits_a_small_screen(qtbot, window, tmp_path):
    assert window.minimumSize().width() <= 1024 and window.minimumSize().height() <= 700
    window.resize(1024, 700)
    qtbot.wait(50)
    assert (window.width(), window.height()) == (1024, 700)
    from gui.chrome.window import MainWindow

    fresh = MainWindow(QtCore.QSettings(str(tmp_path / "fresh.ini"), QtCore.QSettings.Format.IniFormat))
    qtbot.addWidget(fresh)
    available = fresh.screen().availableGeometry()  # a new window opens at a size that fits the screen
    assert fresh.width() <= max(available.width(), 1024) and fresh.height() <= max(available.height(), 700)
    fresh.close()


def test_select_out_of_range_is_an_error_not_clamped(qtbot, window):
    run(qtbot, window, "The cat sat")
    with pytest.raises(ValueError):
        window.select_head(9, 9)
    assert (window.state.layer, window.state.head) == (0, 0)


@pytest.mark.slow
def test_the_head_map_gets_the_room_on_a_laptop(qtbot, window):
    """At 1366×768 (a title bar takes ~28 px) with the first-start note, the input area is compact, the
    head map gets the height, and a splitter between them is remembered. The Head tab's controls are one
    row (the head's label elided, whole in its tooltip) and a long key label is cut, so the map itself (the
    view box: the image fills it) is ≥ 315 px high even with "<|endoftext|> 0" under it (340 with 11-character
    key labels; 14 characters keep a common word and its index whole, "␣because [6]", for 11 px of map; the Draw
    choice beside the hover line, 6 px more)."""
    from gui.chrome.downloads import offer_gpt2_download
    from gui.plots.figures import ROTATED_LABEL_CHARS

    window.resize(1366, 740)
    offer_gpt2_download(window)
    run(qtbot, window, "The cat sat on the mat because it was tired. " * 3)
    qtbot.wait(100)
    note = window.note
    assert note.label.height() < 2 * note.label.fontMetrics().lineSpacing()  # the note is one line
    assert "not downloaded yet" in note.label.toolTip()  # the whole of it is in the tooltip
    assert window.input_area.height() <= 130  # note, 2 lines of text, strip and predictions
    assert window.head_tab.plot.height() >= 420
    panel = window.head_tab
    run(qtbot, window, "The server rejected the request because it was overloaded.", bos=True)
    qtbot.wait(100)
    assert window.state.result.tokens[0] == "<|endoftext|>" and note.isVisible()
    # one control row, the key labels cut; the Draw (matrix / lines) choice beside the hover line takes 6 px more
    assert panel.plot.plot.getViewBox().height() >= 315
    assert max(len(label) for label in panel.plot.bottom_axis._labels) <= ROTATED_LABEL_CHARS
    row = panel.head_label.geometry().center().y()
    for control in (panel.view_choice, panel.colormap_choice, panel.scale_choice, panel.hide_first_box):
        assert abs(control.geometry().center().y() - row) <= 2  # one row
    label = panel.head_label
    assert not label.is_elided()
    assert label.shown_document().idealWidth() <= label.contentsRect().width()
    assert label.plain_text().startswith("L0H0 · top score:")
    assert "induction probe" in label.toolTip()
    window.resize(1000, 680)  # the minimum size
    qtbot.wait(100)
    assert window.head_tab.plot.height() >= 360
    window.resize(1366, 740)
    qtbot.wait(50)
    compact = window.input_area.height()
    window.show_error("Something went wrong.")
    qtbot.wait(50)
    window.error.hide()
    qtbot.wait(50)
    assert window.input_area.height() == compact  # a banner that came and went gives the plots their room back
    window.vsplitter.moveSplitter(compact + 80, 1)  # the user gives the text box more room
    qtbot.wait(50)
    assert window.input_area.height() == compact + 80 and window.input_extra == 80
    assert window.text_input.text_edit.height() > window.text_input.text_edit.lines_height(4)
    window.save_settings()
    assert int(window.settings.value("window/input_extra")) == 80
    window.vsplitter.moveSplitter(0, 1)  # back as small as it goes
    qtbot.wait(50)
    assert window.input_extra == 0 and window.input_area.height() == compact
    note.hide()
    window.resize(1400, 900)


def test_predictions_fit_two_lines_beside_the_token_strip(qtbot, window):
    from gui.input.text_input import PREDICTIONS_WIDTH, fit_lines

    metrics = window.text_input.predictions.fontMetrics()
    pieces = ["Next token:", "<|endoftext|> 45.2%", "␣the 19.5%", "a&b 3.0%", "x" * 400 + " 1.0%", "last 0.1%"]
    text = fit_lines(pieces, metrics, PREDICTIONS_WIDTH)
    lines = text.split("<br>")
    assert len(lines) <= 2 and "&lt;|endoftext|&gt;" in text and "<|" not in text  # escaped, never broken
    for line in lines:
        plain = QtGui.QTextDocumentFragment.fromHtml(line).toPlainText().replace("\xa0", " ")
        assert metrics.horizontalAdvance(plain) <= PREDICTIONS_WIDTH
    assert fit_lines(["a 1%", "b 2%"], metrics, PREDICTIONS_WIDTH) == "a&nbsp;1%&nbsp;b&nbsp;2%"
    run(qtbot, window, "The cat sat on the mat")
    label = window.text_input.predictions
    assert label.text().startswith("Next&nbsp;token:") and label.isVisible()
    assert all(p.token in label.toolTip() or "&" in p.token or "<" in p.token
               for p in window.bundle.result.predictions)


def test_the_token_strip_of_a_long_text_is_a_model_laid_out_in_batches(qtbot):
    """8,192 tokens: the strip holds the tokens, not a widget item each, lays them out a batch per event-loop turn
    (no single long layout pass), and a query row chosen elsewhere is selected and scrolled into view."""
    from types import SimpleNamespace

    from PySide6 import QtWidgets

    from gui.input.token_strip import LAYOUT_BATCH, TokenStrip
    from gui.state.view_state import ViewState

    state = ViewState()
    strip = TokenStrip(state)
    qtbot.addWidget(strip)
    strip.resize(600, strip.height())
    strip.show()
    qtbot.waitExposed(strip)
    n = 8192
    tokens = [f"t{i}" for i in range(n)]
    strip._bundle_changed(SimpleNamespace(result=SimpleNamespace(tokens=tokens, token_ids=range(n))))
    assert strip.layoutMode() is QtWidgets.QListView.LayoutMode.Batched and strip.batchSize() == LAYOUT_BATCH
    assert strip.count() == n and strip.label(5000) == "5000\nt5000" and "id 5000" in strip.tooltip(5000)
    strip._query_row_changed(7000)
    qtbot.waitUntil(lambda: strip.item_rect(7000).isValid() and strip.viewport().rect().intersects(
        strip.item_rect(7000)), timeout=5000)
    assert strip.current_row() == 7000
    strip._bundle_changed(None)
    assert strip.count() == 0
