"""pytest-qt tests that drive the real window (offscreen) with a small test model."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from conftest import ROOT  # noqa: E402

WAIT_MS = 120_000


@pytest.fixture
def settings(tmp_path):
    return QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat)


def make_window(qtbot, settings, model_dir):
    from gui.qt import ensure_qapp
    from gui.window import MainWindow

    ensure_qapp()
    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.resize(1400, 900)
    window.show()
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(model_dir))
    return window


@pytest.fixture
def window(qtbot, settings, tiny_model_dir):
    w = make_window(qtbot, settings, tiny_model_dir)
    yield w
    w.close()


def run(qtbot, window, text, bos=False):
    window.bos_box.blockSignals(True)
    window.bos_box.setChecked(bos)
    window.bos_box.blockSignals(False)
    window.set_text(text)
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        window.run_text()
    return window.bundle.result


def test_typing_runs_automatically_and_fills_every_view(qtbot, window):
    window.set_text("")
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        qtbot.keyClicks(window.text_edit, "The cat sat on the mat")
    r = window.bundle.result
    assert r.text == "The cat sat on the mat"
    assert window.token_strip.count() == r.n_tokens
    assert [window.token_strip.item(i).text() for i in range(r.n_tokens)] == [
        f"{i}\n{t}" for i, t in enumerate(r.tokens)]
    assert r.tokens[1].startswith("␣")  # the leading-space marker is visible
    assert f"id {r.token_ids[1]}" in window.token_strip.item(1).toolTip()
    assert f"{r.n_tokens} tokens" in window.status_tokens.text()
    assert "tiny" in window.status_model.text() and "cpu" in window.status_model.text()
    assert "last run" in window.status_run.text()
    assert window.scores_panel.model.rowCount() == 12
    assert "Next token" in window.predictions_label.text()


def click_grid_cell(qtbot, window, layer, head):
    grid = window.grid
    qtbot.wait(200)  # let the view fit the new mosaic before mapping coordinates
    x = head * grid.pitch + grid.cell / 2
    y = layer * grid.pitch + grid.cell / 2
    scene_point = grid.plot.vb.mapViewToScene(QtCore.QPointF(x, y))
    view_point = grid.mapFromScene(scene_point)
    qtbot.mouseClick(grid.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=view_point)


def test_clicking_a_grid_cell_shows_that_head_and_arrows_move(qtbot, window):
    r = run(qtbot, window, "The server rejected the request because it was overloaded.")
    click_grid_cell(qtbot, window, 2, 3)
    assert (window.layer, window.head) == (2, 3)
    shown = window.detail.matrix
    expected = np.array(r.attentions[2, 3])
    lower = np.tril_indices(r.n_tokens)
    np.testing.assert_array_equal(shown[lower], expected[lower])
    assert np.isnan(shown[0, 1])  # future keys are masked, not drawn as 0
    assert "Layer 2, head 3" in window.head_label.text()
    window.grid.setFocus()
    qtbot.keyClick(window.grid, QtCore.Qt.Key.Key_Left)
    qtbot.keyClick(window.grid, QtCore.Qt.Key.Key_Up)
    assert (window.layer, window.head) == (1, 2)
    qtbot.keyClick(window.grid, QtCore.Qt.Key.Key_Down)
    qtbot.keyClick(window.grid, QtCore.Qt.Key.Key_Down)
    qtbot.keyClick(window.grid, QtCore.Qt.Key.Key_Down)  # stays on the last layer
    assert (window.layer, window.head) == (2, 2)


def test_hover_text_and_query_highlight(qtbot, window):
    r = run(qtbot, window, "The server rejected the request because it was overloaded.")
    window.select_head(1, 0)
    window.detail._hovered((5, 2))
    text = window.detail.toolTip()
    assert text == (f"query '{r.tokens[5]}' [5] → key '{r.tokens[2]}' [2]: {r.attentions[1, 0, 5, 2]:.3f}")
    window.detail._hovered((2, 5))
    assert "masked" in window.detail.toolTip()
    window.token_strip.token_clicked.emit(4)
    assert window.query_row == 4 and window.detail.row_highlight.isVisible()


def test_hide_first_token_renormalises(qtbot, window):
    run(qtbot, window, "One two three four five six", bos=True)
    window.hide_first_box.setChecked(True)
    m = window.detail.matrix
    assert np.isnan(m[:, 0]).all()
    np.testing.assert_allclose(np.nansum(m[2:], axis=1), 1, atol=1e-5)


def test_score_table_sorts_and_selects(qtbot, window):
    run(qtbot, window, "a b a b a b c d c d")
    table = window.scores_panel.table
    column = window.scores_panel.model.COLUMNS.index("previous_token")
    header = table.horizontalHeader()
    pos = QtCore.QPoint(header.sectionViewportPosition(column) + header.sectionSize(column) // 2, 5)
    qtbot.mouseClick(header.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=pos)
    proxy = window.scores_panel.proxy
    values = [float(proxy.index(row, column).data()) for row in range(proxy.rowCount())]
    assert values in (sorted(values), sorted(values, reverse=True)) and values != [values[0]] * len(values)
    # clicking a row selects that head everywhere
    rect = table.visualRect(proxy.index(3, 0))
    qtbot.mouseClick(table.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=rect.center())
    layer, head = int(proxy.index(3, 0).data()), int(proxy.index(3, 1).data())
    assert (window.layer, window.head) == (layer, head)
    assert f"Layer {layer}, head {head}" in window.head_label.text()


def test_badges_overlay(qtbot, window):
    run(qtbot, window, "The cat sat on the mat")
    window.overlay_choice.setCurrentIndex(window.overlay_choice.findData("sink"))
    assert len(window.grid.badges) == 12
    window.overlay_choice.setCurrentIndex(0)
    assert window.grid.badges == []


@pytest.mark.parametrize("what,name", [("head", "h.png"), ("head", "h.svg"), ("head", "h.pdf"), ("head", "h.csv"),
                                       ("head", "h.npz"), ("grid", "g.png"), ("grid", "g.json")])
def test_export_files(qtbot, window, tmp_path, what, name):
    r = run(qtbot, window, "The cat sat on the mat")
    written = window.export(what, tmp_path / name, png_width=900)
    assert written == [tmp_path / name] and (tmp_path / name).stat().st_size > 0
    if name.endswith(".png"):
        assert QtGui.QImage(str(tmp_path / name)).width() == 900
    if name == "h.npz":
        with np.load(tmp_path / name) as data:
            np.testing.assert_array_equal(data["attentions"], r.attentions[window.layer, window.head])
    if name == "g.json":
        data = json.loads((tmp_path / name).read_text())
        assert np.array(data["attentions"]).shape == r.attentions.shape


def test_export_folders(qtbot, window, tmp_path):
    run(qtbot, window, "The cat sat on the mat")
    written = window.export("data", tmp_path / "data")
    assert sorted(p.name for p in written) == ["attention.npz", "result.json", "scores.csv"]
    written = window.export("heads", tmp_path / "heads", fmt="svg")
    assert len(written) == 13 and (tmp_path / "heads" / "heads" / "L2H3.svg").exists()


def test_unwritable_export_path_shows_a_message(qtbot, window, tmp_path):
    run(qtbot, window, "The cat sat on the mat")
    (tmp_path / "file").write_text("")
    with qtbot.waitSignal(window.error_shown, timeout=5000) as blocker:
        assert window.export("head", tmp_path / "file" / "x.png") == []
    assert "Cannot write" in blocker.args[0] and window.error.isVisible()


def test_copy_figure_to_clipboard(qtbot, window):
    run(qtbot, window, "The cat sat")
    window.copy_figure()
    assert not QtWidgets.QApplication.clipboard().image().isNull()


def test_empty_and_overlong_text(qtbot, window):
    window.set_text("   ")
    assert window.run_text() is None and window.text_warning.isVisible()
    r = run(qtbot, window, "word " * 200)
    assert r.truncated and "only the first 64 tokens" in window.text_warning.text()
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
    from gui.worker import AnalysisBundle

    late = AnalysisBundle(first, window.bundle.result, window.bundle.scores, 0.0)
    shown_before = window.bundle
    window._analysis_ready(late)
    assert window.bundle is shown_before


def test_failed_loads_keep_the_previous_model(qtbot, window, tmp_path, tokenizer):
    info = window.model_info
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.load_model(str(tmp_path / "missing-model"))
    assert "not found" in blocker.args[0] and "Still using" in blocker.args[0]
    assert window.model_info is info
    assert run(qtbot, window, "still works").text == "still works"
    # a device that is not there
    if "cuda" not in [window.device_choice.itemText(i) for i in range(window.device_choice.count())]:
        window.device_choice.addItem("cuda")
        window.device_choice.setCurrentText("cuda")
        with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
            window.load_model(str(info.folder))
        assert "cuda" in blocker.args[0] and window.model_info is info
        window.device_choice.setCurrentText("cpu")
    # pickle weights: refused, then loaded after the explicit opt-in button
    from analysis.synthetic import save_random_gpt2

    folder = save_random_gpt2(tmp_path / "pickle", tokenizer=tokenizer, safetensors=False)
    with qtbot.waitSignal(window.error_shown, timeout=WAIT_MS) as blocker:
        window.load_model(str(folder))
    assert "pickle" in blocker.args[0]
    buttons = [b for b in window.error.findChildren(QtWidgets.QPushButton) if "Load anyway" in b.text()]
    assert buttons
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        buttons[0].click()
    assert window.model_info.n_layer == 2


def test_settings_persist(qtbot, settings, tiny_model_dir):
    from gui.window import MainWindow

    w = make_window(qtbot, settings, tiny_model_dir)
    w.colormap_choice.setCurrentText("magma")
    w.scale_choice.setCurrentText("log")
    run(qtbot, w, "remember me")
    w.close()
    w2 = MainWindow(settings)
    qtbot.addWidget(w2)
    assert w2.colormap_choice.currentText() == "magma" and w2.scale_choice.currentText() == "log"
    assert w2.recent_texts()[0] == "remember me"
    assert settings.value("model/last") == str(tiny_model_dir)
    w2.close()


def test_closing_mid_load_stops_the_worker(qtbot, settings, tiny_model_dir):
    from gui.window import MainWindow

    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.show()
    w.load_model(str(tiny_model_dir))
    w.close()
    assert not w.worker._thread.is_alive()


def screenshot_run(*args, config_home=None):
    import os
    import tempfile

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",  # settings go to a private folder, not the user's
           "XDG_CONFIG_HOME": str(config_home or tempfile.mkdtemp(prefix="attnscope-config-"))}
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


def test_screenshot_launch_option(tiny_model_dir, tmp_path):
    out = screenshot_run("--model", tiny_model_dir, "--text", "The cat sat on the mat", "--select", "2.1",
                         "--screenshot", tmp_path / "shots")
    assert out.returncode == 0, out.stderr
    for name in ("window", "grid", "detail", "scores"):
        image = QtGui.QImage(str(tmp_path / "shots" / f"{name}.png"))
        assert not image.isNull() and image.width() > 200


def test_a_remembered_model_that_is_gone_falls_back_to_the_default(tiny_model_dir, tmp_path):
    import shutil as sh

    folder = sh.copytree(tiny_model_dir, tmp_path / "was-here")
    first = screenshot_run("--model", folder, "--screenshot", tmp_path / "a", config_home=tmp_path / "cfg")
    assert first.returncode == 0, first.stderr
    sh.rmtree(folder)
    from gui.app import still_available

    assert not still_available(str(folder)) and still_available("bundled") and not still_available("gpt2-xl")
    second = screenshot_run("--screenshot", tmp_path / "b", config_home=tmp_path / "cfg")
    assert second.returncode == 0, second.stderr  # opened the bundled model instead of failing


def test_screenshot_fails_loudly_on_a_bad_model(tmp_path):
    out = screenshot_run("--model", tmp_path / "nope", "--screenshot", tmp_path / "shots")
    assert out.returncode != 0 and "not found" in out.stderr


def test_gpt2_download_offline_fails_fast_and_keeps_the_model(qtbot, window):
    """HF_HUB_OFFLINE is set for the tests: the offered download says what to do, the model stays."""
    from gui.downloads import offer_gpt2_download

    info = window.model_info
    offer_gpt2_download(window)
    assert window.note.isVisible() and "not downloaded yet" in window.note.label.text()
    button = [b for b in window.note.findChildren(QtWidgets.QPushButton) if b.text() == "Download GPT-2"][0]
    with qtbot.waitSignal(window.error_shown, timeout=30_000) as blocker:
        button.click()
    assert "go online once" in blocker.args[0].lower() and window.model_info is info
    assert window.model_choice.currentData() == str(info.folder)


def test_default_model_is_bundled_without_a_cached_gpt2(tmp_path):
    out = subprocess.run([sys.executable, "-c", "from gui.app import default_model_choice as d; print(d())"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**__import__("os").environ, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert out.stdout.strip() == "('bundled', True)", out.stderr
