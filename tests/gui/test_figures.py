"""The figures: hover readouts and tooltips, zoom limits and reset, label thinning, grid pooling,
hide-first on the grid, SVG export that looks like the PNG, themes and colormap names."""
import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from analysis.display import pooled, pooled_heads, without_first_key  # noqa: E402
from gui.plots.figures import dispose_figure  # noqa: E402
from helpers import double_click, plain, view_point  # noqa: E402


def causal(n, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random((n, n)).astype(np.float32) * np.tri(n, dtype=np.float32)
    return w / w.sum(-1, keepdims=True)


@pytest.fixture
def head(shown_figure):
    from gui.plots.figures import HeadPlot

    return shown_figure(HeadPlot, 600, 600)


def settle(qtbot, ms=50):
    qtbot.wait(ms)
    QtWidgets.QApplication.processEvents()


@pytest.mark.slow
def test_the_value_tooltip_stays_while_the_pointer_rests(qtbot, head):
    head.set_head(causal(8), [f"t{i}" for i in range(8)], "x")
    settle(qtbot)
    qtbot.mouseMove(head.viewport(), view_point(head, 2.5, 5.5))
    qtbot.wait(300)
    assert QtWidgets.QToolTip.isVisible() and "key 't2' [2]" in plain(QtWidgets.QToolTip.text())
    qtbot.wait(1500)  # past Qt's tooltip wake-up (~0.7 s), which must not hide it
    assert QtWidgets.QToolTip.isVisible() and "key 't2' [2]" in plain(QtWidgets.QToolTip.text())
    QtWidgets.QToolTip.hideText()


def test_hover_reports_the_cell_and_the_value_as_drawn_after_the_tooltip(qtbot, head):
    w = causal(6)
    head.set_head(w, [f"t{i}" for i in range(6)], "x", hide_first=True)
    seen = []
    head.cell_hovered.connect(lambda cell: seen.append((cell, head.image.toolTip())))
    head.image.hover_cell((4, 2))
    (cell, tooltip), = seen
    assert cell[:2] == (4, 2) and cell[2] == pytest.approx(float(without_first_key(w)[4, 2]))
    assert "query 't4' [4] → key 't2' [2]" in plain(tooltip)  # the tooltip was already this cell's
    head.image.hover_cell((1, 0))
    assert np.isnan(seen[-1][0][2]) and "hidden (first key)" in plain(seen[-1][1])
    head.image.hover_cell(None)
    assert seen[-1][0] is None
    # a new run under a resting pointer: the readout follows the new data
    w2 = causal(6, seed=5)
    head.image.hover_cell((4, 2))
    head.set_head(w2, [f"u{i}" for i in range(6)], "y")
    assert seen[-1][0][2] == pytest.approx(float(w2[4, 2])) and "'u4'" in plain(seen[-1][1])


def test_hover_text_never_renders_tokens_as_html(qtbot, head):
    tokens = ["<b>bold</b>", "&amp;", "<img src=x>", "d"]
    head.set_head(causal(4), tokens, "<i>title</i>")
    head.image.hover_cell((1, 0))
    tip = head.image.toolTip()
    assert "&lt;b&gt;bold&lt;/b&gt;" in tip and "<b>bold</b>" not in tip and "&amp;amp;" in tip
    assert "query '&amp;' [1] → key '<b>bold</b>' [0]" in plain(tip)  # shown literally
    assert "&lt;i&gt;" in head.plot.titleLabel.text


@pytest.mark.slow
def test_zoom_stays_on_the_data_and_resets(qtbot, head):
    n = 20
    head.set_head(causal(n), [f"t{i}" for i in range(n)], "x")
    settle(qtbot)
    vb = head.plot.getViewBox()
    vb.scaleBy((20, 20))  # try to zoom far out
    settle(qtbot)
    (x0, x1), (y0, y1) = vb.viewRange()
    assert x0 >= -1e-6 and x1 <= n + 1e-6 and y0 >= -1e-6 and y1 <= n + 1e-6
    for reset in (lambda: qtbot.keyClick(head, QtCore.Qt.Key.Key_Home), vb.reset_action.trigger,
                  head.reset_button.click,
                  lambda: double_click(qtbot, head.viewport(), view_point(head, 7.5, 4.5))):
        vb.scaleBy((0.2, 0.2), center=QtCore.QPointF(5, 5))
        settle(qtbot)
        assert vb.viewRange()[0][1] - vb.viewRange()[0][0] < n / 2
        reset()
        settle(qtbot)
        np.testing.assert_allclose(vb.viewRange(), [[0, n], [0, n]], atol=1e-6)


def test_the_map_fills_the_plot(qtbot, head):
    head.resize(1100, 600)  # a wide plot: no empty half beside a square map
    head.set_head(causal(30), [f"t{i}" for i in range(30)], "x")
    settle(qtbot, 200)
    vb = head.plot.getViewBox()
    image_rect = head.image.mapRectToScene(head.image.boundingRect())
    assert image_rect.width() >= 0.98 * vb.sceneBoundingRect().width()


@pytest.mark.parametrize("n", [38, 120, 400])
def test_labels_are_thinned_so_that_neighbours_never_touch(qtbot, head, n):
    tokens = [("␣tok" if i % 2 else "word") + "x" * (i % 40) for i in range(n)]
    head.set_head(causal(n), tokens, "x")
    settle(qtbot, 200)
    vb = head.plot.getViewBox()
    row_px, col_px = vb.height() / n, vb.width() / n
    metrics = QtGui.QFontMetrics(head.left_axis.style["tickFont"])
    for axis, px in ((head.left_axis, row_px), (head.bottom_axis, col_px)):
        # a line of text on the left; a rotated label's thickness, fallback glyphs included, underneath
        height = metrics.height() if axis is head.left_axis else \
            max(metrics.boundingRect(t).height() for t in axis._labels)
        positions = [v for v, _ in axis._tickLevels[0]]
        gaps = np.diff(positions) * px
        assert gaps.min() >= height, (axis.orientation, gaps.min(), height)
        assert all(len(label) <= 24 + len(f" [{n}]") for _, label in axis._tickLevels[0])  # 24 + " [index]"



@pytest.mark.parametrize("height", [330, 420, 560])
def test_query_labels_are_thinned_only_when_rows_are_shorter_than_a_line(qtbot, shown_figure, height):
    """On a laptop (rows ~15 px tall from ~20 tokens) every query label is kept: labels are thinned only when a
    row is shorter than a line."""
    from gui.plots.figures import HeadPlot

    head = shown_figure(HeadPlot, 700, height)
    n = 20
    head.set_head(causal(n), ["<|endoftext|>"] + [f"␣w{i}" for i in range(1, n)], "x")
    settle(qtbot, 100)
    vb = head.plot.getViewBox()
    row_px = vb.height() / n
    line = QtGui.QFontMetrics(head.left_axis.style["tickFont"]).height()
    shown = [label for _, label in head.left_axis._tickLevels[0]]
    if row_px >= line:
        assert len(shown) == n and "␣w1 [1]" in shown, (row_px, line)
    else:
        assert len(shown) == -(-n // -(-line // row_px)), (row_px, line)


def test_rotated_key_labels_are_cut_harder_and_keep_the_index(qtbot, head):
    """A long token under the map would take its height ("<|endoftext|> 0" took ~100 px of a laptop's ~340):
    a rotated label is at most ROTATED_LABEL_CHARS (14) characters, the index whole; the query labels
    keep 24 characters of the token. A common word with its index ("␣because [6]") is not cut."""
    from gui.plots.figures import ROTATED_LABEL_CHARS, rotated_label

    assert ROTATED_LABEL_CHARS == 14
    head.set_head(causal(3), ["<|endoftext|>", "ab", "x" * 30], "t")
    assert head.bottom_axis._labels == ["<|endofte… [0]", "ab [1]", "xxxxxxxxx… [2]"]
    assert head.left_axis._labels == ["<|endoftext|> [0]", "ab [1]", "x" * 23 + "… [2]"]
    assert rotated_label("␣because", 6) == "␣because [6]"
    assert rotated_label("abcdefghijkmn", 123) == "abcdefg… [123]" and rotated_label("abcde", 123) == "abcde [123]"
    assert rotated_label("x", 1234567890123) == "x [1234567890123]"  # the index is never cut
    metrics = QtGui.QFontMetrics(head.bottom_axis.style["tickFont"])
    before = metrics.horizontalAdvance("<|endoftext|> [0]")
    cut = max(metrics.horizontalAdvance(label) for label in head.bottom_axis._labels)
    # the axis is sized by the cut labels, not the whole one: their longest, and the title below it
    assert head.bottom_axis._longest == cut < before
    assert head.bottom_axis.height() < before + 22  # (the whole label and its title: before + 24 or more)


def test_number_tokens_and_their_indices_read_the_same_way_on_both_axes(qtbot, head):
    """On "1 2 3 … 16" the labels were "11 ␣12" down the side and "␣12 11" along the bottom: one form on both
    axes, the index in brackets after the token, as the hover writes it ("'␣12' [11]")."""
    import re

    tokens = ["1"] + [f"␣{i}" for i in range(2, 17)]
    head.set_head(causal(16), tokens, "t")
    for axis in (head.left_axis, head.bottom_axis):
        parsed = [re.fullmatch(r"(.*) \[(\d+)\]", label) for label in axis._labels]
        assert all(parsed), axis._labels
        assert [(m.group(1), int(m.group(2))) for m in parsed] == [(t, i) for i, t in enumerate(tokens)]
    assert head.left_axis._labels == head.bottom_axis._labels  # short tokens: the very same text
    head.image.hover_cell((11, 3))
    assert "query '␣12' [11] → key '␣4' [3]" in plain(head.image.toolTip())
    # tick labels are drawn as plain text (QPainter.drawText), so a token is shown as it is, never as markup
    head.set_head(causal(2), ["<b>x</b>", "&amp;"], "t")
    assert head.left_axis._labels == ["<b>x</b> [0]", "&amp; [1]"]


def grid_result(n=200, L=2, H=3):
    a = np.zeros((L, H, n, n), dtype=np.float32)
    a[..., 0, 0] = 1.0
    a[..., np.arange(1, n), np.arange(n - 1)] = 1.0  # previous-token heads everywhere
    return a


@pytest.fixture
def grid(shown_figure):
    from gui.plots.grid_plot import GridPlot

    return shown_figure(GridPlot, 500, 500)


def bright_rows(fig, layer, head):
    """How many pixel rows of one cell, as painted on screen, hold a bright (yellow) pixel, and the cell's height."""
    image = fig.grab().toImage()
    top_left = view_point(fig, head + 0.1, layer + 0.1)
    bottom_right = view_point(fig, head + 0.9, layer + 0.9)
    ratio = image.devicePixelRatio()
    rows = 0
    y_range = range(int(top_left.y() * ratio) + 2, int(bottom_right.y() * ratio) - 2)
    for y in y_range:
        if any(QtGui.QColor(image.pixel(x, y)).green() > 200
               for x in range(int(top_left.x() * ratio), int(bottom_right.x() * ratio))):
            rows += 1
    return rows, len(y_range)


@pytest.mark.slow
def test_grid_thumbnails_are_pooled_to_the_pixels_each_cell_has(qtbot, grid):
    a = grid_result()
    thumbs = pooled_heads(a, 96)
    grid.set_attentions(thumbs, full=a, key=1)
    settle(qtbot, 200)
    assert grid.cell == grid.target_cell() > 96  # more pixels than the thumbnails: pooled from the full map
    for size in ((260, 220), (800, 700), (180, 160)):
        grid.resize(*size)
        settle(qtbot, 300)
        assert grid.cell <= grid.target_cell() * 1.0 and grid.cell >= 0.8 * grid.target_cell()
        rows, height = bright_rows(grid, 1, 2)
        assert rows >= height - 1  # the diagonal crosses every pixel row: no row was dropped


def test_grid_hides_the_first_key_like_the_head_plot(qtbot, grid):
    rng = np.random.default_rng(1)
    a = rng.random((2, 2, 30, 30)).astype(np.float32) * np.tri(30, dtype=np.float32)
    a /= a.sum(-1, keepdims=True)
    grid.set_attentions(a, key=1, hide_first=True)
    settle(qtbot, 200)
    c = grid.cell
    block = grid.image.image[c : 2 * c, 0:c]  # layer 1, head 0
    np.testing.assert_allclose(block, pooled(without_first_key(a[1, 0]), c), rtol=1e-5, equal_nan=True)
    assert "first key hidden" in grid.colorbar.axis.labelText


def test_large_grids_are_pooled_a_layer_per_event_loop_turn(qtbot, grid, monkeypatch):
    import gui.plots.grid_plot as grid_plot

    monkeypatch.setattr(grid_plot, "SYNC_ELEMENTS", 10)
    a = grid_result(n=120, L=4, H=2)
    with qtbot.waitSignal(grid.mosaic_ready, timeout=5000):
        grid.set_attentions(a, key=7, hide_first=True)
        assert grid._job is not None  # not done yet: the GUI thread is free in between
    assert grid.image.image.shape == (4 * grid.cell, 2 * grid.cell)


def test_svg_export_looks_like_the_png(qtbot, tmp_path):
    from PySide6 import QtSvg

    from gui.plots.figures import dispose_figure, offscreen_grid_figure, offscreen_head_figure
    from gui.export.figure_files import save_figure

    class Result:
        n, n_layer, n_head = 14, 3, 2
        attentions = np.stack([np.stack([causal(14, seed=l * 2 + h) for h in range(2)]) for l in range(3)])
        thumbnails, tokens, n_tokens, model_label, causal = None, tuple(f"tok{i}" for i in range(14)), 14, "m", True
        head_map = staticmethod(lambda layer, head: Result.attentions[layer, head])

    for make in (lambda: offscreen_head_figure(Result, 1, 1), lambda: offscreen_grid_figure(Result)):
        fig = make()
        png, svg = save_figure(fig, tmp_path / "f.png"), save_figure(fig, tmp_path / "f.svg")
        dispose_figure(fig)
        reference = QtGui.QImage(str(png)).convertToFormat(QtGui.QImage.Format.Format_RGB32)
        drawn = QtGui.QImage(reference.size(), QtGui.QImage.Format.Format_RGB32)
        drawn.fill(QtCore.Qt.GlobalColor.white)
        painter = QtGui.QPainter(drawn)
        QtSvg.QSvgRenderer(str(svg)).render(painter)
        painter.end()

        def small_rgb(image):  # 4× smaller, so antialiasing differences average out
            small = image.scaled(image.width() // 4, image.height() // 4, QtCore.Qt.AspectRatioMode.IgnoreAspectRatio,
                                 QtCore.Qt.TransformationMode.SmoothTransformation)
            return rgb(small).astype(float)

        def rgb(image):
            arr = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine() // 4, 4)
            return arr[:, : image.width(), :3].astype(int)

        def colour_box(image):  # bounding box of the saturated (heatmap and colour bar) pixels
            pixels = rgb(image)
            ys, xs = np.nonzero(pixels.max(-1) - pixels.min(-1) > 60)
            return np.array([xs.min(), ys.min(), xs.max(), ys.max()])

        # measured: aligned 0.7–1.0 / 0.1–0.4 %; the 72-dpi SVG (text and axes at 0.75) 3.5 / 1.7 %
        difference = np.abs(small_rgb(reference) - small_rgb(drawn)).max(-1)
        assert difference.mean() < 1.5 and (difference > 64).mean() < 0.006
        np.testing.assert_allclose(colour_box(drawn), colour_box(reference), atol=3)


def test_every_figure_is_exported_after_a_check(qtbot, tmp_path):
    from gui.plots.result_images import write_result_images

    class Result:
        n_layer, n_head = 2, 2
        attentions = np.stack([np.stack([causal(5, seed=l + h) for h in range(2)]) for l in range(2)])
        thumbnails, tokens, n_tokens, model_label, causal = None, tuple("abcde"), 5, "m", True
        head_map = staticmethod(lambda layer, head: Result.attentions[layer, head])

    calls = []
    written = write_result_images(Result, tmp_path, check=lambda: calls.append(1), png_width=300)
    assert len(written) == 10 and len(calls) >= 5  # 5 figures, each with its options file beside it
    assert [p.suffix for p in written] == [".png", ".json"] * 5 and written[3].name == "L0H0.json"
    assert QtGui.QImage(str(written[2])).width() == 300

    class Stop(Exception):
        pass

    def stop_after_two():
        calls.append(1)
        if len(calls) > 2:
            raise Stop

    calls.clear()
    with pytest.raises(Stop):
        write_result_images(Result, tmp_path / "..", check=stop_after_two)


def test_colormap_names_and_dark_theme(qtbot, head):
    import pyqtgraph as pg

    from gui.state.view_state import COLORMAPS, COLORMAP_LABELS
    from gui.plots.plot_items import apply_theme

    assert set(COLORMAP_LABELS) == set(COLORMAPS) and "viridis" in COLORMAPS
    assert "grey" in COLORMAP_LABELS["CET-L1"]
    for name in COLORMAPS:
        pg.colormap.get(name)
    head.set_head(causal(5), list("abcde"), "t")
    apply_theme(head, True)
    assert head.backgroundBrush().color().lightness() < 60
    assert head.left_axis.textPen().color().lightness() > 180
    assert head.colorbar.axis.textPen().color().lightness() > 180
    assert QtGui.QColor(head.plot.titleLabel.opts["color"]).lightness() > 180
    apply_theme(head, False)
    assert head.backgroundBrush().color().lightness() > 240


def test_clicking_a_query_label_on_the_axis_picks_its_row(qtbot, head):
    n = 8
    head.set_head(causal(n), [f"t{i}" for i in range(n)], "x")
    settle(qtbot, 100)
    clicked = []
    head.query_clicked.connect(clicked.append)
    axis = head.left_axis
    label_x = axis.mapToScene(axis.boundingRect().center()).x()  # on the labels, left of the map
    row_y = head.plot.vb.mapViewToScene(QtCore.QPointF(0.5, 5.5)).y()
    qtbot.mouseClick(head.viewport(), QtCore.Qt.MouseButton.LeftButton,
                     pos=head.mapFromScene(QtCore.QPointF(label_x, row_y)))
    assert clicked == [5]
    assert axis.index_at(QtCore.QPointF(label_x, head.plot.vb.mapViewToScene(QtCore.QPointF(0.5, 2.2)).y())) == 2


def test_the_hover_follows_a_zoom_under_a_resting_pointer(qtbot, head):
    n = 20
    head.set_head(causal(n), [f"t{i}" for i in range(n)], "x")
    settle(qtbot, 100)
    seen = []
    head.cell_hovered.connect(seen.append)
    qtbot.mouseMove(head.viewport(), view_point(head, 15.5, 17.5))
    qtbot.wait(100)
    assert seen and seen[-1][:2] == (17, 15)
    scene_point = head.plot.vb.mapViewToScene(QtCore.QPointF(15.5, 17.5))
    head.plot.vb.scaleBy((0.5, 0.5), center=QtCore.QPointF(5, 5))  # as a wheel zoom does, the pointer resting
    settle(qtbot)
    now = head.plot.vb.mapSceneToView(scene_point)
    expected = (int(now.y()), int(now.x()))
    assert expected != (17, 15) and seen[-1][:2] == expected  # re-reported without a mouse move
    assert f"[{expected[0]}] → key 't{expected[1]}'" in plain(head.image.toolTip())


def test_colour_bar_names_the_quantity_and_hide_first_tooltip_gives_the_weight_before(qtbot, head):
    w = causal(6)
    head.set_head(w, list("abcdef"), "x", scale="power", quantity="rollout R")
    assert head.colorbar.axis.labelText == "√rollout R"
    head.set_head(w, list("abcdef"), "x", hide_first=True)
    assert head.colorbar.axis.labelText == "weight (first key hidden)"
    tip = head._text_for((4, 2))
    assert f"{without_first_key(w)[4, 2]:.3f} renormalised" in tip and f"(before renormalising: {w[4, 2]:.3f})" in tip


def test_a_head_figures_tooltip_is_the_hover_text(qtbot, head):
    """HeadPlot's tooltip was a hand-copied twin of the Head tab's hover text and had drifted ("masked (future
    token)"): it is gui/plots/hover_text.py's text now, and a view passes its own through ``describe``."""
    from gui.plots.figures import HeadPlot
    from gui.plots.hover_text import hover_text

    w, tokens = causal(6), list("abcdef")
    for hide_first in (False, True):
        head.set_head(w, tokens, "x", hide_first=hide_first)
        shown = without_first_key(w) if hide_first else w
        for q, k in ((4, 2), (1, 3), (3, 0)):
            value = float(head.matrix[q, k])
            assert head._text_for((q, k)) == hover_text(tokens, (q, k, value), True, w[q, k] if hide_first else None)
            if k <= q and not (hide_first and k == 0):
                assert f": {shown[q, k]:.3f}" in head._text_for((q, k))
    assert head._text_for((1, 3)) == "query 'b' [1] → key 'd' [3]: masked (a future token)"
    seen = []
    own = HeadPlot(describe=lambda q, k, value: seen.append((q, k, value)) or f"cell {q},{k}")
    try:
        own.set_head(w, tokens, "x")
        assert own._text_for((4, 2)) == "cell 4,2" and seen == [(4, 2, pytest.approx(w[4, 2]))]
    finally:
        dispose_figure(own)


def test_grid_colour_bar_quantity(qtbot, grid):
    grid.set_attentions(grid_result(n=20), scale="log", key=3, quantity="share of row N", sync=True)
    assert grid.colorbar.axis.labelText == "log₁₀ share of row N"


def test_the_head_tab_hover_says_renormalised_and_gives_the_raw_weight():
    from gui.plots.hover_text import hover_text

    tokens = ("<s>", "a", "b")
    assert hover_text(tokens, (2, 1, 0.678), raw=0.225) == \
        "query 'b' [2] → key 'a' [1]: 0.678 renormalised without the first key (before renormalising: 0.225)"
    assert hover_text(tokens, (2, 1, 0.678)) == "query 'b' [2] → key 'a' [1]: 0.678"
    assert hover_text(tokens, (1, 2, float("nan"))).endswith("masked (a future token)")
    assert hover_text(tokens, (1, 2, 0.3), causal=False).endswith(": 0.300")  # an encoder has no future mask


def test_svg_text_falls_back_to_a_css_generic_family(qtbot, tmp_path):
    from gui.export.figure_files import SVG_FONT_FALLBACK, save_figure, svg_with_font_fallback
    from gui.plots.figures import offscreen_head_figure

    assert svg_with_font_fallback('<text font-family="Sans Serif" x="1">') == \
        f'<text font-family="{SVG_FONT_FALLBACK}" x="1">'
    assert svg_with_font_fallback('<g font-family="Noto Sans">') == \
        f'<g font-family="\'Noto Sans\', {SVG_FONT_FALLBACK}">'
    assert SVG_FONT_FALLBACK.endswith("sans-serif")

    class Result:
        n_layer, n_head = 1, 1
        attentions = causal(5)[None, None]
        thumbnails, tokens, n_tokens, model_label, causal = None, tuple("abcde"), 5, "m", True
        head_map = staticmethod(lambda layer, head: Result.attentions[layer, head])

    fig = offscreen_head_figure(Result, 0, 0)
    try:
        text = save_figure(fig, tmp_path / "f.svg").read_text(encoding="utf-8")
    finally:
        dispose_figure(fig)
    import re

    families = set(re.findall(r'font-family="([^"]*)"', text))
    assert families and all(f.endswith(", sans-serif") for f in families), families
    assert 'font-family="Sans Serif"' not in text


def test_colour_bars_show_weights_without_an_si_prefix(qtbot, head, grid):
    w = np.full((4, 4), 0.25, dtype=np.float32)
    w[:, 0] = 0.9997 - 0.75  # an encoder's map whose largest weight is just under 1
    w[0, 0] = 0.9997
    head.set_head(w, list("abcd"), "x", causal=False)
    grid.set_attentions(w[None, None], key=5, sync=True)
    settle(qtbot)
    for axis in (head.colorbar.axis, grid.colorbar.axis):
        assert "x0.001" not in axis.labelString() and axis.autoSIPrefixScale == 1.0


@pytest.mark.parametrize("export", [False, True])
def test_the_key_title_leaves_a_gap_below_the_longest_rotated_label(qtbot, head, export):
    """The "␣" of "␣reque… [7]" stays clear of the "key" title, in the app and in exports."""
    from gui.plots.figures import AXIS_TITLE_GAP_PX, LABEL_TOP_PX, offscreen_head_figure

    tokens = ["<|endoftext|>", "The", "␣server", "␣rejected", "␣the", "␣request", "␣because", "␣it"]
    if export:
        class Result:
            n = n_tokens = 8
            model_label, causal, attentions = "m", True, causal(8)[None, None]
            head_map = staticmethod(lambda layer, head: Result.attentions[layer, head])
        Result.tokens = tuple(tokens)
        fig = offscreen_head_figure(Result, 0, 0)
    else:
        head.set_head(causal(8), tokens, "x")
        settle(qtbot)
        fig = head
    axis = fig.bottom_axis
    metrics = QtGui.QFontMetrics(axis.style["tickFont"])
    longest = max(metrics.horizontalAdvance(label) for label in axis._labels)
    labels_end = axis.mapToScene(QtCore.QPointF(0, LABEL_TOP_PX + longest + 2)).y()
    title = axis.label
    title_top = title.mapToScene(QtCore.QPointF(0, title.document().documentMargin())).y()
    assert title.isVisible() and title.toPlainText().strip() == "key"
    assert title_top - labels_end >= AXIS_TITLE_GAP_PX - 0.5, (title_top, labels_end)
    if export:
        dispose_figure(fig)


def test_an_svg_has_the_figures_background(qtbot, tmp_path):
    """An SVG has the figure's background, as PNG and PDF do (a transparent one loses black labels on a dark
    viewer)."""
    import re

    from gui.plots.figures import offscreen_head_figure
    from gui.export.figure_files import save_figure

    class Result:
        n = n_tokens = 4
        model_label, causal, attentions, tokens = "m", True, causal(4)[None, None], ("a", "b", "c", "d")
        head_map = staticmethod(lambda layer, head: Result.attentions[layer, head])

    fig = offscreen_head_figure(Result, 0, 0)
    svg = save_figure(fig, tmp_path / "f.svg").read_text(encoding="utf-8")
    dispose_figure(fig)
    size = re.search(r'viewBox="0 0 (\S+) (\S+)"', svg).groups()
    first = re.search(r"<g fill=\"#([0-9a-f]{6})\"[^>]*>\s*<rect x=\"0\" y=\"0\" width=\"(\S+)\" height=\"(\S+)\"", svg)
    assert first and first.group(1) == "ffffff" and first.groups()[1:] == size
    drawn = QtGui.QImage(int(float(size[0])), int(float(size[1])), QtGui.QImage.Format.Format_ARGB32)
    drawn.fill(QtCore.Qt.GlobalColor.transparent)
    from PySide6 import QtSvg
    painter = QtGui.QPainter(drawn)
    QtSvg.QSvgRenderer(str(tmp_path / "f.svg")).render(painter)
    painter.end()
    assert drawn.pixelColor(10, 10) == QtGui.QColor("white")


def test_token_labels_are_measured_once_per_token_list_not_per_view(qtbot, head):
    """A new head of the same text, a zoom or a pan measures no label again (issue 20: a run's paint re-measured
    hundreds of labels): the axes' sizes are counted (LabelSizes.measured), and match Qt's own measure."""
    n = 300
    tokens = [("␣tok" if i % 3 else "word") + "x" * (i % 7) for i in range(n)]
    head.set_head(causal(n), tokens, "a")
    settle(qtbot)
    axis = head.bottom_axis
    metrics = QtGui.QFontMetrics(axis.style["tickFont"])
    assert axis._label_px == max(metrics.boundingRect(label).height() for label in axis._labels)
    assert axis._longest == max(metrics.horizontalAdvance(label) for label in axis._labels)
    assert head.left_axis.sizes.measured < n / 2  # the labels in view at the stride shown, not all n
    measured = (head.left_axis.sizes.measured, axis.sizes.measured)
    head.set_head(causal(n, seed=1), tokens, "b")  # another head of the same text
    settle(qtbot)
    assert (head.left_axis.sizes.measured, axis.sizes.measured) == measured
    ticks = axis._tickLevels
    head.plot.getViewBox().setXRange(100, 140, padding=0)  # zoom in: more labels, each measured once at most
    settle(qtbot)
    head.plot.getViewBox().setXRange(0, n, padding=0)
    settle(qtbot)
    after_zoom = (head.left_axis.sizes.measured, axis.sizes.measured)
    head.plot.getViewBox().setXRange(100, 140, padding=0)
    settle(qtbot)
    assert (head.left_axis.sizes.measured, axis.sizes.measured) == after_zoom
    assert axis._tickLevels != ticks or axis._stride == 1


# ----------------------------------------------------------------------------- a long map: overview and tiles
def long_causal(n: int, seed: int = 0) -> np.ndarray:
    """n × n causal weights with a sink column and a previous-token diagonal (exact zeros after each query)."""
    rng = np.random.default_rng(seed)
    w = np.tril(rng.random((n, n), dtype=np.float32) * 0.01)
    w[:, 0] += 0.5
    w[np.arange(1, n), np.arange(n - 1)] += 0.3
    return w / w.sum(axis=1, keepdims=True)


def bin_max(values: np.ndarray, rows, cols, s: int) -> np.ndarray:
    """The max of each s × s bin's finite cells, NaN when none, one bin at a time (the definition)."""
    window = values[rows[0]:rows[1], cols[0]:cols[1]]
    out = np.full((-(-window.shape[0] // s), -(-window.shape[1] // s)), np.nan, np.float32)
    for a in range(out.shape[0]):
        for b in range(out.shape[1]):
            cells = window[a * s:(a + 1) * s, b * s:(b + 1) * s]
            if np.isfinite(cells).any():
                out[a, b] = np.nanmax(cells)
    return out


def wait_for_tile(qtbot, head, timeout=5000):
    qtbot.waitUntil(lambda: head.detail.request is not None and head.detail.isVisible(), timeout=timeout)


@pytest.mark.slow  # a 4,096-token map pooled and tiled (~3 s)
@pytest.mark.parametrize("scale", ["linear", "log"])
def test_a_long_map_is_drawn_pooled_and_the_part_in_view_comes_as_a_tile_of_the_maps_max(qtbot, head, scale):
    """Past OVERVIEW_CELLS tokens the image is the map max-pooled (every bin's max, a one-cell diagonal kept),
    never the n × n map; zoomed in, the tile in view is the map's max over each of its bins down to single
    cells, coloured on the overview's levels; the hover and the tooltip read the cell itself at every zoom."""
    from analysis.display import apply_scale, shown_weights
    from gui.plots.tiles import OVERVIEW_CELLS

    n = 2 * OVERVIEW_CELLS + 50
    w = long_causal(n)
    head.set_head(w, [f"t{i}" for i in range(n)], "long", scale=scale)
    shown = shown_weights(w)
    stride = head.image.cells_per_pixel
    assert stride == 3 and head.image.image.shape == (-(-n // 3),) * 2
    expected, _ = apply_scale(bin_max(shown, (0, n), (0, n), 3), scale)
    np.testing.assert_allclose(head.image.image, expected, rtol=1e-6, equal_nan=True)
    assert np.isfinite(np.diag(head.image.image)).all()  # the diagonal bins: the previous-token cells' max
    # zoom into 60 × 60 cells: a full-resolution tile of the part in view
    head.plot.getViewBox().setRange(xRange=(1000, 1060), yRange=(1020, 1080), padding=0)
    wait_for_tile(qtbot, head)
    tile = head.detail.request
    assert tile.stride == 1 and tile.rows[0] <= 1020 and tile.rows[1] >= 1080 and tile.cols[0] <= 1000
    np.testing.assert_allclose(head.detail.pooled, shown[tile.rows[0]:tile.rows[1], tile.cols[0]:tile.cols[1]],
                               rtol=1e-6, equal_nan=True)
    # the hover at a zoomed cell: the cell's own value, not a bin's
    seen = []
    head.cell_hovered.connect(seen.append)
    point = head.image.mapFromScene(head.plot.vb.mapViewToScene(QtCore.QPointF(1031.5, 1032.5)))
    assert head.image._cell(point) == (1032, 1031)
    head.image.hover_cell(head.image._cell(point))
    assert seen[-1] == (1032, 1031, pytest.approx(float(shown[1032, 1031])))
    assert head._text_for((1032, 1031)).endswith(f": {shown[1032, 1031]:.3f}")
    # zoomed out to a middle view, then to the whole map on fewer pixels than the overview has: tiles pooled at the
    # view's stride (⌈cells / pixels⌉), each bin the max of its cells, so the screen drops no row or column
    from analysis.display import pool_stride

    vb = head.plot.getViewBox()
    for span in (700, n):
        vb.setRange(xRange=(0, span), yRange=(n - span, n), padding=0)
        want = max(1, min(pool_stride(span, vb.width()), pool_stride(span, vb.height())))
        assert want != stride
        qtbot.waitUntil(lambda: head.detail.request is not None and head.detail.request.stride == want, timeout=5000)
        tile = head.detail.request
        np.testing.assert_allclose(head.detail.pooled, bin_max(shown, tile.rows, tile.cols, tile.stride), rtol=1e-6,
                                   equal_nan=True)


def test_a_new_map_drops_the_tile_of_the_old_one(qtbot, head):
    from gui.plots.tiles import OVERVIEW_CELLS

    n = OVERVIEW_CELLS + 200
    head.set_head(long_causal(n), [f"t{i}" for i in range(n)], "a")
    head.plot.getViewBox().setRange(xRange=(100, 140), yRange=(100, 140), padding=0)
    wait_for_tile(qtbot, head)
    head.set_head(long_causal(n, seed=9), [f"u{i}" for i in range(n)], "b")
    assert not head.detail.isVisible() and head.detail.request is None  # nothing of the old map stays on top
    wait_for_tile(qtbot, head)  # the view was kept: a tile of the new map comes
    np.testing.assert_allclose(head.detail.pooled[0, 0], long_causal(n, seed=9)[head.detail.request.rows[0],
                                                                                head.detail.request.cols[0]],
                               rtol=1e-6)


def test_the_shown_row_is_the_maps_row_as_drawn():
    """HeadPlot.shown_row: the row as drawn (NaN masked, renormalised when the first key is hidden), short or
    long map."""
    from analysis.display import shown_weights
    from gui.plots.figures import HeadPlot
    from gui.plots.tiles import OVERVIEW_CELLS

    fig = HeadPlot()
    try:
        for n in (12, OVERVIEW_CELLS + 30):
            w = long_causal(n)
            for hide_first in (False, True):
                fig.set_head(w, [f"t{i}" for i in range(n)], "x", hide_first=hide_first)
                expected = shown_weights(w, True, hide_first)
                for q in (0, 5, n - 1):
                    np.testing.assert_allclose(fig.shown_row(q), expected[q], rtol=1e-6, equal_nan=True)
    finally:
        dispose_figure(fig)
