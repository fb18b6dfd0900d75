"""What keeps a new result's drawing and painting in short turns of the GUI thread (issue 20: the longest stall while a
2,048-token run is shown): the worker's answers are emitted from a timer, not from the posted call that carries them;
a new result's token labels are made before its first map (TokenAxis.prime_tokens) and only put up with it; a figure
is laid out before its scene paints, so it paints once; the Head tab shows a line, not empty axes, until its first
map arrives."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")

from helpers import WAIT_MS, worker_held  # noqa: E402

TOKENS = ["<|endoftext|>", " The", " cat", " sat", " on", " the", " mat", "."] * 40  # 320 tokens


def causal(n: int) -> np.ndarray:
    a = np.tri(n, dtype=np.float32)
    return a / a.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("rotate", [False, True])
def test_primed_labels_are_the_labels_set_tokens_makes_and_are_not_made_again(qtbot, rotate):
    from gui.plots.token_axis import TokenAxis
    from gui.qt import ensure_qapp

    ensure_qapp()
    plain, primed = TokenAxis("bottom", rotate=rotate), TokenAxis("bottom", rotate=rotate)
    plain.set_tokens(TOKENS)
    primed.prime_tokens(TOKENS)
    measured = primed.sizes.measured
    labels_made = []
    primed._labelled = lambda key: labels_made.append(key)  # set_tokens must not label again
    primed.set_tokens(TOKENS)
    assert labels_made == [] and primed.sizes.measured == measured
    assert primed._labels == plain._labels and primed.label_px() == plain.label_px()
    if rotate:
        assert primed._longest == plain._longest and primed.fixedHeight == plain.fixedHeight


def test_primed_labels_of_other_tokens_or_another_label_length_are_not_used(qtbot):
    from gui.plots.token_axis import TokenAxis, token_label
    from gui.qt import ensure_qapp

    ensure_qapp()
    axis = TokenAxis("left")
    axis.prime_tokens(TOKENS)
    axis.set_tokens(TOKENS[:10])  # other tokens: labelled now
    assert len(axis._labels) == 10
    axis.prime_tokens(TOKENS)
    whole = axis._primed[1][0]
    axis.label_chars = 10  # a figure's label length, set after priming: the primed labels are stale
    axis.set_tokens(TOKENS)
    assert axis._labels == [token_label(t, i, 10) for i, t in enumerate(TOKENS)] != whole
    assert len(axis._labels[0]) == 10


def test_a_new_map_is_laid_out_before_its_first_paint(qtbot, shown_figure):
    """After set_head, before any event: each axis already has the size it asked for, and the view the map's range,
    so the paint that follows is the only one (no relayout after it moves the axes)."""
    from PySide6 import QtWidgets

    from gui.plots.figures import HeadPlot

    fig = shown_figure(HeadPlot, 900, 700)
    fig.set_head(causal(8), TOKENS[:8], "short")
    QtWidgets.QApplication.processEvents()
    n = len(TOKENS)
    fig.set_head(causal(n), TOKENS, "long")  # longer labels ("␣mat [319]"): a wider query axis
    left, bottom = fig.left_axis, fig.bottom_axis
    (x0, x1), (y0, y1) = fig.plot.getViewBox().viewRange()
    assert (x0, x1) == pytest.approx((0, n), abs=1) and (y0, y1) == pytest.approx((0, n), abs=1)
    assert left.geometry().width() == pytest.approx(left.minimumWidth())
    assert bottom.geometry().height() == pytest.approx(bottom.minimumHeight())
    before = (left.geometry(), bottom.geometry(), fig.plot.getViewBox().geometry())
    fig.grab()  # paint it, as the screen would
    QtWidgets.QApplication.processEvents()
    assert (left.geometry(), bottom.geometry(), fig.plot.getViewBox().geometry()) == before


def test_the_workers_answers_are_emitted_from_a_timer_in_the_order_handed_over(qtbot, loaded_worker):
    """An answer reaches its receiver only when the event loop runs its timers, not inside the posted call that
    carried it; two answers keep their order."""
    from PySide6 import QtCore

    class Answers(QtCore.QObject):
        said = QtCore.Signal(object)

    answers, got = Answers(), []
    answers.said.connect(got.append)
    loaded_worker._deliver(answers.said, ("first",))
    loaded_worker._deliver(answers.said, ("second",))
    assert got == []  # not from the call itself
    qtbot.waitUntil(lambda: len(got) == 2, timeout=WAIT_MS)
    assert got == ["first", "second"]


def test_the_head_tab_says_its_first_map_is_on_its_way_instead_of_empty_axes(qtbot, loaded_worker, tiny_model,
                                                                              monkeypatch):
    """A result whose maps are computed on demand, with the worker busy: the map's place says which head is being
    computed; when the map arrives it is drawn."""
    from analysis.measures.measured import run_measured
    from analysis.run.memory import KEEP_MAPS_ENV
    from gui.state.view_state import ViewState
    from gui.tabs.head.head_tab import HeadTab
    from helpers import bundle

    monkeypatch.setenv(KEEP_MAPS_ENV, "0")
    result = run_measured(tiny_model, "The cat sat on the mat.")
    assert result.attentions is None  # on demand
    state = ViewState()
    tab = HeadTab(state, loaded_worker)
    qtbot.addWidget(tab)
    tab.resize(816, 560)
    tab.show()
    with qtbot.waitSignal(tab.head_maps.ready, timeout=WAIT_MS):
        with worker_held(loaded_worker):  # its map cannot be computed yet
            state.set_bundle(bundle(result))
            assert tab.pending == ("weights", 0, 0)
            assert tab.stack.currentWidget() is tab.placeholder
            assert tab.placeholder.text() == "Computing L0H0's map…"
    assert tab.pending is None and tab.plot.matrix is not None  # drawn while hidden, shown in a turn of its own
    assert tab.stack.currentWidget() is tab.placeholder
    qtbot.waitUntil(lambda: tab.stack.currentWidget() is tab.plot, timeout=WAIT_MS)


@pytest.mark.parametrize("n", [0, 1, 10, 11, 101, 1234])
def test_labels_made_once_per_distinct_token_are_token_labels(n):
    """token_axis._elided (each distinct token elided once per index length) against token_label one by one."""
    import random

    from analysis.display import LABEL_CHARS, elide
    from gui.plots.token_axis import _elided, token_label

    rng = random.Random(n)
    tokens = ["".join(rng.choice("ab ␣<|>xyz") for _ in range(rng.randint(0, 30))) for _ in range(n)]
    for limit in (None, 3, 5, 14, 24):
        assert _elided(tokens, limit, True) == [token_label(t, i, limit).rpartition(" [")[0]
                                                for i, t in enumerate(tokens)]
        assert _elided(tokens, limit, False) == [elide(t, limit or LABEL_CHARS) for t in tokens]
