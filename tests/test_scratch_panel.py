"""The from-scratch panel: the displayed numbers are the engine's, and the lesson's preset shows the lesson's numbers."""
import math

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from test_gui import WAIT_MS, make_window, run  # noqa: E402


def table_texts(table):
    return [[table.item(i, j).text() for j in range(table.columnCount())] for i in range(table.rowCount())]


@pytest.fixture
def calculator(qtbot):
    from gui.qt import ensure_qapp
    from gui.scratch import CalculatorPage

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
    calculator.load_preset("3 tokens, causal")
    rows = table_texts(calculator.weights_table)
    assert rows[0][:3] == ["1.0000", "0.0000", "0.0000"] and all(r[3] == "1.0000" for r in rows)
    assert table_texts(calculator.scaled_table)[0][1] == "−∞"
    calculator._add_row("K", "V")
    assert "as many queries as keys" in calculator.message.text()
    calculator._add_row("Q")
    assert calculator.weights_table.rowCount() == 4 and calculator.weights_table.columnCount() == 5
    calculator._add_dim()
    assert calculator.tables["V"].columnCount() == 3 and calculator.output_table.columnCount() == 3
    calculator._remove_dim()
    calculator._remove_row("Q")
    calculator._remove_row("K", "V")
    assert calculator.result.weights.shape == (3, 3)


def test_scaling_lab(qtbot):
    from gui.qt import ensure_qapp
    from gui.scratch import ScalingPage

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
def window(qtbot, settings, tiny_model_dir):
    w = make_window(qtbot, settings, tiny_model_dir)
    yield w
    w.close()


@pytest.fixture
def settings(tmp_path):
    return QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)


def show_scratch(qtbot, window):
    with qtbot.waitSignal(window.scratch_shown, timeout=WAIT_MS):
        window.tabs.setCurrentWidget(window.scratch)


def test_steps_and_parity_for_the_selected_head(qtbot, window, tiny_model):
    from analysis.manual_attention import recompute_layer

    r = run(qtbot, window, "The server rejected the request because it was overloaded.")
    window.select_head(1, 2)
    show_scratch(qtbot, window)
    panel = window.scratch
    rec = recompute_layer(tiny_model.attention_parameters(1), r.layer_inputs[1], 1)
    np.testing.assert_allclose(panel.steps.views["weights"].values, rec.weights[2], atol=1e-7)
    np.testing.assert_allclose(panel.steps.views["q"].values, rec.q[2], atol=1e-6)
    assert np.isneginf(panel.steps.views["masked"].values[0, 1])
    assert "√d_k = 4.0000" in panel.steps.info.text()
    # the hover explanation of a weight shows its making
    text = panel.steps._explain_weight(5, 2)
    assert "exp(" in text and f"{rec.weights[2, 5, 2]:.4f}" in text
    assert "−∞" in panel.steps._explain_masked(2, 5)
    # query focus: the row for the last token
    panel.steps.focus_query(5)
    assert panel.steps.focus_table.rowCount() == r.n_tokens
    assert panel.steps.focus_table.item(6, 2).text() == "−∞"
    assert panel.steps.focus_table.item(2, 4).text() == f"{rec.weights[2, 5, 2]:.4f}"
    # model vs manual
    assert "PASS" in panel.parity.head_verdict.text() and "layer 1, head 2" in panel.parity.head_verdict.text()
    assert "PASS" in panel.parity.layer_verdict.text() and "W_O" in panel.parity.layer_verdict.text()
    assert "all 12 heads" in panel.parity.all_verdict.text()
    # cost, from the weights
    assert panel.cost.table.item(2, 1).text() == f"{4 * 64 * 64 + 4 * 64:,}"


def test_selection_and_precision_switch_follow(qtbot, window):
    run(qtbot, window, "The cat sat on the mat")
    show_scratch(qtbot, window)
    with qtbot.waitSignal(window.scratch_shown, timeout=WAIT_MS):
        window.select_head(2, 3)
    assert window.scratch.status.text() == "layer 2, head 3"
    with qtbot.waitSignal(window.scratch_shown, timeout=WAIT_MS):
        window.scratch.dtype_choice.setCurrentText("float64")
    assert "manual computed in float64" in window.scratch.parity.head_verdict.text()
    assert window.scratch.steps.views["weights"].values.dtype == np.float64
