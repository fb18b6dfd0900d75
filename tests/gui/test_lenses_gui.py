"""The value-weighted view (grid and head) and the Rollout tab, on a ViewState with a real worker.

What is drawn is compared with analysis/measures/lenses.py's numbers, row-normalised here in numpy; answers
are computed on the worker and an answer for a result no longer on screen is dropped. While a new text runs the
maps are dimmed; the Rollout tab says it is computing instead of showing empty axes."""

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtWidgets  # noqa: E402

from analysis.measures.head_scores import all_scores  # noqa: E402
from helpers import WAIT_MS, bundle, shown_tab, worker_held  # noqa: E402


@pytest.fixture
def views(qtbot, loaded_worker):
    """The grid, the Head tab and the Rollout tab side by side on one state, shown."""
    from gui.plots.grid_panel import GridPanel
    from gui.tabs.head.head_tab import HeadTab
    from gui.tabs.rollout.rollout_tab import RolloutTab
    from gui.state.view_state import ViewState

    state = ViewState()
    box = QtWidgets.QWidget()
    layout = QtWidgets.QHBoxLayout(box)
    grid, head, roll = GridPanel(state), HeadTab(state, loaded_worker), RolloutTab(state, loaded_worker)
    for widget in (grid, head, roll):
        layout.addWidget(widget)
    qtbot.addWidget(box)
    box.resize(1700, 760)
    box.show()
    qtbot.waitExposed(box)
    box.state, box.grid, box.head, box.roll, box.worker = state, grid, head, roll, loaded_worker
    return box


def shares(result, tiny_model):
    """The independent expectation: lenses' N = A·‖f_h(x_j)‖, each query row divided by its sum."""
    from analysis.measures.lenses import value_norms

    n = value_norms(tiny_model, result).value_norms.astype(np.float64)
    return n / n.sum(axis=-1, keepdims=True), n


def masked(matrix):
    n = matrix.shape[-1]
    return np.where(np.tri(n, dtype=bool), matrix, np.nan)


def show(qtbot, views, result, request_id=1, view="value-weighted", kind="value_norms"):
    state = views.state
    with qtbot.waitSignal(state.lens_changed, timeout=WAIT_MS, check_params_cb=lambda k: k == kind):
        state.set_bundle(bundle(result, all_scores(result), request_id))
        state.set_attention_view(view)
    assert state.lens_error(kind) is None


@pytest.mark.slow
def test_the_switch_changes_what_the_head_and_the_grid_draw(qtbot, views, tiny_result, tiny_model):
    state, head, grid = views.state, views.head, views.grid
    assert head.lenses is views.roll.lenses  # one helper per state: each lens is asked for once
    state.set_bundle(bundle(tiny_result, all_scores(tiny_result), 1))
    state.select(2, 1)
    np.testing.assert_allclose(head.plot.image.image, masked(tiny_result.attentions[2, 1]), rtol=1e-6)
    # the value norms' answer itself: the Rollout tab beside it asks for R too, and either may come first
    with qtbot.waitSignal(state.lens_changed, timeout=WAIT_MS, check_params_cb=lambda kind: kind == "value_norms"):
        state.set_attention_view("value-weighted")
        assert state.lens("value_norms") is None  # asked of the worker, not computed here
    expected, _ = shares(tiny_result, tiny_model)
    assert head.drawn == "value-weighted" and head.strip.view.isVisible()
    np.testing.assert_allclose(head.plot.image.image, masked(expected[2, 1]), rtol=1e-5, atol=1e-7)
    assert "value-weighted" in head.plot.plot.titleLabel.text and "normalised" in head.plot.plot.titleLabel.text
    assert head.view_choice.currentData() == "value-weighted"
    n = tiny_result.n_tokens
    assert grid.plot.cell == n  # a cell per token: the mosaic holds the maps themselves
    mosaic = grid.plot.image.image.reshape(3, n, 4, n).transpose(0, 2, 1, 3)  # (L, H, n, n)
    future = np.triu(np.ones((n, n), dtype=bool), 1)  # blank in the grid as in the head view
    np.testing.assert_allclose(mosaic, np.where(future, np.nan, expected), rtol=1e-5, atol=1e-7)
    assert "value-weighted" in grid.title.text() and "share" in grid.plot.colorbar.axis.labelText
    state.set_hide_first(True)  # key 0 dropped, each row renormalised over the rest
    rest = expected[2, 1, 1:, 1:] / expected[2, 1, 1:, 1:].sum(axis=-1, keepdims=True)  # rows 1…n−1, keys 1…n−1
    np.testing.assert_allclose(head.plot.image.image[1:, 1:], masked(rest), rtol=1e-5, atol=1e-7)
    state.set_hide_first(False)
    head.view_choice.setCurrentIndex(head.view_choice.findData("weights"))  # the user switches back
    assert state.attention_view == "weights" and not head.strip.view.isVisible()
    np.testing.assert_allclose(head.plot.image.image, masked(tiny_result.attentions[2, 1]), rtol=1e-6)
    mosaic = grid.plot.image.image.reshape(3, n, 4, n).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(mosaic, np.where(future, np.nan, tiny_result.attentions), rtol=1e-6)
    assert "value-weighted" not in grid.title.text()


