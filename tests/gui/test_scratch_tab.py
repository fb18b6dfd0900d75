"""The From-scratch tab on a ViewState and a real worker: the displayed numbers are the engine's, it follows
the state (selection, colormap, theme, query row), asks the worker only while visible, and the lesson's preset
shows the lesson's numbers."""
import math
import re

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from helpers import WAIT_MS, analyse, plain  # noqa: E402


def table_texts(table):
    return [[table.item(i, j).text() for j in range(table.columnCount())] for i in range(table.rowCount())]


@pytest.fixture
def calculator(qtbot):
    from gui.qt import ensure_qapp
    from gui.tabs.scratch.calculator_page import CalculatorPage

    ensure_qapp()
    page = CalculatorPage()
    qtbot.addWidget(page)
    return page


def test_worked_example_preset_shows_the_lessons_numbers(calculator):
    calculator.load_preset("Worked example: server / request / it")
    assert table_texts(calculator.scores_table) == [["2.4000", "0.1000", "0.5000"]]
    assert table_texts(calculator.scaled_table) == [["1.2000", "0.0500", "0.2500"]]
    assert table_texts(calculator.weights_table) == [["0.5871", "0.1859", "0.2270", "1.0000"]]
    assert table_texts(calculator.output_table) == [["0.6151", "0.2941", "0.5616", "0.5337"]]
    assert "√d_k = 2.0000" in calculator.message.text() and "convex mixture" in calculator.message.text()


def test_editing_a_number_updates_everything(calculator):
    calculator.load_preset("Worked example: server / request / it")
    calculator.tables["Q"].item(0, 1).setText("2")  # the query now also looks for messages
    weights = [float(x) for x in table_texts(calculator.weights_table)[0][:3]]
    assert weights[1] > 0.1859 and math.isclose(sum(weights), 1, abs_tol=2e-4)
    calculator.tables["Q"].item(0, 1).setText("oops")
    assert "not a number" in calculator.message.text()


def test_causal_preset_and_resizing(calculator):
    from analysis.lessons.calculator import attend

    calculator.load_preset("3 tokens, causal")
    rows = table_texts(calculator.weights_table)
    assert rows[0][:3] == ["1.0000", "0.0000", "0.0000"] and all(r[3] == "1.0000" for r in rows)
    assert table_texts(calculator.scaled_table)[0][1] == "−∞"
    calculator._add_row("K", "V")  # 3 queries, 4 keys: the queries are the last 3 positions (attend's rule)
    q, k, v = (calculator._values(n) for n in "QKV")
    expected = attend(q, k, v, causal=True)
    np.testing.assert_array_equal(calculator.result.weights, expected.weights)
    assert calculator.result.weights[0, 2] == 0 and calculator.result.weights[0, 1] > 0  # query 0 at position 1
    assert "n_k − n_q + i" in plain(calculator.message) and "position 1 + i" in plain(calculator.message)
    calculator._add_row("Q")
    assert calculator.weights_table.rowCount() == 4 and calculator.weights_table.columnCount() == 5
    calculator._add_dim()
    assert calculator.tables["V"].columnCount() == 3 and calculator.output_table.columnCount() == 3
    calculator._remove_dim()
    calculator._remove_row("Q")
    calculator._remove_row("K", "V")
    assert calculator.result.weights.shape == (3, 3)
    calculator._remove_row("K", "V")  # 3 queries, 2 keys: no position for the first query
    assert "need at least 3 keys" in plain(calculator.message) and calculator.result is None


def test_invalid_input_clears_the_results_and_valid_input_brings_them_back(calculator):
    calculator.load_preset("Worked example: server / request / it")
    calculator.tables["Q"].item(0, 0).setText("abc")
    assert "Q[0, 0] is not a number: 'abc'" in plain(calculator.message)
    for table in calculator.result_tables():  # no stale numbers beside the error
        assert table.rowCount() == 0 and not table.isEnabled()
    assert calculator.result is None
    # the input column is wide enough to show what was typed
    table = calculator.tables["Q"]
    assert table.columnWidth(0) >= QtGui.QFontMetrics(table.font()).horizontalAdvance("abc") + 8
    calculator.tables["Q"].item(0, 0).setText("nan")  # a number for float(), not for attention
    assert "finite" in plain(calculator.message) and calculator.result is None
    calculator.tables["Q"].item(0, 0).setText("1")
    assert table_texts(calculator.weights_table) == [["0.5871", "0.1859", "0.2270", "1.0000"]]
    assert all(t.isEnabled() for t in calculator.result_tables())


