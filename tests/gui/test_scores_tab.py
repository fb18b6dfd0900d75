"""The Head scores tab on a ViewState: sorting (which follows the score when the columns change), activation,
selection both ways, names, colormap, theme; the sink rate and the TransformerLens-style scores it shows equal
the analysis functions'; the score map's long title and its sink marks stay inside the figure and their cells,
and a marked sink cell is never elided."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from analysis.display import format_score, head_name  # noqa: E402
from helpers import bundle, double_click, synthetic_scan, view_point  # noqa: E402


@pytest.fixture
def panel(qtbot, tiny_result):
    from analysis.measures.head_scores import all_scores
    from gui.qt import ensure_qapp
    from gui.tabs.scores.scores_tab import ScoresTab
    from gui.state.view_state import ViewState

    ensure_qapp()
    state = ViewState()
    p = ScoresTab(state, None)
    p.resize(1000, 600)
    p.show()
    qtbot.waitExposed(p)
    state.set_bundle(bundle(tiny_result, all_scores(tiny_result)))
    qtbot.wait(50)
    yield p
    p.hide()
    p.deleteLater()


def header_click(qtbot, panel, column):
    header = panel.table.horizontalHeader()
    x = header.sectionViewportPosition(column) + header.sectionSize(column) // 2
    qtbot.mouseClick(header.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=QtCore.QPoint(x, header.height() // 2))


def test_first_click_on_a_score_sorts_high_first(qtbot, panel):
    column = panel.model.names.index("previous_token")
    header_click(qtbot, panel, column)
    shown = [panel.proxy.index(r, column).data(QtCore.Qt.ItemDataRole.DisplayRole) for r in range(panel.proxy.rowCount())]
    values = [float(v.lstrip("• ")) for v in shown if v != "–"]
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


def test_a_head_is_named_l1h0_and_a_score_reads_the_same_in_its_cell_and_its_tooltip(panel):
    Tip = QtCore.Qt.ItemDataRole.ToolTipRole
    model = panel.model
    assert model.names[0] == "head" and model.headerData(0, QtCore.Qt.Orientation.Horizontal) == "head"
    for row in range(model.rowCount()):
        layer, head = model.head_at(row)
        assert model.index(row, 0).data() == head_name(layer, head)  # "L1H0"
        assert model.index(row, 0).data(Tip) == f"Layer {layer}, head {head}"
        for column, score in enumerate(model.columns, start=1):
            value = float(score.values[layer, head])
            text = model.index(row, column).data().lstrip("• ")
            assert text == format_score(value)  # "0.998", never "0.9981" or "1.00"
            if value == value:
                assert model.index(row, column).data(Tip).startswith(f"{head_name(layer, head)} · {score.label}: {text}")


def test_the_head_column_sorts_layer_by_layer(qtbot, panel):
    header_click(qtbot, panel, panel.model.names.index("previous_token"))
    header_click(qtbot, panel, 0)
    heads = [panel.table.head_at_row(r) for r in range(panel.proxy.rowCount())]
    assert heads == sorted(heads)  # L0H0, L0H1, …, L1H0, … — not "L10H0" before "L2H0"


def test_a_refilled_table_opens_at_the_top_of_its_sort_and_a_selection_elsewhere_scrolls_to_it(qtbot, panel):
    """The scan's 270 heads sorted by a score open at the top of the ranking, not scrolled to the selected head
    (there the sorted column looked unsorted); the selected head stays selected, and selecting one scrolls to it."""
    scan = synthetic_scan(30, 9)
    k = scan.score_names.index("previous_token")
    panel.state.select(2, 3)
    header_click(qtbot, panel, panel.model.names.index("previous_token"))  # high first
    low = float(np.nanmin(scan.mean[k]))
    object.__setattr__(scan, "mean", scan.mean.copy())
    scan.mean[k, 2, 3] = low - 0.5  # the selected head sorts last
    panel.show_scan(scan, "synthetic")
    qtbot.wait(50)
    table = panel.table
    assert table.verticalScrollBar().maximum() > 0  # there is somewhere to scroll to
    assert table.rowAt(0) == 0 and table.verticalScrollBar().value() == 0  # the top of the sort is shown
    top = np.unravel_index(np.nanargmax(scan.mean[k]), scan.mean[k].shape)
    assert table.head_at_row(0) == tuple(int(i) for i in top)
    assert table.head_at_row(table.currentIndex().row()) == (2, 3)  # still selected, at the bottom
    panel.state.select(1, 2)  # selected elsewhere (the grid): the table shows it
    qtbot.wait(20)
    assert table.viewport().rect().contains(table.visualRect(table.currentIndex()))


def test_one_name_per_score(panel):
    from analysis.measures.head_scores import SCORE_NAMES
    from analysis.measures.head_scores import SCORE_LABELS

    assert set(SCORE_LABELS) == set(SCORE_NAMES)
    assert panel.model.names[1:] == tuple(name for name in SCORE_NAMES if panel.scores.applies(name))
    for column, name in enumerate(panel.model.names[1:], start=1):
        tooltip = panel.model.headerData(column, QtCore.Qt.Orientation.Horizontal, QtCore.Qt.ItemDataRole.ToolTipRole)
        assert tooltip.startswith(SCORE_LABELS[name])
    panel.score_choice.setCurrentIndex(panel.score_choice.findData("induction"))
    assert panel.map.plot.titleLabel.text.startswith(SCORE_LABELS["induction"])
    assert SCORE_LABELS["induction"] in panel.map.hover_text(1, 1) and "rank" in panel.map.hover_text(1, 1)


def test_a_key_under_the_table_says_what_every_short_header_stands_for(panel):
    from analysis.measures.head_scores import SCORE_DESCRIPTIONS, SCORE_LABELS, SCORE_SHORT

    key = panel.key_label.text()
    assert panel.key_label.isVisibleTo(panel) and key.startswith("Columns: ")
    shown = panel.model.names[1:]
    for name in shown:
        short, label = SCORE_SHORT[name], SCORE_LABELS[name]
        meaning = label if short != label else SCORE_DESCRIPTIONS[name].split(" (")[0]
        assert f"{short} = {meaning}" in key, name
    assert "dup. = duplicate token" in key and "entropy = how spread the attention is" in key
    positions = [key.index(f"{SCORE_SHORT[name]} = ") for name in shown]
    assert positions == sorted(positions)  # in the table's order


def test_colormap_and_dark_mode_reach_the_map(qtbot, panel):
    import pyqtgraph as pg

    panel.state.set_colormap("magma")
    expected = pg.colormap.get("magma").getLookupTable(nPts=8)
    assert np.array_equal(panel.map.colorbar.colorMap().getLookupTable(nPts=8), expected)
    panel.state.set_dark(True)
    assert panel.map.backgroundBrush().color().lightness() < 60
    fig = panel.offscreen_figure()
    assert fig.values is not None and fig is not panel.map
    from gui.plots.figures import dispose_figure

    dispose_figure(fig)


# ----------------------------------------------------------------------------- sink rate
def shown_cells(panel, name):
    """The table's text of score ``name`` per head: {(layer, head): text}."""
    column = panel.model.names.index(name)
    return {panel.model.head_at(row): panel.model.index(row, column).data() for row in range(panel.model.rowCount())}


