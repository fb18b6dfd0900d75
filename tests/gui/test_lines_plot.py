"""The Lines view (gui/plots/lines_plot.py, the Head tab's Draw: Lines): each line's opacity is its weight as the
matrix draws it, hovering a token leaves exactly its lines, heads get distinct colours, a text past the limit
keeps the matrix under a note, the view follows the selected head and the view options, and an exported PNG
shows the lines."""

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from helpers import WAIT_MS, bundle  # noqa: E402


def causal_weights(n: int, seed: int) -> np.ndarray:
    """A random causal attention map (n, n): rows sum to 1 over keys 0 … q."""
    rng = np.random.default_rng(seed)
    w = np.tril(rng.random((n, n)) ** 3)
    return w / w.sum(axis=1, keepdims=True)


def drawn_lines(fig) -> dict:
    """(head, query, key) → (opacity, rgb) read back from the figure's line items."""
    out = {}
    for line, h, q, k in zip(fig.lines, fig.line_head, fig.line_query, fig.line_key):
        color = line.pen().color()
        out[(int(h), int(q), int(k))] = (color.alphaF(), (color.red(), color.green(), color.blue()))
    return out


TOKENS = ["The", "<b>cat", " sat", " on", " the", " mat", ".", " It", " was", " warm"]


@pytest.fixture
def figure(disposed):
    from gui.plots.lines_plot import lines_figure

    def make(weights, heads, **options):
        fig = lines_figure(TOKENS, weights, heads, **options)
        disposed(fig)
        return fig

    return make


@pytest.mark.parametrize("hide_first", [False, True])
def test_each_line_s_opacity_is_its_weight(figure, hide_first):
    """Opacity = the weight (linear), the first key's row share renormalised away when hidden; one line per weight
    above 0, none for a masked (future) key or the hidden key."""
    n = len(TOKENS)
    w = causal_weights(n, 1)
    fig = figure({(0, 0): w}, [(0, 0)], hide_first=hide_first)
    expected = {}
    for q in range(n):
        for k in range(q + 1):
            if hide_first:
                if k == 0 or q == 0:
                    continue  # row 0 has no key left
                value = w[q, k] / w[q, 1:q + 1].sum()
            else:
                value = w[q, k]
            expected[(0, q, k)] = value
    got = drawn_lines(fig)
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key][0] == pytest.approx(value, abs=2e-5), key


def test_the_power_scale_draws_the_square_root(figure):
    w = causal_weights(len(TOKENS), 2)
    got = drawn_lines(figure({(0, 0): w}, [(0, 0)], scale="power"))
    assert got[(0, 5, 2)][0] == pytest.approx(np.sqrt(w[5, 2]), abs=2e-5)


def test_hovering_a_token_leaves_exactly_its_lines(qtbot, shown_figure):
    """A real pointer over a query token leaves its row; over a key token its column; off them, every line."""
    from PySide6 import QtCore

    from gui.plots.lines_plot import LinesPlot, drawn_heads

    n = len(TOKENS)
    weights = {(1, 0): causal_weights(n, 3), (1, 2): causal_weights(n, 4)}
    fig = shown_figure(LinesPlot, 600, 400)
    fig.set_lines(TOKENS, drawn_heads(weights, list(weights), 4))
    qtbot.wait(50)  # painted: the labels placed where the view shows them
    every = {(h, q, k) for h, q, k in drawn_lines(fig)}
    assert set(fig.visible_lines()) == every

    def point_at(item):
        center = item.mapToScene(item.boundingRect().center())
        return fig.mapFromScene(center)

    for side, index, axis in (("query", 6, 1), ("key", 2, 2)):
        item = (fig.queries if side == "query" else fig.keys)[index]
        qtbot.mouseMove(fig.viewport(), point_at(item))
        qtbot.wait(50)  # (the move is delivered on a later turn: polling at once can miss it)
        qtbot.waitUntil(lambda: fig.hovered == (side, index), timeout=2000)
        visible = set(fig.visible_lines())
        assert visible == {line for line in every if line[axis] == index}
        assert visible and {line[0] for line in visible} == {0, 1}  # both heads
    qtbot.mouseMove(fig.viewport(), QtCore.QPoint(3, fig.height() - 3))  # off every token
    qtbot.wait(50)
    qtbot.waitUntil(lambda: fig.hovered is None, timeout=2000)
    assert set(fig.visible_lines()) == every


def test_heads_get_distinct_colours(figure):
    from gui.plots.lines_plot import head_colour

    n = len(TOKENS)
    heads = [(2, 0), (2, 3), (2, 8)]
    fig = figure({h: causal_weights(n, i) for i, h in enumerate(heads)}, heads, n_head=9)
    colours = {}
    for (h, _, _), (_, rgb) in drawn_lines(fig).items():
        colours.setdefault(h, set()).add(rgb)
    assert all(len(c) == 1 for c in colours.values())  # one colour a head
    assert len({next(iter(c)) for c in colours.values()}) == 3  # distinct
    for n_head in (9, 12, 16, 32):
        assert len({head_colour(h, n_head).name() for h in range(n_head)}) == n_head


