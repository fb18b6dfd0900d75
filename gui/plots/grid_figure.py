"""The grid figure of ``main.py figure`` (no ``heads``) and of ``main.py export`` (grid.png): the chosen layers ×
heads as pooled thumbnails in a mosaic laid out for its shape, a figure-only :class:`GridFigure` (the on-screen grid,
gui/plots/grid_plot.py, is for the GUI and keeps its own layout).

Layout: the L′ layers shown (``FigureOptions.layers``, in that order) are wrapped into ``k`` side-by-side blocks of
R = ⌈L′ / k⌉ layers, each block its own plot of R rows × H′ columns (the heads shown, ``grid_heads``), every cell
square: the mosaic is k·H′ cells wide and R tall, and ``k`` is the one (1 … L′) whose width / height k·H′ / R is
nearest ``aspect`` (default 1) on a log scale, a block count that leaves the last block short (L′ mod k ≠ 0) costing
:data:`UNEVEN_COST` (its missing rows would be blank inside its frame). With ``aspect`` given, the cells are then
stretched so the mosaic is that wide for its height (a cell at most 2 × longer on one side). SmolLM2's 30 × 9: two
blocks of 15 layers (18 / 15 = 1.2); a 48 × 25 model: 1 block (25 / 48 ≈ 0.52) vs. 2 (50 / 24 ≈ 2.1): one.

Each block's left axis reads "layer" with the real layer indices, its bottom axis "head" with the real head indices;
cells are separated by a 1-pixel line of the background. One colour scale for every block: 0 … 1 for weights
(``vmax`` for another top), on the figure's scale (analysis.display.apply_scale), with its colour bar and label.

Badges (``FigureOptions.badges``, a score of analysis.measures.head_scores.SCORE_NAMES): the heads that stand out on
that score, as the GUI's grid chooses them (:func:`gui.plots.badges.standout_order`: ≥ 0.3 and more than 3 robust
standard deviations past the model's median head, the low side for entropy), get a gold dot in the cell's top-right
corner, and a legend under the mosaic says which score and that rule.
"""
from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import apply_scale, pooled_heads
from analysis.export.figure_options import FigureOptions, model_name

from ..export.figure_files import settle_layout
from .badges import LOW_IS_FINDING, OUTLINE_COLOR, OUTLINE_EDGE, standout_order
from .figure_text import FigureFont, fill_lines, measure_axes
from .grid_plot import bar_label, mask_future
from .plot_items import apply_theme, colormap

UNEVEN_COST = 0.35  # on |log(aspect got / aspect asked)|: a short last block is worth this much more squareness
MAX_STRETCH = 2.0  # with ``aspect``: a cell at most this many times longer on one side than the other
DEFAULT_WIDTH = (560, 1200)  # logical pixels of a figure without a width: 160 + 56 a cell column, within these
LAYOUT_DPI = 96
BADGE_MARK = "●"


