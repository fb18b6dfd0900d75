"""Exporting from the window (gui/export/): the dialog offers the figure in front and remembers the last type,
that figure is written through the staged writer, and "No" to replacing a file returns to the dialog."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtGui, QtWidgets  # noqa: E402

from helpers import TEXT, WAIT_MS, analyse, bundle, worker_held  # noqa: E402


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


def test_an_export_runs_to_its_end_whatever_is_asked_meanwhile(qtbot, loaded_worker, settings, tmp_path, tiny_result):
    """An export is one short Job (gui/state/jobs.py) that the status bar does not name and that nothing stops once
    started (``cancellable=False``): not its Cancel, not a new model asked for. It finishes, complete or absent."""
    from analysis.measures.head_scores import all_scores
    from gui.export.exporting import Exporter
    from gui.state.jobs import Job, running_jobs
    from gui.state.view_state import ViewState
    from gui.state.worker import RequestKind

    state = ViewState()
    state.set_bundle(bundle(tiny_result, all_scores(tiny_result)))
    parent = QtWidgets.QWidget()
    qtbot.addWidget(parent)
    exporter = Exporter(state, loaded_worker, settings, parent)
    stopped, failed, cancelled = [], [], []
    loaded_worker.tasks_stopped.connect(lambda labels, _kind: stopped.extend(labels))
    exporter.failed.connect(failed.append)
    out = tmp_path / "out"
    with qtbot.waitSignal(exporter.finished, timeout=WAIT_MS) as blocker:
        with worker_held(loaded_worker):  # the export waits on the worker
            assert exporter.start("data", out)
            (job,) = exporter.findChildren(Job)
            job.cancelled.connect(lambda: cancelled.append(True))
            assert running_jobs(loaded_worker) == running_jobs(loaded_worker, RequestKind.LOAD) == []
            job.cancel()
            loaded_worker.load(str(tmp_path / "no model here"))  # a new model asked for (it fails, after the export)
    assert sorted(p.name for p in blocker.args[0]) == ["attention.npz", "parity.json", "scores.csv", "scores_tl.csv",
                                                       "summary.json"]
    assert (out / "summary.json").is_file() and stopped == failed == cancelled == []
    qtbot.waitUntil(lambda: not exporter.findChildren(Job), timeout=WAIT_MS)  # its job is gone once it answered
