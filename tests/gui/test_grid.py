"""The grid of every layer × head (gui/plots/grid_plot.py, gui/plots/grid_panel.py): masked cells are left
blank as the head view leaves them (on screen and in the export, with the head view's colour), cells fill
the panel near square (layers wrapped into blocks), a head selected elsewhere is brought into view, and Badges offers only the scores that apply."""
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import bundle  # noqa: E402


def causal_maps(L=2, H=3, n=37, seed=0) -> np.ndarray:
    """Random causal attention maps (rows sum to 1, future keys exactly 0, as a decoder's softmax gives)."""
    a = np.random.default_rng(seed).random((L, H, n, n)).astype(np.float32) + 0.01
    a = np.where(np.tri(n, dtype=bool), a, np.float32(0))
    return a / a.sum(axis=-1, keepdims=True)


def masked_pixels(n: int, c: int) -> np.ndarray:
    """(c, c): True where every (query i, key j) a pooled pixel covers has j > i — by enumeration."""
    from analysis.display import pool_edges

    edges = list(pool_edges(n, c)) + [n]
    out = np.zeros((c, c), dtype=bool)
    for a in range(c):
        for b in range(c):
            out[a, b] = all(j > i for i in range(edges[a], edges[a + 1]) for j in range(edges[b], edges[b + 1]))
    return out


def cells(image: np.ndarray, L: int, H: int, c: int) -> np.ndarray:
    return image.reshape(L, c, H, c).transpose(0, 2, 1, 3)  # (layer, head, c, c)


@pytest.mark.parametrize("scale", ["linear", "log"])
@pytest.mark.parametrize("width", [150, 1400])  # pooled below n, and one pixel per token
def test_the_grid_leaves_masked_cells_blank_like_the_head_view(qtbot, shown_figure, scale, width):
    from gui.plots.grid_plot import GridPlot

    a = causal_maps()
    L, H, n, _ = a.shape
    fig = shown_figure(GridPlot, width, 700)
    fig.set_attentions(a, scale=scale, key=1, causal=True, sync=True)
    c = fig.cell
    assert (c < n) == (width == 150)
    blank = np.isnan(cells(fig.image.image, L, H, c))
    assert np.array_equal(blank, np.broadcast_to(masked_pixels(n, c), blank.shape))
    assert np.isfinite(cells(fig.image.image, L, H, c)[~blank]).all()
    fig.set_attentions(a, scale=scale, key=2, causal=False, sync=True)  # an encoder's map: no mask
    assert not np.isnan(fig.image.image).any()


def test_masked_cells_have_the_head_views_colour(qtbot, shown_figure):
    """The same pixel colour (the figure's background through a transparent cell) in the grid and the head view."""
    from gui.plots.figures import HeadPlot
    from gui.plots.grid_plot import GridPlot

    a = causal_maps(L=1, H=1, n=8)
    grid = shown_figure(GridPlot, 500, 500)
    grid.set_attentions(a, scale="log", key=1, causal=True, sync=True)
    head = shown_figure(HeadPlot, 500, 500)
    head.set_head(a[0, 0], [f"t{i}" for i in range(8)], causal=True, scale="log")
    qtbot.wait(50)

    def colour(fig, x, y):
        point = fig.mapFromScene(fig.plot.getViewBox().mapViewToScene(QtCore.QPointF(x, y)))
        return fig.grab().toImage().pixelColor(point * fig.devicePixelRatioF()).name()

    masked, below = (6.5, 1.5), (1.5, 6.5)  # (key, query): key 6 of query 1, and key 1 of query 6
    assert colour(grid, masked[0] / 8, masked[1] / 8) == colour(head, *masked)
    assert colour(grid, masked[0] / 8, masked[1] / 8) != colour(grid, below[0] / 8, below[1] / 8)


def test_the_grid_export_blanks_masked_cells_too(qtbot, tiny_result):
    from gui.plots.figures import dispose_figure
    from gui.plots.grid_panel import grid_figure

    view = SimpleNamespace(result=tiny_result, bundle=None, scores=None, badge_score=None, colormap="viridis",
                           scale="log", hide_first=False, attention_view="weights", lens=lambda _kind: None)
    view.bundle = SimpleNamespace(request_id=1)
    fig = grid_figure(view)
    try:
        L, H, n, _ = tiny_result.attentions.shape
        c = fig.cell
        blank = np.isnan(cells(fig.image.image, L, H, c))
        assert np.array_equal(blank, np.broadcast_to(masked_pixels(n, c), blank.shape)) and blank.any()
    finally:
        dispose_figure(fig)


