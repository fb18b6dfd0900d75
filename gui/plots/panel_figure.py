"""Several heads side by side (``main.py figure --head L16H0,L17H8,L19H3``): the figure a paper about "the
previous-token heads of model X" needs.

- The panels: ``options.heads`` in the order given, ``options.columns`` a row (default ⌈√k⌉), each a head's map
  (gui/plots/figure_make.figure_map: the token range, renormalised if asked) with square cells, titled with its
  name ("L3H1", analysis.display.head_name) and, under it, the ``options.scores`` asked for ("previous_token 0.812":
  analysis.measures.head_scores.all_scores of the result, analysis.display.format_score).
- One colour scale (``shared_scale``, the default): every panel coloured over the same levels, 0 … the largest
  weight any panel shows (or ``vmax``), on the scale (analysis.display.apply_scale), and ONE colour bar at the right.
  With ``shared_scale`` False each panel has its own levels (0 … its own largest weight) and its own bar.
- Token labels on the outer panels only (queries down the first column, keys under the last panel of each column);
  every panel shows the same tokens.
- Size: as a head figure (figure_make.layout_size at LAYOUT_DPI); the height follows from the square panels.
- ``drawing="lines"``: the heads as lines between two columns of tokens, one colour each (figure_make.lines_of_heads).
"""
from __future__ import annotations

import html
import math
import re

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore

from analysis.display import apply_scale, format_score, head_name
from analysis.export.figure_options import FigureOptions, model_name

from ..export.figure_files import settle_layout
from .figure_parts import (VALUE_TITLE, figure_bar_label, figure_map, layout_size, lines_of_heads, scale_top,
                           shown_labels, shown_range)
from .figure_text import FigureFont, elided, fill_lines, measure_axes, set_axis_font, set_figure_font, wrap_text
from .figures import lay_out_offscreen
from .grid_plot import bar_label
from .plot_items import HoverImage, colormap
from .token_axis import TokenAxis

PANEL_GAP_PX = 12  # between two panels (logical pixels)
BAR_WIDTH_PX = 12
MIN_SIDE_PX = 8  # a panel's map is at least this many logical pixels a side (the figure keeps its width)


def panel_grid(k: int, columns: int | None) -> tuple[int, int]:
    """(rows, columns) of ``k`` panels: ``columns`` a row (at most k), else ⌈√k⌉; rows = ⌈k / columns⌉."""
    cols = min(k, columns) if columns else math.ceil(math.sqrt(k))
    return math.ceil(k / cols), cols


def panel_scores(result, heads, names) -> dict[tuple[int, int], list[str]]:
    """The text under each head's title: "name value" for each score of ``names`` (analysis.measures.head_scores'
    names; "n/a" where the score does not apply to the model), in order; an unknown name is refused."""
    if not names:
        return {h: [] for h in heads}
    from analysis.export.figure_options import check_scores
    from analysis.measures.head_scores import NOT_APPLICABLE, all_scores

    check_scores(names)
    scores = all_scores(result)
    return {(layer, head): [f"{name} {format_score(scores[name][layer, head]) if scores.applies(name) else NOT_APPLICABLE}"
                            for name in names] for layer, head in heads}


class PanelFigure(pg.GraphicsLayoutWidget):
    """The panels' figure: ``plots`` (one PlotItem a head, in order), ``images`` (their HoverImage), ``bars`` (one
    ColorBarItem, or one a panel with own scales), ``levels`` (each panel's colour levels), ``grid`` (rows, columns)."""

    def __init__(self):
        super().__init__()
        self.setBackground("w")
        self.plots: list[pg.PlotItem] = []
        self.images: list[HoverImage] = []
        self.bars: list[pg.ColorBarItem] = []
        self.levels: list[tuple[float, float]] = []
        self.grid = (1, 1)


