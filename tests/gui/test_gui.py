"""pytest-qt tests that drive the real window (offscreen) with a small test model."""
import errno
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from conftest import ROOT  # noqa: E402
from helpers import WAIT_MS, hold_at_call  # noqa: E402


@pytest.fixture
def settings(tmp_path):
    return QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat)


def make_window(qtbot, settings, model_dir):
    from gui.qt import ensure_qapp
    from gui.chrome.window import MainWindow

    ensure_qapp()
    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.resize(1400, 900)
    window.show()
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(model_dir))
    return window


@pytest.fixture(scope="module")
def shared_window(tmp_path_factory, tiny_model_dir):
    """One window for the module's tests (creating one costs seconds): each test gets it reset."""
    from gui.qt import ensure_qapp
    from gui.chrome.window import MainWindow

    ensure_qapp()
    settings = QtCore.QSettings(str(tmp_path_factory.mktemp("shared") / "settings.ini"),
                                QtCore.QSettings.Format.IniFormat)
    w = MainWindow(settings)
    w.resize(1400, 900)
    w.show()
    yield w
    w.close()
    w.deleteLater()


@pytest.fixture
def window(qtbot, shared_window, tiny_model_dir):
    """The shared window, reset to a fresh start on the tiny model."""
    from gui.export import exporting
    from gui.input import model_bar

    w = shared_window
    w.exporter.ask_overwrite, w.model_bar.ask = exporting.ask_overwrite, model_bar.ask
    bar = w.model_bar
    for index in reversed(range(bar.device_choice.count())):
        if bar.device_choice.itemText(index) not in ("auto", "cpu"):
            bar.device_choice.removeItem(index)
    bar.device_choice.setCurrentText("auto")
    if w.model_info is None or w.model_info.folder != str(tiny_model_dir):
        with qtbot.waitSignal(w.model_ready, timeout=WAIT_MS):
            w.load_model(str(tiny_model_dir))
    w.text_input.auto_box.setChecked(True)
    w.settings.remove("texts/recent")
    w.text_input._refresh_recent_menu()
    w.text_input.set_bos(False)
    state = w.state
    state.set_colormap("viridis"), state.set_scale("linear"), state.set_hide_first(False), state.set_badge_score(None)
    if state.result is not None:
        state.select(0, 0)
    w.tabs.setCurrentWidget(w.head_tab)
    w.error.hide(), w.note.hide()
    return w


def run(qtbot, window, text, bos=False):
    window.text_input.set_bos(bos)
    window.set_text(text)
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        window.run_text()
    return window.bundle.result


def export(qtbot, window, what, path, fmt=None, png_width=None):
    """Run an export to the end; returns the files written."""
    with qtbot.waitSignal(window.exporter.finished, timeout=WAIT_MS) as blocker:
        assert window.exporter.start(what, path, fmt, png_width)
    return blocker.args[0]


@pytest.mark.slow
def test_typing_runs_automatically_and_fills_every_view(qtbot, window):
    window.set_text("")
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        qtbot.keyClicks(window.text_input.text_edit, "The cat sat on the mat")
    r = window.bundle.result
    strip = window.text_input.token_strip
    assert r.text == "The cat sat on the mat"
    assert [strip.item(i).text() for i in range(strip.count())] == [f"{i}\n{t}" for i, t in enumerate(r.tokens)]
    assert r.tokens[1].startswith("␣")  # the leading-space marker is visible
    assert f"id {r.token_ids[1]}" in strip.item(1).toolTip()
    assert f"{r.n_tokens} tokens" in window.status_tokens.text()
    assert "tiny" in window.status_model.text() and "cpu" in window.status_model.text()
    assert "last run" in window.status_run.text()
    assert window.text_input.predictions.text().startswith("Next&nbsp;token:")
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
    assert window.head_tab.head_label.plain_text().startswith("L2 H3")
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
    qtbot.mouseClick(strip.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=strip.visualItemRect(strip.item(4)).center())
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
    assert window.head_tab.head_label.plain_text().startswith("L2 H1")


def test_badges_follow_the_state(qtbot, window):
    run(qtbot, window, "The cat sat on the mat")
    panel = window.grid_panel
    panel.badge_choice.setCurrentIndex(panel.badge_choice.findData("sink"))
    assert window.state.badge_score == "sink" and panel.plot.badges
    window.state.set_badge_score(None)
    assert panel.badge_choice.currentData() is None and panel.plot.badges == []


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


@pytest.mark.parametrize("what,name", [("head", "h.png"), ("head", "h.svg"), ("head", "h.pdf"), ("head", "h.csv"),
                                       ("head", "h.npz"), ("grid", "g.png"), ("grid", "g.json")])