def test_hover_shows_the_raw_n_and_the_key_norm_and_the_bars_are_the_key_norms(qtbot, views, tiny_result, tiny_model):
    from analysis.measures.lenses import value_norms

    show(qtbot, views, tiny_result)
    state, head = views.state, views.head
    state.select(1, 3)
    norms = value_norms(tiny_model, tiny_result)
    np.testing.assert_allclose(head.strip.norms, norms.key_norms[1, 3], rtol=1e-6)
    expected, raw = shares(tiny_result, tiny_model)
    q, k = 9, 4
    head.plot.image.hover_cell((q, k))
    line = head.hover_label.text()
    assert f"= {raw[1, 3, q, k]:.4g}" in line  # the raw N, from lenses
    assert f"{norms.key_norms[1, 3, k]:.3g}" in line and f"{tiny_result.attentions[1, 3, q, k]:.3f}" in line
    assert f"share {expected[1, 3, q, k]:.3f}" in line
    head.plot.image.hover_cell((2, 5))
    assert "masked" in head.hover_label.text()


def test_the_rollout_tab_shows_lenses_rollout_for_the_chosen_layer(qtbot, views, tiny_result):
    from analysis.measures.lenses import rollout

    show(qtbot, views, tiny_result, view="weights", kind="rollout")  # the tab is visible: it asked at once
    state, roll = views.state, views.roll
    expected = rollout(tiny_result.attentions)
    selected = (state.layer, state.head)
    for layer in (0, 2):
        roll.layer_box.setValue(layer)  # the user picks a layer: R(layer) is drawn, the selected head stays
        assert (state.layer, state.head) == selected and roll.layer == layer and roll.layer_slider.value() == layer
        np.testing.assert_allclose(roll.plot.image.image, masked(expected[layer]), rtol=1e-6)
    assert "R(2)" in roll.plot.plot.titleLabel.text
    roll.plot.image.hover_cell((7, 3))
    assert roll.hover_label.text().endswith(f"{expected[2, 7, 3]:.3f}") and "draws on input" in roll.hover_label.text()
    state.select(1, 0)  # a head chosen elsewhere moves the tab's layer
    assert roll.layer_box.value() == 1
    np.testing.assert_allclose(roll.plot.image.image, masked(expected[1]), rtol=1e-6)