@pytest.mark.parametrize("epsilon", [0.3, 0.15, 0.05])
def test_sink_rate_shown_equals_lenses_sink_rate(qtbot, panel, tiny_result, epsilon):
    from analysis.measures.lenses import sink_rate

    panel.epsilon_spin.setValue(epsilon)
    expected = sink_rate(tiny_result.attentions, epsilon)
    L, H = expected.mask.shape
    assert f"{int(expected.mask.sum())} of {L * H}" in panel.sink_label.text()
    assert f"sink rate {expected.rate:.1%}" in panel.sink_label.text()
    assert np.array_equal(panel.sinks().mask, expected.mask) and panel.sinks().rate == expected.rate
    marked = {lh for lh, text in shown_cells(panel, "sink").items() if text.startswith("•")}
    assert marked == {(int(l), int(h)) for l, h in zip(*np.nonzero(expected.mask))}
    xs, ys = panel.map.marks.getData()
    assert {(int(y), int(x)) for x, y in zip(xs, ys)} == marked  # one • per sink head on the map
    assert "above ε" in panel.map.hover_text(*next(iter(marked))) if marked else True


def test_sink_epsilon_is_strict_and_changes_the_count(qtbot, panel, tiny_result):
    from analysis.measures.head_scores import sink

    scores = sink(tiny_result.attentions)
    panel.epsilon_spin.setValue(0.0)
    assert panel.sinks().mask.sum() == (scores > 0).sum()
    panel.epsilon_spin.setValue(0.99)
    assert panel.sinks().mask.sum() == (scores > 0.99).sum()
    assert "sink rate" in panel.sink_label.text()


