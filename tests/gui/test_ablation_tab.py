"""The Ablation tab on a ViewState and a real worker: the numbers shown are ``analysis.measures.ablation``'s
(``ablate`` and ``importance_map`` run here on the same model), Cancel stops the importance map between
forwards and stays where it was when a run starts, answers for a text no longer on screen are dropped, an encoder is
told why it cannot, the importance sentence names only heads that raise the loss, and after the importance map
alone the baseline box shows the baseline."""

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from analysis.display import format_score, head_name  # noqa: E402
from helpers import (TEXT, WAIT_MS, analyse, double_click, hold_at_call, shown_tab, view_point,  # noqa: E402
                     worker_held)


@pytest.fixture
def panel(qtbot, worker):
    from gui.tabs.ablation.ablation_tab import AblationTab

    p = shown_tab(qtbot, AblationTab, worker, 1100, 600)
    p.state.set_bundle(analyse(qtbot, worker, TEXT))
    return p


def shown_top(box):
    return box.tokens()


def expected_top(outcome):
    return [(token, f"{p:.3f}") for token, p in outcome.top]


def test_the_heads_box_follows_the_selection_until_heads_are_added(qtbot, panel):
    state = panel.state
    state.select(1, 2)
    assert panel.heads_edit.text() == "L1H2" and panel.add_button.text() == "Keep L1H2"  # a head, not a decimal
    qtbot.mouseClick(panel.add_button, QtCore.Qt.MouseButton.LeftButton)
    assert panel.add_button.text() == "Add L1H2" and not panel.add_button.isEnabled()  # named already
    assert "in the list already" in panel.add_button.toolTip()
    state.select(0, 3)
    assert panel.heads_edit.text() == "L1H2"  # pinned
    assert panel.add_button.text() == "Add L0H3" and panel.add_button.isEnabled()
    qtbot.mouseClick(panel.add_button, QtCore.Qt.MouseButton.LeftButton)
    assert panel.heads_edit.text() == "L1H2, L0H3" and not panel.add_button.isEnabled()
    qtbot.mouseClick(panel.reset_button, QtCore.Qt.MouseButton.LeftButton)
    assert panel.heads_edit.text() == "L0H3"
    state.select(2, 1)
    assert panel.heads_edit.text() == "L2H1"


def test_before_the_first_ablation_the_baseline_shows_the_texts_top_5_and_the_boxes_keep_their_width(qtbot, panel):
    from analysis.measures.ablation import TOP_K

    r = panel.state.result
    assert shown_top(panel.baseline_box) == [(p.token, f"{p.probability:.3f}") for p in r.predictions[:TOP_K]]
    assert "Ablate" in panel.baseline_box.loss.text() and "Ablate" in panel.ablated_box.loss.text()
    assert shown_top(panel.ablated_box) == []
    widths = panel.baseline_box.width(), panel.ablated_box.width()
    assert abs(widths[0] - widths[1]) <= 2
    with qtbot.waitSignal(panel.ablation_shown, timeout=WAIT_MS):
        panel.ablate()
    qtbot.wait(20)
    assert (panel.baseline_box.width(), panel.ablated_box.width()) == widths


def test_add_keeps_the_heads_as_typed_and_never_names_one_twice(qtbot, panel):
    panel.heads_edit.setText("1.2, L0h3")  # typed: the old form and a lower-case name
    panel._followed = ""
    panel.state.select(1, 2)
    qtbot.mouseClick(panel.add_button, QtCore.Qt.MouseButton.LeftButton)
    assert panel.heads_edit.text() == "1.2, L0h3"  # 1.2 is L1H2: not added again
    panel.state.select(2, 0)
    qtbot.mouseClick(panel.add_button, QtCore.Qt.MouseButton.LeftButton)
    assert panel.heads_edit.text() == "1.2, L0h3, L2H0"


