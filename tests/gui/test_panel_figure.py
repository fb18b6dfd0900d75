"""Several heads side by side (gui/plots/panel_figure.py) and the head figure's options (figure_make.head_figure),
read back from the PNG's pixels: the panels' arrangement and order, one colour scale (the same weight the same
colour in every panel, the bar's top only where the maximum is) or each its own, renormalised crops, lines, and the
refusals."""
import math

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui  # noqa: E402

from analysis.errors import InputError  # noqa: E402
from analysis.export.figure_options import FigureOptions  # noqa: E402
from gui.export.figure_files import figure_bytes  # noqa: E402
from gui.plots.figures import dispose_figure  # noqa: E402

TEXT = "The server rejected the request because it was overloaded. The server"
HEADS = ((1, 0), (2, 3), (0, 1), (1, 2), (2, 0))


@pytest.fixture(scope="module")
def result(tiny_model):
    from analysis.measures.measured import run_measured

    return run_measured(tiny_model, TEXT)


@pytest.fixture
def drawn(qapp):
    """make(result, options) → (figure, PNG pixels (h, w, 3), PNG pixels per layout pixel); figures disposed after."""
    made = []

    def make(result, options):
        from gui.plots.figure_make import make_figure

        fig, _ = make_figure(result, options)
        made.append(fig)
        data = figure_bytes(fig, "png", options.pixels)
        image = QtGui.QImage.fromData(data).convertToFormat(QtGui.QImage.Format.Format_RGB888)
        w, h = image.width(), image.height()
        rgb = np.frombuffer(image.constBits(), np.uint8).reshape(h, image.bytesPerLine())[:, : 3 * w].reshape(h, w, 3)
        return fig, rgb.copy(), w / fig.width()

    yield make
    for fig in made:
        dispose_figure(fig)


def expected_colour(fig, value, levels):
    """pyqtgraph's colour of ``value`` over ``levels``: entry ⌊(v − low) · 256 / (high − low)⌋ of the 256-colour
    table (clipped), computed here from the colormap, not from the figure's images."""
    lut = fig.bars[0].colorMap().getLookupTable(nPts=256, alpha=False)
    low, high = levels
    return lut[int(np.clip(math.floor((value - low) * 256 / (high - low)), 0, 255))]


def cell_pixel(fig, rgb, scale, panel, q, k):
    """The PNG's pixel at the centre of cell (query q, key k) of ``panel``."""
    vb = fig.plots[panel].getViewBox()
    point = vb.mapViewToScene(QtCore.QPointF(k + 0.5, q + 0.5))
    return rgb[int(point.y() * scale), int(point.x() * scale)].astype(int)


def bar_top_pixel(fig, rgb, scale, bar=0):
    rect = fig.bars[bar].bar.sceneBoundingRect()
    return rgb[int((rect.top() + 2) * scale), int(rect.center().x() * scale)].astype(int)


def maps_of(result, heads, first, stop):
    return {h: np.asarray(result.head_map(*h), np.float64)[first:stop, first:stop] for h in heads}


def test_the_panels_in_the_order_given_rows_by_columns(result, drawn):
    fig, rgb, scale = drawn(result, FigureOptions(heads=HEADS, width_px=900))
    assert fig.grid == (2, 3)  # 5 heads: ⌈√5⌉ = 3 columns, 2 rows
    centres = [fig.plots[i].getViewBox().sceneBoundingRect().center() for i in range(5)]
    rows = sorted({round(c.y()) for c in centres})
    cols = sorted({round(c.x()) for c in centres})
    assert len(rows) == 2 and len(cols) == 3
    assert [(rows.index(round(c.y())), cols.index(round(c.x()))) for c in centres] == [divmod(i, 3) for i in range(5)]
    sides = {(round(fig.plots[i].getViewBox().width()), round(fig.plots[i].getViewBox().height())) for i in range(5)}
    assert len(sides) == 1 and len({*next(iter(sides))}) == 1  # square maps, all one size
    # each panel draws its own head, in the order given: a cell's colour read from the PNG is that head's weight's
    n = result.n_tokens
    maps = maps_of(result, HEADS, 0, n)
    for i, h in enumerate(HEADS):
        for q, k in ((n - 1, 2), (n - 2, n - 3), (5, 1)):
            assert np.abs(cell_pixel(fig, rgb, scale, i, q, k) - expected_colour(fig, maps[h][q, k], fig.levels[i])
                          ).max() <= 3
    fig2, _, _ = drawn(result, FigureOptions(heads=HEADS, columns=2, width_px=900))
    assert fig2.grid == (3, 2)