# ----------------------------------------------------------------------------- TransformerLens-style scores
@pytest.mark.parametrize("measure", ["mul", "abs"])
@pytest.mark.parametrize("exclude_bos,exclude_current", [(False, False), (True, False), (False, True), (True, True)])
def test_tl_scores_shown_equal_tl_detect(qtbot, panel, tiny_result, measure, exclude_bos, exclude_current):
    from analysis.measures import tl_scores
    from gui.tabs.scores.score_sources import TL_NAMES

    panel.source_choice.setCurrentIndex(panel.source_choice.findData("tl"))
    panel.measure_choice.setCurrentIndex(panel.measure_choice.findData(measure))
    panel.exclude_bos_box.setChecked(exclude_bos)
    panel.exclude_current_box.setChecked(exclude_current)
    assert panel.model.names[1:] == TL_NAMES
    for name in TL_NAMES:
        expected = tl_scores.detect(tiny_result.attentions, tiny_result.token_ids, name, error_measure=measure,
                                    exclude_bos=exclude_bos, exclude_current_token=exclude_current)
        column = next(c for c in panel.model.columns if c.name == name)
        np.testing.assert_array_equal(column.values, expected)
        for (layer, head), text in shown_cells(panel, name).items():
            assert text == format_score(expected[layer, head])
    panel.score_choice.setCurrentIndex(panel.score_choice.findData("induction_head"))
    np.testing.assert_array_equal(panel.map.values, panel.tl_scores["induction_head"])
    assert panel.map.label == "induction (TL-style)" and "TransformerLens-style" in panel.note.text()
    assert panel.map.colorbar.levels() == ((-1.0, 1.0) if measure == "abs" else (0.0, 1.0))


def test_back_to_attnscope_scores_and_tl_is_off_for_an_encoder(qtbot, panel, tiny_result):
    from analysis.measures.head_scores import SCORE_NAMES, all_scores

    panel.source_choice.setCurrentIndex(panel.source_choice.findData("tl"))
    assert panel.tl_controls.isVisibleTo(panel)
    panel.source_choice.setCurrentIndex(panel.source_choice.findData("attnscope"))
    assert panel.model.names[1:] == tuple(n for n in SCORE_NAMES if n != "next_token")
    assert not panel.tl_controls.isVisibleTo(panel)

    class EncoderResult:  # the result on screen, as an encoder's
        causal = False

        def __getattr__(self, name):
            return getattr(tiny_result, name)

    panel.source_choice.setCurrentIndex(panel.source_choice.findData("tl"))
    panel.state.set_bundle(bundle(EncoderResult(), all_scores(tiny_result), request_id=2))
    assert panel.source() == "attnscope"  # switched back: TL's detectors are for decoders
    assert not panel.source_choice.model().item(1).isEnabled()


# ----------------------------------------------------------------------------- scores that do not apply
@pytest.fixture(scope="module")
def encoder_result(tmp_path_factory):
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    folder = save_random_family(tmp_path_factory.mktemp("bert"), "bert", seed=2)
    return run_text(load_model(str(folder), device="cpu"), "the cat sat on the mat and the cat slept")


def every_cell(panel):
    return [panel.model.index(row, column).data() for row in range(panel.model.rowCount())
            for column in range(1, panel.model.columnCount())]


def choices(panel):
    return [panel.score_choice.itemData(i) for i in range(panel.score_choice.count())]


def test_a_decoder_hides_next_token_and_says_why(panel):
    from analysis.measures.head_scores import NOT_APPLICABLE, NOT_APPLICABLE_WHY, SCORE_LABELS, SCORE_NAMES

    assert not panel.scores.applies("next_token")  # GPT-2: causal
    expected = [name for name in SCORE_NAMES if name != "next_token"]
    assert list(panel.model.names[1:]) == expected and choices(panel) == expected  # the map's chooser too
    assert NOT_APPLICABLE not in every_cell(panel)
    note = panel.hidden_note.text()
    assert panel.hidden_note.isVisibleTo(panel) and "\n" not in note
    assert SCORE_LABELS["next_token"] in note and NOT_APPLICABLE_WHY["next_token"] in note
    assert SCORE_LABELS["induction"] not in note


