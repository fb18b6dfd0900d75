"""The Head scores tab on a ViewState: sorting, activation, selection both ways, names, colormap, theme."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from test_figures import double_click, view_point  # noqa: E402


class Bundle:
    def __init__(self, result, scores, request_id=1):
        self.result, self.scores, self.request_id = result, scores, request_id


@pytest.fixture
def panel(qtbot, tiny_result):
    from analysis.head_scores import all_scores
    from gui.qt import ensure_qapp
    from gui.scores_view import ScoresPanel
    from gui.view_state import ViewState

    ensure_qapp()
    state = ViewState()
    p = ScoresPanel(state, None)
    p.resize(1000, 600)
    p.show()
    qtbot.waitExposed(p)
    state.set_bundle(Bundle(tiny_result, all_scores(tiny_result)))
    qtbot.wait(50)
    yield p
    p.hide()
    p.deleteLater()


def header_click(qtbot, panel, column):
    header = panel.table.horizontalHeader()
    x = header.sectionViewportPosition(column) + header.sectionSize(column) // 2
    qtbot.mouseClick(header.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=QtCore.QPoint(x, header.height() // 2))


def test_first_click_on_a_score_sorts_high_first(qtbot, panel):
    from gui.scores_view import ScoreTableModel

    column = ScoreTableModel.COLUMNS.index("previous_token")
    header_click(qtbot, panel, column)
    shown = [panel.proxy.index(r, column).data(QtCore.Qt.ItemDataRole.DisplayRole) for r in range(panel.proxy.rowCount())]
    values = [float(v) for v in shown if v != "—"]
    assert values == sorted(values, reverse=True)
    assert float(shown[0]) == pytest.approx(np.nanmax(panel.scores["previous_token"]), abs=5e-4)


def test_selection_goes_both_ways_and_enter_or_double_click_activates(qtbot, panel):
    state = panel.state
    activated = []
    panel.head_activated.connect(lambda l, h: activated.append((l, h)))
    state.select(2, 1)
    row = panel.table.currentIndex().row()
    assert panel.model.head_at(panel.proxy.mapToSource(panel.proxy.index(row, 0)).row()) == (2, 1)
    assert panel.map.selected == (2, 1)
    panel.table.selectRow(5)  # a user's click on a row
    assert (state.layer, state.head) == panel.model.head_at(panel.proxy.mapToSource(panel.proxy.index(5, 0)).row())
    panel.table.setFocus()
    qtbot.keyClick(panel.table, QtCore.Qt.Key.Key_Return)
    assert activated[-1] == (state.layer, state.head)
    qtbot.wait(100)
    double_click(qtbot, panel.map.viewport(), view_point(panel.map, 3.5, 0.5))
    assert activated[-1] == (0, 3) and (state.layer, state.head) == (0, 3)


def test_the_table_fits_and_tab_leaves_it(qtbot, panel):
    header = panel.table.horizontalHeader()
    panel.resize(800, 500)
    qtbot.wait(50)
    assert header.length() <= panel.table.viewport().width() + 1  # every column visible, nothing to scroll
    assert not panel.table.tabKeyNavigation()


def test_one_name_per_score(panel):
    from analysis.head_scores import SCORE_NAMES
    from gui.scores_view import SCORE_LABELS, ScoreTableModel

    assert set(SCORE_LABELS) == set(SCORE_NAMES)
    for column, name in enumerate(ScoreTableModel.COLUMNS[2:], start=2):
        tooltip = panel.model.headerData(column, QtCore.Qt.Orientation.Horizontal, QtCore.Qt.ItemDataRole.ToolTipRole)
        assert tooltip.startswith(SCORE_LABELS[name])
    panel.score_choice.setCurrentIndex(SCORE_NAMES.index("induction"))
    assert panel.map.plot.titleLabel.text.startswith(SCORE_LABELS["induction"])
    assert SCORE_LABELS["induction"] in panel.map.hover_text(1, 1) and "rank" in panel.map.hover_text(1, 1)


def test_colormap_and_dark_mode_reach_the_map(qtbot, panel):
    import pyqtgraph as pg

    panel.state.set_colormap("magma")
    expected = pg.colormap.get("magma").getLookupTable(nPts=8)
    assert np.array_equal(panel.map.colorbar.colorMap().getLookupTable(nPts=8), expected)
    panel.state.set_dark(True)
    assert panel.map.backgroundBrush().color().lightness() < 60
    fig = panel.offscreen_figure()
    assert fig.values is not None and fig is not panel.map
    from gui.figures import dispose_figure

    dispose_figure(fig)