@pytest.mark.parametrize("hide_first", [False, True])
def test_the_hover_line_and_the_tooltip_are_one_text_in_the_rollout_and_the_head_tab(
        qtbot, views, tiny_result, hide_first):
    """The Rollout tab's line said a bare R while its tooltip said "renormalised … (before renormalising: …)"."""
    from analysis.measures.lenses import rollout
    from helpers import plain

    show(qtbot, views, tiny_result, view="weights", kind="rollout")
    state, roll, head = views.state, views.roll, views.head
    state.select(2, 1)
    state.set_hide_first(hide_first)  # the Head tab's
    state.set_rollout_skip_first(hide_first)  # the Rollout tab's own
    r, a = rollout(tiny_result.attentions)[2], tiny_result.attentions[2, 1]
    t = tiny_result.tokens
    q, k = 7, 3
    for tab, m, to in ((roll, r, "draws on input"), (head, a, "→ key")):
        tab.plot.image.hover_cell((q, k))
        line = tab.hover_label.text()
        assert line == plain(tab.plot.image.toolTip()), tab.title
        start = f"query '{t[q]}' [{q}] {to} '{t[k]}' [{k}]: "
        if hide_first:
            assert line == (f"{start}{m[q, k] / m[q, 1:].sum():.3f} renormalised without the first key "
                            f"(before renormalising: {m[q, k]:.3f})"), tab.title
        else:
            assert line == f"{start}{m[q, k]:.3f}", tab.title
        for cell, end in (((2, 5), "masked (a future token)"), ((q, 0), "hidden (first key)" if hide_first else None)):
            tab.plot.image.hover_cell(cell)
            assert tab.hover_label.text() == plain(tab.plot.image.toolTip()), (tab.title, cell)
            if end is not None:
                assert tab.hover_label.text().endswith(end)
        assert "→ key" in tab.hover_label.text() or tab is roll  # the mask reads "→ key" in both


def test_the_rollout_tabs_hide_first_token_box_draws_rollout_skip_first_and_survives_a_new_result(
        qtbot, views, tiny_result, tiny_model):
    """The box draws lenses.rollout_skip_first of R (the formula, checked here by hand too): the first column
    hidden, the colour range and the hover over the values shown, a line saying so; the Head tab's map is left as it
    was. A new result is drawn the same way, the box still on."""
    from analysis.measures.lenses import rollout, rollout_skip_first
    from analysis.run.inference import run_text
    from gui.tabs.rollout.rollout_tab import SKIP_FIRST_LABEL, SKIP_FIRST_NOTE

    show(qtbot, views, tiny_result, view="weights", kind="rollout")
    state, roll, head = views.state, views.roll, views.head
    state.select(2, 1)
    r = rollout(tiny_result.attentions)[2]
    assert roll.skip_first_box.text() == SKIP_FIRST_LABEL and not roll.skip_first_box.isChecked()
    assert not roll.skip_note.isVisible()
    np.testing.assert_allclose(roll.plot.image.image, masked(r), rtol=1e-6)
    head_before = head.plot.image.image.copy()
    roll.skip_first_box.click()  # the user ticks the box
    assert state.rollout_skip_first and not state.hide_first
    shown = roll.plot.image.image
    expected = rollout_skip_first(r)
    np.testing.assert_allclose(shown, masked(expected), rtol=1e-6, equal_nan=True)
    by_hand = r[1:, 1:].astype(np.float64) / (1 - r[1:, :1].astype(np.float64))  # R[i, j] / (1 − R[i, 0])
    np.testing.assert_allclose(shown[1:, 1:], masked(by_hand), rtol=1e-5, atol=1e-7, equal_nan=True)
    assert np.isnan(shown[:, 0]).all() and np.isnan(shown[0]).all()  # the first input; position 0 draws on it alone
    assert roll.skip_note.isVisible() and roll.skip_note.text() == SKIP_FIRST_NOTE and "hidden" in SKIP_FIRST_NOTE
    assert "first key hidden" in roll.plot.colorbar.axis.labelText and "first input hidden" in \
        roll.plot.plot.titleLabel.text
    low, high = roll.plot.image.getLevels()
    assert high == pytest.approx(float(np.nanmax(expected)), rel=1e-6) and high > np.nanmax(r[:, 1:]) * 1.05
    np.testing.assert_array_equal(head.plot.image.image, head_before)  # the Head tab's hide-first is its own
    t, q, k = tiny_result.tokens, 7, 3
    roll.plot.image.hover_cell((q, k))
    assert roll.hover_label.text() == (f"query '{t[q]}' [{q}] draws on input '{t[k]}' [{k}]: {expected[q, k]:.3f} "
                                       f"renormalised without the first key (before renormalising: {r[q, k]:.3f})")
    roll.plot.image.hover_cell((q, 0))
    assert roll.hover_label.text().endswith("hidden (first key)")

    other = run_text(tiny_model, "A different text, for another rollout.", bos=True)
    assert other.n_tokens != tiny_result.n_tokens
    show(qtbot, views, other, request_id=2, view="weights", kind="rollout")
    assert roll.skip_first_box.isChecked() and state.rollout_skip_first and roll.skip_note.isVisible()
    np.testing.assert_allclose(roll.plot.image.image, masked(rollout_skip_first(rollout(other.attentions)[2])),
                               rtol=1e-6, equal_nan=True)
    roll.skip_first_box.click()  # off again: R itself
    assert not state.rollout_skip_first and not roll.skip_note.isVisible()
    np.testing.assert_allclose(roll.plot.image.image, masked(rollout(other.attentions)[2]), rtol=1e-6)
    state.set_rollout_skip_first(True)  # the box follows the state
    assert roll.skip_first_box.isChecked()
    state.set_rollout_skip_first(False)