def test_export_files(qtbot, window, tmp_path, what, name):
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    r = run(qtbot, window, "The cat sat on the mat")
    assert export(qtbot, window, what, tmp_path / name, png_width=900) == [tmp_path / name]
    assert (tmp_path / name).stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing else left behind
    if name.endswith(".png"):
        assert QtGui.QImage(str(tmp_path / name)).width() == 900
    if name == "h.npz":
        with np.load(tmp_path / name) as data:
            np.testing.assert_array_equal(data["attentions"], r.attentions[window.state.layer, window.state.head])
    if name == "g.json":
        data = json.loads((tmp_path / name).read_text())
        assert np.array(data["attentions"]).shape == r.attentions.shape


@pytest.mark.slow
def test_every_head_export_honours_the_png_width_in_one_folder(qtbot, window, tmp_path):
    run(qtbot, window, "The cat sat on the mat")
    written = export(qtbot, window, "heads", tmp_path / "heads", "png", png_width=500)
    assert len(written) == 13 and (tmp_path / "heads" / "L2H3.png").exists()
    assert not (tmp_path / "heads" / "heads").exists()
    assert {QtGui.QImage(str(p)).width() for p in written} == {500}


def test_gui_and_cli_data_exports_are_the_same_bytes(qtbot, window, tmp_path, tiny_model_dir):
    import main

    text = "The cat sat on the mat because it was tired."
    run(qtbot, window, text, bos=False)
    written = export(qtbot, window, "data", tmp_path / "gui")
    assert {"attention.npz", "scores.csv", "parity.json"} <= {p.name for p in written}
    assert main.main(["export", "--model", str(tiny_model_dir), "--text", text, "--no-bos", "--device", "cpu",
                      "--no-head-images", "--out", str(tmp_path / "cli")]) == 0
    for name in ("attention.npz", "scores.csv", "scores_tl.csv"):
        assert (tmp_path / "gui" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    gui_parity, cli_parity = (json.loads((tmp_path / d / "parity.json").read_text()) for d in ("gui", "cli"))
    gui_parity.pop("seconds"), cli_parity.pop("seconds")  # how long it took is the one field that may differ
    assert gui_parity == cli_parity


def test_a_data_export_writes_the_tl_scores_the_scores_tab_shows(qtbot, window, tmp_path, tiny_model_dir):
    """scores_tl.csv of the app's data export is computed with the TL options chosen in the Head scores tab, and
    equals the command line's with the same options, byte for byte."""
    import main
    from gui.tabs.scores.scores_tab import ScoresTab

    text = "The cat sat on the mat because the cat was tired."
    run(qtbot, window, text, bos=False)
    panel = window.tab(ScoresTab)
    panel.measure_choice.setCurrentIndex(panel.measure_choice.findData("abs"))
    panel.exclude_bos_box.setChecked(True)
    try:
        assert window.state.tl_options == {"error_measure": "abs", "exclude_bos": True, "exclude_current_token": False}
        export(qtbot, window, "data", tmp_path / "gui")
    finally:
        panel.measure_choice.setCurrentIndex(panel.measure_choice.findData("mul"))
        panel.exclude_bos_box.setChecked(False)
    assert main.main(["export", "--model", str(tiny_model_dir), "--text", text, "--no-bos", "--device", "cpu",
                      "--no-head-images", "--tl-measure", "abs", "--tl-exclude-bos", "--out", str(tmp_path / "cli")]) == 0
    gui, cli = ((tmp_path / d / "scores_tl.csv").read_bytes() for d in ("gui", "cli"))
    assert gui == cli and b",abs,true,false" in gui


def test_a_full_disk_leaves_no_partial_files_and_says_so_in_one_sentence(qtbot, window, tmp_path, monkeypatch):
    from analysis.export import writers as writers

    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    run(qtbot, window, "The cat sat on the mat")

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writers, "write_scores_csv", full)
    for what, path in (("data", tmp_path / "data"), ("grid", tmp_path / "scores.csv")):
        with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
            window.exporter.start(what, path)
        message = blocker.args[0]
        assert "space" in message.lower() and "\n" not in message and "Errno" not in message
        assert not path.exists()
    assert list(tmp_path.iterdir()) == []  # no staging folder, no partial file


def test_an_unwritable_export_path_shows_a_message(qtbot, window, tmp_path):
    run(qtbot, window, "The cat sat on the mat")
    (tmp_path / "file").write_text("")
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.exporter.start("head", tmp_path / "file" / "x.png")
    assert window.error.isVisible() and "\n" not in blocker.args[0]


def test_an_export_never_replaces_a_file_of_the_model_it_came_from(qtbot, window, tmp_path, tiny_model_dir):
    """The command line's rule in the app too: a data export named over one of the model's files (here a hard
    link to its config.json, so that the old code's rename would not harm the shared model) is refused."""
    import os

    run(qtbot, window, "The cat sat on the mat")
    target = tmp_path / "scores.json"
    os.link(tiny_model_dir / "config.json", target)
    window.exporter.ask_overwrite = lambda _parent, path: True
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.exporter.start("grid", target)
    assert "config.json" in blocker.args[0] and blocker.args[0].endswith("choose another place for the export.")
    assert os.path.samefile(target, tiny_model_dir / "config.json")