@pytest.mark.parametrize("mode,heads,spec,named", [("zero", [(1, 2), (0, 3)], "1.2, 0.3", "L1H2, L0H3"),
                                                    ("mean", [(2, 0)], "L2H0", "L2H0")])
def test_ablation_numbers_equal_ablate(qtbot, panel, tiny_model, mode, heads, spec, named):
    from analysis.measures.ablation import ablate

    panel.heads_edit.setText(spec)
    panel.mode_choice.setCurrentIndex(panel.mode_choice.findData(mode))
    with qtbot.waitSignal(panel.ablation_shown, timeout=WAIT_MS) as blocker:
        panel.ablate()
    expected = ablate(tiny_model, TEXT, heads, mode, bos=True)
    shown = blocker.args[0]
    assert shown.mode == mode and shown.heads == tuple(heads)
    assert shown.baseline.loss == pytest.approx(expected.baseline.loss, abs=1e-9)
    assert shown.ablated.loss == pytest.approx(expected.ablated.loss, abs=1e-9)
    assert [t for t, _ in shown.ablated.top] == [t for t, _ in expected.ablated.top]
    # what the user reads, side by side
    assert panel.baseline_box.loss.text() == f"loss {expected.baseline.loss:.3f} nats"
    assert panel.ablated_box.loss.text().startswith(f"loss {expected.ablated.loss:.3f} nats")
    assert f"{format_score(expected.loss_change, signed=True)} vs baseline" in panel.ablated_box.loss.text()
    assert shown_top(panel.baseline_box) == expected_top(expected.baseline)
    assert shown_top(panel.ablated_box) == expected_top(expected.ablated)
    assert panel.ablated_box.title() == f"Ablated ({mode}): {named}"  # the heads named as everywhere


def test_bad_heads_are_one_sentence_and_nothing_is_sent(qtbot, panel, worker):
    sent = []
    original = worker.submit
    worker.submit = lambda name, task: sent.append(name) or original(name, task)
    try:
        for spec in ("9.9", "1,2", ""):
            panel.heads_edit.setText(spec)
            assert panel.ablate() is None
            assert panel.message.isVisible() and "\n" not in panel.message.text() and panel.message.text()
    finally:
        del worker.submit
    assert sent == []


