"""The heatmaps AttnScope draws, in the GUI and in exported files alike (pyqtgraph).

- :class:`HeadPlot`: one head, query tokens down the left (row 0 at the top), key tokens along
  the bottom (rotated), a colour bar, hover values; the map fills the plot, zoom stays on the data.
- :class:`GridPlot` (gui/plots/grid_plot.py): every layer × head as pooled thumbnails in one mosaic.
- :func:`~gui.export.figure_files.save_figure`: PNG, SVG or PDF of a figure widget, drawn like the PNG.
- An export's figures: gui/plots/result_images.py (the routines of ``main.py figure``).
"""
from __future__ import annotations

import html
import math
import re
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
import pyqtgraph.exporters  # noqa: F401  (registers the exporters)
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import PreparedHead, ShownMap, head_name
from analysis.export.figure_options import model_name

from ..export.figure_files import settle_layout

from .grid_plot import GridPlot, bar_label
from .hover_text import KEY, hover_text
from .plot_items import HoverImage, ZoomableFigure, colormap, limit_to_data, theme_colors
from .tiles import OVERVIEW_CELLS, DetailTile, TileMaker, tile_for_view
from .token_axis import (  # noqa: F401  (the figures' label names, read here by tests and the tabs)
    AXIS_LABEL_NUDGE_PX, AXIS_TITLE_GAP_PX, LABEL_TOP_PX, ROTATED_LABEL_CHARS, TokenAxis, rotated_label,
    tick_font, token_label)

ROW_HIGHLIGHT = "#ff2d55"
TILE_DELAY_MS = 40  # a detail tile is asked for once the view has rested this long (not at every wheel step)


