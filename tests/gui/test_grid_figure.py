"""The grid figure (gui/plots/grid_figure.py): the mosaic's blocks and aspect for tall grids, the chosen layers and
heads with their real indices, no blank bands inside the frames, one colour scale, the title from the model's name —
read from the PNG's pixels and the SVG's text of a fake 30 × 9 result."""
import html
import re

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtGui  # noqa: E402

from analysis.export.figure_options import FigureOptions  # noqa: E402

N = 12


def causal(n, seed):
    rng = np.random.default_rng(seed)
    w = rng.random((n, n)).astype(np.float32) * np.tri(n, dtype=np.float32)
    return w / w.sum(-1, keepdims=True)


class Tall:
    """A result with 30 layers × 9 heads (SmolLM2's shape), 12 tokens; head (layer 5, head 2) is a one-hot diagonal."""
    n_layer, n_head = 30, 9
    attentions = np.stack([np.stack([causal(N, 9 * layer + head) for head in range(9)]) for layer in range(30)])
    attentions[5, 2] = np.eye(N, dtype=np.float32)
    thumbnails, tokens, n_tokens, causal = None, tuple(f"t{i}" for i in range(N)), N, True
    model_label, text, bos = "/some/folder/fake-model", "x", None
    head_map = staticmethod(lambda layer, head: Tall.attentions[layer, head])


def rgb(path) -> np.ndarray:
    image = QtGui.QImage(str(path)).convertToFormat(QtGui.QImage.Format.Format_RGB32)
    pixels = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine() // 4, 4)
    return pixels[:, : image.width(), 2::-1].astype(int)


def draw(tmp_path, fmt="png", **options):
    from gui.export.figure_files import save_figure
    from gui.plots.figures import dispose_figure
    from gui.plots.grid_figure import grid_figure

    opts = FigureOptions(**options)
    fig, shown = grid_figure(Tall, opts)
    try:
        path = save_figure(fig, tmp_path / f"g.{fmt}", opts.pixels)
        frames = [frame_rect(fig, plot) for plot in fig.plots]
        levels = [tuple(image.levels) for image in fig.images]
    finally:
        dispose_figure(fig)
    return path, shown, frames, levels


def frame_rect(fig, plot):
    """(x0, y0, x1, y1) of a block's frame (its view box) in figure pixels."""
    origin = fig.mapToScene(fig.viewport().rect()).boundingRect().topLeft()
    r = plot.getViewBox().sceneBoundingRect().translated(-origin)
    return r.left(), r.top(), r.right(), r.bottom()


def test_the_block_count_is_the_one_nearest_the_aspect():
    from gui.plots.grid_figure import mosaic_blocks

    assert mosaic_blocks(30, 9) == 2  # 18 / 15 = 1.2, against 9 / 30 = 0.3 and 27 / 10 = 2.7
    assert mosaic_blocks(48, 25) == 1  # 25 / 48 ≈ 0.52, against 50 / 24 ≈ 2.1
    assert mosaic_blocks(30, 9, aspect=3) == 3  # 2.7
    assert mosaic_blocks(12, 12) == 1 and mosaic_blocks(1, 1) == 1
    for L, H in ((30, 9), (48, 25), (24, 16), (7, 2)):
        k = mosaic_blocks(L, H)
        got = k * H / -(-L // k)
        assert all(abs(np.log(got)) <= abs(np.log(j * H / -(-L // j))) + 0.36 for j in range(1, L + 1)
                   if (j - 1) * -(-L // j) < L)


def test_a_tall_grid_is_a_near_square_mosaic_of_blocks_with_square_cells(qtbot, tmp_path):
    path, shown, frames, _ = draw(tmp_path)
    assert shown["blocks"] == 2 and len(frames) == 2
    pixels = rgb(path)
    coloured = (pixels.max(-1) - pixels.min(-1)) > 40  # a viridis cell; white, black and grey are not
    # the map's pixels lie in two side-by-side blocks, each inside its frame, 15 layers × 9 heads of square cells
    columns = np.flatnonzero(coloured.any(0))
    runs = np.split(columns, np.flatnonzero(np.diff(columns) > 20) + 1)
    assert len(runs) >= 2
    for x0, y0, x1, y1 in frames:
        w, h = x1 - x0, y1 - y0
        assert w / 9 == pytest.approx(h / 15, rel=0.05)  # square cells
    left, right = frames[0][0], frames[-1][2]
    top, bottom = frames[0][1], frames[0][3]
    assert 0.9 < (right - left) / (bottom - top) < 1.6  # near square (18 / 15 and the gap between blocks)
    assert pixels.shape[1] / pixels.shape[0] > 0.8  # no 1000 × 2600 strip


def test_no_blank_band_inside_any_frame(qtbot, tmp_path):
    path, _, frames, _ = draw(tmp_path)
    pixels = rgb(path)
    white = (pixels > 245).all(-1)
    for x0, y0, x1, y1 in frames:
        inside = white[int(y0) + 2 : int(y1) - 1, int(x0) + 2 : int(x1) - 1]
        for axis in (0, 1):  # every pixel column and every pixel row crosses a map cell, but for the 1-px lines
            blank = inside.all(axis=axis)
            longest = max((len(r) for r in np.split(blank, np.flatnonzero(~blank)) if r.any()), default=0)
            assert longest <= 3, (axis, longest)


def test_the_chosen_layers_and_heads_are_shown_with_their_real_indices(qtbot, tmp_path):
    path, shown, _, _ = draw(tmp_path, fmt="svg", layers=tuple(range(14, 24)), grid_heads=(0, 2, 5))
    assert shown["layers"] == list(range(14, 24)) and shown["grid_heads"] == [0, 2, 5]
    texts = [html.unescape(t).strip() for t in re.findall(r">([^<>]+)</text>", path.read_text())]
    assert {str(i) for i in range(14, 24)} <= set(texts)
    assert {"0", "2", "5"} <= set(texts) and not {"1", "3", "4", "6", "13", "24"} & set(texts)
    assert texts.count("layer") == shown["blocks"] and texts.count("head") == shown["blocks"]
    title, = [t for t in texts if "—" in t]
    assert title == "fake-model — layers 14–23, heads 0, 2, 5, 12 tokens" and "/" not in title


def test_one_colour_scale_0_to_1_or_vmax_and_the_one_hot_head_at_its_top(qtbot, tmp_path):
    from gui.plots.plot_items import colormap

    path, _, frames, levels = draw(tmp_path, layers=(5,), grid_heads=(2, 3))
    assert set(levels) == {(0.0, 1.0)}
    top = np.array(colormap("viridis").map(1.0, mode="byte")[:3], int)
    pixels = rgb(path)
    x0, y0, x1, y1 = frames[0]
    cell = pixels[int(y0) + 3 : int(y1) - 3, int(x0) + 3 : int((x0 + x1) / 2) - 3]  # head 2: the eye
    assert (np.abs(cell - top).sum(-1) < 30).mean() > 0.03  # its diagonal drawn at the top colour
    _, _, _, levels = draw(tmp_path, vmax=0.25)
    assert set(levels) == {(0.0, 0.25)}


def test_an_unknown_badge_score_is_one_sentence_naming_the_scores():
    from analysis.errors import InputError
    from analysis.measures.head_scores import SCORE_NAMES
    from gui.plots.grid_figure import check_badges

    with pytest.raises(InputError) as err:
        check_badges("prev")
    message = str(err.value)
    assert message.count(".") == 1 + sum(n.count(".") for n in SCORE_NAMES) and all(n in message for n in SCORE_NAMES)
