"""The shared layer × head map: cells, clicks, double-click/Enter, arrows, badges, hover text."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import double_click, view_point  # noqa: E402


@pytest.fixture
def lh_map(shown_figure):
    from gui.layer_head_map import LayerHeadMap

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
    from gui.layer_head_map import top_heads

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