class HeadPlot(ZoomableFigure):
    """One head's attention map: rows are queries (row 0 on top), columns are keys; the map fills the
    plot (cells follow the plot's shape), zoom is limited to the map and reset by Home/double-click/⤢.
    A click on a cell or on a query's label emits ``query_clicked``. A causal model's future keys are
    drawn as background; an encoder's map (``causal=False``) has no mask."""

    cell_hovered = QtCore.Signal(object)  # None or (query, key, value as drawn; NaN for a masked/hidden cell)
    query_clicked = QtCore.Signal(int)
    matrix: np.ndarray | None = None  # set before __init__ runs: GraphicsView calls resizeEvent early
    tokens: tuple[str, ...] = ()
    causal = True  # the model hides future keys (decoders); set_head(causal=False) for an encoder
    before_hiding: np.ndarray | None = None  # with the first key hidden: the map before renormalising
    title_px = 30  # height of the title row (pyqtgraph's own); the Head tab's figure takes less
    title_pt = 11.0  # the title's size; a figure's follows its font (figure_text.set_figure_font)

    def __init__(self, parent=None, describe: Callable[[int, int, float], str] | None = None):
        """``describe(query, key, value as drawn)``: the text of a cell's tooltip; by default
        :meth:`weight_text`. A view that says more (the Head tab's value-weighted view, the Rollout tab's
        wording) passes its own, and shows the same text in its hover line."""
        left = TokenAxis("left", on_click=lambda row: self.query_clicked.emit(row))
        bottom = TokenAxis("bottom", rotate=True)
        super().__init__(parent, axisItems={"left": left, "bottom": bottom})
        self.describe = describe if describe is not None else self.weight_text
        self.left_axis, self.bottom_axis = left, bottom
        self.plot.invertY(True)
        self.image = HoverImage(text_for=self._text_for, on_hover=self._hovered,
                                on_click=lambda cell: self.query_clicked.emit(cell[0]))
        self.plot.addItem(self.image)
        # a long map: the image is the whole map pooled (the overview), the tile the part in view in more detail
        self.detail = DetailTile()
        self.detail.setZValue(self.image.zValue() + 1)
        self.detail.setVisible(False)
        self.plot.addItem(self.detail, ignoreBounds=True)
        self.tiles = TileMaker(self)
        self.tiles.ready.connect(self.detail.show_tile)
        self.shown: ShownMap | None = None  # a long map's cells (self.matrix too), pooled into the tiles
        self.scale = "linear"  # the colour scale of the map drawn
        self._tile_wanted = None  # (rows, cols, stride) asked of the tile maker last
        self._tile_timer = QtCore.QTimer(self)
        self._tile_timer.setSingleShot(True)
        self._tile_timer.setInterval(TILE_DELAY_MS)
        self._tile_timer.timeout.connect(self._make_tile)
        self.row_highlight = QtWidgets.QGraphicsRectItem()
        self.row_highlight.setPen(pg.mkPen(ROW_HIGHLIGHT, width=2, cosmetic=True))
        self.row_highlight.setVisible(False)
        self.row_highlight.setZValue(self.detail.zValue() + 1)  # over the detail tile
        self.plot.addItem(self.row_highlight, ignoreBounds=True)
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=colormap("viridis"), interactive=False, width=14)
        self.colorbar.setImageItem(self.image, insert_in=self.plot)
        self.colorbar.axis.enableAutoSIPrefix(False)  # weights as they are: a top of 0.9997 is never "900 (x0.001)"
        self._title: tuple[str, int, float] | None = None  # (title, title_px, title_pt) drawn now
        # zooming in shows more token labels, zooming out thins them
        self.plot.getViewBox().sigRangeChanged.connect(lambda *_: self.update_label_density())
        self.plot.getViewBox().sigResized.connect(lambda *_: self.update_label_density())
        self.plot.getViewBox().sigRangeChanged.connect(lambda *_: self._want_tile())
        self.plot.getViewBox().sigResized.connect(lambda *_: self._want_tile())

    def set_head(self, weights: np.ndarray, tokens, title: str = "", cmap: str = "viridis", scale: str = "linear",
                 hide_first: bool = False, *, causal: bool | None = None, quantity: str = "weight",
                 prepared: PreparedHead | None = None) -> None:
        """Show ``weights`` (n, n) with token labels; ``hide_first``: drop key 0 and renormalise each row.

        ``causal``: draw the future keys as background (the model's mask); None keeps the figure's
        setting (True until told otherwise). ``quantity`` names what is drawn on the colour bar
        ("weight", "rollout R", …), written on the scale ("√weight", "log₁₀ weight"). ``prepared``: the whole drawing
        (the overview pooled, scaled and coloured) made off the GUI thread (:class:`analysis.display.PreparedHead`),
        used when it is of these ``weights`` and options; else made here."""
        if causal is not None:
            self.causal = bool(causal)
        if prepared is None or not prepared.fits(weights, self.causal, hide_first, scale):
            prepared = PreparedHead(weights, self.causal, hide_first, scale, OVERVIEW_CELLS)
        shown, matrix, stride = prepared.shown, prepared.matrix, prepared.stride
        # up to OVERVIEW_CELLS a side the whole map is the image; past it the image is the map pooled (the overview)
        # and self.matrix the ShownMap (cells looked up, no n × n copy); the part in view comes as a detail tile
        self.before_hiding = shown.weights if hide_first else None  # what each cell was before renormalising
        n = shown.shape[0]
        new_size = self.matrix is None or self.matrix.shape != matrix.shape
        self.matrix, self.tokens = matrix, tuple(tokens)
        drawn, levels = prepared.drawn, prepared.levels
        self._show_scale(cmap, levels, bar_label(scale, hide_first, quantity))
        self._draw(shown, scale, drawn, levels, stride, prepared.index)
        self._show_titles(html.escape(title, quote=False))
        self.left_axis.set_tokens(self.tokens)
        self.bottom_axis.set_tokens(self.tokens)
        if new_size:
            limit_to_data(self.plot, n, n)
        # the view's range as it will be painted (pyqtgraph auto-ranges a new image only when the scene is about to
        # paint): the labels in view, and so the query axis' width, are those of this map, not of the one before
        self.plot.getViewBox().prepareForPaint()
        for _ in range(2):  # the labels thinned for the map's size as laid out, and the axes sized for those labels,
            self.update_label_density()  # before the scene paints (ZoomableFigure.lay_out_now)
            self.lay_out_now()
        cell = self.image.cell_now
        self.image.hover_cell(cell if cell is not None and max(cell) < n else None)  # the readout follows new data

    def _draw(self, shown: ShownMap, scale: str, drawn: np.ndarray, levels: tuple[float, float], stride: int,
              index: np.ndarray | None = None) -> None:
        """The image: ``drawn``, the map (``stride`` 1) or its overview pooled over ``stride`` × ``stride`` cells a
        pixel, coloured by ``scale`` over ``levels`` (``index``: its colour index, made with it); a detail tile of
        ``shown`` is asked for the view."""
        self.tiles.drop()
        self.detail.clear()
        self._tile_wanted = None
        self.shown, self.scale = shown, scale
        self.image.cells_per_pixel, self.image.data_shape = stride, shown.shape
        self.image.set_image(drawn, levels, index)
        self.image.setRect(QtCore.QRectF(0, 0, drawn.shape[1] * stride, drawn.shape[0] * stride))
        self._want_tile()

    def _want_tile(self) -> None:
        """The view moved or the map changed: ask for the tile it needs once the view rests (TILE_DELAY_MS)."""
        if self.shown is not None:
            self._tile_timer.start()

    def _make_tile(self) -> None:
        """Ask the tile maker for the part in view at the stride the view needs (:func:`tile_for_view`), unless
        the tile shown or asked for already covers it; none when the overview is fine enough."""
        values, vb = self.shown, self.plot.getViewBox()
        if values is None or vb.width() < 10 or vb.height() < 10:
            return
        ratio = self.devicePixelRatioF()
        (x0, x1), (y0, y1) = view = vb.viewRange()
        want = tile_for_view(view, (vb.width() * ratio, vb.height() * ratio), values.shape,
                             self.image.cells_per_pixel)
        if want is None:
            self.tiles.drop()
            self.detail.clear()
            self._tile_wanted = None
            return

        def covers(tile) -> bool:
            (r0, r1), (c0, c1), stride = tile
            return (stride == want[2] and r0 <= max(0, math.floor(y0)) and c0 <= max(0, math.floor(x0))
                    and r1 >= min(values.shape[0], math.ceil(y1)) and c1 >= min(values.shape[1], math.ceil(x1)))

        shown = self.detail.request
        if self._tile_wanted is not None and covers(self._tile_wanted):
            return  # shown, or on its way
        if shown is not None and covers((shown.rows, shown.cols, shown.stride)):
            return
        self._tile_wanted = want
        lut = self.image.lut if isinstance(self.image.lut, np.ndarray) else self.colorbar.colorMap().getLookupTable(
            nPts=256, alpha=True)
        self.tiles.request(values, *want, self.scale, self.image.levels, lut)

    def on_theme(self, dark: bool) -> None:
        self.detail.background = theme_colors(dark)["background"]
        self.detail.update()

    def _show_scale(self, cmap: str, levels: tuple[float, float], label: str) -> None:
        """The colour bar's map, levels and label, each set only when it changes: pyqtgraph draws the bar's axis
        again on every set, and a new label lays the figure out again."""
        if self.colorbar.colorMap() is not colormap(cmap):  # (pyqtgraph keeps one ColorMap per name)
            self.colorbar.setColorMap(colormap(cmap))
        if tuple(self.colorbar.levels()) != tuple(levels):
            self.colorbar.setLevels(levels)
        if self.colorbar.axis.labelText != label:
            self.colorbar.axis.setLabel(label)

    def _show_titles(self, title_html: str) -> None:
        """The plot's title and the axes' titles ("query", "key"), each set only when it changes (a new title lays
        the figure out again, and every axis is drawn again after that)."""
        if (title_html, self.title_px, self.title_pt) != self._title:
            self._title = (title_html, self.title_px, self.title_pt)
            self.plot.setTitle(title_html, size=f"{self.title_pt:g}pt")
            self.plot.layout.setRowFixedHeight(0, self.title_px)
            self.plot.titleLabel.setMaximumHeight(self.title_px)
        for axis, name in ((self.left_axis, "query"), (self.bottom_axis, "key")):
            if axis.labelText != name or not axis.label.isVisible():
                self.plot.setLabel(axis.orientation, name)

    def update_label_density(self) -> None:
        """Thin the token labels so that neighbours never touch, from the labels' real height (after a new map, a
        zoom, a pan or a resize)."""
        if self.matrix is None:
            return
        n = self.matrix.shape[0]
        vb = self.plot.getViewBox()
        (x0, x1), (y0, y1) = vb.viewRange()
        row_px = vb.height() / max(1e-9, y1 - y0) if vb.height() > 10 else 400 / n
        col_px = vb.width() / max(1e-9, x1 - x0) if vb.width() > 10 else 400 / n
        strides = (max(1, math.ceil(self.left_axis.label_px() / row_px)),
                   max(1, math.ceil(self.bottom_axis.label_px() / col_px)))
        self.left_axis.set_stride(strides[0])  # (the same stride again changes nothing; new labels get it anew)
        self.bottom_axis.set_stride(strides[1])
        self.left_axis.fit_width()  # the labels in view now: the figure laid out for them before it paints

    def resizeEvent(self, ev):  # noqa: N802
        super().resizeEvent(ev)
        self.update_label_density()
        self.lay_out_now()  # an axis widened for the labels now in view: laid out before the paint

    def highlight_row(self, row: int | None) -> None:
        if row is None or self.matrix is None:
            self.row_highlight.setVisible(False)
            return
        self.row_highlight.setRect(QtCore.QRectF(0, row, self.matrix.shape[1], 1))
        self.row_highlight.setVisible(True)

    def shown_row(self, q: int) -> np.ndarray:
        """Query ``q``'s row as the map shows it, every key: (n_key,) float32, NaN where masked or hidden."""
        if isinstance(self.matrix, ShownMap):
            return self.matrix.row(q)
        return np.array(self.matrix[q], dtype=np.float32)

    def weight_text(self, q: int, k: int, value: float, to: str = KEY) -> str:
        """The hover text of cell (query ``q``, key ``k``, ``value`` as drawn) of a weights map
        (gui/plots/hover_text.py ``hover_text``): the mask, the hidden first key, or the value (renormalised, and
        the value before, when the first key is hidden). ``to``: the words between query and key."""
        raw = None if self.before_hiding is None else float(self.before_hiding[q, k])
        return hover_text(self.tokens, (q, k, value), self.causal, raw, to)

    def _text_for(self, cell) -> str:
        """The cell's tooltip: ``describe`` of (query, key, value as drawn)."""
        if self.matrix is None:
            return ""
        q, k = cell
        return self.describe(q, k, float(self.matrix[q, k]))

    def _hovered(self, cell) -> None:
        if cell is None or self.matrix is None:
            self.cell_hovered.emit(None)
        else:
            self.cell_hovered.emit((int(cell[0]), int(cell[1]), float(self.matrix[cell])))


