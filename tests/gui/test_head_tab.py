"""The Head tab's hover line, cell tooltip and head label: a resting pointer survives a
new result whose value norms are still being computed, the line and the tooltip say the same words and follow
every change of the view, and the label is short, true and never cut inside a word."""

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from analysis.display import format_score, head_name  # noqa: E402
from analysis.measures.head_scores import all_scores  # noqa: E402
from helpers import WAIT_MS, bundle, plain, worker_held  # noqa: E402


@pytest.fixture
def panel(qtbot, loaded_worker):
    """A Head tab on its own state, shown at the width it gets in a 1366 px window."""
    from gui.tabs.head.head_tab import HeadTab
    from gui.state.view_state import ViewState

    state = ViewState()
    head = HeadTab(state, loaded_worker)
    qtbot.addWidget(head)
    head.resize(816, 560)  # its width in a 1366 px window
    head.show()
    qtbot.waitExposed(head)
    head.worker = loaded_worker
    return head


def expected_value_norms(tiny_model, result):
    """The independent numbers: analysis.measures.lenses' N = A·‖f_h(x_j)‖ and ‖f_h(x_j)‖."""
    from analysis.measures.lenses import value_norms

    v = value_norms(tiny_model, result)
    return v.value_norms.astype(np.float64), v.key_norms.astype(np.float64)


def tooltip_of(head) -> str:
    return plain(head.plot.image.toolTip())


def value_view_with_norms(qtbot, head, result, request_id=1):
    state = head.state
    with qtbot.waitSignal(state.lens_changed, timeout=WAIT_MS, check_params_cb=lambda k: k == "value_norms"):
        state.set_bundle(bundle(result, all_scores(result), request_id))
        state.set_attention_view("value-weighted")
    assert state.lens_error("value_norms") is None and head.drawn == "value-weighted"


def test_a_new_result_under_a_resting_pointer_in_the_value_view_says_the_norms_are_not_ready(
        qtbot, panel, tiny_result, tiny_model):
    """An automatic re-run under a resting pointer says the value norms are not ready, then updates the line
    and the tooltip when they arrive."""
    from analysis.run.inference import run_text

    state, head = panel.state, panel
    value_view_with_norms(qtbot, head, tiny_result)
    state.select(1, 2)
    q, k = 6, 3
    head.plot.image.hover_cell((q, k))  # the pointer rests on a cell
    assert "N = A·‖f(x)‖" in head.hover_label.text()
    other = run_text(tiny_model, "The dog sat on the mat because it was late.", bos=True)
    with worker_held(panel.worker):  # the new norms cannot arrive yet
        state.set_bundle(bundle(other, all_scores(other), 2))  # the automatic re-run
        assert state.lens("value_norms") is None and head.drawn == "weights"
        line = head.hover_label.text()
        assert f"{other.attentions[1, 2, q, k]:.3f}" in line and "value norms not ready yet" in line
        assert "N = " not in line and tooltip_of(head) == line
    qtbot.waitUntil(lambda: state.lens("value_norms") is not None, timeout=WAIT_MS)
    n, key_norms = expected_value_norms(tiny_model, other)
    share = n[1, 2, q, k] / n[1, 2, q].sum()
    line = head.hover_label.text()  # updated without a mouse move
    assert f"share {share:.3f} of the row" in line and f"= {n[1, 2, q, k]:.4g}" in line
    assert f"{key_norms[1, 2, k]:.3g}" in line and "not ready" not in line
    assert tooltip_of(head) == line


def test_hide_first_in_the_value_view_gives_the_same_before_renormalising_in_line_and_tooltip(
        qtbot, panel, tiny_result, tiny_model):
    """With the first token hidden, the tooltip and the line give the same value before renormalising (the
    share before hiding, not the raw weight A)."""
    state, head = panel.state, panel
    value_view_with_norms(qtbot, head, tiny_result)
    state.select(2, 0)
    q, k = 7, 4
    head.plot.image.hover_cell((q, k))
    before = head.hover_label.text()
    state.set_hide_first(True)  # the pointer does not move
    line = head.hover_label.text()
    assert line != before and line == tooltip_of(head)
    n, key_norms = expected_value_norms(tiny_model, tiny_result)
    row = n[2, 0, q]
    assert f"share {n[2, 0, q, k] / row[1:].sum():.3f} (before renormalising: {n[2, 0, q, k] / row.sum():.3f})" in line
    assert f"{tiny_result.attentions[2, 0, q, k]:.3f} × {key_norms[2, 0, k]:.3g}" in line
    assert "was" not in line.replace(tiny_result.tokens[q], "").replace(tiny_result.tokens[k], "")
    head.plot.image.hover_cell((q, 0))
    assert head.hover_label.text().endswith("hidden (first key)") and tooltip_of(head) == head.hover_label.text()