def test_an_answer_for_a_result_no_longer_on_screen_is_dropped(qtbot, views, tiny_result, tiny_model):
    from analysis.run.inference import run_text
    from gui.state.lens_data import ValueView

    state, worker = views.state, views.worker
    other = run_text(tiny_model, "A different text.", bos=True)
    assert other.n_tokens != tiny_result.n_tokens
    answers, arrived, dropped = [], [], []  # value views computed by the worker and kept by the state; cancelled
    worker.task_done.connect(lambda rid, name, value: isinstance(value, ValueView) and answers.append(value))
    worker.failed.connect(lambda failure: failure.name == "lenses" and dropped.append(failure.message))
    state.lens_changed.connect(lambda kind: kind == "value_norms" and arrived.append(state.lens(kind)))
    with worker_held(worker):  # the worker is busy: requests queue up
        state.set_bundle(bundle(tiny_result, all_scores(tiny_result), 1))
        state.set_attention_view("value-weighted")  # asks for result 1 …
        state.set_bundle(bundle(other, all_scores(other), 2))  # … which is replaced before the worker answers
    qtbot.waitUntil(lambda: bool(arrived) and bool(dropped), timeout=WAIT_MS)
    qtbot.wait(50)
    # the requests for result 1 (its value norms, and its rollout for the Rollout tab) were dropped unanswered
    assert dropped == ["Cancelled.", "Cancelled."]
    assert [a.shown.shape[-1] for a in answers] == [other.n_tokens]
    assert [a.shown.shape[-1] for a in arrived] == [other.n_tokens]  # only the one on screen was shown
    assert state.lens_error("value_norms") is None  # the dropped request's cancellation is no error of the view
    expected, _ = shares(other, tiny_model)
    np.testing.assert_allclose(views.head.plot.image.image, masked(expected[state.layer, state.head]),
                               rtol=1e-5, atol=1e-7)


def test_a_result_from_another_model_says_so_and_shows_the_weights(qtbot, views, tiny_result):
    import dataclasses

    state, head = views.state, views.head
    stale = dataclasses.replace(tiny_result, model_label="some other model")
    with qtbot.waitSignal(state.lens_changed, timeout=WAIT_MS):
        state.set_bundle(bundle(stale, all_scores(stale), 3))
        state.set_attention_view("value-weighted")
    qtbot.waitUntil(lambda: state.lens_error("value_norms") is not None and state.lens_error("rollout") is None
                    and state.lens("rollout") is not None, timeout=WAIT_MS)
    assert "run it again" in state.lens_error("value_norms")
    assert head.drawn == "weights" and "run it again" in head.head_label.text()
    np.testing.assert_allclose(head.plot.image.image, masked(tiny_result.attentions[0, 0]), rtol=1e-6)