def test_what_an_export_left_behind_is_said_in_the_status_bar(qtbot, window, tmp_path, monkeypatch):
    from analysis.export import contents, folders

    run(qtbot, window, "The cat sat on the mat")
    said = "The new export is in X, but the earlier one could not be deleted wholly: Y is left."
    monkeypatch.setattr(contents, "write_export", lambda out, *a, **k: folders.Written([out / "a.csv"], [said]))
    with qtbot.waitSignal(window.exporter.warned, timeout=WAIT_MS):
        window.exporter.start("data", tmp_path / "out")
    assert window.statusBar().currentMessage() == said


def test_overwriting_asks_first(qtbot, window, tmp_path):
    run(qtbot, window, "The cat sat on the mat")
    target = tmp_path / "L0H0.png"
    target.write_bytes(b"mine")
    asked = []
    window.exporter.ask_overwrite = lambda _parent, path: asked.append(path) or False
    assert not window.exporter.start("head", target)
    assert asked == [target] and target.read_bytes() == b"mine"
    window.exporter.ask_overwrite = lambda _parent, path: True
    export(qtbot, window, "head", target)
    assert target.read_bytes()[:4] == b"\x89PNG"


def test_export_dialog_names_say_what_they_hold_and_the_folder_stays(qtbot, window, tmp_path, settings):
    from gui.export.export_dialog import ExportDialog

    settings.setValue("export/folder", str(tmp_path))
    dialog = ExportDialog(window, settings, layer=2, head=1)
    qtbot.addWidget(dialog)
    assert dialog.path() == str(tmp_path / "L2H1.png")
    names = []
    for _ in range(3):
        for index in range(dialog.what_choice.count()):
            dialog.what_choice.setCurrentIndex(index)
            names.append(os.path.basename(dialog.path()))
            for fmt_index in range(dialog.format_choice.count()):
                dialog.format_choice.setCurrentIndex(fmt_index)
                assert os.path.dirname(dialog.path()) == str(tmp_path)
                names.append(os.path.basename(dialog.path()))
    assert {"L2H1.svg", "grid.pdf", "attnscope-heads", "attnscope-data", "attnscope-export"} <= set(names)


@pytest.mark.slow
def test_copy_figure_copies_the_clean_figure_of_the_view_in_front_at_the_export_width(qtbot, window, tmp_path):
    from gui.export.export_dialog import DEFAULT_PNG_WIDTH
    from gui.plots.figures import dispose_figure

    window.settings.remove("export/png_width")
    run(qtbot, window, "The cat sat")
    clipboard = QtWidgets.QApplication.clipboard()
    window.tabs.setCurrentWidget(window.head_tab)
    window.text_input.setFocus()
    window.copy_figure()
    copied = clipboard.image()
    reference = window.head_tab.offscreen_figure()
    # the export figure, at the export's default PNG width (not a grab of the screen at the figure's own size)
    assert copied.width() == DEFAULT_PNG_WIDTH == 1600
    assert abs(copied.height() / copied.width() - reference.height() / reference.width()) < 0.01
    dispose_figure(reference)
    (png,) = export(qtbot, window, "head", tmp_path / "head.png", png_width=DEFAULT_PNG_WIDTH)
    assert QtGui.QImage(str(png)).size() == copied.size()  # the same size as the PNG export
    window.grid_panel.plot.setFocus()
    qtbot.waitUntil(window.grid_panel.plot.hasFocus)
    window.settings.setValue("export/png_width", 700)  # what the Export dialog last used
    window.copy_figure()
    reference = window.grid_panel.offscreen_figure()
    assert clipboard.image().width() == 700
    assert abs(clipboard.image().height() / 700 - reference.height() / reference.width()) < 0.01
    dispose_figure(reference)
    window.settings.remove("export/png_width")


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


def test_failed_loads_keep_the_previous_model_and_offer_load_anyway(qtbot, window, tmp_path, tokenizer):
    info = window.model_info
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.load_model(str(tmp_path / "missing-model"))
    assert "not found" in blocker.args[0] and "Still using" in blocker.args[0]
    assert window.model_info is info
    assert run(qtbot, window, "still works").text == "still works"
    assert not window.error.isVisible()  # a later successful run clears the banner
    # pickle weights: refused, then loaded after the explicit opt-in button
    from analysis.model.synthetic import save_random_gpt2

    folder = save_random_gpt2(tmp_path / "pickle", tokenizer=tokenizer, safetensors=False)
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.load_model(str(folder))
    assert "pickle" in blocker.args[0]
    buttons = [b for b in window.error.action_buttons() if "Load anyway" in b.text()]
    assert buttons
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        buttons[0].click()
    assert window.model_info.n_layer == 2 and not window.error.isVisible()