def mosaic_blocks(n_layer: int, n_head: int, aspect: float | None = None) -> int:
    """How many side-by-side blocks the ``n_layer`` × ``n_head`` grid is wrapped into (see the module's doc)."""
    target = 1.0 if aspect is None else float(aspect)

    def cost(k: int) -> float:
        rows = -(-n_layer // k)
        if (k - 1) * rows >= n_layer:  # an empty block
            return math.inf
        return abs(math.log(k * n_head / rows / target)) + (UNEVEN_COST if n_layer % k else 0.0)

    return min(range(1, max(1, n_layer) + 1), key=lambda k: (cost(k), k))


def default_title(result, layers, heads, weighting: str = "") -> str:
    """The grid's title: the model's name (never its folder's path), what it shows, ``weighting`` when given and the
    text's length: "bundled — all heads, 12 tokens", "smollm2 — layers 14–23, value-weighted, 12 tokens"."""
    name = model_name(result.model_label)
    parts = []
    if list(layers) != list(range(result.n_layer)):
        parts.append("layers " + spans(layers))
    if list(heads) != list(range(result.n_head)):
        parts.append("heads " + spans(heads))
    shows = ", ".join(parts) if parts else "all heads"
    return f"{name} — {shows}{', ' + weighting if weighting else ''}, {result.n_tokens} tokens"


def spans(indices) -> str:
    """(0, 1, 2, 5) → "0–2, 5"."""
    out, run = [], []
    for i in indices:
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
        run = [i]
    if run:
        out.append(f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
    return ", ".join(out)


def wrapped(text: str, point_size: float, width: float) -> str:
    """``text`` as escaped HTML, broken into lines (<br>) at spaces so that none is wider than ``width`` logical
    pixels in the application's font at ``point_size`` (figure_text.fill_lines); a word wider than that keeps its
    own line whole."""
    words = text.split(" ")
    lines = [" ".join(words[i] for i in line) for line in fill_lines(words, point_size, width)]
    return "<br>".join(html.escape(line, quote=False) for line in lines)


def badge_rule(score: str) -> str:
    """The legend's words for which heads carry a badge (analysis.measures.head_scores.standout_heads)."""
    if score in LOW_IS_FINDING:
        return f"stands out on {score}: ≤ 0.3 and > 3 robust SD below the model's median head"
    return f"stands out on {score}: ≥ 0.3 and > 3 robust SD above the model's median head"


def check_badges(score: str | None) -> None:
    """The badges' score is a head score, or None (no badges): figure_options.check_scores."""
    from analysis.export.figure_options import check_scores

    check_scores(() if score is None else (score,))


class GridFigure(pg.GraphicsLayoutWidget):
    """The grid as a figure (never on screen in the GUI): a title, ``blocks`` plots of layers × heads, one colour bar,
    and a badge legend when asked. ``plots``/``images`` per block; ``layout_blocks`` the layers of each block."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setBackground("w")
        self.plots: list[pg.PlotItem] = []
        self.images: list[pg.ImageItem] = []
        self.layout_blocks: list[list[int]] = []
        self.heads: list[int] = []
        self.colorbar = None
        self.title_label = None
        self.legend = None
        self.badged: list[tuple[int, int]] = []
        self.separators: list[QtWidgets.QGraphicsPathItem] = []
        self.cell_ratio = 1.0  # a cell's height / width
        self.fonts = None  # figure_text.FigureFont: the sizes of its text (None: 11 pt title, 9 pt legend)

    def build(self, cells: np.ndarray, layers, heads, blocks: int, levels, cmap: str, title: str, bar: str,
              badged=(), legend: str = "") -> None:
        """Lay out ``cells`` (layer shown, head shown, c, c) already on the colour scale (NaN: background)."""
        self.heads = list(heads)
        rows = -(-len(layers) // blocks)
        self.layout_blocks = [list(layers[b * rows:(b + 1) * rows]) for b in range(blocks)]
        room = self.width() - 24  # the text wrapped to the figure's width: a wider label would widen the layout past
        title_pt, legend_pt = (11, 9) if self.fonts is None else (self.fonts.title, self.fonts.text)  # the PNG
        self.title_label = self.ci.addLabel(wrapped(title, title_pt, room), row=0, col=0, colspan=blocks + 1,
                                            size=f"{title_pt:g}pt")
        c = cells.shape[-1]
        shown_badges = set(badged)
        for b, block_layers in enumerate(self.layout_blocks):
            plot = self.ci.addPlot(row=1, col=b)
            plot.setMenuEnabled(False)
            plot.hideButtons()
            vb = plot.getViewBox()
            vb.setMouseEnabled(False, False)
            vb.invertY(True)
            first = b * rows
            block = cells[first:first + len(block_layers)]  # (r, H′, c, c)
            image = np.full((rows * c, len(heads) * c), np.nan, np.float32)
            r = len(block_layers)
            image[: r * c] = block.transpose(0, 2, 1, 3).reshape(r * c, len(heads) * c)
            item = pg.ImageItem(image, levels=levels)
            item.setColorMap(colormap(cmap))
            item.setRect(QtCore.QRectF(0, 0, len(heads), rows))
            plot.addItem(item)
            self._separators(plot, rows, len(heads))
            marks = [(h + 0.82, i + 0.18) for i, layer in enumerate(block_layers)
                     for h, head in enumerate(heads) if (layer, head) in shown_badges]
            if marks:
                dots = pg.ScatterPlotItem([x for x, _ in marks], [y for _, y in marks], symbol="o", size=9,
                                          brush=pg.mkBrush(OUTLINE_COLOR), pen=pg.mkPen(OUTLINE_EDGE, width=1.2))
                dots.setZValue(5)
                plot.addItem(dots)
            plot.setXRange(0, len(heads), padding=0)
            plot.setYRange(0, rows, padding=0)
            plot.setLabel("left", "layer")
            plot.setLabel("bottom", "head")
            for side in ("left", "bottom"):  # ticks outside the frame: none drawn over a cell
                plot.getAxis(side).setStyle(tickLength=3)
            vb.setBorder(pg.mkPen("k", width=1))
            self.plots.append(plot)
            self.images.append(item)
        self.colorbar = pg.ColorBarItem(values=levels, colorMap=colormap(cmap), interactive=False, width=14)
        self.colorbar.axis.enableAutoSIPrefix(False)
        self.colorbar.setImageItem(self.images)
        self.colorbar.axis.setLabel(bar)
        self.ci.addItem(self.colorbar, row=1, col=blocks)
        if legend:
            legend = (f'<span style="color:{OUTLINE_COLOR}">{BADGE_MARK}</span> '
                      + wrapped(legend, legend_pt, room - 16))
            self.legend = self.ci.addLabel(legend, row=2, col=0, colspan=blocks + 1, size=f"{legend_pt:g}pt")
        if self.fonts is not None:  # the layer and head numbers, the axes' titles, the colour bar's
            from .figure_text import set_axis_font

            for axis in [p.getAxis(side) for p in self.plots for side in ("left", "bottom")] + [self.colorbar.axis]:
                set_axis_font(axis, self.fonts.qfont())
        apply_theme(self, False)
        if self.legend is not None:  # the theme set the legend's colour; the mark keeps its gold
            self.legend.setText(legend)

    def _separators(self, plot, rows: int, columns: int) -> None:
        path = QtGui.QPainterPath()
        for x in range(1, columns):
            path.moveTo(x, 0)
            path.lineTo(x, rows)
        for y in range(1, rows):
            path.moveTo(0, y)
            path.lineTo(columns, y)
        item = QtWidgets.QGraphicsPathItem(path)
        item.setPen(pg.mkPen("w", width=0.02))  # in cells: set to 1 pixel once laid out (_fit_separators)
        item.setZValue(2)
        plot.addItem(item, ignoreBounds=True)
        self.separators.append(item)

    def _fit_separators(self) -> None:
        """The lines between cells 1 logical pixel wide, as a width in cells: not a cosmetic pen, which an SVG
        writes as vector-effect="non-scaling-stroke" — a renderer that ignores it (rsvg-convert) would draw the
        lines a whole cell wide."""
        for plot, item in zip(self.plots, self.separators):
            vb = plot.getViewBox()
            cell = min(vb.width() / max(1, len(self.heads)), vb.height() / max(1, max(map(len, self.layout_blocks))))
            item.setPen(pg.mkPen("w", width=1.0 / max(cell, 1.0)))

    def update_ticks(self) -> None:
        """Layer and head numbers on every block, every k-th when the cells are too small for each."""
        font = QtGui.QFontMetricsF(self.plots[0].getAxis("left").style.get("tickFont") or QtGui.QFont())
        for plot, block_layers in zip(self.plots, self.layout_blocks):
            vb = plot.getViewBox()
            rows = max(len(b) for b in self.layout_blocks)
            cell_h = vb.height() / max(1, rows)
            cell_w = vb.width() / max(1, len(self.heads))
            k_rows = max(1, math.ceil((1.2 * font.height() + 2) / max(cell_h, 1e-6)))
            widest = max(font.horizontalAdvance(str(h)) for h in self.heads)
            k_cols = max(1, math.ceil((1.5 * widest + 8) / max(cell_w, 1e-6)))
            plot.getAxis("left").setTicks([[(i + 0.5, str(layer)) for i, layer in enumerate(block_layers)
                                            if i % k_rows == 0]])
            plot.getAxis("bottom").setTicks([[(j + 0.5, str(head)) for j, head in enumerate(self.heads)
                                              if j % k_cols == 0]])

    def fit_height(self) -> None:
        """Resize the figure's height so each block's cells are ``cell_ratio`` × as tall as wide (twice: the axes'
        labels change the layout once)."""
        rows = max(len(b) for b in self.layout_blocks)
        for _ in range(3):
            settle_layout()
            vb = self.plots[0].getViewBox()
            want = rows * vb.width() / max(1, len(self.heads)) * self.cell_ratio
            height = int(round(self.height() + want - vb.height()))
            if abs(height - self.height()) <= 1:
                break
            self.resize(self.width(), max(120, height))
        self._fit_separators()
        self.update_ticks()
        settle_layout()


def shown_cells(result, layers, heads, target: int, hide_first: bool = False, key_norms=None) -> np.ndarray:
    """(layer shown, head shown, c, c) float32 thumbnails of the heads shown, max-pooled to ``target`` pixels a side
    (c = min(target, n)): from the run's thumbnails when they have that many, else from the attentions; with
    ``key_norms`` ((L, H, n) ‖f_h(x_k)‖) each head's value-weighted map (figure_parts.value_weighted_map), pooled a
    head at a time (memory: one head's map and its weighted copy); a causal model's masked pixels NaN (grid_plot.mask_future)."""
    from .figures import grid_source

    if key_norms is not None:
        from .figure_parts import value_weighted_map

        c = min(target, result.n_tokens)
        cells = np.empty((len(layers), len(heads), c, c), np.float32)  # (L′, H′, c, c), one head's map at a time
        for i, layer in enumerate(layers):
            for j, head in enumerate(heads):
                weighted = value_weighted_map(result.head_map(layer, head), key_norms[layer, head])
                cells[i, j] = pooled_heads(weighted[None, None], target, hide_first)[0, 0]
        if result.causal:
            mask_future(cells)
        return cells
    thumbs = result.thumbnails
    full = result.attentions if result.attentions is not None else grid_source(result)
    use_thumbs = not hide_first and thumbs is not None and target <= thumbs.shape[-1]
    source = thumbs if use_thumbs else full
    picked = np.asarray(source)[np.ix_(list(layers), list(heads))]
    cells = pooled_heads(picked, target, hide_first).astype(np.float32)
    if result.causal:
        mask_future(cells)
    return cells


def grid_figure(result, options: FigureOptions, hide_first: bool = False, key_norms=None):
    """The grid of ``result`` as ``options`` ask, laid out offscreen, and what it shows (for the options file);
    ``hide_first``: as ``options.hide_first``, either hides the first key; ``key_norms``: (L, H, n) ‖f_h(x_k)‖ of
    every head, for a value-weighted grid (``options.weighting`` "value": figure_parts.value_weighted_map)."""
    from .figure_parts import VALUE_TITLE, check_key_norms, weighting_label
    from analysis.measures.head_scores import all_scores

    hide_first = bool(hide_first or options.hide_first)
    from .figures import lay_out_offscreen

    check_badges(options.badges)
    layers = list(options.layers) if options.layers is not None else list(range(result.n_layer))
    heads = list(options.grid_heads) if options.grid_heads is not None else list(range(result.n_head))
    blocks = mosaic_blocks(len(layers), len(heads), options.aspect)
    rows = -(-len(layers) // blocks)
    columns = blocks * len(heads)
    if options.pixels is not None:
        width = max(160, int(round(options.pixels / options.dpi * LAYOUT_DPI)))  # the width asked (3.3 in: 317)
    else:
        width = int(min(DEFAULT_WIDTH[1], max(DEFAULT_WIDTH[0], 160 + 56 * columns)))
    png_scale = (options.pixels or width) / width
    cell_ratio = 1.0
    if options.aspect is not None:  # the mosaic's width / height as asked: columns / (rows · ratio) = aspect
        cell_ratio = min(MAX_STRETCH, max(1 / MAX_STRETCH, columns / rows / options.aspect))
    cell_px = max(1.0, (width - 90 * blocks - 80) / columns) * png_scale  # PNG pixels a cell has (about)
    target = max(1, min(result.n_tokens, int(cell_px * max(1.0, cell_ratio))))
    norms = check_key_norms(options, key_norms, result) if options.weighting == "value" else None
    cells = shown_cells(result, layers, heads, target, hide_first, norms)
    top = options.vmax if options.vmax is not None else 1.0
    drawn, _ = apply_scale(cells, options.scale)
    _, levels = apply_scale(np.array([top], np.float32), options.scale)
    bar = options.bar_label if options.bar_label is not None else weighting_label(bar_label(options.scale, hide_first),
                                                                                  options)
    badged, legend = [], ""
    if options.badges is not None:
        values = np.asarray(all_scores(result)[options.badges], dtype=np.float64)
        standout = standout_order(values, low=options.badges in LOW_IS_FINDING)
        badged = [(l, h) for l, h in standout if l in layers and h in heads]
        count = (f"{len(badged)} head{'s' if len(badged) != 1 else ''}" if badged
                 else "none among the heads shown" if standout else "no head does")
        legend = f"{badge_rule(options.badges)} ({count})"
    title = options.title if options.title is not None else default_title(
        result, layers, heads, VALUE_TITLE if options.weighting == "value" else "")
    fig = GridFigure()
    fig.fonts = FigureFont.of(options.font_pt)
    fig.cell_ratio = cell_ratio
    lay_out_offscreen(fig, width, int(width * rows * cell_ratio / columns) + 120)
    fig.build(drawn, layers, heads, blocks, levels, options.cmap, title, bar, badged, legend)
    measure_axes(fig)  # the numbers in the figure's font, laid out for before the height is fitted
    fig.fit_height()
    return fig, {"head": None, "tokens": list(result.tokens), "layers": layers, "grid_heads": heads,
                 "blocks": blocks, "badged": [f"L{l}H{h}" for l, h in badged]}