def test_each_lens_task_computes_its_registry_entry_and_a_lens_of_the_weights_checks_the_model(tiny_model,
                                                                                                tiny_result):
    import dataclasses

    from analysis.errors import AttnScopeError
    from analysis.measures.lenses import rollout, value_norms
    from gui.state.lens_data import ValueView, lens_task

    view = lens_task("value_norms", tiny_result)(tiny_model)  # as the worker runs it
    norms = value_norms(tiny_model, tiny_result)
    assert isinstance(view, ValueView) and not view.shown.flags.writeable
    np.testing.assert_array_equal(view.shown, norms.row_normalised())
    np.testing.assert_array_equal(view.key_norms, norms.key_norms)
    np.testing.assert_array_equal(lens_task("rollout", tiny_result)(tiny_model), rollout(tiny_result.attentions))
    fewer_heads = dataclasses.replace(tiny_result, attentions=tiny_result.attentions[:, :-1])  # another model's
    with pytest.raises(AttnScopeError, match=r"^The model changed since this text was run; run it again to see "
                                             r"this view\.$"):
        lens_task("value_norms", fewer_heads)(tiny_model)
    np.testing.assert_array_equal(lens_task("rollout", fewer_heads)(tiny_model), rollout(fewer_heads.attentions))


def lut_of(figure):
    item = figure.image
    lut = item.lut if item.lut is not None else item.getColorMap().getLookupTable(nPts=256, alpha=False)
    return np.asarray(lut)[:, :3].astype(int)


def test_colormap_and_dark_mode_reach_the_new_views(qtbot, views, tiny_result):
    from gui.plots.plot_items import colormap

    show(qtbot, views, tiny_result)
    state = views.state
    qtbot.waitUntil(lambda: state.lens("rollout") is not None, timeout=WAIT_MS)
    state.set_colormap("magma")
    magma = colormap("magma").getLookupTable(nPts=256, alpha=False)[:, :3].astype(int)
    sample = np.linspace(0, 255, 8).astype(int)
    for figure in (views.head.plot, views.grid.plot, views.roll.plot):
        lut = lut_of(figure)
        assert np.abs(lut[np.linspace(0, len(lut) - 1, 8).astype(int)] - magma[sample]).max() <= 3
    state.set_dark(True)
    for figure in (views.head.plot, views.grid.plot, views.roll.plot):
        assert figure.backgroundBrush().color().lightness() < 80
    state.set_dark(False)


@pytest.mark.slow
def test_copy_figures_draw_what_the_tabs_show(qtbot, views, tiny_result, tiny_model):
    from analysis.measures.lenses import rollout
    from gui.plots.figures import dispose_figure

    show(qtbot, views, tiny_result)
    state = views.state
    qtbot.waitUntil(lambda: state.lens("rollout") is not None, timeout=WAIT_MS)
    state.select(2, 2)
    expected, _ = shares(tiny_result, tiny_model)
    fig = views.head.offscreen_figure()
    try:
        np.testing.assert_allclose(fig.image.image, masked(expected[2, 2]), rtol=1e-5, atol=1e-7)
        assert fig.plot.getViewBox().width() >= fig.plot.titleLabel.minimumWidth()  # the title fits the map
    finally:
        dispose_figure(fig)
    fig = views.roll.offscreen_figure()
    try:
        np.testing.assert_allclose(fig.image.image, masked(rollout(tiny_result.attentions)[2]), rtol=1e-6)
        assert "rollout" in fig.colorbar.axis.labelText
    finally:
        dispose_figure(fig)
    fig = views.grid.offscreen_figure()
    try:
        assert "value-weighted" in fig.plot.titleLabel.text
    finally:
        dispose_figure(fig)


class FakeWorker(QtCore.QObject):
    """The worker's signals that the tabs listen to, emitted by hand."""
    analysis_started = QtCore.Signal(int)
    analysis_ready = QtCore.Signal(object)
    failed = QtCore.Signal(object)
    task_done = QtCore.Signal(int, str, object)

    def submit(self, *_args):
        return 0