def test_the_line_follows_every_change_of_the_view_under_a_resting_pointer(qtbot, panel, tiny_result):
    state, head = panel.state, panel
    state.set_bundle(bundle(tiny_result, all_scores(tiny_result), 1))
    state.select(0, 1)
    q, k = 5, 2
    a = tiny_result.attentions[0, 1]
    head.plot.image.hover_cell((q, k))
    assert head.hover_label.text().endswith(f": {a[q, k]:.3f}") and tooltip_of(head) == head.hover_label.text()
    state.set_hide_first(True)
    renormalised = a[q, k] / a[q, 1:q + 1].sum()
    assert head.hover_label.text().endswith(
        f": {renormalised:.3f} renormalised without the first key (before renormalising: {a[q, k]:.3f})")
    assert tooltip_of(head) == head.hover_label.text()
    state.set_scale("log")  # the colours change, the numbers do not
    assert head.hover_label.text().endswith(f"(before renormalising: {a[q, k]:.3f})")
    state.select(1, 1)  # another head under the same pointer
    b = tiny_result.attentions[1, 1]
    assert f"{b[q, k] / b[q, 1:q + 1].sum():.3f} renormalised" in head.hover_label.text()
    state.set_hide_first(False)
    assert head.hover_label.text().endswith(f": {b[q, k]:.3f}") and tooltip_of(head) == head.hover_label.text()


def test_hover_text_wording():
    from gui.plots.hover_text import hover_text, value_hover_text

    tokens = ("<s>", "was", "b")
    assert hover_text(tokens, (2, 1, 0.678), raw=0.225) == \
        "query 'b' [2] → key 'was' [1]: 0.678 renormalised without the first key (before renormalising: 0.225)"
    assert hover_text(tokens, (2, 1, 0.678)) == "query 'b' [2] → key 'was' [1]: 0.678"
    assert value_hover_text(tokens, (2, 1, 0.5), 0.25, 2.0) == \
        "query 'b' [2] → key 'was' [1]: share 0.500 of the row · N = A·‖f(x)‖ = 0.250 × 2 = 0.5"
    assert value_hover_text(tokens, (2, 1, 0.5), 0.25, None) == \
        "query 'b' [2] → key 'was' [1]: share 0.500 of the row (value norms not ready yet)"
    assert value_hover_text(tokens, (1, 2, float("nan")), 0.25, 2.0).endswith("masked (a future token)")


def test_strongest_score_is_the_largest_finite_pattern_score_that_applies():
    from analysis.measures.head_scores import HeadScores
    from gui.tabs.head.head_tab import strongest_score, top_score_text

    scores = HeadScores({"previous_token": np.array([[0.14, 0.5]]), "sink": np.array([[0.141, np.nan]]),
                         "induction_probe": np.array([[0.01, 0.2]])})
    assert strongest_score(scores, 0, 0) == ("sink", pytest.approx(0.141))
    assert strongest_score(scores, 0, 1) == ("previous_token", pytest.approx(0.5))
    nan = HeadScores({name: np.full((1, 1), np.nan) for name in scores.values})
    assert strongest_score(nan, 0, 0) is None
    assert strongest_score(None, 0, 0) is None
    # every pattern score counts (self 0.41 beats sink 0.14), entropy (a spread) never does, nor a score
    # that does not apply to the model
    full = HeadScores({"previous_token": np.array([[0.1]]), "sink": np.array([[0.14]]), "self": np.array([[0.41]]),
                       "entropy": np.array([[0.9]]), "next_token": np.array([[np.nan]]),
                       "induction": np.array([[np.nan]])},
                      applicable=frozenset({"previous_token", "sink", "self", "entropy"}))
    assert strongest_score(full, 0, 0) == ("self", pytest.approx(0.41))
    assert top_score_text(("self", 0.41)) == "self 0.410"  # format_score: as the Head scores table reads it
    assert top_score_text(("sink", 0.141)) == "no pattern ≥ 0.3"  # never named by a weak score
    assert top_score_text(("sink", 0.3)) == "sink 0.300"
    assert top_score_text(("sink", 0.9981)) == "sink 0.998"  # never "1.00"


def test_the_head_label_fits_beside_the_controls_and_keeps_every_score_in_its_tooltip(qtbot, panel, tiny_result):
    """At 1366 px the label is whole beside the controls (not cut as "— previous toke…")."""
    from gui.tabs.head.head_tab import STRONG_PATTERN

    state, label = panel.state, panel.head_label
    scores = all_scores(tiny_result)
    state.set_bundle(bundle(tiny_result, scores, 1))
    patterns = [k for k in scores.values if k != "entropy" and scores.applies(k)]
    for layer, head in ((0, 0), (1, 3), (2, 2)):
        state.select(layer, head)
        qtbot.wait(10)
        values = {k: float(scores[k][layer, head]) for k in patterns if np.isfinite(scores[k][layer, head])}
        top = max(values, key=values.get)
        score = f"{top.replace('_', ' ')} {format_score(values[top])}"
        if values[top] < STRONG_PATTERN:
            assert f"largest of them (entropy, a spread, is not a pattern): {score}." in label.toolTip()
            score = "no pattern ≥ 0.3"
        assert label.plain_text() == f"{head_name(layer, head)} · top score: {score}"  # "L1H3 · top score: …"
        assert not label.is_elided(), label.contentsRect().width()  # the Head tab's width in a 1366 px window
        tip = label.toolTip()
        assert f"Layer {layer}, head {head}" in tip
        for k, v in values.items():
            assert f"{k.replace('_', ' ')} {format_score(v)}" in tip
        assert "entropy" not in tip.split("Scores")[1].split(".")[0]