def test_pasted_json_is_read_like_the_command_line_and_notes_are_shown(calculator):
    from analysis.lessons.calculator import attend

    calculator.load_preset("Worked example: server / request / it")
    assert not calculator.paste("K", "[[1, 2], [3")  # not JSON: one sentence, results cleared
    assert "K is not JSON" in plain(calculator.message) and calculator.weights_table.rowCount() == 0
    assert not calculator.paste("V", '[[1, 2], [3]]')
    assert "ragged" in plain(calculator.message)
    assert calculator.paste("Q", "[1e200, 0, 0, 1e200]")  # QKᵀ overflows float64: attend's notes are shown
    calculator.paste("K", "[[1e200, 0, 0, 1e200], [0, 1, 0, 0], [1, 1, 1, 1]]")
    expected = attend(calculator._values("Q"), calculator._values("K"), calculator._values("V"))
    assert expected.notes and all(html_note in plain(calculator.message) for html_note in
                                  ["beyond 64-bit floats", "exact all the same"])
    np.testing.assert_array_equal(calculator.result.weights, expected.weights)
    assert calculator.tables["K"].verticalHeaderItem(0).text() == "server"  # labels kept: same rows


def test_scaling_lab(qtbot):
    from gui.qt import ensure_qapp
    from gui.tabs.scratch.scratch_lab import ScalingPage

    ensure_qapp()
    page = ScalingPage()
    qtbot.addWidget(page)
    page.dk_spin.setValue(128)
    e = page.experiment
    assert abs(e.std_unscaled - math.sqrt(128)) < 0.5 and abs(e.std_scaled - 1) < 0.05
    assert e.entropy_unscaled < e.entropy_scaled < e.max_entropy
    assert f"{e.std_unscaled:.3f}" in page.numbers.text()
    page.seed_spin.setValue(1)
    assert page.experiment.seed == 1 and page.experiment.std_unscaled != e.std_unscaled


@pytest.fixture
def panel(qtbot, worker):
    from gui.tabs.scratch.scratch_tab import ScratchTab
    from gui.state.view_state import ViewState

    state = ViewState()
    p = ScratchTab(state, worker)
    p.resize(1300, 800)
    yield p
    p.hide()
    p.deleteLater()


def show(qtbot, panel):
    with qtbot.waitSignal(panel.data_shown, timeout=WAIT_MS):
        panel.show()


@pytest.mark.slow
def test_steps_and_parity_for_the_selected_head(qtbot, panel, worker, tiny_model):
    from analysis.lessons.manual_attention import recompute_layer

    bundle = analyse(qtbot, worker, "The server rejected the request because it was overloaded.", bos=False)
    r = bundle.result
    panel.state.set_bundle(bundle)
    panel.state.select(1, 2)
    show(qtbot, panel)
    rec = recompute_layer(tiny_model.attention_weights(1), r.layer_inputs[1], 1)
    np.testing.assert_allclose(panel.steps.views["weights"].values, rec.weights[2], atol=1e-7)
    np.testing.assert_allclose(panel.steps.views["q"].values, rec.q[2], atol=1e-6)
    assert np.isneginf(panel.steps.views["masked"].values[0, 1])
    assert "√d_k = 4.0000" in panel.steps.info.text()
    # the hover explanation of a weight shows its making
    text = panel.steps._explain_weight(5, 2)
    assert "exp(" in text and f"{rec.weights[2, 5, 2]:.4f}" in text
    assert "−∞" in panel.steps._explain_masked(2, 5)
    # query focus follows the state's query row: the row for token 5
    panel.state.set_query_row(5)
    assert panel.steps.focus_table.rowCount() == r.n_tokens
    assert panel.steps.focus_table.item(6, 2).text() == "−∞"
    assert panel.steps.focus_table.item(2, 4).text() == f"{rec.weights[2, 5, 2]:.4f}"
    # model vs manual
    assert "PASS" in panel.parity.head_verdict.text() and "L1H2:" in panel.parity.head_verdict.text()
    assert "PASS" in panel.parity.layer_verdict.text() and "W_O" in panel.parity.layer_verdict.text()
    qtbot.waitUntil(lambda: panel.parity.report is not None and panel.parity.report.complete, timeout=WAIT_MS)
    assert "all 12 heads" in panel.parity.all_verdict.text() and "PASS" in panel.parity.all_verdict.text()
    # cost, from the weights
    assert panel.cost.table.item(2, 1).text() == f"{4 * 64 * 64 + 4 * 64:,}"


