"""What a second newcomer found: layer × head maps fit their panel, the sink column is readable, the
export dialog writes the figure in front, sorting follows the score, the importance sentence names only
heads that raise the loss, Badges offers only scores that apply, summary.json carries the text."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from helpers import TEXT, WAIT_MS, analyse, bundle  # noqa: E402


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


def settle(qtbot):
    qtbot.wait(30)
    QtWidgets.QApplication.processEvents()


# ----------------------------------------------------------------- 1. maps fit their panel
@pytest.mark.parametrize("width", [260, 330, 420])
def test_a_long_title_never_pushes_the_map_or_its_colour_bar_out_of_the_figure(qtbot, disposed, width):
    from gui.tabs.scores.score_map import ScoreMap

    fig = ScoreMap()
    disposed(fig)
    fig.resize(width, 330)
    fig.show()
    qtbot.waitExposed(fig)
    title_source = "previous token"
    fig.set_score("previous_token", np.random.default_rng(0).random((4, 4)), label=title_source,
                  note="mean over 284 texts")
    settle(qtbot)
    fig.resize(width, 331)  # a resize after the title, as a splitter drag gives
    settle(qtbot)
    view = fig.viewport().width()
    assert fig.ci.size().width() <= view + 1  # the layout fits: nothing is cut on the right
    assert fig.colorbar.sceneBoundingRect().right() <= view + 1  # the colour bar is visible
    assert fig.plot.getViewBox().sceneBoundingRect().right() <= view + 1  # so is the last head column
    full = "previous token, mean over 284 texts"
    assert fig.full_title == full
    shown = fig.plot.titleLabel.text
    if "…" in shown:  # elided: the whole title is in the tooltip
        assert fig.plot.titleLabel.toolTip() == full
    else:
        assert full in shown


# ----------------------------------------------------------------- 2. the sink column is readable
def test_a_marked_sink_cell_is_never_elided(qtbot, disposed, tiny_result):
    from analysis.measures.head_scores import all_scores
    from gui.tabs.scores.score_table import SINK_MARK
    from gui.tabs.scores.scores_tab import ScoresTab
    from gui.state.view_state import ViewState

    state = ViewState()
    panel = ScoresTab(state, None)
    disposed(panel)
    panel.resize(700, 500)  # narrow, as at 1366 px with the grid beside it
    panel.show()
    state.set_bundle(bundle(tiny_result, all_scores(tiny_result)))
    L, H = tiny_result.attentions.shape[:2]
    panel.model.set_marked(np.ones((L, H), dtype=bool), "all marked")
    settle(qtbot)
    column = panel.model.names.index("sink")
    bold = QtGui.QFont(panel.table.font())
    bold.setBold(True)
    metrics = QtGui.QFontMetrics(bold)
    width = panel.table.horizontalHeader().sectionSize(column)
    for row in range(panel.model.rowCount()):
        text = panel.model.index(row, column).data()
        assert text.startswith(SINK_MARK)
        assert metrics.horizontalAdvance(text) + 6 <= width, text


# ----------------------------------------------------------------- 4. sorting follows the score
def test_sorting_follows_the_score_when_the_columns_change(qtbot):
    from gui.tabs.scores.score_table import Column, ScoreTable

    table = ScoreTable()
    qtbot.addWidget(table)
    rng = np.random.default_rng(1)
    a, b, c = (Column(n, n, n, "", rng.random((2, 3))) for n in ("a", "b", "c"))
    table.set_columns([a, b], (2, 3))
    table.sortByColumn(table.score_model.names.index("b"), QtCore.Qt.SortOrder.DescendingOrder)
    table.set_columns([c, a, b], (2, 3))  # b moved from column 3 to 4
    header = table.horizontalHeader()
    assert table.score_model.names[header.sortIndicatorSection()] == "b"
    assert header.sortIndicatorOrder() == QtCore.Qt.SortOrder.DescendingOrder
    shown = [b.values[table.head_at_row(r)] for r in range(table.proxy.rowCount())]
    assert shown == sorted(b.values.ravel(), reverse=True)
    table.set_columns([c], (2, 3))  # b is gone: by layer
    assert header.sortIndicatorSection() == 0


# ----------------------------------------------------------------- 5. the importance sentence
def test_the_importance_sentence_names_only_heads_that_raise_the_loss():
    from analysis.measures.ablation import ImportanceMap
    from gui.tabs.ablation.ablation_tab import importance_summary

    change = np.array([[0.5, -0.1], [0.0, 0.2]])
    text = importance_summary(ImportanceMap("zero", 3.0, 3.0 + change, change, 12, False))
    assert "0.0 +0.500, 1.1 +0.200." in text and "0.1" not in text.split("most:")[1]
    none = importance_summary(ImportanceMap("mean", 3.0, 3.0 - np.abs(change), -np.abs(change), 12, False))
    assert "none raises the loss" in none and "+" not in none.split("most:")[1]


def test_after_the_importance_map_alone_the_baseline_box_shows_the_baseline(qtbot, disposed, worker, tiny_model):
    from analysis.measures.ablation import ablate
    from gui.tabs.ablation.ablation_tab import AblationTab
    from gui.state.view_state import ViewState

    state = ViewState()
    panel = AblationTab(state, worker)
    disposed(panel)
    state.set_bundle(analyse(qtbot, worker, TEXT))
    with qtbot.waitSignal(panel.importance_shown, timeout=WAIT_MS) as blocker:
        panel.start_importance()
    importance = blocker.args[0]
    expected = ablate(tiny_model, TEXT, [(0, 0)], "zero", True).baseline  # independent: its own forward
    assert panel.baseline_box.loss.text() == f"loss {expected.loss:.3f} nats"
    assert importance.baseline_loss == pytest.approx(expected.loss, abs=1e-9)
    assert panel.baseline_box.tokens() == [(t, f"{p:.3f}") for t, p in expected.top]


# ----------------------------------------------------------------- 3. the figure in front
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


# ----------------------------------------------------------------- 8. Badges offers what applies
def test_badges_offer_only_scores_that_apply(qtbot, disposed, tiny_result):
    from analysis.measures.head_scores import all_scores
    from gui.plots.grid_panel import GridPanel
    from gui.state.view_state import ViewState

    scores = all_scores(tiny_result)
    state = ViewState()
    state.set_badge_score("next_token")
    panel = GridPanel(state)
    disposed(panel)
    state.set_bundle(bundle(tiny_result, scores))
    items = panel.badge_choice.model()
    for index in range(1, panel.badge_choice.count()):
        name = panel.badge_choice.itemData(index)
        assert items.item(index).isEnabled() == scores.applies(name), name
    assert not scores.applies("next_token")  # a causal model
    assert state.badge_score is None and panel.badge_choice.currentData() is None


# ----------------------------------------------------------------- 9. summary.json has the text
def test_summary_carries_the_text(tiny_result):
    from analysis.export.writers import summary

    assert summary(tiny_result)["text"] == tiny_result.text