def grid_source(result) -> np.ndarray:
    """What the grid draws: the thumbnails pooled during the run (an on-demand run's streamed pass pooled them),
    or the attentions themselves."""
    return result.thumbnails if result.thumbnails is not None else result.attentions


def lay_out_offscreen(fig: pg.GraphicsLayoutWidget, width: int, height: int) -> None:
    """Give a figure that is never shown on screen real geometry, so its layout is computed."""
    fig.setAttribute(QtCore.Qt.WidgetAttribute.WA_DontShowOnScreen, True)
    fig.resize(width, height)
    fig.show()
    settle_layout()


def fit_title(fig) -> None:
    """Fit an offscreen figure's title (and a Lines figure's legend) within the figure's width, which stays as
    laid out (a paper's column of 3.3 in is a file 3.3 in wide): a head's title wider than its map spans the whole
    figure; one wider than that is wrapped onto more lines at spaces, a single word wider than the figure elided
    (figure_text.wrap_text), its row as tall as its lines. A head's figure is then made as tall as its map is wide
    (square cells). (A title wider than the map pushed the colour bar out of the picture; widening the figure for it
    shrank the PNG's text and widened the PDF's page.)"""
    from .figure_text import measure_axes, wrap_text

    settle_layout()
    label = _title_label(fig)
    if isinstance(fig, HeadPlot) and _excess(fig) > 0:  # the title over the whole figure, not the map alone
        layout = fig.plot.layout
        layout.removeItem(label)
        layout.addItem(label, 0, 0, 1, layout.columnCount())
        settle_layout()
    for _ in range(4):  # the title's room depends on the layout, which the wrapped title changes
        excess = _excess(fig)
        if excess <= 0 or label is None:
            break
        text = getattr(label, "plain_title", None) or html.unescape(re.sub(r"<[^>]*>", " ", label.text)).strip()
        label.plain_title = text
        room = max(30.0, label.item.boundingRect().width() - excess - 2)
        points = float(str(label.opts.get("size", "11pt")).rstrip("pt") or 11)
        label.setText(wrap_text(text, points, room), size=f"{points:g}pt")
        _title_row(fig, label)
        settle_layout()
    if isinstance(fig, HeadPlot):
        _title_row(fig, label)  # (a large font's title on one line is taller than pyqtgraph's row too)
        measure_axes(fig)  # the colour bar's numbers in the figure's font, before the map is squared
        _square_map(fig)
    fig.resize(fig.width() + 1, fig.height())  # any resize lays the figure out again, at the width laid out
    fig.resize(fig.width() - 1, fig.height())
    settle_layout()