def test_one_colour_scale_across_the_panels(result, drawn):
    first, stop = 1, result.n_tokens  # without query 0 (whose one weight is 1 in every head)
    every = maps_of(result, [(l, h) for l in range(result.n_layer) for h in range(result.n_head)], first, stop)
    top_of = {h: np.nanmax(np.where(np.tri(stop - first, dtype=bool), m, np.nan)) for h, m in every.items()}
    best = max(top_of, key=top_of.get)  # the head with the maximum, and three whose tops are clearly below it
    heads = tuple([h for h in HEADS if top_of[h] < 0.97 * top_of[best]][:2] + [best] +
                  [h for h in top_of if h not in HEADS and top_of[h] < 0.97 * top_of[best]][:1])
    assert len(heads) == 4
    fig, rgb, scale = drawn(result, FigureOptions(heads=heads, tokens=(first, stop), width_px=1000))
    maps = maps_of(result, heads, first, stop)
    tops = {h: np.nanmax(np.where(np.tri(stop - first, dtype=bool), maps[h], np.nan)) for h in heads}
    top = max(tops.values())
    assert len(fig.bars) == 1 and all(levels == (0.0, pytest.approx(top)) for levels in fig.levels)
    bar_top = bar_top_pixel(fig, rgb, scale)
    for i, h in enumerate(heads):
        q, k = np.unravel_index(np.nanargmax(np.where(np.tri(stop - first, dtype=bool), maps[h], np.nan)),
                                maps[h].shape)
        pixel = cell_pixel(fig, rgb, scale, i, q, k)
        assert np.abs(pixel - expected_colour(fig, tops[h], (0, top))).max() <= 3  # one scale: its value's colour
        at_top = np.abs(pixel - bar_top).max() <= 3
        assert at_top == (tops[h] == top), (h, tops[h], top)  # the bar's top only where the maximum is
    # the same weight, the same colour in two panels: a cell of the first panel and the cell of the second whose
    # weight is nearest it
    a, b = maps[heads[0]], maps[heads[1]]
    q, k = stop - first - 1, 1
    q2, k2 = np.unravel_index(np.nanargmin(np.abs(np.where(np.tri(len(b), dtype=bool), b, np.nan) - a[q, k])), b.shape)
    if abs(b[q2, k2] - a[q, k]) * 256 / top < 0.5:
        assert np.abs(cell_pixel(fig, rgb, scale, 0, q, k) - cell_pixel(fig, rgb, scale, 1, q2, k2)).max() <= 3


def test_own_scales_each_panel_to_its_own_maximum(result, drawn):
    first, stop = 1, result.n_tokens
    heads = HEADS[:3]
    fig, rgb, scale = drawn(result, FigureOptions(heads=heads, tokens=(first, stop), shared_scale=False,
                                                  width_px=1200))
    assert len(fig.bars) == 3 and len(set(fig.levels)) == 3  # own scales differ
    maps = maps_of(result, heads, first, stop)
    for i, h in enumerate(heads):
        shown = np.where(np.tri(stop - first, dtype=bool), maps[h], np.nan)
        assert fig.levels[i] == (0.0, pytest.approx(np.nanmax(shown)))
        q, k = np.unravel_index(np.nanargmax(shown), shown.shape)
        assert np.abs(cell_pixel(fig, rgb, scale, i, q, k) - bar_top_pixel(fig, rgb, scale, i)).max() <= 3


def test_vmax_is_the_top_of_every_panel(result, drawn):
    fig, _, _ = drawn(result, FigureOptions(heads=HEADS[:2], vmax=0.5, shared_scale=False, width_px=700))
    assert fig.levels == [(0.0, 0.5), (0.0, 0.5)] and len(fig.bars) == 1


def test_renormalised_crop_rows_sum_to_one(result, drawn):
    first, stop = 3, 11
    fig, _, _ = drawn(result, FigureOptions(heads=HEADS[:2], tokens=(first, stop), renormalise=True, width_px=700))
    maps = maps_of(result, HEADS[:2], first, stop)
    for i, h in enumerate(HEADS[:2]):
        drawn_values = np.asarray(fig.images[i].image, np.float64)  # what the panel draws (linear scale)
        expected = np.where(np.tri(stop - first, dtype=bool), maps[h], np.nan)
        expected = expected / np.nansum(expected, axis=1, keepdims=True)
        assert np.allclose(drawn_values, expected, atol=1e-6, equal_nan=True)
        assert np.allclose(np.nansum(drawn_values, axis=1), 1, atol=1e-5)
    assert "renormalised" in fig.bars[0].axis.labelText
    head, _, _ = drawn(result, FigureOptions(heads=(HEADS[0],), tokens=(first, stop), renormalise=True, width_px=600))
    assert np.allclose(np.nansum(np.asarray(head.matrix, np.float64), axis=1), 1, atol=1e-5)
    assert head.colorbar.axis.labelText == "weight (renormalised)"


def test_a_single_heads_vmax_tops_its_scale(result, drawn):
    head, _, _ = drawn(result, FigureOptions(heads=(HEADS[0],), vmax=0.25, width_px=600))
    assert tuple(head.colorbar.levels()) == (0.0, 0.25) and tuple(head.image.levels) == (0.0, 0.25)


