"""From scratch for every model family (issue 12): the Steps page shows the family's own steps (the norm,
the rotation of q and k with its angle explained, which key/value head a query head reads, the mask or
none), Model vs manual passes per head and per layer, and the Cost page counts grouped-query attention.
Encoders draw no causal mask in the head plot, the grid and exported figures.

Every number shown is compared with an independent computation here (numpy, from the formulas)."""
import math

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import plain  # noqa: E402

TEXT = "The cat sat on the mat because it was tired."
FAMILY_TYPES = ("llama", "qwen2", "mistral", "gpt_neox", "bert", "distilbert", "gpt2")


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory):
    """model_type → (loaded model, result) for a tiny random model of each family."""
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    runs = {}
    for model_type in FAMILY_TYPES:
        folder = save_random_family(tmp_path_factory.mktemp(model_type), model_type, seed=3)
        loaded = load_model(str(folder), device="cpu")
        runs[model_type] = (loaded, run_text(loaded, TEXT, bos=True))
    return runs


class StubWorker(QtCore.QObject):
    """The worker's signals, and nothing computed: the tests hand the panel its ScratchData themselves."""

    task_done = QtCore.Signal(int, str, object)
    failed = QtCore.Signal(object)

    def submit(self, name, task):
        return 1


@pytest.fixture
def panel(qtbot):
    from gui.qt import ensure_qapp
    from gui.tabs.scratch.scratch_tab import ScratchTab
    from gui.state.view_state import ViewState

    ensure_qapp()
    p = ScratchTab(ViewState(), StubWorker())
    p.resize(1100, 700)
    yield p
    p.hide()
    p.deleteLater()


def shown_for(panel, family_runs, model_type, layer=1, head=3, dtype="float32"):
    from gui.tabs.scratch.scratch_data import scratch_data

    loaded, result = family_runs[model_type]
    data = scratch_data(loaded, result, layer, head, dtype)
    panel.show_data(data)
    return loaded, result, data


# ----------------------------------------------------------------------------- the worker's data
@pytest.mark.slow
@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_scratch_data_recomputes_by_the_family_and_parity_is_per_head_and_layer(family_runs, model_type):
    from gui.tabs.scratch.scratch_data import scratch_data

    loaded, result = family_runs[model_type]
    data = scratch_data(loaded, result, 1, 2, "float64")
    rec = data.recomputation
    assert rec.family == loaded.family.name and rec.steps == loaded.family.steps and rec.weights.dtype == np.float64
    # the report against an independent comparison of every layer and head with the model's attention
    for layer in range(result.n_layer):
        manual = loaded.recompute(layer, result.layer_inputs[layer], np.float64)
        np.testing.assert_allclose(data.report.weights_max_abs_diff[layer],
                                   np.abs(manual.weights - result.attentions[layer]).max(axis=(-2, -1)), rtol=1e-12)
        assert data.report.output_max_abs_diff[layer] == pytest.approx(
            np.abs(manual.output - result.attention_outputs[layer]).max(), rel=1e-12)
    assert data.report.passed and data.report.weights_max_abs_diff.shape == (result.n_layer, result.n_head)
    assert data.kv_head == 2 // (loaded.n_head // loaded.n_kv_head)


def test_projection_parameters_are_counted_off_the_model_by_hand(family_runs):
    # llama: d 64, 4 query heads, 2 key/value heads, dk 16, attention_bias=True (q, k, v and o biases)
    d, h, g, dk = 64, 4, 2, 16
    _, _, data = shown_for_data(family_runs, "llama")
    assert data.params_counted == d * h * dk + 2 * d * g * dk + h * dk * d + (h * dk + 2 * g * dk + d)
    # qwen2: one key/value head, q/k/v biases but none on o_proj
    _, _, data = shown_for_data(family_runs, "qwen2")
    assert data.params_counted == d * h * dk + 2 * d * 1 * dk + h * dk * d + (h * dk + 2 * 1 * dk)
    # bert: d 32, 4 heads, every projection with a bias
    _, _, data = shown_for_data(family_runs, "bert")
    assert data.params_counted == 4 * 32 * 32 + 4 * 32


