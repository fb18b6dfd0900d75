"""Scores over many texts in the GUI: the dialog runs ``scan_texts`` on the worker, the Head scores tab then
shows mean ± std equal to ``scan_texts``'s own, Cancel stops the scan between batches, bad input is one
sentence, and answers nobody wants any more (a new model, changed options) are dropped."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtWidgets  # noqa: E402

from analysis.display import format_score  # noqa: E402
from helpers import WAIT_MS, analyse, hold_at_call, run, shown_tab, synthetic_scan, worker_held  # noqa: E402
TEXTS = ["The cat sat on the mat.", "A dog barked at the mailman twice.", "It rained all day in the old town.",
         "She read the letter, then she read it again.", "Numbers like 42 and 7 are tokens too.",
         "The cat sat on the mat because it was tired.", "One, two, three, four, five, six."]


def wait_until(qtbot, condition, timeout=WAIT_MS):
    qtbot.waitUntil(condition, timeout=timeout)


@pytest.fixture
def panel(qtbot, worker):
    from gui.tabs.scores.scores_tab import ScoresTab

    p = shown_tab(qtbot, ScoresTab, worker, 1000, 600)
    p.state.set_bundle(analyse(qtbot, worker, "The cat sat on the mat because it was tired.", bos=False))
    return p


@pytest.fixture
def texts_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS[:3]) + "\n\n" + "\n".join(TEXTS[3:]) + "\n", encoding="utf-8")  # a blank line
    return path


def open_dialog(panel, path, batch=3):
    dialog = panel.open_scan_dialog()
    dialog.set_path(str(path))
    dialog.batch_spin.setValue(batch)
    return dialog


@pytest.mark.slow
def test_the_table_shows_mean_and_std_equal_to_scan_texts(qtbot, panel, texts_file, tiny_model):
    from analysis.measures.scan import scan_texts
    from analysis.measures.scan_inputs import read_texts

    dialog = open_dialog(panel, texts_file)
    assert dialog.bos_label.text() == "not prepended, as for the text on screen"  # the panel's text ran without
    with qtbot.waitSignal(dialog.scan_ready, timeout=WAIT_MS):
        dialog.start()
    expected = scan_texts(tiny_model, read_texts(texts_file), batch_size=3, bos=False)
    assert panel.source() == "scan" and panel.scan.n_texts == len(TEXTS) == expected.n_texts
    shown = tuple(name for name in expected.score_names if name in expected.applicable)
    assert panel.model.names[1:] == shown and "next_token" not in shown  # a decoder's: no column of n/a
    assert "next token —" in panel.hidden_note.text()
    for name in shown:
        k = expected.score_names.index(name)
        column = next(c for c in panel.model.columns if c.name == name)
        np.testing.assert_allclose(column.values, expected.mean[k], rtol=0, atol=1e-9)
        np.testing.assert_allclose(column.std, expected.std[k], rtol=0, atol=1e-9)
        col = panel.model.names.index(name)
        for row in range(panel.model.rowCount()):
            layer, head = panel.model.head_at(row)
            m, s = expected.mean[k, layer, head], expected.std[k, layer, head]
            text = panel.model.index(row, col).data().lstrip("• ")  # the mean; the std in its tooltip
            assert text == format_score(m)
            if not np.isnan(m):
                tip = panel.model.index(row, col).data(QtCore.Qt.ItemDataRole.ToolTipRole)
                assert f"mean {text}, std {format_score(s)} over {len(TEXTS)} texts" in tip
    # "over N texts" said clearly: the banner, the map's title and hover, the sink row
    assert f"mean ± std over {len(TEXTS)} texts" in panel.scan_label.text()
    assert "texts.txt" in panel.scan_label.text()
    assert f"mean over {len(TEXTS)} texts" in panel.map.plot.titleLabel.text
    assert "±" in panel.map.hover_text(0, 0)
    sinks = expected.sink_rate(panel.epsilon_spin.value())
    assert np.array_equal(panel.sinks().mask, sinks.mask) and f"over {len(TEXTS)} texts" in panel.sink_label.text()
    assert not panel.source_choice.isEnabled()  # TL-style scores are for the text on screen
    from gui.plots.figures import dispose_figure

    fig = panel.offscreen_figure()  # Copy figure / Export: the mean map, titled as such
    assert f"mean over {len(TEXTS)} texts" in fig.plot.titleLabel.text
    np.testing.assert_array_equal(fig.values, panel.map.values)
    dispose_figure(fig)
    # the way back to the single text, and to the scan again
    qtbot.mouseClick(panel.scan_toggle, QtCore.Qt.MouseButton.LeftButton)
    assert panel.source() == "attnscope" and panel.model.columns[0].std is None
    np.testing.assert_array_equal(panel.model.columns[0].values, panel.state.scores[panel.model.columns[0].name])
    assert panel.scan_toggle.text() == f"Show the {len(TEXTS)} texts"
    qtbot.mouseClick(panel.scan_toggle, QtCore.Qt.MouseButton.LeftButton)
    assert panel.source() == "scan"


def test_the_bundled_sample_is_the_default_source(qtbot, panel):
    from analysis.measures.scan_inputs import SAMPLE_TEXTS

    dialog = panel.open_scan_dialog()
    assert dialog.sample_radio.isChecked() and dialog.texts_path() == SAMPLE_TEXTS
    n = sum(1 for line in SAMPLE_TEXTS.read_text(encoding="utf-8").splitlines() if line.strip())
    assert f"{n} varied sentences" in dialog.sample_radio.text()
    dialog.close()


def test_cancel_stops_the_scan_between_batches(qtbot, panel, tmp_path, worker, monkeypatch):
    import analysis.measures.scan as scan_module
    from analysis.errors import AnalysisCancelled

    path = tmp_path / "many.txt"
    path.write_text("\n".join(TEXTS * 2), encoding="utf-8")  # 14 texts, one per batch
    calls, reached, go = hold_at_call(monkeypatch, scan_module, "_forward_batch", 2)  # until Cancel is pressed
    failures = []
    worker.failed.connect(failures.append)
    dialog = open_dialog(panel, path, batch=1)
    progress = []
    dialog.job.progressed.connect(lambda done, total: progress.append((done, total)))
    dialog.start()
    wait_until(qtbot, reached.is_set)
    qtbot.mouseClick(dialog.cancel_button, QtCore.Qt.MouseButton.LeftButton)
    assert dialog.isVisible() and dialog.cancel_button.text() == "Stopping…"
    with qtbot.waitSignal(dialog.job.cancelled, timeout=WAIT_MS):
        go.set()
    worker.failed.disconnect(failures.append)
    assert len(calls) == 2  # it stopped before the third batch of 14
    assert any(isinstance(f.error, AnalysisCancelled) for f in failures)
    assert all(done < total for done, total in progress)
    assert panel.scan is None and panel.source() == "attnscope"
    assert dialog.message.text().startswith("Cancelled") and dialog.run_button.isEnabled()
    dialog.close()


@pytest.mark.parametrize("what", ["missing", "empty", "binary"])
def test_bad_texts_are_one_sentence_in_the_dialog(qtbot, panel, tmp_path, what):
    dialog = panel.open_scan_dialog()
    if what == "empty":
        dialog.file_radio.setChecked(True)
        assert dialog.start() is None
    else:
        path = tmp_path / "nothere.txt"
        if what == "binary":
            path.write_bytes(b"\x00\x01\x02 binary")
        dialog.set_path(str(path))
        with qtbot.waitSignal(dialog.job.failed, timeout=WAIT_MS):
            dialog.start()
    message = dialog.message.text()
    assert message and "\n" not in message and "Traceback" not in message and "nexpected" not in message
    assert dialog.isVisible() and dialog.run_button.isEnabled() and panel.scan is None
    dialog.close()


@pytest.mark.slow
def test_a_new_model_drops_the_scan_and_a_late_answer(qtbot, panel, texts_file, worker):
    dialog = open_dialog(panel, texts_file)
    with qtbot.waitSignal(dialog.scan_ready, timeout=WAIT_MS):
        dialog.start()
    assert panel.source() == "scan"
    worker.model_loaded.emit(999, None)  # what the worker says after loading another model
    assert panel.scan is None and panel.source() == "attnscope" and not panel.scan_bar.isVisible()
    # a scan still running when the model changes is dropped, never shown
    dialog = open_dialog(panel, texts_file)
    shown = []
    dialog.scan_ready.connect(lambda *args: shown.append(args))
    with worker_held(worker):
        dialog.start()
        worker.model_loaded.emit(1000, None)
    wait_until(qtbot, lambda: worker._queue.empty())
    qtbot.wait(300)
    assert shown == [] and panel.scan is None and "model changed" in dialog.message.text()
    dialog.close()


def test_tl_scores_on_the_worker_and_stale_options_dropped(qtbot, panel, worker):
    from analysis.measures import tl_scores
    from gui.tabs.scores.score_sources import TL_NAMES

    result = panel.state.result
    with worker_held(worker):
        panel.source_choice.setCurrentIndex(panel.source_choice.findData("tl"))
        assert all(c.pending for c in panel.model.columns)
        assert panel.model.index(0, 1).data() == "…"
        panel.measure_choice.setCurrentIndex(panel.measure_choice.findData("abs"))  # the "mul" answer is stale
        panel.exclude_bos_box.setChecked(True)
    wait_until(qtbot, lambda: panel.tl_scores is not None and not panel.model.columns[0].pending)
    qtbot.wait(200)  # any late answer has arrived by now
    for name in TL_NAMES:
        expected = tl_scores.detect(result.attentions, result.token_ids, name, error_measure="abs", exclude_bos=True)
        np.testing.assert_array_equal(next(c for c in panel.model.columns if c.name == name).values, expected)


@pytest.mark.slow
def test_the_window_has_the_menu_entry_and_the_ablation_tab(qtbot, tmp_path, tiny_model_dir):
    from gui.tabs.ablation.ablation_tab import AblationTab
    from gui.tabs.scores.scan_dialog import ScanDialog
    from gui.tabs.scores.scores_tab import ScoresTab
    from gui.chrome.window import MainWindow

    settings = QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat)
    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))
    assert isinstance(window.tab(AblationTab), AblationTab)
    actions = [a for menu in window.menuBar().actions() for a in menu.menu().actions()
               if a.text() == "Scores over many texts…"]
    assert len(actions) == 1
    actions[0].trigger()
    assert window.tabs.currentWidget() is window.tab(ScoresTab)
    dialogs = [d for d in window.findChildren(ScanDialog) if d.isVisible()]
    assert len(dialogs) == 1 and dialogs[0].sample_radio.isChecked()
    dialogs[0].close()
    window.close()


# ----------------------------------------------------------------------------- closing mid-scan
def test_closing_the_dialog_mid_scan_stops_it_and_prints_nothing(qtbot, panel, tmp_path, worker, monkeypatch, capsys):
    import analysis.measures.scan as scan_module
    from analysis.errors import AnalysisCancelled

    path = tmp_path / "many.txt"
    path.write_text("\n".join(TEXTS * 2), encoding="utf-8")
    # held after the first batch's forward, before its progress: no module call left to interrupt it
    calls, reached, go = hold_at_call(monkeypatch, scan_module, "_score_text", 1)
    failures, shown = [], []
    worker.failed.connect(failures.append)
    dialog = open_dialog(panel, path, batch=1)  # WA_DeleteOnClose, as the panel opens it
    dialog.scan_ready.connect(lambda *args: shown.append(args))
    destroyed = []
    dialog.destroyed.connect(lambda *_: destroyed.append(True))
    dialog.start()
    wait_until(qtbot, reached.is_set)
    dialog.close()  # the title bar's ×, mid-scan
    assert not dialog.isVisible()
    qtbot.wait(100)  # a deleteLater would run now: the dialog must still be there for the scan's last word
    assert not destroyed
    go.set()  # the batch is scored and would report its progress
    wait_until(qtbot, lambda: bool(destroyed))  # gone once the worker let the scan go
    worker.failed.disconnect(failures.append)
    assert len(calls) == 1  # it stopped after the batch it was in
    assert failures and all(isinstance(f.error, AnalysisCancelled) for f in failures)
    assert shown == [] and panel.scan is None
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Signal source has been deleted" not in err


# ----------------------------------------------------------------------------- the memory rule in the app (17.4)
def test_a_text_over_the_memory_budget_is_refused_in_the_dialog(qtbot, panel, tmp_path, monkeypatch):
    from analysis.run import memory

    path = tmp_path / "long.txt"
    path.write_text("a short one\n" + " ".join(["word"] * 300) + "\n", encoding="utf-8")
    monkeypatch.setenv(memory.MEMORY_BUDGET_ENV, "0.1")  # 100 KiB: the tiny model's 64 tokens take 192 KiB
    dialog = open_dialog(panel, path)
    with qtbot.waitSignal(dialog.job.failed, timeout=WAIT_MS):
        dialog.start()
    message = dialog.message.text()
    assert message.startswith("Text 2: The attention of 64 tokens would take 192.0 KiB") and "\n" not in message
    assert panel.scan is None and dialog.run_button.isEnabled()
    dialog.close()


# ----------------------------------------------------------------------------- the banner's warnings (17.10)
def test_the_banner_says_what_the_scan_skipped_and_cut(qtbot, tiny_model, tmp_path):
    import os

    from analysis.measures import scan, scan_inputs
    from gui.tabs.scores.scan_bar import ScanBar

    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("text a", encoding="utf-8")
    (folder / "b.txt").write_text(" ".join(["word"] * 300), encoding="utf-8")  # cut to the context
    os.mkfifo(folder / "pipe.txt")
    result = scan.scan_texts(tiny_model, scan_inputs.read_texts(folder))
    bar = ScanBar()
    qtbot.addWidget(bar)
    bar.show_scan(result, "texts", True)
    lines = bar.label.text().split("\n")
    assert lines[0].startswith("Showing the mean ± std over 2 texts")
    assert lines[1] == f"Skipped 1 named pipe in {folder}: pipe.txt (only regular .txt files are scanned)."
    assert lines[2].startswith("1 of 2 texts were longer than the 64 tokens")


def test_a_load_asked_for_mid_scan_stops_it_and_the_dialog_says_why(qtbot, panel, tmp_path, worker, monkeypatch,
                                                                     tiny_model_dir):
    """The worker ends a scan the moment another model is asked for: the dialog says that, not
    "Cancelled … nothing changed" (which reads as if the user had pressed Cancel)."""
    import analysis.measures.scan as scan_module

    path = tmp_path / "many.txt"
    path.write_text("\n".join(TEXTS * 2), encoding="utf-8")
    calls, reached, go = hold_at_call(monkeypatch, scan_module, "_forward_batch", 1)
    dialog = open_dialog(panel, path, batch=1)
    dialog.start()
    wait_until(qtbot, reached.is_set)
    with qtbot.waitSignal(dialog.job.cancelled, timeout=WAIT_MS):
        worker.load(str(tiny_model_dir), device="cpu")
        go.set()
    assert dialog.message.text() == "The scan stopped: another model was asked for. Scan again once it has loaded."
    assert dialog.run_button.isEnabled() and panel.scan is None
    wait_until(qtbot, lambda: worker._queue.empty())
    dialog.close()


def test_the_dialog_leaves_the_window_usable_and_is_opened_once(qtbot, panel):
    """Window-modal, the dialog made the window's model list and text box unreachable while a scan ran, so a new
    model or text during a scan (which the worker handles: the scan stops, or the text waits and says so) could not
    be asked for. It is modeless now, and asking again brings the open one to the front."""
    dialog = panel.open_scan_dialog()
    try:
        assert dialog.isVisible() and dialog.windowModality() == QtCore.Qt.WindowModality.NonModal
        assert panel.open_scan_dialog() is dialog
        dialog._set_running(True)  # as while a scan runs: nothing can change what is being scanned
        assert not dialog.file_button.isEnabled() and not dialog.folder_button.isEnabled()
        dialog._set_running(False)
        assert dialog.max_tokens == panel.state.result.max_tokens  # the scan follows Run → Token limit
    finally:
        dialog.close()


def test_enter_in_the_dialog_starts_the_scan_not_a_file_chooser(qtbot, panel, monkeypatch):
    """Scan is the dialog's one default button: Enter, wherever the dialog put the focus when it opened,
    scans (the bundled sample by default); the File… and Folder… buttons only answer a click or Space."""
    chooser, started = [], []
    monkeypatch.setattr(QtWidgets.QFileDialog, "getOpenFileName", lambda *a, **k: chooser.append(a) or ("", ""))
    monkeypatch.setattr(QtWidgets.QFileDialog, "getExistingDirectory", lambda *a, **k: chooser.append(a) or "")
    dialog = panel.open_scan_dialog()
    try:
        monkeypatch.setattr(dialog, "start", lambda *a: started.append(True))
        dialog.run_button.clicked.disconnect()
        dialog.run_button.clicked.connect(dialog.start)
        dialog.activateWindow()
        qtbot.waitUntil(lambda: dialog.focusWidget() is not None, timeout=2000)
        qtbot.keyClick(dialog.focusWidget(), QtCore.Qt.Key.Key_Return)
        assert chooser == [] and started == [True]
        assert not dialog.file_button.autoDefault() and not dialog.folder_button.autoDefault()
    finally:
        dialog.close()


@pytest.mark.slow
def test_the_scan_table_of_a_30_by_9_model_fits_a_1366_px_window(qtbot, window):
    """At 1366 × 768 (the grid beside the tabs) every column of a scan over SmolLM2's 270 heads is on screen, whole:
    the columns' widths add up to no more than the table's, nothing scrolls sideways, and each header and the widest
    cell of its column fit it (the std is in the cell's tooltip, not the cell)."""
    from PySide6 import QtGui

    from gui.tabs.scores.scores_tab import ScoresTab

    window.resize(1366, 740)
    run(qtbot, window, "The cat sat on the mat because it was tired.")
    panel = window.tab(ScoresTab)
    window.tabs.setCurrentWidget(panel)
    panel.show_scan(synthetic_scan(30, 9), "synthetic")
    panel.model.set_marked(np.ones((30, 9), dtype=bool), "all marked")  # the sink column's widest cells, in bold
    qtbot.wait(100)
    table, header = panel.table, panel.table.horizontalHeader()
    widths = [header.sectionSize(c) for c in range(header.count())]
    assert header.count() == 1 + 7 and sum(widths) <= table.viewport().width()
    assert table.horizontalScrollBar().maximum() == 0
    metrics, bold = header.fontMetrics(), QtGui.QFont(table.font())
    bold.setBold(True)
    for column, width in enumerate(widths):
        title = panel.model.headerData(column, QtCore.Qt.Orientation.Horizontal)
        assert metrics.horizontalAdvance(title) + 12 <= width, title
        cells = {panel.model.index(row, column).data() for row in range(panel.model.rowCount())}
        widest = max(QtGui.QFontMetrics(bold).horizontalAdvance(text) for text in cells)
        assert widest + 6 <= width, (title, max(cells, key=len))
    assert table.rowAt(0) == 0  # it opens at the top of its sort
    panel.clear_scan()
