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
        assert "layer 2, head 3" in lh_map._text_for((2 * c, 3 * c))


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


def test_badges_mark_only_the_top_heads_best_first(qtbot, lh_map):
    from gui.plots.layer_head_map import top_heads

    show(qtbot, lh_map)
    values = np.array([[0.1, 0.9, 0.5, np.nan], [0.95, 0.2, 0.3, 0.4], [0.6, 0.0, 0.1, 0.2]])
    assert top_heads(values) == [(1, 0), (0, 1), (2, 0)]  # k = 3 of 12 heads
    lh_map.set_badges(values, "induction")
    assert len(lh_map.badges) == 3 and "★" in lh_map.badges[0].textItem.toPlainText()
    assert "induction 0.950" in lh_map.hover_text(1, 0)
    big = np.random.default_rng(0).random((12, 12))
    assert len(top_heads(big)) == 10 and top_heads(big)[0] == np.unravel_index(big.argmax(), big.shape)
    lh_map.set_badges(None)
    assert not lh_map.badges


def test_compact_badge_values_round_and_never_cut():
    from gui.plots.layer_head_map import badge_wordings, compact_value

    assert [compact_value(v) for v in (0.891, 0.3, -0.123, 0.996, 2.345, 12.6)] == \
        [".89", ".30", "-.12", "1.0", "2.3", "13"]
    assert badge_wordings(0.891, True) == ["★ 0.89", "★.89", ".89"]
    assert badge_wordings(0.17, False) == ["0.17", ".17"]


@pytest.mark.parametrize("size", [(330, 420), (290, 400), (240, 420), (420, 500), (900, 600)])
def test_every_badge_lies_inside_its_own_cell_at_any_width(qtbot, shown_figure, size):
    """At any panel width (1366 px with 72 heads among them) a badge is drawn whole inside its own cell — in
    fewer digits or not at all, never running into its neighbour's ("★ 0.80.88") — and over the selection
    frame, which never cuts its digits ("0.|7")."""
    from gui.plots.layer_head_map import BADGE_INSET_PX
    from gui.tabs.scores.score_map import ScoreMap

    L, H = 6, 12  # minilm
    values = np.random.default_rng(5).random((L, H))
    values[2, 7], values[2, 8], values[1, 9], values[1, 11] = 0.999, 0.998, 0.997, 0.996
    fig = shown_figure(ScoreMap, *size)
    fig.set_score("sink", values)
    fig.select(1, 11)
    qtbot.wait(50)
    vb = fig.plot.getViewBox()
    cell_px = vb.mapViewToScene(QtCore.QRectF(0, 0, 1, 1)).boundingRect()
    hidden = [item for item in fig._badge_items if item not in fig.badges]
    assert all(not item.isVisible() for item in hidden) and all(item.isVisible() for item in fig.badges)
    for item, (layer, head, _) in zip(fig._badge_items, fig._badge_texts):
        if not item.isVisible():
            continue
        cell = vb.mapViewToScene(QtCore.QRectF(head, layer, 1, 1)).boundingRect()
        box = item.mapRectToScene(item.boundingRect())
        inner = cell.adjusted(BADGE_INSET_PX - 0.5, BADGE_INSET_PX - 0.5, -BADGE_INSET_PX + 0.5, -BADGE_INSET_PX + 0.5)
        assert inner.contains(box), (size, layer, head, box, cell)
        assert item.zValue() > fig.selection.zValue()
    text = [item.textItem.toPlainText() for item in fig.badges]
    if cell_px.width() >= 60:  # room for the whole wording
        assert text[0] == "★ 1.00" and len(fig.badges) == len(fig._badge_items)
    for t in text:  # whatever is shown is the value, rounded, never a cut-off piece of it
        assert t.lstrip("★ ") in {f"{v:.2f}" for v in values.ravel()} | {f"{v:.2f}"[1:] for v in values.ravel()} \
            | {"1.0"}


def test_badges_follow_a_resize(qtbot, shown_figure):
    from gui.tabs.scores.score_map import ScoreMap

    values = np.random.default_rng(1).random((6, 12))
    fig = shown_figure(ScoreMap, 900, 600)
    fig.set_score("sink", values)
    qtbot.wait(50)
    wide = len(fig.badges)
    fig.resize(200, 400)
    qtbot.waitUntil(lambda: len(fig.badges) < wide)
    fig.resize(900, 600)
    qtbot.waitUntil(lambda: len(fig.badges) == wide)