def test_a_folder_that_is_not_a_model_is_not_added_to_the_model_list(qtbot, window, tmp_path):
    choice = window.model_bar.model_choice
    before = [choice.itemData(i) for i in range(choice.count())]
    (tmp_path / "notes").mkdir()
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS):
        window.load_model(str(tmp_path / "notes"))
    assert [choice.itemData(i) for i in range(choice.count())] == before
    assert choice.currentData() == window.model_bar.loaded_source


def test_model_list_says_what_is_downloaded_and_asks_before_a_download(qtbot, window):
    from analysis.model.hub import is_cached

    choice, bar = window.model_bar.model_choice, window.model_bar
    labels = {choice.itemData(i): choice.itemText(i) for i in range(choice.count())}
    for name, size in (("gpt2", "124 M"), ("distilgpt2", "82 M"), ("gpt2-medium", "355 M"), ("gpt2-large", "774 M"),
                       ("gpt2-xl", "1.5 B")):
        assert size in labels[name] and ("not downloaded" in labels[name]) == (not is_cached(name))
    uncached = next(name for name in ("gpt2-xl", "gpt2-large") if not is_cached(name))
    asked = []
    bar.ask = lambda _parent, _title, text: asked.append(text) or False
    load_id = window.latest_load_id
    bar.model_choice.setCurrentIndex(choice.findData(uncached))
    bar._model_chosen(choice.findData(uncached))
    assert asked and uncached in asked[0] and window.latest_load_id == load_id  # declined: nothing loads
    assert choice.currentData() == bar.loaded_source
    bar.device_choice.addItem("cuda:9")
    bar.device_choice.setCurrentText("cuda:9")
    assert "Load" in bar.progress_label.text()


def test_offline_gpt2_download_says_what_to_do_and_offers_retry(qtbot, window):
    """HF_HUB_OFFLINE is set for the tests: the download fails fast, the model stays, Retry is offered."""
    from analysis.model.hub import is_cached
    from gui.chrome.downloads import offer_gpt2_download

    if is_cached("gpt2"):
        pytest.skip("GPT-2 is in this machine's cache")
    info = window.model_info
    assert window.download_action.isVisible()
    offer_gpt2_download(window)
    assert window.note.isVisible() and "not downloaded yet" in window.note.text()
    assert "4-layer × 4-head" in window.note.text()
    button = [b for b in window.note.action_buttons() if b.text() == "Download GPT-2"][0]
    with qtbot.waitSignal(window.error_shown, timeout=30_000) as blocker:
        button.click()
    message = blocker.args[0]
    assert "&#" not in window.error.label.text() and "--" not in message  # plain text, no command-line flags
    assert window.model_info is info and window.model_bar.model_choice.currentData() == str(info.folder)
    assert [b.text() for b in window.error.action_buttons()] == ["Retry"]
    assert window.download_action.isVisible()


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
    qtbot.keyClicks(text_input.text_edit, " down")
    assert text_input.stale.isVisible()
    run(qtbot, window, text_input.text())
    assert not text_input.stale.isVisible()