def test_lines_one_colour_a_head(result, drawn):
    from gui.plots.lines_plot import LinesPlot

    fig, _, _ = drawn(result, FigureOptions(heads=HEADS[:2], drawing="lines", tokens=(0, 9), width_px=600))
    assert isinstance(fig, LinesPlot)
    assert [name for name, _, _ in fig.heads] == ["L1H0", "L2H3"]
    assert fig.heads[0][1] != fig.heads[1][1]
    assert np.allclose(np.nan_to_num(fig.heads[0][2]),
                       np.tril(np.asarray(result.head_map(1, 0))[:9, :9]), atol=1e-6)
    same_index, _, _ = drawn(result, FigureOptions(heads=((1, 0), (2, 0), (0, 0)), drawing="lines", tokens=(0, 9)))
    assert len({colour.name() for _, colour, _ in same_index.heads}) == 3  # L1H0, L2H0, L0H0: three colours
    one, _, _ = drawn(result, FigureOptions(heads=(HEADS[0],), drawing="lines", width_px=600))
    assert isinstance(one, LinesPlot) and len(one.tokens) == result.n_tokens


def test_lines_past_64_tokens_and_unknown_scores_are_refused(result):
    from gui.plots.figure_parts import lines_of_heads
    from gui.plots.panel_figure import panel_scores

    with pytest.raises(InputError, match="at most 64 tokens.*65.*matrix"):
        lines_of_heads(result, FigureOptions(heads=HEADS[:2]), {}, [f"t{i}" for i in range(65)], "")
    with pytest.raises(InputError, match=r"Unknown score 'prev'; the scores are .*previous_token") as error:
        panel_scores(result, HEADS[:2], ("prev",))
    assert str(error.value).count(".") == 1


def test_scores_under_each_title_are_the_head_scores(result):
    from analysis.display import format_score
    from analysis.measures.head_scores import previous_token, sink
    from gui.plots.panel_figure import panel_scores

    texts = panel_scores(result, HEADS, ("previous_token", "sink"))
    prev, sinks = previous_token(result.attentions), sink(result.attentions)
    for layer, head in HEADS:
        assert texts[(layer, head)] == [f"previous_token {format_score(prev[layer, head])}",
                                        f"sink {format_score(sinks[layer, head])}"]


def test_the_key_axis_is_as_tall_as_the_labels_it_draws(qapp):
    """The gap above "key": a rotated axis was as tall as its longest label even when its stride left that label
    out. A figure's axis (fit_drawn) puts its title AXIS_TITLE_GAP_PX under the longest label drawn, measured here
    with the font's own metrics; the app's axis keeps one height whatever the stride."""
    from gui.plots.token_axis import AXIS_LABEL_NUDGE_PX, AXIS_TITLE_GAP_PX, LABEL_TOP_PX, TokenAxis

    tokens = ["a", "a-much-longer-token", "b", "cc"]
    heights = {}
    for fit in (True, False):
        axis = TokenAxis("bottom", rotate=True)
        axis.fit_drawn, axis.label_chars = fit, 0  # (whole labels, as a figure's)
        axis.set_tokens(tokens, with_index=False)
        axis.setLabel("key")
        axis.set_stride(2)  # draws "a" and "b"
        metrics = QtGui.QFontMetrics(axis.style["tickFont"])
        title = axis.label.boundingRect().height() - AXIS_LABEL_NUDGE_PX - axis.label.document().documentMargin()
        heights[fit] = axis.fixedHeight
        longest = max(metrics.horizontalAdvance(t) for t in (tokens[::2] if fit else tokens))
        assert axis.fixedHeight == math.ceil(LABEL_TOP_PX + longest + 2 + AXIS_TITLE_GAP_PX + title)
    assert heights[True] < heights[False] - 50


def test_font_pt_reaches_every_text_of_a_panel_figure(result, drawn):
    """Token labels, axis titles, colour bar numbers and label at font_pt; the title ×11/8.5; the head names ×9/8.5."""
    options = FigureOptions(text=TEXT, heads=((1, 0), (2, 3)), width_in=10, dpi=100, font_pt=12, scores=("sink",))
    fig, _, _ = drawn(result, options)
    for side in ("left", "bottom"):
        axis = fig.plots[0].getAxis(side)
        assert axis.style["tickFont"].pointSizeF() == 12 and axis.label.font().pointSizeF() == 12
    bar = fig.bars[0].axis
    assert bar.style["tickFont"].pointSizeF() == 12 and bar.label.font().pointSizeF() == 12
    title = fig.plots[0].titleLabel.text
    assert f"font-size:{round(12 * 9 / 8.5, 2):g}pt" in title and "font-size:12pt" in title
