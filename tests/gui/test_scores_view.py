"""The Head scores tab on a ViewState: sorting, activation, selection both ways, names, colormap, theme;
the sink rate and the TransformerLens-style scores it shows equal the analysis functions'."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import bundle, double_click, view_point  # noqa: E402


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
    values = [float(v.lstrip("• ")) for v in shown if v != "—"]
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
    from analysis.measures.head_scores import SCORE_NAMES
    from analysis.measures.head_scores import SCORE_LABELS

    assert set(SCORE_LABELS) == set(SCORE_NAMES)
    assert panel.model.names[2:] == tuple(name for name in SCORE_NAMES if panel.scores.applies(name))
    for column, name in enumerate(panel.model.names[2:], start=2):
        tooltip = panel.model.headerData(column, QtCore.Qt.Orientation.Horizontal, QtCore.Qt.ItemDataRole.ToolTipRole)
        assert tooltip.startswith(SCORE_LABELS[name])
    panel.score_choice.setCurrentIndex(panel.score_choice.findData("induction"))
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
    assert panel.model.names[2:] == TL_NAMES
    for name in TL_NAMES:
        expected = tl_scores.detect(tiny_result.attentions, tiny_result.token_ids, name, error_measure=measure,
                                    exclude_bos=exclude_bos, exclude_current_token=exclude_current)
        column = next(c for c in panel.model.columns if c.name == name)
        np.testing.assert_array_equal(column.values, expected)
        for (layer, head), text in shown_cells(panel, name).items():
            assert text == ("—" if np.isnan(expected[layer, head]) else f"{expected[layer, head]:.3f}")
    panel.score_choice.setCurrentIndex(panel.score_choice.findData("induction_head"))
    np.testing.assert_array_equal(panel.map.values, panel.tl_scores["induction_head"])
    assert panel.map.label == "induction (TL-style)" and "TransformerLens-style" in panel.note.text()
    assert panel.map.colorbar.levels() == ((-1.0, 1.0) if measure == "abs" else (0.0, 1.0))


def test_back_to_attnscope_scores_and_tl_is_off_for_an_encoder(qtbot, panel, tiny_result):
    from analysis.measures.head_scores import SCORE_NAMES, all_scores

    panel.source_choice.setCurrentIndex(panel.source_choice.findData("tl"))
    assert panel.tl_controls.isVisibleTo(panel)
    panel.source_choice.setCurrentIndex(panel.source_choice.findData("attnscope"))
    assert panel.model.names[2:] == tuple(n for n in SCORE_NAMES if n != "next_token")
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
            for column in range(2, panel.model.columnCount())]


def choices(panel):
    return [panel.score_choice.itemData(i) for i in range(panel.score_choice.count())]


def test_a_decoder_hides_next_token_and_says_why(panel):
    from analysis.measures.head_scores import NOT_APPLICABLE, NOT_APPLICABLE_WHY, SCORE_LABELS, SCORE_NAMES

    assert not panel.scores.applies("next_token")  # GPT-2: causal
    expected = [name for name in SCORE_NAMES if name != "next_token"]
    assert list(panel.model.names[2:]) == expected and choices(panel) == expected  # the map's chooser too
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
    assert list(panel.model.names[2:]) == expected and choices(panel) == expected
    assert panel.current_score() == "previous_token" and panel.map.label == SCORE_LABELS["previous_token"]
    np.testing.assert_array_equal(panel.map.values, scores["previous_token"])
    assert NOT_APPLICABLE not in every_cell(panel)
    column = panel.model.names.index("next_token")  # an encoder's next-token score is a number, as computed
    for row in range(panel.model.rowCount()):
        layer, head = panel.model.head_at(row)
        assert panel.model.index(row, column).data().lstrip("• ") == f"{scores['next_token'][layer, head]:.3f}"
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