def _title_row(fig, label) -> None:
    """A head figure's title row as tall as its title's lines (pyqtgraph fixes one 30 px line)."""
    if isinstance(fig, HeadPlot):
        height = max(fig.title_px, int(math.ceil(label.item.boundingRect().height())) + 6)
        fig.plot.layout.setRowFixedHeight(0, height)
        label.setMaximumHeight(height)


def _excess(fig) -> float:
    """How much wider than the figure its layout wants to be (logical pixels; ≤ 0: it fits)."""
    return fig.ci.effectiveSizeHint(QtCore.Qt.SizeHint.MinimumSize).width() + 24 - fig.width()


def _square_map(fig: "HeadPlot") -> None:
    """A head figure's height changed so that its map is as tall as it is wide (the token labels thinned for it)."""
    vb = fig.plot.getViewBox()
    for _ in range(4):
        settle_layout()
        fig.update_label_density()
        change = int(round(vb.width() - vb.height()))
        if abs(change) <= 1:
            break
        fig.resize(fig.width(), max(120, fig.height() + change))


def _title_label(fig):
    """The figure's title (a pyqtgraph LabelItem): a HeadPlot's plot title, a Lines figure's."""
    if isinstance(fig, HeadPlot):
        return fig.plot.titleLabel
    return getattr(fig, "title", None) if isinstance(getattr(fig, "title", None), pg.LabelItem) else None