def test_a_narrow_head_label_shows_a_shorter_wording_whole(qtbot, panel, tiny_result):
    state, label = panel.state, panel.head_label
    state.set_bundle(bundle(tiny_result, all_scores(tiny_result), 1))
    whole = label.plain_text()
    panel.resize(640, 560)
    qtbot.waitUntil(lambda: label.is_elided())
    shown = label.shown_document().toPlainText()
    assert shown in (whole.replace("top score: ", ""), whole.split(" · ")[0])
    assert label.shown_document().idealWidth() <= label.contentsRect().width()


def test_the_query_row_view_shows_the_chosen_rows_values_as_the_map_draws_them(qtbot, panel, tiny_result):
    """A query row chosen (a click on the map or a token): the view under the map holds that row of the head on
    screen, as drawn (first key hidden too), its bars every key's value, its top keys the row's largest; it
    follows the head; its × and a second click clear the row."""
    from analysis.display import shown_weights, top_keys

    state = panel.state
    state.set_bundle(bundle(tiny_result, all_scores(tiny_result), 1))
    assert not panel.query_view.isVisible()
    q = tiny_result.n_tokens - 1
    state.set_query_row(q)
    assert panel.query_view.isVisible() and panel.query_view.query == q
    for hide_first in (False, True):
        state.set_hide_first(hide_first)
        for layer, head in ((0, 0), (2, 1)):
            state.select(layer, head)
            expected = shown_weights(tiny_result.attentions[layer, head], True, hide_first)[q]
            np.testing.assert_allclose(panel.query_view.values, expected, rtol=1e-6, equal_nan=True)
            heights = panel.query_view.bars.opts["height"]  # one bar a key: the strip is wider than the keys
            np.testing.assert_allclose(heights, np.nan_to_num(expected), rtol=1e-6)
            best = top_keys(expected, 1)[0]
            assert f"#{best[0]} " in plain(panel.query_view.keys) and f"{best[1]:.3f}" in plain(panel.query_view.keys)
            assert ("first key hidden" in plain(panel.query_view.title)) == hide_first
    panel.query_view.closed.emit()
    assert state.query_row is None and not panel.query_view.isVisible()
    state.toggle_query_row(2)
    state.toggle_query_row(2)
    assert not panel.query_view.isVisible()


def test_without_a_result_the_map_is_a_line_saying_why(qtbot, panel, tiny_result):
    """A load that failed left the Head tab with empty axes (−0.5…0.5) and a colour bar (walk 5): with no result
    the map's place says what the state's placeholder says, or to run a text; a result brings the map back, and
    losing it again shows the line again."""
    from gui.tabs.head.head_tab import NO_RESULT

    state = panel.state
    assert panel.stack.currentWidget() is panel.placeholder and panel.placeholder.text() == NO_RESULT
    assert not panel.plot.isVisible()
    state.set_bundle(bundle(tiny_result, all_scores(tiny_result), 1))  # the first map: shown in the next turn
    qtbot.waitUntil(lambda: panel.stack.currentWidget() is panel.plot and panel.plot.isVisible(), timeout=WAIT_MS)
    state.set_bundle(None)
    state.set_placeholder("no model loaded")
    assert panel.placeholder.isVisible() and panel.placeholder.text() == "no model loaded"
    assert panel.head_label.plain_text().strip() == ""


def test_a_long_kept_map_is_drawn_from_a_drawing_made_on_the_worker(qtbot, panel, tiny_result, monkeypatch):
    """From DRAWN_ON_WORKER_FROM tokens the Head tab waits for the worker's PreparedHead even when the result kept its
    maps (the GUI thread only looks colours up), and asks again when the scale changes; the picture is the map as
    shown, through the scale."""
    from analysis.display import apply_scale, shown_weights
    from gui.state import head_maps

    monkeypatch.setattr(head_maps, "DRAWN_ON_WORKER_FROM", 2)
    state = panel.state
    assert tiny_result.maps_kept
    with qtbot.waitSignal(panel.head_maps.ready, timeout=WAIT_MS):
        state.set_bundle(bundle(tiny_result, all_scores(tiny_result)))
    assert panel.pending is None and panel.plot.image.prepared is not None
    for scale in ("power", "log"):
        with qtbot.waitSignal(panel.head_maps.ready, timeout=WAIT_MS):
            state.set_scale(scale)
        assert panel.pending is None and panel.head_maps.prepared("weights", state.layer, state.head).scale == scale
        want, _ = apply_scale(shown_weights(tiny_result.head_map(state.layer, state.head), tiny_result.causal), scale)
        np.testing.assert_allclose(panel.plot.image.image, want, rtol=1e-6, equal_nan=True)
        assert panel.plot.image.prepared is not None