def shown_for_data(family_runs, model_type):
    from gui.tabs.scratch.scratch_data import scratch_data

    loaded, result = family_runs[model_type]
    return loaded, result, scratch_data(loaded, result, 0, 0)


# ----------------------------------------------------------------------------- the Steps page
def test_llama_steps_show_rmsnorm_rotation_and_which_key_value_head(qtbot, panel, family_runs):
    loaded, result, data = shown_for(panel, family_runs, "llama", layer=1, head=3)
    steps, rec = panel.steps, data.recomputation
    assert steps.shown_views == ["x_ln", "q", "k", "v", "angles", "q_rot", "k_rot", "scores", "scaled", "masked",
                                 "weights", "out"]
    assert "RMSNorm" in steps.views["x_ln"].title and "ln_1" not in steps.views["x_ln"].title
    info = steps.info.text()
    assert "4 query heads share 2 key/value heads" in info and "query head 3 uses key/value head 1" in info
    assert "K/V head 1" in steps.views["k"].title and "for Q heads 2, 3" in steps.views["k"].subtitle
    # K and V are the key/value head's own, before it is repeated; Q before and after rotation
    np.testing.assert_array_equal(steps.views["k"].values, rec.k_before_rotation[1])
    np.testing.assert_array_equal(steps.views["v"].values, rec.v_per_kv_head[1])
    np.testing.assert_array_equal(steps.views["q"].values, rec.q_before_rotation[3])
    np.testing.assert_array_equal(steps.views["q_rot"].values, rec.q[3])
    # the RMSNorm hover, by hand: x / sqrt(mean(x²) + eps) · γ
    w = data.weights
    x = result.layer_inputs[1][4].astype(np.float64)
    rms = math.sqrt((x * x).mean() + w.norm.eps)
    assert x[7] / rms * w.norm.weight[7] == pytest.approx(steps.views["x_ln"].values[4, 7], rel=1e-4)
    assert f"{rms:.4f}" in steps._explain_input(4, 7) and "RMSNorm" in steps._explain_input(4, 7)