@pytest.mark.slow
def test_focus_starts_in_the_text_box_and_tab_leaves_it(qtbot, settings, tiny_model_dir):
    w = make_window(qtbot, settings, tiny_model_dir)
    w.activateWindow()
    box = w.text_input.text_edit
    qtbot.waitUntil(box.hasFocus, timeout=5000)
    box.setPlainText("a b")
    qtbot.keyClick(box, QtCore.Qt.Key.Key_Tab)
    assert "\t" not in box.toPlainText() and not box.hasFocus()
    w.grid_panel.plot.setFocus()
    qtbot.waitUntil(w.grid_panel.plot.hasFocus)
    assert "#3d8ee0" in w.grid_panel.plot.styleSheet()  # the focus ring
    qtbot.keyClick(w.grid_panel.plot, QtCore.Qt.Key.Key_L, QtCore.Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(box.hasFocus)
    assert "transparent" in w.grid_panel.plot.styleSheet()
    w.close()


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
def test_bundled_model_is_explained_in_the_status_bar(qtbot, settings):
    w = make_window(qtbot, settings, "bundled")
    assert "4,096-token vocabulary" in w.status_model.toolTip() and "256-token context" in w.status_model.toolTip()
    w.close()


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


@pytest.mark.slow
def test_settings_persist(qtbot, settings, tiny_model_dir):
    from gui.chrome.window import MainWindow

    w = make_window(qtbot, settings, tiny_model_dir)
    w.state.set_colormap("magma")
    w.state.set_scale("log")
    run(qtbot, w, "remember me")
    w.close()
    w2 = MainWindow(settings)
    qtbot.addWidget(w2)
    assert w2.state.colormap == "magma" and w2.state.scale == "log"
    assert w2.head_tab.colormap_choice.currentData() == "magma"
    assert w2.text_input.recent_texts()[0] == "remember me"
    assert settings.value("model/last") == str(tiny_model_dir)
    w2.close()


@pytest.mark.slow
def test_closing_mid_load_or_mid_run_returns_at_once(qtbot, settings, tiny_model_dir):
    from gui.chrome.window import MainWindow

    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.show()
    w.load_model(str(tiny_model_dir))
    started = time.perf_counter()
    w.close()
    assert time.perf_counter() - started < 0.5
    w2 = make_window(qtbot, settings, tiny_model_dir)
    w2.set_text("word " * 60)
    w2.run_text()
    started = time.perf_counter()
    w2.close()
    assert time.perf_counter() - started < 0.5


# ------------------------------------------------------------------ requests behind a long job
def long_job(window, total: int, go: threading.Event):
    """A job as the scan dialog makes it (gui.state.jobs.Job, named "scan"), running until ``go`` or its Cancel."""
    from analysis.errors import AnalysisCancelled
    from gui.state.jobs import Job

    job = Job(window.worker, "scan")
    outcome = []
    job.finished.connect(outcome.append)
    job.cancelled.connect(lambda: outcome.append("cancelled"))

    def work(_loaded, progress, cancel):
        progress(total // 4, total)
        for _ in range(3000):  # at most 300 s: as the scan, it looks at its Cancel between batches
            if go.is_set():
                return "scanned"
            if cancel.wait(0.1):
                raise AnalysisCancelled("Scan cancelled.")
        return "scanned"

    job.start(work)
    return job, outcome


def test_a_new_model_stops_a_scan_at_once_and_says_so(qtbot, window, tiny_model_dir):
    """A new model chosen during a 20,000-text scan had not loaded 400 s later, with no message: its load
    waited behind the scan. Now the load ends the scan the moment it is asked for, and the status bar says so."""
    job, outcome = long_job(window, 20_000, threading.Event())
    qtbot.waitUntil(lambda: job.done == 5_000, timeout=WAIT_MS)
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))
        assert window.statusBar().currentMessage() == "Stopped the scan: a new model is loading."
    qtbot.waitUntil(lambda: outcome == ["cancelled"], timeout=WAIT_MS)


def test_a_text_waiting_for_a_scan_that_a_new_model_stops_no_longer_says_it_waits(qtbot, window, tiny_model_dir):
    """The status bar went on saying "waiting for the scan (12 % done)…" beside "Stopped the scan" while the new
    model loaded: the text no longer waits for that scan."""
    job, outcome = long_job(window, 20_000, threading.Event())
    qtbot.waitUntil(lambda: job.done == 5_000, timeout=WAIT_MS)
    window.set_text("A text typed while the scan runs.")
    window.run_text()
    assert window.status_run.text().startswith("waiting for the scan")
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))
        assert "waiting for the scan" not in window.status_run.text()
    qtbot.waitUntil(lambda: outcome == ["cancelled"], timeout=WAIT_MS)


def test_a_text_run_during_a_scan_says_at_once_what_it_waits_for(qtbot, window):
    """A new text does not end a scan (its scores are not the text's): the run waits, and says so at once."""
    go = threading.Event()
    job, outcome = long_job(window, 20, go)
    qtbot.waitUntil(lambda: job.done == 5, timeout=WAIT_MS)
    window.set_text("A text typed while the scan runs.")
    window.run_text()
    assert window.status_run.text() == "waiting for the scan (25 % done) to finish before running the text…"
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        go.set()
    assert outcome == ["scanned"] and window.bundle.result.text == "A text typed while the scan runs."
    assert window.status_run.text().startswith("last run")


def test_a_text_run_during_an_importance_map_stops_it_at_once_and_runs(qtbot, window, monkeypatch):
    """A text typed during an importance map was not analysed 300 s later. The map is of the text on screen,
    so a new text ends it at its next forward (the status bar says so) and the new text runs."""
    import analysis.measures.ablation as ablation_module
    from gui.tabs.ablation.ablation_tab import AblationTab

    run(qtbot, window, "The cat sat on the mat because it was tired.")
    panel = window.tab(AblationTab)
    shown = []
    panel.importance_shown.connect(shown.append)
    calls, reached, go = hold_at_call(monkeypatch, ablation_module, "_run", 3)
    panel.start_importance()
    qtbot.waitUntil(reached.is_set, timeout=WAIT_MS)
    window.set_text("Another text, typed while the map runs.")
    window.run_text()
    assert window.statusBar().currentMessage() == "Stopped the importance map: a new text is running."
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        go.set()
    assert window.bundle.result.text == "Another text, typed while the map runs."
    assert shown == [] and len(calls) < window.bundle.result.n_layer * window.bundle.result.n_head + 1


# ------------------------------------------------------------------ a 5 MB one-line text
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


def test_select_out_of_range_is_an_error_not_clamped(qtbot, window):
    run(qtbot, window, "The cat sat")
    with pytest.raises(ValueError):
        window.select_head(9, 9)
    assert (window.state.layer, window.state.head) == (0, 0)