def test_an_encoder_hides_the_causal_scores_and_says_why(qtbot, panel, encoder_result):
    from analysis.measures.head_scores import NOT_APPLICABLE, NOT_APPLICABLE_WHY, SCORE_LABELS, SCORE_NAMES, all_scores

    scores = all_scores(encoder_result)
    panel.score_choice.setCurrentIndex(panel.score_choice.findData("induction"))  # on the map: about to leave
    panel.state.set_bundle(bundle(encoder_result, scores, request_id=5))
    not_for_encoders = ("duplicate_token", "induction", "induction_probe")
    expected = [name for name in SCORE_NAMES if name not in not_for_encoders]
    assert list(panel.model.names[1:]) == expected and choices(panel) == expected
    assert panel.current_score() == "previous_token" and panel.map.label == SCORE_LABELS["previous_token"]
    np.testing.assert_array_equal(panel.map.values, scores["previous_token"])
    assert NOT_APPLICABLE not in every_cell(panel)
    column = panel.model.names.index("next_token")  # an encoder's next-token score is a number, as computed
    for row in range(panel.model.rowCount()):
        layer, head = panel.model.head_at(row)
        assert panel.model.index(row, column).data().lstrip("• ") == format_score(scores['next_token'][layer, head])
    note = panel.hidden_note.text()
    assert all(SCORE_LABELS[name] in note for name in not_for_encoders)
    assert f"{SCORE_LABELS['next_token']} —" not in note
    assert NOT_APPLICABLE_WHY["duplicate_token"] in note
    assert note.count(NOT_APPLICABLE_WHY["induction"]) == 1  # one reason said once for both induction scores
    panel.score_choice.setCurrentIndex(panel.score_choice.findData("entropy"))  # a score both kinds have stays
    panel.state.set_bundle(bundle(encoder_result, scores, request_id=6))
    assert panel.current_score() == "entropy"


def test_the_hidden_note_follows_the_model(qtbot, panel, tiny_result, encoder_result):
    from analysis.measures.head_scores import all_scores

    panel.state.set_bundle(bundle(encoder_result, all_scores(encoder_result), request_id=6))
    assert "induction" not in panel.model.names and "next_token" in panel.model.names
    panel.state.set_bundle(bundle(tiny_result, all_scores(tiny_result), request_id=7))
    assert "induction" in panel.model.names and "next_token" not in panel.model.names
    assert "next token —" in panel.hidden_note.text() and "Induction" not in panel.hidden_note.text()


# ----------------------------------------------------------------------------- ε lives in the view state
def test_the_epsilon_box_writes_and_follows_the_state(qtbot, panel, tiny_result):
    from analysis.measures.lenses import sink_rate

    panel.epsilon_spin.setValue(0.2)
    assert panel.state.sink_epsilon == pytest.approx(0.2)
    panel.state.set_sink_epsilon(0.05)  # e.g. restored, or set by another view
    assert panel.epsilon_spin.value() == pytest.approx(0.05)
    expected = sink_rate(tiny_result.attentions, 0.05)
    assert np.array_equal(panel.sinks().mask, expected.mask)
    assert f"sink rate {expected.rate:.1%}" in panel.sink_label.text()
    assert panel.model.mark_note.endswith("ε = 0.05") and panel.map.mark_note == panel.model.mark_note


def scene_rect_of_cell(fig, layer, head) -> QtCore.QRectF:
    vb = fig.plot.getViewBox()
    return vb.mapViewToScene(QtCore.QRectF(head, layer, 1, 1)).boundingRect()


@pytest.mark.parametrize("size", [(330, 1000), (240, 420), (700, 500)])
def test_sink_marks_sit_inside_their_own_cell_clear_of_the_badges(qtbot, shown_figure, size):
    from gui.tabs.scores.score_map import MARK_INSET_PX, MARK_PX, ScoreMap

    L, H = 6, 12  # minilm
    values = np.random.default_rng(3).random((L, H))
    values[2, 11] = 2.0  # the best head in the last column: its badge must not be cut at the plot's edge
    fig = shown_figure(ScoreMap, *size)
    fig.set_score("previous_token", values)
    fig.set_marks(np.ones((L, H), dtype=bool), "sink head")
    qtbot.wait(50)
    vb = fig.plot.getViewBox()
    view = vb.mapRectToScene(vb.boundingRect())
    xs, ys = fig.marks.getData()
    assert len(xs) == L * H
    for x, y in zip(xs, ys):
        layer, head = int(y), int(x)  # the cell the mark's centre is in …
        centre = vb.mapViewToScene(QtCore.QPointF(x, y))
        cell = scene_rect_of_cell(fig, layer, head)
        dot = QtCore.QRectF(centre.x() - MARK_PX / 2, centre.y() - MARK_PX / 2, MARK_PX, MARK_PX)
        room = MARK_PX + 2 * MARK_INSET_PX
        if cell.width() >= room and cell.height() >= room:
            assert cell.contains(dot)  # … the whole dot is inside it, never on an edge
        if cell.width() >= room:  # in from the left edge …
            assert dot.left() - cell.left() == pytest.approx(MARK_INSET_PX, abs=0.5)
        else:  # … or, in a cell narrower than that, in its middle
            assert centre.x() == pytest.approx(cell.center().x(), abs=0.5)
        if cell.height() >= room:  # up from the bottom edge …
            assert cell.bottom() - dot.bottom() == pytest.approx(MARK_INSET_PX, abs=0.5)
        else:
            assert centre.y() == pytest.approx(cell.center().y(), abs=0.5)
    for badge in fig.badges:
        margin = badge.textItem.document().documentMargin()  # the text item's empty border around the badge
        label = badge.mapRectToScene(badge.boundingRect()).adjusted(margin, margin, -margin, -margin)
        assert view.adjusted(-1, -1, 1, 1).contains(label)  # never cut at the plot's edge
        layer, head = int(badge.pos().y()), int(round(badge.pos().x())) - (1 if badge.anchor.x() == 1 else 0)
        cell = scene_rect_of_cell(fig, layer, head)
        x, y = vb.mapSceneToView(QtCore.QPointF(label.left(), label.top())).x(), layer
        centre = vb.mapViewToScene(QtCore.QPointF(head + (xs[0] - int(xs[0])), layer + (ys[0] - int(ys[0]))))
        dot = QtCore.QRectF(centre.x() - MARK_PX / 2, centre.y() - MARK_PX / 2, MARK_PX, MARK_PX)
        if cell.height() >= label.height() + MARK_PX + MARK_INSET_PX:
            assert not label.intersects(dot), (x, y)  # the label has its room: the mark is below it