@pytest.mark.parametrize("model_type, rotary_dim", [("llama", 16), ("gpt_neox", 4)])
def test_the_rotation_hover_explains_the_angle_and_the_turned_pair(qtbot, panel, family_runs, model_type, rotary_dim):
    loaded, result, data = shown_for(panel, family_runs, model_type, layer=0, head=1)
    steps = panel.steps
    base = data.weights.rotary.theta
    assert steps.shown_views[4:7] == ["angles", "q_rot", "k_rot"] and data.recomputation.rotary_dim == rotary_dim
    half = rotary_dim // 2
    before = steps.views["q"].values.astype(np.float64)
    for p, j in ((5, 1), (7, half + 1), (3, 0)):
        m = j % half
        theta = p * base ** (-2 * m / rotary_dim)  # θ_i = p · base^(−2i/d_rot), in float64 here
        assert steps.views["angles"].values[p, m] == pytest.approx(theta, rel=1e-5)
        x1, x2 = before[p, m], before[p, m + half]
        turned = (x1 * math.cos(theta) - x2 * math.sin(theta), x2 * math.cos(theta) + x1 * math.sin(theta))
        assert steps.views["q_rot"].values[p, j] == pytest.approx(turned[j // half], abs=1e-5)
        text = steps.views["q_rot"]._text_for((p, j))
        assert f"position p = {p}, pair i = {m}" in text and f"{theta:.4f} rad" in text
        assert f"^(−2·{m}/{rotary_dim})" in text and f"{turned[0]:.4f}, {turned[1]:.4f}" in text
        assert f"'{result.tokens[p]}' [{p}]" in text
    angle_text = steps.views["angles"]._text_for((5, 1))
    assert "position p = 5, pair i = 1" in angle_text and f"dims 1 and {1 + half}" in angle_text
    if rotary_dim < steps.views["q"].values.shape[1]:  # NeoX's partial rotary: the other dims pass through
        j = rotary_dim + 2
        assert steps.views["q_rot"].values[5, j] == steps.views["q"].values[5, j]
        assert "passes through unchanged" in steps.views["q_rot"]._text_for((5, j))


@pytest.mark.slow
def test_mistral_shows_its_sliding_window_in_the_mask_step(qtbot, panel, family_runs):
    loaded, result, data = shown_for(panel, family_runs, "mistral", layer=0, head=0)
    view = panel.steps.views["masked"]
    assert "sliding window of 5" in view.title
    n = result.n_tokens
    i, j = np.indices((n, n))
    np.testing.assert_array_equal(np.isneginf(view.values), (j > i) | (j <= i - 5))  # the window, by hand
    assert "outside the sliding window of 5" in panel.steps._explain_masked(9, 2)
    assert "comes after query" in panel.steps._explain_masked(2, 9)
    assert "kept" in panel.steps._explain_masked(9, 6)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["bert", "distilbert"])
def test_an_encoder_has_no_mask_step_and_enters_attention_unnormed(qtbot, panel, family_runs, model_type):
    loaded, result, data = shown_for(panel, family_runs, model_type, layer=1, head=2)
    steps = panel.steps
    assert steps.shown_views == ["x_ln", "q", "k", "v", "scores", "scaled", "weights", "out"]
    assert not steps.views["masked"].isVisibleTo(panel.steps)
    assert "block input (post-LN: no norm)" in steps.views["x_ln"].title and "Post-LN" in steps.info.text()
    assert steps.views["k"].title.endswith("K (head 2)")
    np.testing.assert_array_equal(steps.views["x_ln"].values, result.layer_inputs[1])
    assert "no mask step" in steps.info.text()
    assert [steps.focus_table.horizontalHeaderItem(c).text() for c in range(steps.focus_table.columnCount())] == \
        ["q·k", "× scale", "exp(s − max)", "weight"]
    assert (steps.views["weights"].values[0, 1:] > 0).all()  # the first query sees later keys


def test_the_gpt2_steps_name_ln_1_and_hovers_name_query_and_key(qtbot, panel, family_runs):
    loaded, result, data = shown_for(panel, family_runs, "gpt2", layer=1, head=2)
    steps = panel.steps
    assert steps.views["x_ln"].title == "1. input after ln_1 (LayerNorm)"
    assert steps.shown_views == ["x_ln", "q", "k", "v", "scores", "scaled", "masked", "weights", "out"]
    t = result.tokens
    for name in ("scores", "scaled", "masked", "weights"):
        assert f"query '{t[5]}' [5] → key '{t[2]}' [2]" in steps.views[name]._text_for((5, 2)), name
    assert f"'{t[4]}' [4], dim 3" in steps.views["q"]._text_for((4, 3))
    assert f"query '{t[4]}' [4], dim 3" in steps.views["out"]._text_for((4, 3))


# ----------------------------------------------------------------------------- Model vs manual, Cost
@pytest.mark.parametrize("model_type, w_o", [("llama", "o_proj"), ("gpt_neox", "dense"), ("bert", "output.dense"),
                                              ("gpt2", "c_proj")])
def test_model_vs_manual_per_head_and_per_layer(qtbot, panel, family_runs, model_type, w_o):
    loaded, result, data = shown_for(panel, family_runs, model_type, layer=1, head=1)
    parity = panel.parity
    assert plain(parity.head_verdict).startswith(" PASS") and "L1H1:" in plain(parity.head_verdict)
    assert f"W_O ({w_o})" in plain(parity.layer_verdict) and "PASS" in plain(parity.layer_verdict)
    table = parity.layers_table
    assert table.rowCount() == result.n_layer
    for layer in range(result.n_layer):
        assert table.item(layer, 6).text() == "PASS"
        assert table.item(layer, 4).text() == f"{data.report.output_max_abs_diff[layer]:.3e}"
        assert table.item(layer, 3).text() == f"{data.report.weights_bound_ratio[layer].max():.3g}"
    diff = np.abs(parity.manual_view.values - result.attentions[1, 1])
    np.testing.assert_allclose(parity.diff_view.values, diff, atol=1e-7)


def test_model_vs_manual_shows_each_weights_derived_bound(qtbot, panel, family_runs):
    """The head's verdict: its largest |diff|, the bound of that weight, and the worst |diff| / bound, all computed
    here again; the error map shows log₁₀ of each head's worst ratio; a wrong recomputation reads FAIL."""
    import dataclasses

    from analysis.families.steps import Mistakes
    from analysis.measures.parity import head_check, parity_report

    loaded, result, data = shown_for(panel, family_runs, "llama", layer=1, head=1)
    rec, weights = data.recomputation, loaded.attention_weights(1)
    diff, bound = head_check(rec, weights, result.attentions[1][[1]], "float32", "float32", [1])
    diff, bound = diff[0], bound[0]
    np.testing.assert_allclose(data.head_bound, bound, rtol=1e-6)
    largest = np.unravel_index(np.argmax(diff), diff.shape)
    ratio = diff / np.maximum(bound, 2.0 ** -125)
    verdict = plain(panel.parity.head_verdict)
    assert f"max |manual − model| = {diff.max():.3e}, its bound {bound[largest]:.2e}" in verdict
    assert f"worst |diff| / bound = {ratio.max():.3g}" in verdict and "every query row" in verdict
    assert "derived from float32 rounding for a float32 model" in verdict
    report = data.report
    assert f"against its bound {report.weight_tolerance:.2e}" in plain(panel.parity.all_verdict)
    assert "every query row against every key" in plain(panel.parity.all_verdict)
    logged = panel.parity.error_map.image.image
    np.testing.assert_allclose(logged, np.log10(np.maximum(report.weights_bound_ratio, 1e-6)), rtol=1e-5)
    assert f"worst |diff| / bound = {report.weights_bound_ratio[0, 2]:.3g}" in panel.parity.error_map.hover_text(0, 2)
    # a recomputation that forgets rotary fails, and the page says so
    wrong = parity_report(result, [loaded.attention_weights(layer) for layer in range(result.n_layer)],
                          mistakes=Mistakes(skip_rotation=True))
    panel.show_data(dataclasses.replace(data, report=wrong))
    assert plain(panel.parity.all_verdict).startswith(" FAIL")
    assert "FAIL" in panel.parity.error_map.hover_text(1, 1)
    assert panel.parity.layers_table.item(1, 6).text() == "FAIL"


def test_the_verdict_names_the_query_rows_a_long_text_was_checked_on():
    from analysis.measures.parity import sample_rows
    from gui.tabs.scratch.scratch_parity import rows_words

    assert rows_words(sample_rows(40)) == "every query row"
    assert rows_words(sample_rows(3000, requested=[1234])) == (
        "129 of 3000 query rows (the first and last 16, 96 at random, seed 0 and 1 asked for)")


def test_cost_counts_grouped_query_attention_and_the_kv_cache(qtbot, panel, family_runs):
    loaded, result, data = shown_for(panel, family_runs, "llama")
    cost, n = panel.cost.cost, result.n_tokens
    assert (cost.n_head, cost.n_kv_head, cost.d_head) == (4, 2, 16)
    assert cost.kv_cache_bytes_total == 2 * 2 * n * 2 * 16 * 4  # layers · (K and V) · n · g · dk · 4 bytes
    assert cost.kv_cache_bytes_total_without_gqa == 2 * cost.kv_cache_bytes_total  # g = h would hold twice as much
    rows = {panel.cost.table.item(i, 0).text(): panel.cost.table.item(i, 1).text()
            for i in range(panel.cost.table.rowCount())}
    assert rows["parameters of one attention layer (from the weights)"] == f"{data.params_counted:,}"
    assert rows["KV cache, all layers"] == f"{cost.kv_cache_bytes_total / 1024:,.1f} KiB"  # 16 KiB at 32 tokens
    assert "KV cache, all layers, without grouped-query attention (g = h = 4)" in rows
    assert "4 query heads share 2 key/value heads" in panel.cost.note.text()


# ----------------------------------------------------------------------------- encoders draw no mask
@pytest.mark.slow
def test_an_encoders_head_plot_grid_and_exported_figure_draw_no_mask(qtbot, family_runs, tmp_path):
    from gui.plots.figures import HeadPlot, dispose_figure, offscreen_grid_figure, offscreen_head_figure
    from gui.export.figure_files import save_figure
    from gui.plots.hover_text import hover_text

    loaded, result = family_runs["bert"]
    assert result.causal is False
    fig = HeadPlot()
    try:
        fig.set_head(result.attentions[1, 0], result.tokens, "bert", causal=False)
        assert not np.isnan(fig.matrix).any()  # every cell a weight: nothing drawn as background
        np.testing.assert_array_equal(fig.matrix, result.attentions[1, 0])
        assert "masked" not in fig._text_for((0, 5)) and f"{result.attentions[1, 0, 0, 5]:.3f}" in fig._text_for((0, 5))
        fig.set_head(result.attentions[1, 1], result.tokens, "bert")  # the setting stays for the next head
        assert not np.isnan(fig.matrix).any()
    finally:
        dispose_figure(fig)
    cell = (0, 5, float(result.attentions[1, 0, 0, 5]))
    assert "masked" not in hover_text(result.tokens, cell, causal=False)
    assert "masked" in hover_text(result.tokens, cell, causal=True)
    exported = offscreen_head_figure(result, 1, 0)  # the export path takes causal from the result
    try:
        assert not np.isnan(exported.matrix).any() and exported.causal is False
        save_figure(exported, tmp_path / "head.png")
    finally:
        dispose_figure(exported)
    grid = offscreen_grid_figure(result)
    try:
        assert not np.isnan(grid._mosaic).any()  # the thumbnails hold every weight
    finally:
        dispose_figure(grid)
    decoder = family_runs["llama"][1]
    fig = offscreen_head_figure(decoder, 0, 0)
    try:
        i, j = np.indices(fig.matrix.shape)
        np.testing.assert_array_equal(np.isnan(fig.matrix), j > i)  # a decoder's future keys stay masked
    finally:
        dispose_figure(fig)


def test_a_step_added_to_the_family_table_alone_is_shown_numbered_titled_and_hovered(qtbot, family_runs,
                                                                                     monkeypatch):
    """A family with new maths (Gemma 2's soft-capping of the scores, say) adds its step to
    analysis.families.step_views.STEPS; the Steps page shows it with no change of its own."""
    import dataclasses

    from analysis.families import step_views as sv
    from gui.tabs.scratch.scratch_steps import StepsPage

    capped = sv.StepView("capped", "scaled", "query", lambda f: f"soft-capped (head {f.head})",
                         lambda f: " (cap · tanh(s / cap))", "keys")
    monkeypatch.setitem(sv.STEPS, "softcap", sv.Step("soft-cap", (capped,)))
    loaded, result = family_runs["gpt2"]
    rec = loaded.recompute(1, result.layer_inputs[1])
    after = rec.steps.index("scale") + 1
    rec = dataclasses.replace(rec, steps=rec.steps[:after] + ("softcap",) + rec.steps[after:])
    page = StepsPage()
    qtbot.addWidget(page)
    page.set_data(result, rec, 2)
    assert page.shown_views == ["x_ln", "q", "k", "v", "scores", "scaled", "capped", "masked", "weights", "out"]
    view, t = page.views["capped"], result.tokens
    assert view.title == "7. soft-capped (head 2)" and view.subtitle == " (cap · tanh(s / cap))"
    np.testing.assert_array_equal(view.values, rec.scaled[2])
    assert view._text_for((5, 2)) == (f"query '{t[5]}' [5] → key '{t[2]}' [2]\n"
                                      f"soft-capped (head 2): {rec.scaled[2, 5, 2]:.4f}")
    assert "scale → soft-cap → mask" in page.info.text()