@pytest.mark.slow
def test_screenshot_mode_in_process(qtbot, tiny_model_dir, tmp_path, monkeypatch):
    """run_app --screenshot: every view saved, --select applied, the user's settings untouched."""
    import argparse

    from gui import app as app_module

    used = []
    real = app_module.screenshot_settings
    monkeypatch.setattr(app_module, "screenshot_settings", lambda: used.append(real()) or used[-1])
    args = argparse.Namespace(model=str(tiny_model_dir), device="cpu", text="The cat sat on the mat",
                              select="2.1", screenshot=tmp_path / "shots")
    assert app_module.run_app(args) == 0
    for name in ("window", "grid", "detail", "scores"):
        image = QtGui.QImage(str(tmp_path / "shots" / f"{name}.png"))
        assert not image.isNull() and image.width() > 200
    assert len(used) == 1 and "attnscope-screenshot-settings" in used[0].fileName()
    started = time.monotonic()
    qtbot.wait(300)  # the app ended itself cleanly: later event loops of this process still run
    assert time.monotonic() - started >= 0.25


def screenshot_run(*args, config_home=None):
    import tempfile

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",  # settings go to a private folder, not the user's
           "XDG_CONFIG_HOME": str(config_home or tempfile.mkdtemp(prefix="attnscope-config-"))}
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


@pytest.mark.slow
def test_screenshot_launch_option_never_writes_the_users_settings(tiny_model_dir, tmp_path):
    out = screenshot_run("--model", tiny_model_dir, "--text", "The cat sat on the mat", "--select", "2.1",
                         "--screenshot", tmp_path / "shots", config_home=tmp_path / "cfg")
    assert out.returncode == 0, out.stderr
    for name in ("window", "grid", "detail", "scores"):
        image = QtGui.QImage(str(tmp_path / "shots" / f"{name}.png"))
        assert not image.isNull() and image.width() > 200
    assert not any((tmp_path / "cfg").rglob("*.conf")) and not any((tmp_path / "cfg").rglob("*.ini"))


@pytest.mark.slow
def test_select_out_of_range_fails_the_screenshot_run(tiny_model_dir, tmp_path):
    out = screenshot_run("--model", tiny_model_dir, "--select", "99.99", "--screenshot", tmp_path / "shots")
    assert out.returncode != 0 and "--select 99.99" in out.stderr


def test_a_remembered_model_that_is_gone_falls_back_to_the_default(tiny_model_dir, tmp_path, settings):
    import shutil as sh

    from gui.app import choose_source, still_available

    folder = sh.copytree(tiny_model_dir, tmp_path / "was-here")
    settings.setValue("model/last", str(folder))
    assert choose_source(None, settings) == (str(folder), False)
    sh.rmtree(folder)
    assert not still_available(str(folder)) and still_available("bundled") and not still_available("gpt2-xl")
    assert choose_source(None, settings)[0] in ("bundled", "gpt2")  # the default instead of failing
    assert choose_source("gpt2-xl", settings) == ("gpt2-xl", False)  # asked for by name: loading will say


@pytest.mark.slow
def test_screenshot_fails_loudly_on_a_bad_model(tmp_path):
    out = screenshot_run("--model", tmp_path / "nope", "--screenshot", tmp_path / "shots")
    assert out.returncode != 0 and "not found" in out.stderr