@pytest.mark.slow
def test_selection_and_precision_follow_and_the_error_map_selects(qtbot, panel, worker):
    panel.state.set_bundle(analyse(qtbot, worker, "The cat sat on the mat", bos=False))
    show(qtbot, panel)
    with qtbot.waitSignal(panel.data_shown, timeout=WAIT_MS):
        panel.state.select(2, 3)
    assert panel.status.text() == "L2H3" and panel.parity.error_map.selected == (2, 3)
    with qtbot.waitSignal(panel.data_shown, timeout=WAIT_MS):
        panel.dtype_choice.setCurrentText("float64")
    assert "manual computed in float64" in panel.parity.head_verdict.text()
    assert panel.steps.views["weights"].values.dtype == np.float64
    with qtbot.waitSignal(panel.data_shown, timeout=WAIT_MS):
        panel.parity.error_map.head_clicked.emit(0, 1)  # a click on the error map
    assert (panel.state.layer, panel.state.head) == (0, 1)


@pytest.mark.slow
def test_work_is_asked_for_only_while_visible_and_stale_answers_are_dropped(qtbot, panel, worker):
    bundle = analyse(qtbot, worker, "The cat sat on the mat", bos=False)
    submitted = []
    original = worker.submit
    worker.submit = lambda name, task, **options: submitted.append(name) or original(name, task, **options)
    try:
        panel.state.set_bundle(bundle)
        panel.state.select(1, 1)
        qtbot.wait(400)
        assert submitted == []  # hidden: nothing computed
        show(qtbot, panel)
        assert submitted[0] == "scratch" and set(submitted[1:]) <= {"parity"}  # the head first, then the layers
        shown = panel.status.text()
        worker.task_done.emit(panel.latest_request_id - 1, "scratch", object())  # an older answer: dropped
        assert panel.status.text() == shown
    finally:
        del worker.submit


@pytest.mark.slow
def test_colormap_and_dark_mode_reach_every_figure(qtbot, panel, worker):
    import pyqtgraph as pg

    panel.state.set_bundle(analyse(qtbot, worker, "The cat sat on the mat", bos=False))
    show(qtbot, panel)
    panel.state.set_colormap("inferno")
    expected = pg.colormap.get("inferno").getLookupTable(nPts=16)
    heatmaps = [fig for fig in panel.figures() if hasattr(fig, "image") and fig.image.image is not None]
    assert len(heatmaps) == 9 + 4  # GPT-2's nine steps (no rotation) and Model vs manual's four
    for fig in heatmaps:
        bar = getattr(fig, "colorbar", None)
        lut = (bar.colorMap() if bar is not None else fig.image.getColorMap()).getLookupTable(nPts=16)
        assert np.array_equal(lut, expected), fig
    panel.state.set_dark(True)
    for fig in panel.figures():
        assert fig.backgroundBrush().color().lightness() < 60, fig


@pytest.mark.slow
def test_the_wheel_scrolls_the_steps_page(qtbot, panel, worker):
    panel.state.set_bundle(analyse(qtbot, worker, "The cat sat on the mat because it was tired. " * 3, bos=False))
    panel.resize(1000, 500)
    show(qtbot, panel)
    qtbot.wait(100)
    view = panel.steps.views["weights"]
    before = view.plot.getViewBox().viewRange()
    bar = panel.steps_scroll.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == 0
    centre = QtCore.QPointF(view.width() / 2, view.height() / 2)
    event = QtGui.QWheelEvent(centre, view.mapToGlobal(centre), QtCore.QPoint(), QtCore.QPoint(0, -120),
                              QtCore.Qt.MouseButton.NoButton, QtCore.Qt.KeyboardModifier.NoModifier,
                              QtCore.Qt.ScrollPhase.NoScrollPhase, False)
    QtWidgets.QApplication.sendEvent(view.viewport(), event)
    assert not event.isAccepted()  # the plot declines the wheel ...
    widget, handled = view.viewport().parentWidget(), False
    while widget is not None and not handled:  # ... so Qt hands a real one to the parents (QApplication::notify)
        event.setAccepted(True)
        handled = QtWidgets.QApplication.sendEvent(widget, event) and event.isAccepted()
        widget = widget.parentWidget()
    assert bar.value() > 0  # the page scrolled
    assert view.plot.getViewBox().viewRange() == before  # the small plot did not zoom
    # the walkthrough table shows all its rows: no scroll area inside the page's scroll area
    table = panel.steps.focus_table
    assert table.height() >= table.verticalHeader().length() + table.horizontalHeader().height()