def test_importance_map_equals_importance_map_and_a_click_selects(qtbot, panel, tiny_model):
    from analysis.measures.ablation import importance_map

    progress = []
    panel.importance_job.progressed.connect(lambda done, total: progress.append((done, total)))
    with qtbot.waitSignal(panel.importance_shown, timeout=WAIT_MS) as blocker:
        panel.start_importance()
    expected = importance_map(tiny_model, TEXT, "zero", bos=True)
    shown = blocker.args[0]
    assert shown.baseline_loss == pytest.approx(expected.baseline_loss, abs=1e-9)
    np.testing.assert_allclose(shown.loss_change, expected.loss_change, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(panel.map.image.image, expected.loss_change.astype(np.float32))
    L, H = expected.loss_change.shape
    assert progress[-1] == (L * H + 1, L * H + 1)
    l, h, v = expected.top(1)[0]
    assert f"{head_name(l, h)} {format_score(v, signed=True)}" in panel.importance_label.text()
    hover = panel.map.hover_text(l, h)
    assert hover.startswith(f"{head_name(l, h)}: loss change {format_score(v, signed=True)} nats") and "rank 1 of" in hover
    assert panel.map.isVisible() and not panel.progress.isVisible()
    lo, hi = panel.map.colorbar.levels()
    assert lo == -hi and hi == pytest.approx(np.abs(expected.loss_change).max(), rel=1e-6)  # 0 is the middle
    qtbot.wait(100)
    activated = []
    panel.head_activated.connect(lambda *a: activated.append(a))
    double_click(qtbot, panel.map.viewport(), view_point(panel.map, 2.5, 1.5))
    assert (panel.state.layer, panel.state.head) == (1, 2) and activated[-1] == (1, 2)
    fig = panel.offscreen_figure()
    assert fig is not None and fig is not panel.map and np.array_equal(fig.importance.loss_change, shown.loss_change)
    from gui.plots.figures import dispose_figure

    dispose_figure(fig)


def test_cancel_keeps_the_finished_layers_as_a_partial_map(qtbot, panel, monkeypatch):
    import analysis.measures.ablation as ablation_module

    monkeypatch.setattr(ablation_module, "STREAM_TOKENS", 1)  # one layer's heads a batch: a partial every layer
    # call 1 is the baseline, 2 layer 0, 3 layer 1: held there until Cancel
    calls, reached, go = hold_at_call(monkeypatch, ablation_module, "_decoded_losses", 3)
    panel.start_importance()
    assert panel.importance_cancel.isEnabled() and not panel.importance_button.isEnabled()
    qtbot.waitUntil(reached.is_set, timeout=WAIT_MS)
    assert "left" in panel.progress.text()  # layer 0 done: an estimate of the rest
    qtbot.mouseClick(panel.importance_cancel, QtCore.Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(panel.importance_job.cancelled, timeout=WAIT_MS):
        go.set()
    r = panel.state.result
    imp = panel.importance
    assert len(calls) == 3 < r.n_layer + 1  # the baseline and layer 0 finished, layer 1 stopped
    assert imp.partial and imp.n_done == r.n_head and imp.done[0].all() and not imp.done[1:].any()
    assert panel.map.isVisible()
    assert panel.importance_label.text().startswith(f"Importance map cancelled: the map shows the {r.n_head} of")
    assert "not measured" in panel.map.hover_text(1, 0)
    assert panel.importance_button.isEnabled() and not panel.importance_cancel.isEnabled()


@pytest.mark.slow
def test_answers_for_a_text_no_longer_on_screen_are_dropped(qtbot, panel, worker):
    other = analyse(qtbot, worker, "A different text entirely, with other words.")
    shown = []
    panel.ablation_shown.connect(shown.append)
    panel.importance_shown.connect(shown.append)
    with worker_held(worker):
        panel.heads_edit.setText("0.0")
        panel.ablate()
        panel.start_importance()
        panel.state.set_bundle(other)  # the user ran another text meanwhile
    qtbot.waitUntil(lambda: worker._queue.empty(), timeout=WAIT_MS)
    qtbot.wait(500)
    assert shown == [] and panel.ablation is None and panel.importance is None
    assert panel.baseline_box.tokens() == [(p.token, f"{p.probability:.3f}") for p in other.result.predictions[:5]]
    assert panel.ablated_box.tokens() == [] and panel.ablate_button.isEnabled()  # the new text's, unablated
    # of two ablations asked in a row, only the later one is shown
    with worker_held(worker):
        panel.heads_edit.setText("0.0")
        panel.ablate()
        panel.heads_edit.setText("1.1")
        panel.ablate()
    qtbot.waitUntil(lambda: bool(shown), timeout=WAIT_MS)
    qtbot.wait(300)
    assert [s.heads for s in shown] == [((1, 1),)]


def test_a_new_model_clears_the_results(qtbot, panel, worker):
    with qtbot.waitSignal(panel.ablation_shown, timeout=WAIT_MS):
        panel.ablate()
    worker.model_loaded.emit(999, None)  # what the worker says after loading another model
    assert panel.ablation is None and panel.baseline_box.tokens() == []


def test_an_encoder_is_told_why(qtbot, panel, tiny_result):
    from analysis.measures.head_scores import all_scores

    class EncoderResult:  # the result on screen, as an encoder's
        causal = False
        model_label = "bert-tiny"

        def __getattr__(self, name):
            return getattr(tiny_result, name)

    class Bundle:
        result, scores, request_id = EncoderResult(), all_scores(tiny_result), 77

    panel.state.set_bundle(Bundle())
    assert "needs a decoder" in panel.note.text() and "bert-tiny is an encoder" in panel.note.text()
    assert not panel.ablate_button.isEnabled() and not panel.importance_button.isEnabled()
    assert panel.ablate() is None and panel.start_importance() is None
    assert panel.offscreen_figure() is None


def test_the_tab_ablates_the_prefix_the_run_analysed_and_says_it_was_cut(qtbot, panel, worker, tiny_model):
    """With a token cap below the text's length the tab ablates the prefix on screen (not the default cap's) and
    says the text was cut."""
    from analysis.measures.ablation import ablate, importance_map

    long_text = " ".join([TEXT] * 4)
    with qtbot.waitSignal(worker.analysis_ready, timeout=WAIT_MS) as blocker:
        worker.analyse(long_text, bos=True, max_tokens=12)
    panel.state.set_bundle(blocker.args[0])
    assert panel.state.result.n_tokens == 12 and panel.state.result.truncated
    panel.heads_edit.setText("1.2")
    with qtbot.waitSignal(panel.ablation_shown, timeout=WAIT_MS) as shown:
        panel.ablate()
    expected = ablate(tiny_model, long_text, [(1, 2)], bos=True, max_tokens=12)
    assert shown.args[0].n_tokens == 12 and shown.args[0].baseline.loss == pytest.approx(expected.baseline.loss)
    assert panel.message.isVisible() and "token cap" in panel.message.text()
    with qtbot.waitSignal(panel.importance_shown, timeout=WAIT_MS) as done:
        panel.start_importance()
    assert done.args[0].n_tokens == 12
    assert done.args[0].baseline_loss == pytest.approx(importance_map(tiny_model, long_text, bos=True,
                                                                       max_tokens=12).baseline_loss)
    assert "token cap" in panel.importance_label.text()


def test_the_importance_maps_cancel_button_stays_where_it_was_when_a_run_starts(qtbot, worker, monkeypatch):
    import analysis.measures.ablation as ablation_module
    from gui.tabs.ablation.ablation_tab import AblationTab

    panel = shown_tab(qtbot, AblationTab, worker, 1360, 700)
    panel.state.set_bundle(analyse(qtbot, worker, TEXT))
    qtbot.wait(50)
    cancel = panel.importance_cancel

    def where():
        return QtCore.QRect(cancel.mapTo(panel, QtCore.QPoint(0, 0)), cancel.size())

    before = where()
    monkeypatch.setattr(ablation_module, "STREAM_TOKENS", 1)  # one layer a batch
    _calls, reached, go = hold_at_call(monkeypatch, ablation_module, "_decoded_losses", 1)
    panel.start_importance()
    qtbot.waitUntil(reached.is_set, timeout=WAIT_MS)
    qtbot.wait(50)  # the layout has placed the progress bar
    assert panel.progress.isVisible() and cancel.isEnabled()
    assert where() == before  # was: 1172–1352 px, then 1106–1186 with the progress bar where Cancel had been
    assert not panel.progress.geometry().intersects(cancel.geometry())
    with qtbot.waitSignal(panel.importance_job.cancelled, timeout=WAIT_MS):
        qtbot.mouseClick(cancel, QtCore.Qt.MouseButton.LeftButton)  # a click where Cancel was cancels
        go.set()
    assert where() == before


def test_the_importance_sentence_names_only_heads_that_raise_the_loss():
    from analysis.measures.ablation import ImportanceMap
    from gui.tabs.ablation.ablation_tab import importance_summary

    change = np.array([[0.5, -0.1], [0.0, 0.2]])
    text = importance_summary(ImportanceMap("zero", 3.0, 3.0 + change, change, 12, False))
    assert "L0H0 +0.500, L1H1 +0.200." in text and "L0H1" not in text.split("most:")[1]
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
    assert importance.baseline_loss == pytest.approx(expected.loss, abs=1e-6)  # float32 logsumexp vs float64
    assert panel.baseline_box.tokens() == [(t, f"{p:.3f}") for t, p in expected.top]