def test_the_rollout_tab_points_past_a_dominant_first_input_and_has_the_states_scale(qtbot, views, tiny_result,
                                                                                    monkeypatch):
    """Where the first input takes at least FIRST_INPUT_DOMINATES of R(l) (lenses.first_input_share) and is shown,
    the status line says how much and names the box; ticked, or below the threshold, it is blank. The Scale box
    writes the state's scale and follows it."""
    from analysis.measures.lenses import first_input_share, rollout
    from gui.tabs.rollout import rollout_tab
    from gui.tabs.rollout.rollout_tab import LAYER_LABEL, SKIP_FIRST_LABEL

    show(qtbot, views, tiny_result, view="weights", kind="rollout")
    state, roll = views.state, views.roll
    share = first_input_share(rollout(tiny_result.attentions)[2])
    monkeypatch.setattr(rollout_tab, "FIRST_INPUT_DOMINATES", share)  # this model's R(2) just dominates
    state.select(2, 1)
    assert roll.status.text().startswith(f"The first input takes {share:.0%} of every later position")
    assert SKIP_FIRST_LABEL in roll.status.text()
    roll.skip_first_box.click()
    assert roll.status.text() == " "
    roll.skip_first_box.click()
    monkeypatch.setattr(rollout_tab, "FIRST_INPUT_DOMINATES", share + 1e-3)
    state.select(2, 0)
    assert roll.status.text() == " "
    assert any(label.text() == LAYER_LABEL for label in roll.findChildren(QtWidgets.QLabel))
    roll.scale_choice.setCurrentIndex(roll.scale_choice.findData("power"))
    assert state.scale == "power"
    state.set_scale("log")
    assert roll.scale_choice.currentData() == "log"


def test_rollout_and_head_maps_are_dimmed_while_a_new_text_runs(qtbot):
    """While a new text runs, the maps still show the previous text's result: dimmed, and the Rollout tab says so."""
    from gui.tabs.head.head_tab import HeadTab
    from gui.plots.plot_items import DIM_OPACITY
    from gui.tabs.rollout.rollout_tab import UPDATING, RolloutTab
    from gui.state.view_state import ViewState

    worker, state = FakeWorker(), ViewState()
    rollout, head = RolloutTab(state, worker), HeadTab(state, worker)
    for tab in (rollout, head):
        qtbot.addWidget(tab)
    rollout.stack.setCurrentWidget(rollout.plot)  # as when a map is shown
    for _ in range(2):
        state.set_running(True)  # the window: the newest text's analysis started
        for figure in (rollout.plot, head.plot):  # the map drawn faint; the figure's axes and labels as they were
            assert figure.image.opacity() == DIM_OPACITY and figure.graphicsEffect() is None
        assert rollout.status.text() == UPDATING
        state.set_running(False)  # its result or its failure: the map is current again (or the newest there is)
        assert rollout.plot.image.opacity() == 1.0 and head.plot.image.opacity() == 1.0
        assert rollout.status.text() == " "


def test_the_rollout_tab_says_it_is_computing_instead_of_showing_empty_axes(qtbot, loaded_worker, tiny_result):
    from analysis.measures.head_scores import all_scores
    from analysis.measures.lenses import rollout
    from gui.tabs.rollout.rollout_tab import RolloutTab

    tab = shown_tab(qtbot, RolloutTab, loaded_worker, 700, 600)
    assert tab.stack.currentWidget() is tab.placeholder and "Run a text" in tab.placeholder.text()
    with qtbot.waitSignal(tab.state.lens_changed, timeout=WAIT_MS):  # awaited once the worker is let go
        with worker_held(loaded_worker):  # the rollout cannot be computed yet
            tab.state.set_bundle(bundle(tiny_result, all_scores(tiny_result), 1))
            qtbot.wait(20)
            assert tab.stack.currentWidget() is tab.placeholder and not tab.plot.isVisible()
            assert tab.placeholder.isVisible() and tab.placeholder.text() == "Computing the rollout…"
    assert tab.stack.currentWidget() is tab.plot and tab.plot.isVisible()
    expected = rollout(tiny_result.attentions)[tab.state.layer]
    finite = np.tri(len(expected), dtype=bool)
    np.testing.assert_allclose(tab.plot.image.image[finite], expected[finite], rtol=1e-6)