def settle(qtbot):
    qtbot.wait(30)
    QtWidgets.QApplication.processEvents()


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


def test_a_map_where_most_heads_are_sinks_keeps_its_colours_and_says_how_many(qtbot, shown_figure):
    """SmolLM2 at ε = 0.3 marks ~220 of 270 heads: each mark is a corner tick that leaves most of its cell's colour
    showing, and the line under the map counts the marks and says why."""
    from gui.tabs.scores.score_map import MARK_PX, ScoreMap, sinks_legend

    L, H = 30, 9
    values = np.random.default_rng(4).random((L, H))
    marked = np.random.default_rng(5).random((L, H)) < 0.8
    fig = shown_figure(ScoreMap, 520, 700)
    fig.set_score("sink", values)
    fig.set_marks(marked, "sink head: first-token score above ε = 0.3")
    qtbot.wait(50)
    n = int(marked.sum())
    assert fig.legend.startswith(f"• {n} of {L * H} heads are sinks: first-token score above ε = 0.3")
    assert sinks_legend(marked, "sink head: x") == f"• {n} of {L * H} heads are sinks: x"
    assert sinks_legend(np.eye(1, dtype=bool), "sink head: x") == "• 1 of 1 heads is a sink: x"
    assert sinks_legend(None, "x") == ""
    cell = scene_rect_of_cell(fig, 0, 0)
    tick_area = MARK_PX * MARK_PX / 2  # a right triangle with legs MARK_PX
    assert tick_area <= 0.25 * cell.width() * cell.height()  # three quarters of each marked cell show its colour
    xs, ys = fig.marks.getData()
    assert {(int(y), int(x)) for x, y in zip(xs, ys)} == set(zip(*np.nonzero(marked)))
    fig.set_marks(None)
    assert "heads are sinks" not in fig.legend


def test_the_legend_under_a_narrow_map_wraps_to_its_width_and_keeps_every_word(qtbot, shown_figure):
    """The Scores tab's map beside the table is ~300 px wide at 1366 × 768: the legend under it must wrap, not run
    off both edges ("…s: first-token score above ε = 0.3" was all that showed)."""
    from PySide6 import QtGui

    from gui.tabs.scores.score_map import LEGEND_PT, ScoreMap

    L, H = 30, 9
    fig = shown_figure(ScoreMap, 300, 600)
    fig.set_score("previous_token", np.random.default_rng(4).random((L, H)))
    fig.set_marks(np.random.default_rng(5).random((L, H)) < 0.8, "sink head: first-token score above ε = 0.3")
    qtbot.wait(50)
    font = QtGui.QFont(fig.font())
    font.setPointSizeF(LEGEND_PT)
    metrics = QtGui.QFontMetrics(font)
    assert len(fig.legend_lines) >= 2
    assert all(metrics.horizontalAdvance(line) <= fig.width() for line in fig.legend_lines)
    assert " ".join(fig.legend_lines).split() == fig.legend.replace(" · ", " ").split()  # nothing dropped
    label = fig.plot.getAxis("bottom").label
    assert label.mapRectToScene(label.boundingRect()).width() <= fig.width() + 1  # drawn inside the figure
    fig.resize(900, 600)
    qtbot.wait(50)
    assert len(fig.legend_lines) < 3  # wider: fewer lines
