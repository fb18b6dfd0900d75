"""gui/plots/head_layout.py, pure arithmetic: where each head's cell lies when a layer × head map is wrapped into
side-by-side blocks of layers, checked by enumeration, and how many blocks a panel's shape asks for."""
import itertools
import math

import numpy as np
import pytest

from gui.plots.head_layout import HeadLayout, blocks_for


@pytest.mark.parametrize("L,H,blocks", [(30, 9, 2), (30, 9, 3), (7, 4, 3), (5, 5, 1), (48, 25, 2)])
def test_every_head_has_one_cell_and_every_cell_one_head_or_none(L, H, blocks):
    layout = HeadLayout(L, H, blocks)
    R = math.ceil(L / blocks)
    assert (layout.rows, layout.columns) == (R, blocks * H)
    seen = {}
    for layer, head in itertools.product(range(L), range(H)):
        x, y = layout.origin(layer, head)
        assert (x, y) == ((layer // R) * H + head, layer % R)  # the docstring's formula
        assert layout.head_at(y, x) == (layer, head)
        seen[(x, y)] = (layer, head)
    assert len(seen) == L * H
    empty = [(x, y) for x in range(layout.columns) for y in range(layout.rows) if (x, y) not in seen]
    assert all(layout.head_at(y, x) is None for x, y in empty)  # the last block's tail
    assert len(empty) == blocks * R * H - L * H
    assert layout.head_at(-1, 0) is None and layout.head_at(0, layout.columns) is None


@pytest.mark.parametrize("L,H,blocks,c", [(30, 9, 2, 3), (7, 4, 3, 2), (4, 3, 1, 5)])
def test_wrap_puts_each_thumbnail_in_its_cell(L, H, blocks, c):
    layout = HeadLayout(L, H, blocks)
    cells = np.random.default_rng(0).random((L, H, c, c)).astype(np.float32)
    image = layout.wrap(cells)
    assert image.shape == (layout.rows * c, layout.columns * c)
    for layer, head in itertools.product(range(L), range(H)):
        x, y = layout.origin(layer, head)
        assert np.array_equal(image[y * c:(y + 1) * c, x * c:(x + 1) * c], cells[layer, head])
    assert np.isnan(image).sum() == (layout.rows * layout.columns - L * H) * c * c
    with pytest.raises(ValueError):
        layout.wrap(cells[:, :-1])


def test_blocks_are_chosen_for_cells_nearest_square():
    def aspect(L, H, w, h, k):
        return abs(math.log((w / (k * H)) / (h / math.ceil(L / k))))

    for L, H, w, h in [(30, 9, 640, 560), (48, 25, 640, 560), (12, 12, 640, 560), (30, 9, 300, 900), (6, 12, 900, 260)]:
        k = blocks_for(L, H, w, h)
        valid = [j for j in range(1, L + 1) if math.ceil(L / math.ceil(L / j)) == j]
        assert k in valid and aspect(L, H, w, h, k) <= min(aspect(L, H, w, h, j) for j in valid) + 1e-9
    assert blocks_for(30, 9, 640, 560) == 2  # SmolLM2 in the panel at 1366 × 768
    assert blocks_for(30, 9, 0, 0) == 1 and blocks_for(0, 0, 640, 560) == 1


def test_the_axis_label_names_each_blocks_layers_left_to_right():
    assert HeadLayout(12, 12, 1).axis_label() == "head"
    assert HeadLayout(30, 9, 2).axis_label() == "head · blocks left to right: L0–L14 | L15–L29"
    assert HeadLayout(7, 4, 3).axis_label() == "head · blocks left to right: L0–L2 | L3–L5 | L6"