def test_tokens_are_shown_as_typed(figure):
    fig = figure({(0, 0): causal_weights(len(TOKENS), 5)}, [(0, 0)])
    assert fig.queries[1].textItem.toPlainText() == "<b>cat"
    assert fig.keys[1].textItem.toPlainText() == "<b>cat"


def test_an_exported_png_shows_the_strongest_line(figure, tmp_path):
    """The PNG's pixels at the middle of the strongest line have its head's colour; a spot away from every line
    and token is the background."""
    from PySide6 import QtGui

    from gui.export.figure_files import save_figure
    from gui.plots.lines_plot import head_colour

    n = len(TOKENS)
    w = np.zeros((n, n))
    w[np.arange(n), 0] = 1.0  # every query on the first key ...
    w[8, 0], w[8, 4] = 0.02, 0.98  # ... but query 8, almost wholly on key 4
    fig = figure({(0, 3): w}, [(0, 3)], n_head=9)
    path = save_figure(fig, tmp_path / "lines.png")
    image = QtGui.QImage(str(path))
    index = next(i for i, (q, k) in enumerate(zip(fig.line_query, fig.line_key)) if (q, k) == (8, 4))
    line = fig.lines[index]
    source = fig.viewRect()
    sx, sy = image.width() / source.width(), image.height() / source.height()

    def pixel(scene_point):
        x, y = (scene_point.x() - source.left()) * sx, (scene_point.y() - source.top()) * sy
        return QtGui.QColor(image.pixel(int(round(x)), int(round(y))))

    middle = line.mapToScene(line.line().center())
    want = head_colour(3, 9)
    near = [pixel(middle + d) for d in (QtGui.QVector2D(0, 0).toPointF(),) +
            tuple(QtGui.QVector2D(0, dy).toPointF() for dy in (-1, 1))]
    assert any(max(abs(c.red() - want.red()), abs(c.green() - want.green()), abs(c.blue() - want.blue())) < 40
               for c in near), [c.name() for c in near]
    # below the middle of the strong line, between the columns: no line passes there (all others go to key 0)
    empty = line.mapToScene(line.line().center()) + QtGui.QVector2D(0, 0.75 * fig.row_px * 2).toPointF()
    assert pixel(empty).name() == "#ffffff"


def test_past_the_limit_and_beyond_it_keeps_the_matrix(figure):
    from gui.plots.lines_plot import LINES_MAX_TOKENS, lines_figure

    n = LINES_MAX_TOKENS + 1
    with pytest.raises(ValueError, match="at most"):
        lines_figure([f"t{i}" for i in range(n)], {(0, 0): causal_weights(n, 0)}, [(0, 0)])


# ----------------------------------------------------------------------------- in the Head tab
@pytest.fixture
def tab(qtbot, disposed):
    from gui.state.view_state import ViewState
    from gui.tabs.head.head_tab import HeadTab

    state = ViewState()
    head = HeadTab(state)
    disposed(head)
    head.resize(816, 560)
    head.show()
    qtbot.waitExposed(head)
    return head


def line_weights(tab) -> dict:
    """(head, query, key) → opacity of the tab's Lines view."""
    return {key: alpha for key, (alpha, _) in drawn_lines(tab.lines.plot).items()}


def expected_weights(result, layer, heads, hide_first=False) -> dict:
    """The independent numbers: the result's own maps, causal, first key dropped and renormalised when hidden."""
    out = {}
    for i, h in enumerate(heads):
        a = np.asarray(result.attentions[layer, h], dtype=np.float64)
        for q in range(result.n_tokens):
            row = a[q, :q + 1].copy()
            if hide_first:
                row[0] = 0
                row = row / row.sum() if row.sum() > 0 else row * 0
            for k in np.nonzero(row > 0)[0]:
                out[(i, q, int(k))] = row[k]
    return out


def assert_lines(tab, expected):
    got = line_weights(tab)
    assert set(got) == set(expected)
    assert max(abs(got[key] - value) for key, value in expected.items()) < 2e-5


