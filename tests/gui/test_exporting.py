"""Exporting from the window (gui/export/): the dialog offers the figure in front and remembers the last type,
that figure is written through the staged writer, and "No" to replacing a file returns to the dialog."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from helpers import TEXT, WAIT_MS, analyse  # noqa: E402


@pytest.fixture
def disposed(qtbot):
    """Widgets holding pyqtgraph figures, disposed at the end (gui.plots.figures.dispose_figure), not closed by qtbot."""
    from gui.plots.figures import dispose_figure
    from gui.qt import ensure_qapp

    ensure_qapp()
    widgets = []
    yield widgets.append
    for widget in widgets:
        widget.hide()
        dispose_figure(widget) if hasattr(widget, "scene") else widget.deleteLater()
    qtbot.wait(10)


@pytest.fixture
def settings(tmp_path):
    return QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat)


def test_the_export_dialog_offers_the_figure_in_front_and_remembers_the_last_type(qtbot, settings, tmp_path):
    from gui.export.export_dialog import FRONT, ExportDialog

    settings.setValue("export/folder", str(tmp_path))
    dialog = ExportDialog(None, settings, front="Head scores")
    qtbot.addWidget(dialog)
    index = dialog.what_choice.findData(FRONT)
    assert index >= 0 and "Head scores" in dialog.what_choice.itemText(index)
    dialog.what_choice.setCurrentIndex(index)
    formats = [dialog.format_choice.itemText(i) for i in range(dialog.format_choice.count())]
    assert formats == ["png", "svg", "pdf"]
    assert dialog.path() == str(tmp_path / "head-scores.png")
    dialog.what_choice.setCurrentIndex(dialog.what_choice.findData("grid"))
    formats = [dialog.format_choice.itemText(i) for i in range(dialog.format_choice.count())]
    assert "csv" not in formats and "json" not in formats and {"png", "svg", "pdf"} <= set(formats)
    dialog.accept()
    again = ExportDialog(None, settings, front="Head scores")
    qtbot.addWidget(again)
    assert again.what() == "grid"
    assert ExportDialog(None, settings).what_choice.findData(FRONT) == -1  # no figure in front: not offered


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_the_figure_in_front_is_written_through_the_staged_writer(qtbot, disposed, worker, settings, tmp_path,
                                                                 fmt):
    from gui.export.exporting import Exporter
    from gui.tabs.scores.score_map import ScoreMap
    from gui.state.view_state import ViewState

    state = ViewState()
    state.set_bundle(analyse(qtbot, worker, TEXT))
    parent = QtWidgets.QWidget()
    qtbot.addWidget(parent)
    exporter = Exporter(state, worker, settings, parent)
    fig = ScoreMap()
    fig.resize(520, 300)
    fig.set_score("previous_token", np.eye(2), label="previous token")
    target = tmp_path / f"front.{fmt}"
    with qtbot.waitSignal(exporter.finished, timeout=WAIT_MS) as blocker:
        assert exporter.start("front", target, png_width=800, front_figure=fig)
    assert blocker.args[0] == [target] and target.stat().st_size > 0
    if fmt == "png":
        assert QtGui.QImage(str(target)).width() == 800
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("front")] == [target.name]  # nothing partial
    failed = []
    exporter.failed.connect(failed.append)
    other = ScoreMap()
    disposed(other)
    assert not exporter.start("front", tmp_path / "x.csv", front_figure=other)
    assert failed and "\n" not in failed[0]


def test_no_to_replace_returns_to_the_dialog(qtbot, worker, settings, tmp_path, monkeypatch):
    from gui.export import exporting
    from gui.export.export_dialog import ExportDialog

    state = exporting.ViewState()
    state.set_bundle(analyse(qtbot, worker, TEXT))
    parent = QtWidgets.QWidget()
    qtbot.addWidget(parent)
    exporter = exporting.Exporter(state, worker, settings, parent)
    target = tmp_path / "L0H0.png"
    target.write_bytes(b"old")
    settings.setValue("export/folder", str(tmp_path))
    settings.setValue("export/what", "head")
    shown, asked = [], []
    answers = iter([QtWidgets.QDialog.DialogCode.Accepted, QtWidgets.QDialog.DialogCode.Rejected])
    monkeypatch.setattr(ExportDialog, "exec", lambda self: shown.append(self.path()) or next(answers))
    exporter.ask_overwrite = lambda _parent, path: asked.append(path) or False
    exporter.open_dialog()
    assert asked == [target] and len(shown) == 2  # "No", then the dialog again (cancelled there)
    assert target.read_bytes() == b"old"