@pytest.mark.slow
def test_default_model_is_bundled_without_a_cached_gpt2(tmp_path):
    out = subprocess.run([sys.executable, "-c", "from gui.app import default_model_choice as d; print(d())"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert out.stdout.strip() == "('bundled', True)", out.stderr


# ------------------------------------------------------------------ room on a laptop, examples, models
@pytest.mark.slow
def test_the_head_map_gets_the_room_on_a_laptop(qtbot, window):
    """At 1366×768 (a title bar takes ~28 px) with the first-start note, the input area is compact, the
    head map gets the height, and a splitter between them is remembered. The Head tab's controls are one
    row (the head's label elided, whole in its tooltip) and a long key label is cut, so the map itself (the
    view box: the image fills it) is ≥ 340 px high even with "<|endoftext|> 0" under it."""
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
    assert panel.plot.plot.getViewBox().height() >= 340  # one control row, the key labels cut
    assert max(len(label) for label in panel.plot.bottom_axis._labels) <= ROTATED_LABEL_CHARS
    row = panel.head_label.geometry().center().y()
    for control in (panel.view_choice, panel.colormap_choice, panel.scale_choice, panel.hide_first_box):
        assert abs(control.geometry().center().y() - row) <= 2  # one row
    label = panel.head_label
    assert not label.is_elided()
    assert label.shown_document().idealWidth() <= label.contentsRect().width()
    assert label.plain_text().startswith("L0 H0 · top score:")
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


def test_an_example_that_names_a_head_opens_it(qtbot, window, monkeypatch):
    """"induction in code: layer 1, head 3" runs its text and then shows layer 1, head 3 — on the
    bundled model, whose heads the examples name; on another model it only runs the text."""
    from gui.input import text_input
    from gui.input.examples import example_texts, parse_example

    assert parse_example("previous token: layer 0, head 2 | 0.2 | The cat") == \
        type(example_texts()[0])("previous token: layer 0, head 2", "The cat", (0, 2))
    assert parse_example("pipes | a | b | c").text == "a | b | c" and parse_example("pipes | a | b | c").head is None
    assert parse_example("# a comment") is None and parse_example("   ") is None
    examples = [e for e in example_texts() if e.head is not None]
    assert len(examples) >= 3 and all(f"layer {e.head[0]}" in e.label for e in examples)
    example = next(e for e in examples if e.head == (1, 3))
    window.tabs.setCurrentIndex(1)
    window.state.select(0, 0)
    action = next(a for a in window.text_input.examples_menu.actions() if a.text().startswith(example.label))
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        action.trigger()  # the tiny test model is not the bundled one: its heads are not the ones named
    qtbot.wait(50)
    assert (window.state.layer, window.state.head) == (0, 0) and window.tabs.currentIndex() == 1
    monkeypatch.setattr(text_input, "BUNDLED", window.state.result.model_label)  # as if it were
    window.text_input.set_text("")
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        action.trigger()
    qtbot.waitUntil(lambda: (window.state.layer, window.state.head) == (1, 3))
    assert window.tabs.currentWidget() is window.head_tab
    window.state.select(0, 0)
    run(qtbot, window, example.text + " more")  # another text: the example's head is not forced again
    assert (window.state.layer, window.state.head) == (0, 0)


def test_model_list_is_grouped_by_family_with_sizes_and_explains_minilm(qtbot, window, monkeypatch):
    """Headers per family, a size for every entry (never "? params"), a minilm entry that says how to install it."""
    from analysis.model.catalogue import HUB_MODEL_TABLE, MINILM_MISSING
    from gui.input import model_bar

    bar = window.model_bar
    choice = bar.model_choice
    texts = [choice.itemText(i) for i in range(choice.count())]
    assert not any("?" in t for t in texts)
    headers = [choice.itemText(i) for i in range(choice.count())
               if choice.itemData(i) is None and choice.itemText(i)]
    assert headers == ["GPT-2", "Llama-style decoder", "GPT-NeoX", "BERT-style encoder"]
    for i in range(choice.count()):
        if choice.itemData(i) is None and choice.itemText(i):
            assert not choice.model().item(i).isEnabled()  # a header cannot be chosen
    for model in HUB_MODEL_TABLE:
        index = choice.findData(model.name)
        header = max(i for i in range(index) if choice.itemText(i) in headers)
        assert choice.itemText(header) == model.group and f"{model.parameters} params" in choice.itemText(index)
    assert "BERT" in choice.itemText(max(i for i in range(choice.findData("minilm")) if choice.itemText(i) in headers))
    monkeypatch.setattr(model_bar, "minilm_installed", lambda: False)
    bar.refresh_cached()
    index = choice.findData("minilm")
    assert "make minilm" in choice.itemText(index)
    assert choice.itemData(index, QtCore.Qt.ItemDataRole.ToolTipRole) == MINILM_MISSING
    told, load_id = [], window.latest_load_id
    bar.ask = lambda _parent, title, text, info=False: told.append((text, info)) or True
    bar._model_chosen(index)
    assert told == [(MINILM_MISSING, True)] and window.latest_load_id == load_id  # explained, nothing loads
    assert choice.currentData() == bar.loaded_source
    monkeypatch.undo()
    bar.refresh_cached()


@pytest.mark.slow
def test_loading_says_so_and_a_run_says_what_its_attention_takes(qtbot, settings, tiny_model_dir):
    """"loading …" in the status bar and over the grid instead of empty axes; the token line
    says what the attention takes (layers × heads × tokens² × 4 bytes); the token cap is a setting."""
    from gui.qt import ensure_qapp
    from gui.chrome.window import LOADING_NOTE, MainWindow
    from analysis.display import format_bytes

    ensure_qapp()
    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.show()
    with qtbot.waitSignal(w.model_ready, timeout=WAIT_MS):
        w.load_model(str(tiny_model_dir))
        assert w.status_model.text() == f"loading {tiny_model_dir.name}…"
        assert w.grid_panel.stack.currentWidget() is w.grid_panel.placeholder
        assert w.grid_panel.placeholder.text() == LOADING_NOTE == w.state.placeholder
    sized = []
    w.worker.analysis_sized.connect(lambda rid, n, size: sized.append((n, size)))
    w.set_text("The cat sat on the mat")
    with qtbot.waitSignal(w.result_shown, timeout=WAIT_MS):
        w.run_text()
    r = w.bundle.result
    assert w.grid_panel.stack.currentWidget() is w.grid_panel.plot and w.state.placeholder is None
    need = 3 * 4 * r.n_tokens ** 2 * 4  # float32 (layer, head, query, key) of the tiny model
    assert sized == [(r.n_tokens, need)] and r.attentions.nbytes == need
    assert w.status_tokens.text() == f"{r.n_tokens} tokens · attention {format_bytes(need)}"
    assert format_bytes(604 * 2**20) == "604.00 MiB" and format_bytes(1.25 * 2**30) == "1.25 GiB"
    assert w.max_tokens_action.text() == "Token limit (64: the model's context; your cap 2,048)…"  # what applies
    w.set_max_tokens(4)
    assert "(4)" in w.max_tokens_action.text()
    with qtbot.waitSignal(w.result_shown, timeout=WAIT_MS):
        w.run_text()
    assert w.bundle.result.n_tokens == 4 and w.bundle.result.truncated
    assert "truncated" in w.status_tokens.text() and "Token limit" in w.status_tokens.toolTip()
    w.close()


@pytest.mark.slow
def test_gui_exports_follow_the_value_weighted_view_and_the_sink_epsilon(qtbot, window, tmp_path, tiny_model_dir):
    """What is visible exports: the head PNG in the value-weighted view is the Head tab's own figure; the data
    export's summary has the sink rate at the Scores panel's ε, like `main.py export --sink-epsilon`."""
    import main
    from gui.plots.figures import dispose_figure
    from gui.export.figure_files import save_figure
    from gui.state.lens_data import VALUE_NORMS
    from gui.tabs.scores.scores_tab import ScoresTab

    text = "The cat sat on the mat because it was tired."
    run(qtbot, window, text)
    (weights_png,) = export(qtbot, window, "head", tmp_path / "weights.png", png_width=600)
    window.state.set_attention_view("value-weighted")
    qtbot.waitUntil(lambda: window.state.lens(VALUE_NORMS) is not None, timeout=WAIT_MS)
    (values_png,) = export(qtbot, window, "head", tmp_path / "values.png", png_width=600)
    shown = window.head_tab.offscreen_figure()
    save_figure(shown, tmp_path / "shown.png", 600)
    dispose_figure(shown)
    values, weights = QtGui.QImage(str(values_png)), QtGui.QImage(str(weights_png))
    assert values != weights
    assert values == QtGui.QImage(str(tmp_path / "shown.png"))
    (grid_png,) = export(qtbot, window, "grid", tmp_path / "grid.png", png_width=600)
    grid = window.grid_panel.offscreen_figure()
    save_figure(grid, tmp_path / "grid-shown.png", 600)
    dispose_figure(grid)
    assert QtGui.QImage(str(grid_png)) == QtGui.QImage(str(tmp_path / "grid-shown.png"))
    window.state.set_attention_view("weights")
    scores = window.tab(ScoresTab)
    scores.epsilon_spin.setValue(0.05)  # the user sets ε in the Scores tab
    assert window.state.sink_epsilon == 0.05
    written = export(qtbot, window, "data", tmp_path / "gui")
    window.state.set_sink_epsilon(0.3)
    assert scores.epsilon_spin.value() == 0.3
    assert main.main(["export", "--model", str(tiny_model_dir), "--text", text, "--no-bos", "--device", "cpu",
                      "--no-head-images", "--sink-epsilon", "0.05", "--out", str(tmp_path / "cli")]) == 0
    gui_summary, cli_summary = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("gui", "cli"))
    assert gui_summary["sink_epsilon"] == cli_summary["sink_epsilon"] == 0.05
    assert gui_summary["sink_rate"] == cli_summary["sink_rate"]
    with np.load(tmp_path / "gui" / "attention.npz") as data:
        assert {"attentions", "value_norms", "rollout"} <= set(data.files)
    assert any(p.name == "summary.json" for p in written)


def test_recent_texts_say_what_they_keep(window):
    """Recent texts holds explicit runs only; the menu says so."""
    menu_action = window.text_input.recent_menu.menuAction()
    assert "Run or Ctrl+Enter" in menu_action.text() and "Run or Ctrl+Enter" in menu_action.toolTip()
    assert "Recent texts" in window.text_input.examples_button.toolTip()


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


@pytest.mark.slow
def test_the_bundled_models_note_goes_when_another_model_is_loaded(qtbot, settings, tiny_model_dir):
    """The note about the bundled model ("Using the bundled model, a 4-layer × 4-head …") goes when another
    model is loaded; a note about the model being loaded stays."""
    from gui.chrome.downloads import offer_gpt2_download

    window = make_window(qtbot, settings, tiny_model_dir)  # its own window: loads twice

    offer_gpt2_download(window, about=str(tiny_model_dir))  # a note about the model being loaded stays
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))
    assert window.note.isVisible()
    offer_gpt2_download(window)  # about the bundled model
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))
    assert not window.note.isVisible()
    window.close()


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
