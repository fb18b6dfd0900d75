"""The newcomer's third walk (n3), one test per finding: Tab reaches the model bar, the ablation's Cancel stays
put, Run → Token limit says the limit that applies, the Rollout tab says it is computing, the score map's sink
marks sit inside their cells beside room for the badges, the grid leaves masked cells blank as the head view
does (on screen and in the export), and grid cells stay square in a narrow window."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from helpers import TEXT, WAIT_MS, analyse, hold_at_call, shown_tab, worker_held  # noqa: E402


# ----------------------------------------------------------------------------- 1. the Tab cycle
def tab_stops(window) -> list[QtWidgets.QWidget]:
    """Every control the user can Tab to, found here without the app's focus code: shown, enabled, taking Tab
    focus, not standing in for another widget (a combo box's line edit)."""
    return [w for w in window.findChildren(QtWidgets.QWidget)
            if w.isVisible() and w.isEnabled() and w.focusPolicy() & QtCore.Qt.FocusPolicy.TabFocus
            and w.focusProxy() is None and w.window() is window]


def walk(qtbot, window, start, key, limit=80) -> list[QtWidgets.QWidget]:
    """Press ``key`` (a real key event to the focused widget) from ``start`` until the focus is back on it."""
    app = QtWidgets.QApplication.instance()
    start.setFocus()
    app.processEvents()
    seen = []
    for _ in range(limit):
        focused = QtWidgets.QApplication.focusWidget()
        qtbot.keyClick(focused, key)
        app.processEvents()
        focused = QtWidgets.QApplication.focusWidget()
        if focused is start:
            return seen
        seen.append(focused)
    raise AssertionError(f"the focus never came back: {[type(w).__name__ for w in seen[-12:]]}")


@pytest.fixture
def window(qtbot, tmp_path, tiny_model_dir):
    from gui.chrome.downloads import offer_gpt2_download
    from gui.qt import ensure_qapp
    from gui.chrome.window import MainWindow

    ensure_qapp()
    w = MainWindow(QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.resize(1366, 740)
    w.show()
    with qtbot.waitSignal(w.model_ready, timeout=WAIT_MS):
        w.load_model(str(tiny_model_dir))
    offer_gpt2_download(w)  # the first start's note and its buttons: where Tab used to lose the model bar
    w.set_text("The cat sat on the mat")
    with qtbot.waitSignal(w.result_shown, timeout=WAIT_MS):
        w.run_text()
    w.tabs.setCurrentWidget(w.head_tab)
    w.activateWindow()
    qtbot.wait(50)
    return w


def test_tab_walks_the_whole_window_in_the_readme_order_each_control_once(qtbot, window):
    bar, text, grid, note = window.model_bar, window.text_input, window.grid_panel, window.note
    box = text.text_edit
    forward = walk(qtbot, window, box, QtCore.Qt.Key.Key_Tab)
    cycle = [box] + forward
    assert len(cycle) == len(set(cycle))  # each control once
    assert set(cycle) == set(tab_stops(window))  # … and every one of them
    model_bar = [bar.model_choice, bar.device_choice, bar.load_button]
    assert all(w in cycle for w in model_bar + note.action_buttons())  # was: reachable with Shift+Tab only
    # README: model bar → text → Run/Examples/BOS/Auto → token strip → grid → Badges → tabs → the tab's controls
    # → a note's buttons → back to the model bar. The cycle read from the model bar:
    first = cycle.index(bar.model_choice)
    from_bar = cycle[first:] + cycle[:first]
    readme = model_bar + [box, text.run_button, text.examples_button, text.bos_box, text.auto_box,
                          text.token_strip, grid.plot, grid.badge_choice, window.tabs.tabBar(),
                          window.head_tab.plot]
    positions = [from_bar.index(w) for w in readme]
    assert positions == sorted(positions)
    assert from_bar[: len(model_bar) + 1] == model_bar + [box]  # the model bar, then straight to the text
    tab_bar = from_bar.index(window.tabs.tabBar())
    head_tab = [w for w in from_bar[tab_bar + 1:] if window.head_tab.isAncestorOf(w)]
    assert from_bar[tab_bar + 1: tab_bar + 1 + len(head_tab)] == head_tab  # the tab's controls follow the tab bar
    # then the note's buttons as they sit on screen, left to right (was: ✕ before "Download GPT-2" at its left)
    note_stops = sorted((w for w in cycle if note.isAncestorOf(w)), key=lambda w: w.mapTo(window, QtCore.QPoint()).x())
    assert len(note_stops) >= 2 and note_stops[-1] is note.close_button
    assert from_bar[tab_bar + 1 + len(head_tab):] == note_stops
    backward = walk(qtbot, window, box, QtCore.Qt.Key.Key_Backtab)
    assert backward == list(reversed(forward))  # Shift+Tab walks the same stops the other way


# ----------------------------------------------------------------------------- 2. the ablation's Cancel
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
    _calls, reached, go = hold_at_call(monkeypatch, ablation_module, "_run", 2)
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


# ----------------------------------------------------------------------------- 3. the token limit
@pytest.mark.parametrize("cap,context", [(2048, 256), (2048, 4096), (100, 256), (256, 256)])
def test_the_token_limit_shows_the_limit_that_applies(qtbot, tmp_path, cap, context):
    from analysis.run.inference import token_limit
    from gui.qt import ensure_qapp
    from gui.input.token_limit import TokenLimit

    ensure_qapp()
    settings = QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)
    action = QtGui.QAction()
    limit = TokenLimit(settings, action)
    limit.set(cap)
    assert action.text() == f"Token limit ({cap:,})…"  # no model yet: the cap
    limit.set_context(SimpleNamespace(context_length=context, bos_token="<|endoftext|>", causal=True,
                                      n_special=1))  # a ModelInfo (BOS in front)
    applies = token_limit(SimpleNamespace(context_length=context), cap)  # what a run analyses
    assert limit.applies() == applies
    assert action.text().startswith(f"Token limit ({applies:,}")
    if context < cap:
        assert action.text() == f"Token limit ({context:,}: the model's context; your cap {cap:,})…"
    else:
        assert action.text() == f"Token limit ({cap:,})…"
    assert f"({cap:,})" in action.toolTip() and f"({context:,})" in action.toolTip()


# ----------------------------------------------------------------------------- 4. the Rollout placeholder
def test_the_rollout_tab_says_it_is_computing_instead_of_showing_empty_axes(qtbot, loaded_worker, tiny_result):
    from analysis.measures.head_scores import all_scores
    from analysis.measures.lenses import rollout
    from gui.tabs.rollout.rollout_tab import RolloutTab
    from helpers import bundle

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


# ----------------------------------------------------------------------------- 5. the score map's sink marks
def scene_rect_of_cell(fig, layer, head) -> QtCore.QRectF:
    vb = fig.plot.getViewBox()
    return vb.mapViewToScene(QtCore.QRectF(head, layer, 1, 1)).boundingRect()


@pytest.mark.parametrize("size", [(330, 1000), (240, 420), (700, 500)])
def test_sink_marks_sit_inside_their_own_cell_clear_of_the_badges(qtbot, shown_figure, size):
    from gui.tabs.scores.score_map import MARK_INSET_PX, MARK_PX, ScoreMap

    L, H = 6, 12  # minilm
    values = np.random.default_rng(3).random((L, H))
    values[2, 11] = 2.0  # the best head in the last column: its badge must not be cut at the plot's edge
    fig = shown_figure(ScoreMap, *size)
    fig.set_score("previous_token", values)
    fig.set_marks(np.ones((L, H), dtype=bool), "sink head")
    qtbot.wait(50)
    vb = fig.plot.getViewBox()
    view = vb.mapRectToScene(vb.boundingRect())
    xs, ys = fig.marks.getData()
    assert len(xs) == L * H
    for x, y in zip(xs, ys):
        layer, head = int(y), int(x)  # the cell the mark's centre is in …
        centre = vb.mapViewToScene(QtCore.QPointF(x, y))
        cell = scene_rect_of_cell(fig, layer, head)
        dot = QtCore.QRectF(centre.x() - MARK_PX / 2, centre.y() - MARK_PX / 2, MARK_PX, MARK_PX)
        room = MARK_PX + 2 * MARK_INSET_PX
        if cell.width() >= room and cell.height() >= room:
            assert cell.contains(dot)  # … the whole dot is inside it, never on an edge
        if cell.width() >= room:  # in from the left edge …
            assert dot.left() - cell.left() == pytest.approx(MARK_INSET_PX, abs=0.5)
        else:  # … or, in a cell narrower than that, in its middle
            assert centre.x() == pytest.approx(cell.center().x(), abs=0.5)
        if cell.height() >= room:  # up from the bottom edge …
            assert cell.bottom() - dot.bottom() == pytest.approx(MARK_INSET_PX, abs=0.5)
        else:
            assert centre.y() == pytest.approx(cell.center().y(), abs=0.5)
    for badge in fig.badges:
        margin = badge.textItem.document().documentMargin()  # the text item's empty border around the badge
        label = badge.mapRectToScene(badge.boundingRect()).adjusted(margin, margin, -margin, -margin)
        assert view.adjusted(-1, -1, 1, 1).contains(label)  # never cut at the plot's edge
        layer, head = int(badge.pos().y()), int(round(badge.pos().x())) - (1 if badge.anchor.x() == 1 else 0)
        cell = scene_rect_of_cell(fig, layer, head)
        x, y = vb.mapSceneToView(QtCore.QPointF(label.left(), label.top())).x(), layer
        centre = vb.mapViewToScene(QtCore.QPointF(head + (xs[0] - int(xs[0])), layer + (ys[0] - int(ys[0]))))
        dot = QtCore.QRectF(centre.x() - MARK_PX / 2, centre.y() - MARK_PX / 2, MARK_PX, MARK_PX)
        if cell.height() >= label.height() + MARK_PX + MARK_INSET_PX:
            assert not label.intersects(dot), (x, y)  # the label has its room: the mark is below it


# ----------------------------------------------------------------------------- 6. masked cells in the grid
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


# ----------------------------------------------------------------------------- 7. square thumbnails
@pytest.mark.parametrize("size", [(420, 700), (900, 260)])
def test_grid_cells_stay_square_in_a_narrow_or_flat_window(qtbot, shown_figure, size):
    from gui.plots.grid_plot import GridPlot

    a = causal_maps(L=6, H=12, n=20)
    fig = shown_figure(GridPlot, *size)
    fig.set_attentions(a, key=1, causal=True, sync=True)
    qtbot.wait(150)
    vb = fig.plot.getViewBox()

    def cell_px():
        rect = vb.mapViewToScene(QtCore.QRectF(0, 0, 1, 1)).boundingRect()
        return rect.width(), rect.height()

    w, h = cell_px()
    assert w == pytest.approx(h, rel=0.02)  # was ~30 × 95 px at the smallest window
    (x0, x1), (y0, y1) = vb.viewRange()
    assert x0 <= 1e-6 and x1 >= 12 - 1e-6 and y0 <= 1e-6 and y1 >= 6 - 1e-6  # every head shows
    spare = (vb.width() - vb.width() / (x1 - x0) * 12, vb.height() - vb.height() / (y1 - y0) * 6)
    assert min(spare) <= 1  # the grid fills the short side; the spare room is on the long one
    vb.scaleBy((0.5, 0.5))
    fig.reset_view()
    assert cell_px() == pytest.approx((w, h), rel=0.01)  # "View all" comes back to the square cells