def panel_figure(result, options: FigureOptions, key_norms=None):
    """The figure of ``options.heads`` side by side (see the module's docstring) and what it shows, for the options
    file (the heads, tokens, token range, labels, each panel's levels). ``key_norms``: (L, H, n) ‖f_h(x_k)‖ of every
    head, for value-weighted panels (``options.weighting``, figure_parts.figure_map)."""
    heads = list(options.heads)
    first, stop = shown_range(result, options)
    tokens = list(result.tokens[first:stop])
    labels = shown_labels(tokens, first, options.labels)
    texts = panel_scores(result, heads, options.scores)
    maps = {h: figure_map(result, *h, options, key_norms) for h in heads}
    title = options.title if options.title is not None else model_name(result.model_label) + (
        f" — {VALUE_TITLE}" if options.weighting == "value" else "")
    shown = {"heads": [head_name(*h) for h in heads], "tokens": tokens, "token_range": [first, stop], "labels": labels}
    if options.drawing == "lines":
        return lines_of_heads(result, options, maps, labels, title), shown
    from analysis.display import shown_weights

    drawn = {h: shown_weights(maps[h], result.causal, False) for h in heads}
    scaled = {h: apply_scale(drawn[h], options.scale) for h in heads}
    if options.vmax is not None:
        top = scale_top(options.vmax, options.scale)
        levels = {h: top for h in heads}
    elif options.shared_scale:
        every = np.concatenate([d.ravel() for d in drawn.values()])
        top = apply_scale(every, options.scale)[1]
        levels = {h: top for h in heads}
    else:
        levels = {h: scaled[h][1] for h in heads}
    one_bar = options.shared_scale or options.vmax is not None
    rows, cols = panel_grid(len(heads), options.columns)
    n = len(tokens)
    fig = PanelFigure()
    fig.grid = (rows, cols)
    side = int(min(600, max(150, 14 * n)))
    width, _ = layout_size(options, (cols * side + 160, rows * side + 160))
    lay_out_offscreen(fig, width, 200)
    side_hint = (width - 160) / cols  # about the room a panel gets: scores wider than it are written on two lines
    fonts = FigureFont.of(options.font_pt)
    fig.ci.setSpacing(PANEL_GAP_PX)
    fig.ci.addLabel(wrap_text(title, fonts.title, width - 24), row=0, col=0, colspan=cols + 1,
                    size=f"{fonts.title:g}pt")
    bar_text = figure_bar_label(options, bar_label(options.scale))
    cmap = colormap(options.cmap)
    last_in_column = {c: max(i for i in range(len(heads)) if i % cols == c) for c in range(cols)}
    keyed_rows = {i // cols for i in last_in_column.values()}  # a row with one key axis has them all (no gap under)
    for i, h in enumerate(heads):
        r, c = divmod(i, cols)
        left, bottom = TokenAxis("left"), TokenAxis("bottom", rotate=True)
        for axis in (left, bottom):
            axis.label_chars = options.label_chars or 0
            axis.setStyle(hideOverlappingLabels=False)  # room past the ends: the last rotated label is not cut
        set_figure_font((left, bottom), options.font_pt)
        plot = pg.PlotItem(axisItems={"left": left, "bottom": bottom})
        plot.setMenuEnabled(False)
        plot.hideButtons()
        plot.invertY(True)
        vb = plot.getViewBox()
        vb.setMouseEnabled(False, False)
        image = HoverImage()
        values, _ = scaled[h]
        image.setImage(values, levels=levels[h], autoLevels=False, lut=cmap.getLookupTable(nPts=256, alpha=True))
        image.setRect(QtCore.QRectF(0, 0, n, n))
        plot.addItem(image)
        vb.setRange(xRange=(0, n), yRange=(0, n), padding=0)
        vb.setLimits(xMin=0, xMax=n, yMin=0, yMax=n)
        plot.titleLabel.panel_texts = (head_name(*h), texts[h], fonts)
        _set_panel_title(plot, side_hint)
        for axis in (left, bottom):
            axis.set_tokens(labels, with_index=False)
        if c == 0:
            plot.setLabel("left", "query")
        else:
            plot.hideAxis("left")
        if r in keyed_rows:
            plot.setLabel("bottom", "key")
        else:
            plot.hideAxis("bottom")
        if not one_bar:
            bar = pg.ColorBarItem(values=levels[h], colorMap=cmap, interactive=False, width=BAR_WIDTH_PX)
            bar.setImageItem(image, insert_in=plot)
            bar.setLevels(levels[h])
            bar.axis.enableAutoSIPrefix(False)
            set_axis_font(bar.axis, fonts.qfont())
            if c == cols - 1 or i == len(heads) - 1:
                bar.axis.setLabel(bar_text)  # the label once a row, beside its last panel's bar
            fig.bars.append(bar)
        fig.ci.addItem(plot, row=1 + r, col=c)
        fig.plots.append(plot)
        fig.images.append(image)
        fig.levels.append(tuple(float(v) for v in levels[h]))
    if one_bar:
        bar = pg.ColorBarItem(values=fig.levels[0], colorMap=cmap, interactive=False, width=BAR_WIDTH_PX)
        bar.setImageItem(fig.images)
        bar.setLevels(fig.levels[0])
        bar.axis.enableAutoSIPrefix(False)
        set_axis_font(bar.axis, fonts.qfont())
        bar.axis.setLabel(bar_text)
        fig.ci.addItem(bar, row=1, col=cols, rowspan=rows)
        fig.bars.append(bar)
    _square_panels(fig, width)
    shown["levels"] = [list(v) for v in fig.levels]
    return fig, shown


def panel_title(name: str, scores: list[str], wrap: bool = False, fonts: FigureFont = FigureFont(),
                width: float | None = None) -> str:
    """A panel's title (HTML): the head's name at ``fonts.panel_title``, then each of its scores on a line at
    ``fonts.text``, "previous_token 0.812", or with ``wrap`` the score's name and its value on two lines (a panel
    narrower than the line); with ``width`` a line still wider than that is broken after its underscores
    ("previous_" / "token"), and a piece wider than that elided ("previ…")."""
    lines = [part for text in scores for part in (text.rsplit(" ", 1) if wrap else [text])]

    def fit(text: str, points: float) -> str:
        if width is None:
            return html.escape(text)
        pieces = re.split(r"(?<=_)", text)  # a name wider than the panel broken after its underscores ("previous_")
        lines = ["".join(pieces[i] for i in line) for line in fill_lines(pieces, points, width, sep="")]
        return "<br>".join(html.escape(elided(line, points, width)) for line in lines)

    return (f"<span style='font-size:{fonts.panel_title:g}pt'>{fit(name, fonts.panel_title)}</span>"
            + "".join(f"<br><span style='font-size:{fonts.text:g}pt'>{fit(t, fonts.text)}</span>" for t in lines))


def _set_panel_title(plot: pg.PlotItem, width: float) -> None:
    """A panel's title within ``width`` logical pixels (its map's side): on one line a score, else its name and
    value on two, else elided; its row as tall as its lines."""
    name, scores, fonts = plot.titleLabel.panel_texts
    plot.setTitle(panel_title(name, scores, fonts=fonts), size=f"{fonts.panel_title:g}pt")
    if plot.titleLabel.item.boundingRect().width() > width:  # scores wider than a panel: on two lines
        plot.setTitle(panel_title(name, scores, True, fonts), size=f"{fonts.panel_title:g}pt")
    if plot.titleLabel.item.boundingRect().width() > width:  # still wider: each line elided to the panel
        plot.setTitle(panel_title(name, scores, True, fonts, width - 8), size=f"{fonts.panel_title:g}pt")
    title_h = int(math.ceil(plot.titleLabel.item.boundingRect().height())) + 2  # pyqtgraph fixes 30 px: one line
    plot.layout.setRowFixedHeight(0, title_h)
    plot.titleLabel.setMaximumHeight(title_h)


def _thin_labels(fig: PanelFigure) -> None:
    """Every ``stride``-th token labelled so that neighbours never touch (the maps' rows and columns in pixels), the
    same stride on every panel."""
    strides = {"left": 1, "bottom": 1}
    for plot in fig.plots:
        vb = plot.getViewBox()
        n = max(1, int(round(vb.viewRange()[0][1])))
        for name, cell in (("left", vb.height() / n), ("bottom", vb.width() / n)):
            need = math.ceil(plot.getAxis(name).label_px() / max(cell, 1e-6))
            strides[name] = max(strides[name], need)
    for plot in fig.plots:
        for name in strides:
            plot.getAxis(name).set_stride(strides[name])
            plot.getAxis(name).fit_width()


def _bar_beside_maps(fig: PanelFigure) -> None:
    """The one colour bar as tall as the maps, from the first row's top to the last row's bottom (not down the key
    labels)."""
    if len(fig.bars) != 1 or len(fig.plots) < 1:
        return
    rows, cols = fig.grid
    bar = fig.bars[0]
    top = fig.plots[0].getViewBox().sceneBoundingRect().top()
    bottom = fig.plots[(rows - 1) * cols].getViewBox().sceneBoundingRect().bottom()
    now = bar.getViewBox().sceneBoundingRect()
    left, above, right, below = bar.getContentsMargins()
    bar.setContentsMargins(left, max(0.0, above + top - now.top()), right, max(0.0, below + now.bottom() - bottom))
    settle_layout()


def _square_panels(fig: PanelFigure, width: int) -> None:
    """Lay the figure out ``width`` wide with square maps of one size: each panel's map side is the width left
    after the axes and bars shared by the columns (at least :data:`MIN_SIDE_PX`); the height follows. The figure
    keeps the width asked for (a paper's column is a file that wide): the panels' titles are fitted to the side
    (:func:`_set_panel_title`), never the side to the titles."""
    rows, cols = fig.grid
    settle_layout()
    measure_axes(fig)  # the colour bars' numbers in the figure's font
    for _ in range(3):  # the labels' thinning changes the axes' widths, which change the side: settle it
        _thin_labels(fig)
        settle_layout()
        firsts = [fig.plots[i].getAxis("left") for i in range(0, len(fig.plots), cols)]
        widest = max(axis.width() for axis in firsts)  # one width down the first column: its maps line up
        for axis in firsts:
            if axis.width() != widest:
                axis.setWidth(widest)
        settle_layout()
        extra_w = [p.width() - p.getViewBox().width() for p in fig.plots[:cols]]  # axes (first column), own bars
        bar_w = fig.bars[0].width() if len(fig.bars) == 1 else 0
        margins = fig.ci.layout.getContentsMargins()
        gaps = PANEL_GAP_PX * (cols - 1 + (1 if bar_w else 0))
        free = width - sum(extra_w) - bar_w - gaps - margins[0] - margins[2] - 4  # the maps' room across a row
        side = max(MIN_SIDE_PX, int(free // cols))
        for plot in fig.plots:
            _set_panel_title(plot, side)
        for i, plot in enumerate(fig.plots):
            w = side + (plot.width() - plot.getViewBox().width())
            h = side + (plot.height() - plot.getViewBox().height())
            plot.setFixedWidth(w)
            plot.setFixedHeight(h)
        settle_layout()
        height = int(fig.ci.effectiveSizeHint(QtCore.Qt.SizeHint.MinimumSize).height()) + 4
        fig.resize(width, height)
        settle_layout()
    _bar_beside_maps(fig)