def test_the_lines_view_follows_the_selected_head_and_the_options(qtbot, tab, tiny_result):
    state = tab.state
    state.set_bundle(bundle(tiny_result, None, 1))
    assert tiny_result.n_tokens <= 64
    qtbot.waitUntil(lambda: tab.stack.currentWidget() is tab.plot, timeout=WAIT_MS)  # the first map: the next turn
    state.set_head_drawing("lines")
    assert tab.stack.currentWidget() is tab.lines and not tab.lines_note.isVisible()
    state.select(1, 2)
    assert [name for name, _, _ in tab.lines.plot.heads] == ["L1H2"]
    assert_lines(tab, expected_weights(tiny_result, 1, [2]))
    state.toggle_line_head(0)  # a second head, in its own colour
    assert [name for name, _, _ in tab.lines.plot.heads] == ["L1H2", "L1H0"]
    assert tab.lines.toggles.buttons[0].isChecked() and tab.lines.toggles.buttons[2].isChecked()
    assert_lines(tab, expected_weights(tiny_result, 1, [2, 0]))
    state.select(2, 1)  # the set follows to the new layer
    assert [name for name, _, _ in tab.lines.plot.heads] == ["L2H1", "L2H0"]
    state.set_hide_first(True)
    assert_lines(tab, expected_weights(tiny_result, 2, [1, 0], hide_first=True))
    state.set_query_row(7)  # the selected row: its token framed, its lines alone
    assert tab.lines.plot.queries[7].box.isVisible()
    assert {q for _, q, _ in tab.lines.plot.visible_lines()} == {7}
    state.set_query_row(None)
    assert {q for _, q, _ in tab.lines.plot.visible_lines()} == set(range(1, tiny_result.n_tokens))
    state.set_head_drawing("matrix")
    assert tab.stack.currentWidget() is tab.plot


def test_the_value_weighted_view_draws_the_row_shares(qtbot, tab, tiny_result):
    from gui.plots.head_view import head_matrix

    state = tab.state
    state.set_bundle(bundle(tiny_result, None, 1))
    state.set_head_drawing("lines")
    state.select(0, 1)

    class Values:  # the value lens as it arrives from the worker: key norms and the row-normalised N
        def __init__(self, result):
            rng = np.random.default_rng(0)
            self.key_norms = rng.random((result.n_layer, result.n_head, result.n_tokens)) + 0.5
            n = result.attentions * self.key_norms[:, :, None, :]
            self.shown = n / n.sum(axis=-1, keepdims=True)

    values = Values(tiny_result)
    state.set_attention_view("value-weighted")
    state.set_lens(1, "value_norms", values)
    assert np.allclose(head_matrix(state, "value-weighted", 0, 1), values.shown[0, 1])
    got = line_weights(tab)
    assert got[(0, 9, 3)] == pytest.approx(values.shown[0, 1, 9, 3], abs=2e-5)
    assert tab.lines.plot.quantity == "share of row N"


def test_past_the_limit_a_note_offers_the_matrix_and_the_matrix_stays(qtbot, tab, tiny_result, monkeypatch):
    """(The tiny model has 64 positions, the limit: the limit is lowered below its text for the test.)"""
    from gui.plots import lines_plot

    state = tab.state
    state.set_bundle(bundle(tiny_result, None, 1))
    state.set_head_drawing("lines")
    assert tab.stack.currentWidget() is tab.lines  # within the limit
    monkeypatch.setattr(lines_plot, "LINES_MAX_TOKENS", tiny_result.n_tokens - 1)
    LINES_MAX_TOKENS = lines_plot.LINES_MAX_TOKENS
    state.set_bundle(bundle(tiny_result, None, 2))
    assert tab.stack.currentWidget() is tab.plot and tab.plot.matrix is not None
    assert tab.lines_note.isVisible()
    assert f"at most {LINES_MAX_TOKENS} tokens" in tab.lines_note.text()
    assert tab.lines_note.height() < 2.5 * tab.lines_note.fontMetrics().height()  # one line
    tab.lines_note.linkActivated.emit("matrix")  # the note's link
    assert state.head_drawing == "matrix" and not tab.lines_note.isVisible()


def test_the_tab_s_figure_is_the_lines_figure(qtbot, tab, tiny_result, tmp_path):
    from gui.export.figure_files import save_figure
    from gui.plots.figures import dispose_figure
    from gui.plots.lines_plot import LinesPlot

    state = tab.state
    state.set_bundle(bundle(tiny_result, None, 1))
    state.set_head_drawing("lines")
    state.select(1, 3)
    state.set_line_heads([1])
    fig = tab.offscreen_figure()
    try:
        assert isinstance(fig, LinesPlot)
        assert [name for name, _, _ in fig.heads] == ["L1H3", "L1H1"]
        assert "L1 heads 3, 1" in fig.title.text
        assert save_figure(fig, tmp_path / "lines.svg").stat().st_size > 1000
        sizes = (fig.text_pt, fig.title_pt)
    finally:
        dispose_figure(fig)
    from gui.plots.figure_parts import lines_of_heads
    from analysis.export.figure_options import FigureOptions

    # its text at the sizes main.py figure --drawing lines draws (figure_text.FigureFont), not the view's own
    made = lines_of_heads(tiny_result, FigureOptions(heads=((1, 3),), drawing="lines"),
                          {(1, 3): tiny_result.head_map(1, 3)}, list(tiny_result.tokens), "t")
    try:
        assert sizes == (made.text_pt, made.title_pt) != (LinesPlot.text_pt, LinesPlot.title_pt)
    finally:
        dispose_figure(made)