@pytest.mark.parametrize("shape,size,blocks", [
    ((6, 12), (420, 700), 1),  # a narrow window: one block, cells as wide as the view lets them
    ((6, 12), (900, 260), 1),  # a flat one
    ((30, 9), (640, 560), 2),  # SmolLM2's 30 × 9 in the panel at 1366 × 768: two blocks of 15 layers
    ((48, 25), (640, 560), 1),  # GPT-2-xl's 48 × 25: one block
])
def test_the_grid_fills_its_panel_with_cells_near_square(qtbot, shown_figure, shape, size, blocks):
    from gui.plots.grid_plot import GridPlot
    from gui.plots.head_layout import MAX_CELL_ASPECT

    L, H = shape
    a = causal_maps(L=L, H=H, n=8)
    fig = shown_figure(GridPlot, *size)
    fig.set_attentions(a, key=1, causal=True, sync=True)
    qtbot.wait(150)
    vb = fig.plot.getViewBox()
    assert fig.layout.blocks == blocks

    def cell_px():
        rect = vb.mapViewToScene(QtCore.QRectF(0, 0, 1, 1)).boundingRect()
        return rect.width(), rect.height()

    w, h = cell_px()
    assert 1 / MAX_CELL_ASPECT - 0.02 <= w / h <= MAX_CELL_ASPECT + 0.02  # never stretched more
    columns, rows = fig.layout.columns, fig.layout.rows
    (x0, x1), (y0, y1) = vb.viewRange()
    assert x0 <= 1e-6 and x1 >= columns - 1e-6 and y0 <= 1e-6 and y1 >= rows - 1e-6  # every head shows
    used = (w * columns / vb.width(), h * rows / vb.height())
    if 1 / MAX_CELL_ASPECT + 0.02 < w / h < MAX_CELL_ASPECT - 0.02:
        assert min(used) >= 0.99 and max(used) <= 1.01  # not at the aspect cap: the cells take the whole view
    else:
        assert max(used) >= 0.99  # at the cap: the long side has the spare room
    vb.scaleBy((0.5, 0.5))
    fig.reset_view()
    assert cell_px() == pytest.approx((w, h), rel=0.01)  # "View all" comes back to the same cells


def test_a_head_selected_elsewhere_is_brought_into_the_zoomed_grid(qtbot, shown_figure):
    from gui.plots.grid_plot import GridPlot

    fig = shown_figure(GridPlot, 640, 560)
    fig.set_attentions(causal_maps(L=30, H=9, n=8), key=1, causal=True, sync=True)
    qtbot.wait(100)
    vb = fig.plot.getViewBox()
    vb.setRange(xRange=(0, 3), yRange=(0, 3), padding=0)  # zoomed on the top-left heads
    for layer, head in [(29, 8), (14, 0), (0, 0), (22, 4)]:
        fig.select(layer, head)
        cell = fig.cell_rect(layer, head)
        (x0, x1), (y0, y1) = vb.viewRange()
        assert x0 - 1e-6 <= cell.left() and cell.right() <= x1 + 1e-6, (layer, head)
        assert y0 - 1e-6 <= cell.top() and cell.bottom() <= y1 + 1e-6, (layer, head)
        assert x1 - x0 == pytest.approx(3) and y1 - y0 == pytest.approx(3)  # the zoom is kept
        x, y = fig.layout.origin(layer, head)
        c = fig.image.image.shape[0] // fig.layout.rows
        assert fig.cell_head((y * c + c // 2, x * c + c // 2)) == (layer, head)  # hover and click agree


def test_badges_offer_only_scores_that_apply(qtbot, disposed, tiny_result):
    from analysis.measures.head_scores import all_scores
    from gui.plots.grid_panel import GridPanel
    from gui.state.view_state import ViewState

    scores = all_scores(tiny_result)
    state = ViewState()
    state.set_badge_score("next_token")
    panel = GridPanel(state)
    disposed(panel)
    state.set_bundle(bundle(tiny_result, scores))
    items = panel.badge_choice.model()
    for index in range(1, panel.badge_choice.count()):
        name = panel.badge_choice.itemData(index)
        assert items.item(index).isEnabled() == scores.applies(name), name
    assert not scores.applies("next_token")  # a causal model
    assert state.badge_score is None and panel.badge_choice.currentData() is None