@pytest.mark.slow
def test_offscreen_figure_is_what_is_in_front(qtbot, panel, worker):
    from gui.plots.figures import dispose_figure

    panel.state.set_bundle(analyse(qtbot, worker, "The cat sat on the mat", bos=False))
    show(qtbot, panel)
    fig = panel.offscreen_figure()
    np.testing.assert_array_equal(fig.values, panel.steps.views["weights"].values)
    dispose_figure(fig)
    panel.setCurrentWidget(panel.parity)
    fig = panel.offscreen_figure()
    assert fig.report is panel.parity.report
    dispose_figure(fig)
    panel.setCurrentWidget(panel.calculator_scroll)
    assert panel.offscreen_figure() is None


@pytest.mark.slow
def test_the_selected_head_alone_is_recomputed_and_every_heads_parity_fills_in_layer_by_layer(qtbot, panel, worker,
                                                                                           tiny_model, monkeypatch):
    """From scratch per head on demand: the Steps hold the selected head's n² steps only; the whole-model table
    and error map fill in one layer at a time ("Checking every head: k of L layers"), blank where not yet checked,
    each layer's numbers the independent check_layer's; a head asked for meanwhile runs before the layers left."""
    import analysis.measures.parity as parity
    from analysis.measures.parity import check_layer, sample_rows
    from helpers import hold_at_call

    bundle = analyse(qtbot, worker, "The cat sat on the mat and looked at the dog", bos=False)
    r = bundle.result
    submitted = []
    original = worker.submit
    worker.submit = lambda name, task, **options: submitted.append(name) or original(name, task, **options)
    _, reached, go = hold_at_call(monkeypatch, parity, "check_layer", 2)  # the worker inside layer 1's check
    try:
        panel.state.set_bundle(bundle)
        panel.state.select(1, 2)
        layers_seen = []
        panel.parity_shown.connect(layers_seen.append)
        show(qtbot, panel)
        assert panel.steps.rec.weights.shape == (1, r.n_tokens, r.n_tokens)  # no other head's map is kept
        qtbot.waitUntil(reached.is_set, timeout=WAIT_MS)  # the event loop runs: layer 0's result submits layer 1
        panel.state.select(2, 0)  # asked for while the layers are being checked
        qtbot.waitUntil(lambda: submitted.count("scratch") == 2, timeout=WAIT_MS)
        go.set()
        qtbot.waitUntil(lambda: panel.parity.report is not None and panel.parity.report.complete, timeout=WAIT_MS)
    finally:
        go.set()
        del worker.submit
    assert layers_seen == list(range(r.n_layer + 1))  # blank, then one more layer each time
    assert submitted == ["scratch", "parity", "parity", "scratch"] + ["parity"] * (r.n_layer - 2)  # between layers
    report, sample = panel.parity.report, sample_rows(r.n_tokens)
    for layer in range(r.n_layer):
        part = check_layer(r, tiny_model.attention_weights(layer), "float32", sample)
        np.testing.assert_array_equal(report.weights_bound_ratio[layer], part.ratio)
    assert "all 12 heads" in panel.parity.all_verdict.text()


def test_a_report_being_filled_says_how_far_it_is_and_leaves_the_rest_blank(qtbot, worker, tiny_model):
    from analysis.measures.parity import check_layer, report_of, sample_rows
    from gui.tabs.scratch.scratch_parity import ParityPage
    from helpers import plain

    bundle = analyse(qtbot, worker, "The cat sat on the mat", bos=False)
    r, sample = bundle.result, sample_rows(bundle.result.n_tokens)
    page = ParityPage()
    qtbot.addWidget(page)
    page.set_report(report_of(r, [None] * r.n_layer, "float32", sample))
    assert plain(page.all_verdict).startswith("Checking every head: layer 1 of 3")
    part = check_layer(r, tiny_model.attention_weights(0), "float32", sample)
    page.set_report(report_of(r, [part, None, None], "float32", sample))
    assert re.match(r"Checking every head: 1 of 3 layers so far, about \d+ s left, all within their bounds",
                    plain(page.all_verdict))
    assert page.checking.isVisibleTo(page) and (page.checking.value(), page.checking.maximum()) == (1, 3)
    assert page.layers_table.rowCount() == 1
    assert np.isnan(page.error_map.image.image[1:]).all() and np.isfinite(page.error_map.image.image[0]).all()
    assert "not checked yet" in page.error_map.hover_text(2, 1)
