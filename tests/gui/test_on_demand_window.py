"""The window on a result whose maps are computed on demand (``ATTNSCOPE_KEEP_MAPS_MB=0``: ``result.attentions`` is
None), against the same text's result that kept every map: every tab renders, and what each shows — the head map,
its hover line, the value-weighted view, the grid (with and without the first key), the score table, the TL-style
scores, the sink rate, From scratch's model weights, rollout — equals the kept result's. A view that read
``result.attentions`` would fail here (None: TypeError), and pytest-qt fails a test on an exception in a slot."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")

from helpers import WAIT_MS, run  # noqa: E402

TEXT = "The cat sat on the mat. The cat sat on the mat again, and the dog sat too."
SCORE_TOL = dict(rtol=1e-5, atol=1e-6)  # on-demand weights equal the eager ones to ~1e-6 (analysis tests)


def finite_close(actual, expected, **tol):
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_allclose(np.nan_to_num(actual), np.nan_to_num(expected), **tol)


def wait_lens(qtbot, state, kind, act):
    with qtbot.waitSignal(state.lens_changed, timeout=WAIT_MS, check_params_cb=lambda k: k == kind):
        act()
    assert state.lens_error(kind) is None


def grid_image(window):
    return np.array(window.grid_panel.plot.image.image)


@pytest.fixture
def both(qtbot, window, monkeypatch):
    """(the kept result and what the views showed of it, then the window on the same text computed on demand)."""
    from analysis.run.memory import KEEP_MAPS_ENV

    window.state.set_attention_view("weights")
    monkeypatch.delenv(KEEP_MAPS_ENV, raising=False)
    kept = run(qtbot, window, TEXT)
    assert kept.maps_kept
    window.select_head(2, 1)
    seen = {"head": np.array(window.head_tab.plot.matrix), "grid": grid_image(window),
            "scores": {name: np.array(v) for name, v in window.bundle.scores.values.items()}}
    window.state.set_hide_first(True)
    qtbot.waitUntil(lambda: window.grid_panel.plot._job is None, timeout=WAIT_MS)
    seen["grid_hidden"] = grid_image(window)
    window.state.set_hide_first(False)
    monkeypatch.setenv(KEEP_MAPS_ENV, "0")
    on_demand = run(qtbot, window, TEXT)  # an explicit run runs the same text again
    assert on_demand.attentions is None and not on_demand.maps_kept
    assert on_demand.n_tokens == kept.n_tokens
    yield kept, seen, on_demand
    window.state.set_attention_view("weights")
    window.state.set_hide_first(False)


def test_status_bar_says_the_attention_is_computed_on_demand(both, window):
    kept, _seen, on_demand = both
    assert f"{on_demand.n_tokens} tokens · attention on demand" in window.status_tokens.text()
    assert "computed on demand" in window.status_tokens.toolTip()


def test_head_map_and_its_hover_equal_the_kept_result(qtbot, both, window):
    kept, seen, on_demand = both
    tab = window.head_tab
    with qtbot.waitSignal(tab.head_maps.ready, timeout=WAIT_MS):
        window.select_head(0, 3)  # another head, then back: computed on the worker
    assert tab.pending is None
    finite_close(tab.plot.matrix, np.where(np.tri(kept.n_tokens, dtype=bool), kept.attentions[0, 3], np.nan),
                 **SCORE_TOL)
    if tab.head_maps.get("weights", 2, 1) is None:
        with qtbot.waitSignal(tab.head_maps.ready, timeout=WAIT_MS):
            pass
    window.select_head(2, 1)
    assert tab.pending is None
    finite_close(tab.plot.matrix, seen["head"], **SCORE_TOL)
    q, k = kept.n_tokens - 1, 3
    line = tab.describe_cell(q, k, float(tab.plot.matrix[q, k]))
    assert f"{kept.attentions[2, 1, q, k]:.3f}" in line


def test_value_weighted_head_equals_the_kept_lens(qtbot, both, window, tiny_model):
    from analysis.measures.lenses import row_normalise, value_norms

    kept, _seen, on_demand = both
    state, tab = window.state, window.head_tab
    window.select_head(1, 2)
    if tab.pending is not None:
        with qtbot.waitSignal(tab.head_maps.ready, timeout=WAIT_MS):
            pass
    wait_lens(qtbot, state, "value_norms", lambda: state.set_attention_view("value-weighted"))
    values = state.lens("value_norms")
    assert values.shown is None and values.thumbnails is not None  # never every head's map
    if tab.pending is not None:
        with qtbot.waitSignal(tab.head_maps.ready, timeout=WAIT_MS):
            pass
    assert tab.drawn == "value-weighted"
    norms = value_norms(tiny_model, kept)
    expected = row_normalise(norms.value_norms[1, 2])
    n = kept.n_tokens
    finite_close(tab.plot.matrix, np.where(np.tri(n, dtype=bool), expected, np.nan), **SCORE_TOL)
    np.testing.assert_allclose(tab.strip.norms, norms.key_norms[1, 2], rtol=1e-5)
    q, k = n - 1, 4
    line = tab.describe_cell(q, k, float(tab.plot.matrix[q, k]))
    assert f"{kept.attentions[1, 2, q, k]:.3f}" in line and f"{norms.key_norms[1, 2, k]:.3g}" in line
    # the grid: the value-weighted thumbnails (n ≤ 96: the maps themselves) equal the kept result's shares
    qtbot.waitUntil(lambda: window.grid_panel.plot._job is None, timeout=WAIT_MS)
    mosaic = grid_image(window).reshape(3, n, 4, n).transpose(0, 2, 1, 3)
    future = ~np.tri(n, dtype=bool)
    finite_close(mosaic, np.where(future, np.nan, row_normalise(norms.value_norms)), **SCORE_TOL)


def test_grid_with_and_without_the_first_key_equals_the_kept_result(qtbot, both, window):
    kept, seen, on_demand = both
    state = window.state
    qtbot.waitUntil(lambda: window.grid_panel.plot._job is None, timeout=WAIT_MS)
    finite_close(grid_image(window), seen["grid"], **SCORE_TOL)
    wait_lens(qtbot, state, "thumbnails_hidden_first", lambda: state.set_hide_first(True))
    qtbot.waitUntil(lambda: window.grid_panel.plot._job is None, timeout=WAIT_MS)
    finite_close(grid_image(window), seen["grid_hidden"], **SCORE_TOL)
    assert "first key hidden" in window.grid_panel.plot.colorbar.axis.labelText


def test_scores_table_tl_scores_and_sink_rate_equal_the_kept_result(qtbot, both, window):
    from analysis.measures.lenses import sink_rate
    from analysis.measures.tl_scores import scores_of_text
    from gui.tabs.scores.scores_tab import ScoresTab
    from gui.tabs.scores.score_sources import SOURCE_TL

    kept, seen, on_demand = both
    tab = window.tab(ScoresTab)
    window.tabs.setCurrentWidget(tab)
    shown = window.bundle.scores.values
    assert set(shown) == set(seen["scores"])
    for name, values in seen["scores"].items():
        finite_close(shown[name], values, **SCORE_TOL)
    for name in tab.model.names[1:]:  # what the table shows is the on-demand result's scores
        finite_close(tab.model.column(name).values, shown[name], rtol=0, atol=0)
    expected = sink_rate(kept.attentions, tab.sink_row.epsilon)
    np.testing.assert_array_equal(tab.sinks().mask, expected.mask)
    with qtbot.waitSignal(tab.tl_controls.ready, timeout=WAIT_MS):
        tab.source_choice.setCurrentIndex(tab.source_choice.findData(SOURCE_TL))
    tl = scores_of_text(kept.attentions, kept.token_ids)
    for name, values in tab.tl_controls.scores.items():
        finite_close(values, tl[name], **SCORE_TOL)
    with qtbot.waitSignal(tab.tl_controls.ready, timeout=WAIT_MS):  # other options: streamed again on the worker
        tab.tl_controls.exclude_bos_box.setChecked(True)
    tl = scores_of_text(kept.attentions, kept.token_ids, exclude_bos=True)
    for name, values in tab.tl_controls.scores.items():
        finite_close(values, tl[name], **SCORE_TOL)
    tab.tl_controls.exclude_bos_box.setChecked(False)
    tab.source_choice.setCurrentIndex(0)


def test_from_scratch_rollout_and_ablation_tabs_render(qtbot, both, window):
    from analysis.measures.lenses import rollout
    from gui.tabs.ablation.ablation_tab import AblationTab
    from gui.tabs.rollout.rollout_tab import RolloutTab
    from gui.tabs.scratch.scratch_tab import ScratchTab

    kept, _seen, on_demand = both
    window.select_head(2, 3)
    scratch = window.tab(ScratchTab)
    with qtbot.waitSignal(scratch.data_shown, timeout=WAIT_MS):
        window.tabs.setCurrentWidget(scratch)
    scratch.setCurrentWidget(scratch.parity)
    finite_close(scratch.parity.model_view.values, kept.attentions[2, 3], **SCORE_TOL)
    assert "PASS" in scratch.parity.head_verdict.text()
    roll = window.tab(RolloutTab)
    with qtbot.waitSignal(window.state.lens_changed, timeout=WAIT_MS, check_params_cb=lambda k: k == "rollout"):
        window.tabs.setCurrentWidget(roll)
    assert isinstance(window.state.lens("rollout"), dict)  # one layer, not every layer's R
    finite_close(roll.plot.matrix, np.where(np.tri(kept.n_tokens, dtype=bool), rollout(kept.attentions)[2], np.nan),
                 **SCORE_TOL)
    with qtbot.waitSignal(window.state.lens_changed, timeout=WAIT_MS, check_params_cb=lambda k: k == "rollout"):
        window.select_head(0, 0)  # another layer: computed when shown
    assert sorted(window.state.lens("rollout")) == [0, 2]
    finite_close(roll.plot.matrix, np.where(np.tri(kept.n_tokens, dtype=bool), rollout(kept.attentions)[0], np.nan),
                 **SCORE_TOL)
    window.tabs.setCurrentWidget(window.tab(AblationTab))
    qtbot.wait(50)
    window.tabs.setCurrentWidget(window.head_tab)