def head_figure_size(n_tokens: int) -> tuple[int, int]:
    side = int(min(2400, max(420, 14 * n_tokens)))
    return side + 220, side + 200


def head_title(model_label: str, layer: int, head: int) -> str:
    """The title of a head's export figure: "gpt2 — L1H0" (the head named as everywhere: ``head_name``; the model by
    its name, never its folder's path: ``model_name``)."""
    return f"{model_name(model_label)} — {head_name(layer, head)}"


def offscreen_head_figure(result, layer: int, head: int, cmap="viridis", scale="linear", hide_first=False) -> HeadPlot:
    fig = HeadPlot()
    lay_out_offscreen(fig, *head_figure_size(result.n_tokens))
    fig.set_head(result.head_map(layer, head), result.tokens, head_title(result.model_label, layer, head),
                 cmap=cmap, scale=scale, hide_first=hide_first, causal=result.causal)
    settle_layout()  # the rotated labels' height changes the layout once
    fig.update_label_density()
    return fig


def offscreen_grid_figure(result, cmap="viridis", scale="linear", badges=None, hide_first=False,
                          badge_label: str = "", badge_low: bool = False, title: str | None = None) -> GridPlot:
    """Every head's pooled map in one figure: from the thumbnails (``grid_source``), pooled from the maps themselves
    when they are kept and a cell needs more pixels (an on-demand result: the thumbnails alone). ``badges``: a score
    (layer, head) whose standout heads are badged (the low ones with ``badge_low``)."""
    fig = GridPlot()
    L, H = result.n_layer, result.n_head
    lay_out_offscreen(fig, int(min(3000, 220 + 70 * H)), int(min(4000, 110 + 70 * L)))
    fig.set_attentions(grid_source(result), cmap=cmap, scale=scale, full=result.attentions, hide_first=hide_first,
                       title=title if title is not None else grid_title(result), sync=True,
                       causal=result.causal)
    if badges is not None:
        fig.set_badges(badges, badge_label, low=badge_low)
    return fig


def grid_title(result) -> str:
    """The grid figure's title: "bundled — all heads, 12 tokens" (the model's name, never its folder's path)."""
    return f"{model_name(result.model_label)} — all heads, {result.n_tokens} tokens"


def dispose_figure(widget: QtWidgets.QWidget) -> None:
    """Destroy an offscreen figure now, while the QApplication is alive (not at interpreter exit)."""
    widget.hide()  # not close(): pyqtgraph's GraphicsView.close() drops the viewport and crashes Qt 6.11
    widget.deleteLater()
    QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
