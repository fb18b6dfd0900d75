"""The shared layer × head map: cells, clicks, double-click/Enter, arrows, badges, hover text."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import double_click, view_point  # noqa: E402


@pytest.fixture
def lh_map(shown_figure):
    from gui.plots.layer_head_map import LayerHeadMap

    return shown_figure(LayerHeadMap, 500, 400)


def show(qtbot, fig, L=3, H=4, c=5):
    image = np.arange(L * c * H * c, dtype=np.float32).reshape(L * c, H * c)
    fig.set_image(image, (L, H), (0, float(image.max())), "viridis", "t")
    qtbot.wait(50)


def test_cells_map_to_their_head_at_any_pooling(qtbot, lh_map):
    for c in (1, 7):
        show(qtbot, lh_map, c=c)
        assert lh_map.cell_head((2 * c + c - 1, 3 * c)) == (2, 3)
        assert lh_map.cell_head((0, 0)) == (0, 0)
        assert "L2H3 (layer 2, head 3)" in lh_map._text_for((2 * c, 3 * c))


def test_click_selects_double_click_and_enter_activate_arrows_move(qtbot, lh_map):
    show(qtbot, lh_map)
    clicked, activated = [], []
    lh_map.head_clicked.connect(lambda l, h: clicked.append((l, h)))
    lh_map.head_activated.connect(lambda l, h: activated.append((l, h)))
    qtbot.mouseClick(lh_map.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=view_point(lh_map, 1.5, 2.5))
    assert clicked[-1] == (2, 1) and not activated
    double_click(qtbot, lh_map.viewport(), view_point(lh_map, 3.5, 0.5))
    assert activated == [(0, 3)]
    lh_map.select(1, 1)
    qtbot.keyClick(lh_map, QtCore.Qt.Key.Key_Right)
    assert clicked[-1] == (1, 2)
    qtbot.keyClick(lh_map, QtCore.Qt.Key.Key_Up)
    assert clicked[-1] == (0, 1)
    lh_map.select(0, 0)
    qtbot.keyClick(lh_map, QtCore.Qt.Key.Key_Left)  # stops at the edge
    assert clicked[-1] == (0, 0)
    qtbot.keyClick(lh_map, QtCore.Qt.Key.Key_Return)
    assert activated[-1] == (0, 0)


def standouts(L=6, H=12, seed=5):
    """Scores of a model whose heads read 0 … 0.1 but four, which stand out (0.999, 0.998, 0.997, 0.996)."""
    values = np.random.default_rng(seed).random((L, H)) * 0.1
    values[2, 7], values[2, 8], values[1, 9], values[1, 11] = 0.999, 0.998, 0.997, 0.996
    return values


def test_badges_mark_only_the_heads_that_stand_out_best_first(qtbot, lh_map):
    show(qtbot, lh_map)
    values = np.full((3, 4), 0.05) + np.arange(12).reshape(3, 4) * 0.001
    values[1, 0], values[0, 1], values[0, 3] = 0.95, 0.9, np.nan
    lh_map.set_badges(values, "induction")
    assert lh_map.badge_layer.heads == [(1, 0), (0, 1)]  # two stand out, not a "top 3"
    assert [item.textItem.toPlainText() for item in lh_map.badges] == ["★ 0.950", "0.900"]
    assert "induction 0.950 — stands out" in lh_map.hover_text(1, 0)
    assert "induction 0.052" in lh_map.hover_text(0, 2) and "stands out" not in lh_map.hover_text(0, 2)
    assert lh_map.badge_note == "2 heads stand out"
    assert "L1H0 0.950 ★, L0H1 0.900" in lh_map.badge_layer.summary()
    lh_map.set_badges(None)
    assert not lh_map.badges and lh_map.badge_note == ""


def test_a_model_whose_best_head_is_weak_has_no_badge(qtbot, lh_map):
    """Issue 21: badges always marked at least three heads, so a 0.14 previous-token head got one."""
    show(qtbot, lh_map)
    values = np.full((3, 4), 0.02)
    values[2, 1] = 0.14
    lh_map.set_badges(values, "previous token")
    assert not lh_map.badge_layer.heads and not lh_map.badges and lh_map.badge_layer.outline.path().isEmpty()
    assert lh_map.badge_note == "no head stands out on previous token"
    assert lh_map.badge_layer.summary() == "No head stands out on previous token."


def test_a_low_score_badges_its_low_heads(qtbot, lh_map):
    show(qtbot, lh_map)
    values = np.full((3, 4), 0.8) + np.arange(12).reshape(3, 4) * 0.001
    values[2, 2] = 0.05  # one focused head: its entropy is the finding
    lh_map.set_badges(values, "entropy", low=True)
    assert lh_map.badge_layer.heads == [(2, 2)]
    lh_map.set_badges(values, "entropy")
    assert lh_map.badge_layer.heads == []


def test_badge_text_is_the_one_rounding_of_a_score():
    from gui.plots.badges import badge_wordings

    assert badge_wordings(0.9981, True) == ["★ 0.998", "0.998"]  # never "1.00" or "1.0"
    assert badge_wordings(0.17, False) == ["0.170"]


def test_standout_heads_too_small_for_text_are_outlined_and_the_note_says_zoom_in(qtbot, shown_figure):
    from gui.tabs.scores.score_map import ScoreMap

    values = standouts()
    fig = shown_figure(ScoreMap, 240, 300)  # cells ~13 px wide: no "0.999" fits
    fig.set_score("sink", values)
    qtbot.wait(50)
    assert not fig.badges and len(fig.badge_layer.heads) == 4
    assert fig.badge_note == "4 heads outlined: zoom in to read their badges"
    outline = fig.badge_layer.outline.path()
    for layer, head in fig.badge_layer.heads:  # every standout head outlined, no other
        assert outline.intersects(fig.cell_rect(layer, head))
    assert not outline.intersects(fig.cell_rect(0, 0).adjusted(0.3, 0.3, -0.3, -0.3))
    fig.resize(1400, 700)
    qtbot.waitUntil(lambda: len(fig.badges) == 4)
    assert fig.badge_note == "4 heads stand out"


@pytest.mark.parametrize("size", [(330, 420), (290, 400), (240, 420), (420, 500), (900, 600)])
def test_every_badge_lies_inside_its_own_cell_at_any_width(qtbot, shown_figure, size):
    """At any panel width (1366 px with 72 heads among them) a badge is drawn whole inside its own cell — in
    fewer digits or not at all, never running into its neighbour's ("★ 0.80.88") — and over the selection
    frame, which never cuts its digits ("0.|7")."""
    from gui.plots.badges import BADGE_INSET_PX
    from gui.tabs.scores.score_map import ScoreMap

    from analysis.display import format_score

    L, H = 6, 12  # minilm
    values = standouts(L, H)
    fig = shown_figure(ScoreMap, *size)
    fig.set_score("sink", values)
    fig.select(1, 11)
    qtbot.wait(50)
    vb = fig.plot.getViewBox()
    cell_px = vb.mapViewToScene(QtCore.QRectF(0, 0, 1, 1)).boundingRect()
    hidden = [item for item in fig.badge_layer.items if item not in fig.badges]
    assert all(not item.isVisible() for item in hidden) and all(item.isVisible() for item in fig.badges)
    for item, (layer, head, _) in zip(fig.badge_layer.items, fig.badge_layer.texts):
        if not item.isVisible():
            continue
        cell = vb.mapViewToScene(QtCore.QRectF(head, layer, 1, 1)).boundingRect()
        box = item.mapRectToScene(item.boundingRect())
        inner = cell.adjusted(BADGE_INSET_PX - 0.5, BADGE_INSET_PX - 0.5, -BADGE_INSET_PX + 0.5, -BADGE_INSET_PX + 0.5)
        assert inner.contains(box), (size, layer, head, box, cell)
        assert item.zValue() > fig.selection.zValue()
    text = [item.textItem.toPlainText() for item in fig.badges]
    if cell_px.width() >= 60:  # room for the whole wording
        assert text[0] == "★ 0.999" and len(fig.badges) == len(fig.badge_layer.items) == 4
    for t in text:  # whatever is shown is the value by the one rounding rule, never a cut-off piece of it
        assert t.lstrip("★ ") in {format_score(v) for v in values.ravel()}


def test_badges_follow_a_resize(qtbot, shown_figure):
    from gui.tabs.scores.score_map import ScoreMap

    values = standouts(seed=1)
    fig = shown_figure(ScoreMap, 900, 600)
    fig.set_score("sink", values)
    qtbot.wait(50)
    wide = len(fig.badges)
    fig.resize(200, 400)
    qtbot.waitUntil(lambda: len(fig.badges) < wide)
    fig.resize(900, 600)
    qtbot.waitUntil(lambda: len(fig.badges) == wide)


def test_a_head_selected_before_the_map_is_laid_out_leaves_every_head_in_view(qtbot):
    """The Head scores tab's map is filled and given the selection while another tab is shown: its view has not
    been ranged yet, and bringing the head "into view" then must not zoom the map onto that one cell."""
    from gui.plots.figures import dispose_figure
    from gui.plots.layer_head_map import LayerHeadMap

    fig = LayerHeadMap()
    try:
        fig.resize(300, 500)
        fig.set_image(np.random.default_rng(0).random((30, 9), dtype=np.float32), (30, 9), (0, 1), "viridis", "t")
        fig.select(5, 3)
        fig.show()
        qtbot.waitExposed(fig)
        qtbot.wait(50)
        (x0, x1), (y0, y1) = fig.plot.getViewBox().viewRange()
        assert (x0, x1) == pytest.approx((0, 9), abs=1e-6) and (y0, y1) == pytest.approx((0, 30), abs=1e-6)
    finally:
        dispose_figure(fig)


def test_badges_set_before_the_map_has_its_image_wait_for_it(qtbot, lh_map):
    """At 8,192 tokens the scores reach the grid before its thumbnails: the badges wait for the cells (no
    ZeroDivisionError from an empty layout), and appear on them once the image comes."""
    values = np.zeros((3, 4))
    values[2, 1] = 0.9
    lh_map.set_badges(values, "previous token")
    assert lh_map.badges == [] and lh_map.badge_layer.outline.path().isEmpty()
    show(qtbot, lh_map)
    assert not lh_map.badge_layer.outline.path().isEmpty()
    assert lh_map.badge_layer.heads[0] == (2, 1)
