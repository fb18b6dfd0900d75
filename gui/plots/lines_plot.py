"""The Lines view of attention (bertviz's head view): the tokens in two columns, queries on the left and keys
on the right, and a line from each query to each key it attends to, one colour per head.

- A line's opacity is the weight as drawn (:func:`line_opacity`): the head map's value after the view's options
  (the first key hidden and each row renormalised; the value-weighted shares), through the scale.
- Hovering a token isolates its lines: a query (left) its row, a key (right) its column, of every head drawn.
  A click on a query token toggles the selected query row; the selected row is framed like the matrix's
  row highlight and its lines are isolated while no token is hovered.
- One head, or several of one layer, each in its own colour (:func:`head_colour`, bertviz colours heads too);
  their names, in those colours, above the columns.
- Short texts only: at most :data:`LINES_MAX_TOKENS` tokens (n² lines each head). The Head tab shows the matrix
  and a note beyond it.

:func:`lines_figure` is the entry point of an export (or of a command line's ``figure --kind lines``): a laid-out
offscreen figure for gui/export/figure_files.save_figure.
"""
from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import LOG_FLOOR, POWER_GAMMA, elide, head_name, shown_weights

from .plot_items import theme_colors

#: The most tokens the Lines view draws: n² lines a head (64 tokens: 4,096, half of them under a causal mask),
#: rows of at least :data:`MIN_ROW_PX` on screen. Longer texts are read in the matrix.
LINES_MAX_TOKENS = 64
#: Head colours, by head index: d3's category10 (bertviz's), then two more; past them, hues spread evenly.
HEAD_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf", "#393b79", "#637939")
ROW_HIGHLIGHT = "#ff2d55"  # the selected query row, as in the matrix (figures.ROW_HIGHLIGHT)
MIN_ROW_PX, MAX_ROW_PX = 15, 24  # the row pitch: the widget's height shared by the rows, within these
MIN_SPAN_PX, MAX_SPAN_PX = 160, 360  # the width the lines cross between the two columns
FIGURE_MIN_SPAN_PX = 40  # ... in a figure of a width asked for (a paper's column), down to this
LABEL_GAP_PX = 6  # between a token's text and the end of its lines
MARGIN_PX = 10
LINE_PX = 2  # line width (bertviz's stroke width)
LABEL_CHARS = 20  # a longer token is elided in its column
FONT_PT = 10


def line_opacity(values: np.ndarray, scale: str = "linear") -> np.ndarray:
    """The opacity (0 … 1) of the line of each weight ``w`` as drawn (NaN: no line, kept NaN).

    linear: w (a weight of 0.4 is a line of opacity 0.4, in every head and every text: not relative to the
    largest); power: w^0.5 (``POWER_GAMMA``, small weights show); log: (log₁₀ max(w, LOG_FLOOR) − log₁₀ LOG_FLOOR)
    / −log₁₀ LOG_FLOOR, 1e-4 … 1 onto 0 … 1. Values above 1 (none for weights and shares) are clipped."""
    w = np.clip(np.asarray(values, dtype=np.float64), 0.0, 1.0)  # NaN stays NaN
    if scale == "linear":
        return w
    if scale == "power":
        return w**POWER_GAMMA
    if scale == "log":
        floor = math.log10(LOG_FLOOR)
        with np.errstate(invalid="ignore"):
            return (np.log10(np.maximum(w, LOG_FLOOR)) - floor) / -floor
    raise ValueError(f"unknown scale {scale!r}")


def head_colour(head: int, n_head: int) -> QtGui.QColor:
    """The colour of head index ``head`` of a layer of ``n_head`` heads: :data:`HEAD_COLOURS` when there are
    that many, else ``n_head`` evenly spread hues (distinct either way)."""
    if n_head <= len(HEAD_COLOURS):
        return QtGui.QColor(HEAD_COLOURS[head])
    return pg.intColor(head, hues=n_head, values=1, maxValue=200)


class TokenText(pg.TextItem):
    """One token of a column: plain text (``setPlainText``, so a token like ``<b>`` shows as typed), reporting
    the pointer entering and leaving it and a click."""

    def __init__(self, text: str, side: str, index: int, on_hover, on_click, anchor, points: float = FONT_PT):
        super().__init__(text=text, anchor=anchor)
        self.side, self.index = side, index
        self.on_hover, self.on_click = on_hover, on_click
        font = QtGui.QFont(QtGui.QFont().family())
        font.setPointSizeF(float(points))
        self.setFont(font)
        self.box = QtWidgets.QGraphicsRectItem(self)  # the hover background / the selected row's frame
        self.box.setZValue(-1)
        self.box.setVisible(False)

    def hoverEvent(self, ev):  # noqa: N802 (pyqtgraph's name)
        # pyqtgraph sends the old token's exit after the new token's enter: ``on_hover(token, False)`` ends only
        # this token's hover
        if not ev.isExit():
            ev.acceptClicks(QtCore.Qt.MouseButton.LeftButton)
        self.on_hover((self.side, self.index), not ev.isExit())

    def mouseClickEvent(self, ev):  # noqa: N802
        if ev.button() == QtCore.Qt.MouseButton.LeftButton:
            ev.accept()
            self.on_click((self.side, self.index))

    def mark(self, fill: QtGui.QColor | None, frame: QtGui.QColor | None) -> None:
        """A background ``fill`` (hovered) and/or a ``frame`` (the selected query row), or neither."""
        self.box.setRect(self.textItem.mapRectToParent(self.textItem.boundingRect()).adjusted(-2, 0, 2, 0))
        self.box.setBrush(QtGui.QBrush(fill) if fill is not None else QtGui.QBrush(QtCore.Qt.BrushStyle.NoBrush))
        pen = QtGui.QPen(frame if frame is not None else QtCore.Qt.GlobalColor.transparent)
        pen.setWidthF(2 if frame is not None else 0)
        pen.setCosmetic(True)
        self.box.setPen(pen)
        self.box.setVisible(fill is not None or frame is not None)


class LinesPlot(pg.GraphicsLayoutWidget):
    """Queries on the left, keys on the right, a line per (head, query, key) whose opacity is the weight.

    ``token_hovered``: None or (side, index), side "query" or "key"; ``query_clicked``: a query token was
    clicked. The geometry is in pixels: the view's range is its own size, laid out again at every resize."""

    token_hovered = QtCore.Signal(object)
    query_clicked = QtCore.Signal(int)
    #: the tokens' and the legend's size, and the title's, in points (a figure's: lines_figure's ``font_pt``)
    text_pt, title_pt = FONT_PT, 11.0
    min_span = MIN_SPAN_PX  # the narrowest span the lines cross (a figure of a fixed width allows less)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.dark = False
        self.setBackground("w")
        self.title = self.addLabel("", row=0, col=0, size="11pt")
        self.legend = self.addLabel("", row=1, col=0, size="10pt")
        self.view = pg.ViewBox(enableMouse=False, enableMenu=False, invertY=True, defaultPadding=0)
        self.addItem(self.view, row=2, col=0)
        self.tokens: tuple[str, ...] = ()
        self.heads: list[tuple[str, QtGui.QColor, np.ndarray]] = []  # (name, colour, weights as drawn (n, n))
        self.quantity = "weight"
        self.queries: list[TokenText] = []
        self.keys: list[TokenText] = []
        #: every line drawn: its QGraphicsLineItem, and which head (index into heads), query and key it joins
        self.lines: list[QtWidgets.QGraphicsLineItem] = []
        self.line_head = self.line_query = self.line_key = np.zeros(0, dtype=int)
        self.hovered: tuple[str, int] | None = None
        self.query_row: int | None = None
        self.isolated: tuple[str, int] | None = None  # whose lines are the only ones shown (hover, else the row)
        self.row_px = MAX_ROW_PX
        self.view.sigResized.connect(lambda *_: self._place())

    # ----------------------------------------------------------------- data
    def set_lines(self, tokens: Sequence[str], heads: Sequence[tuple[str, QtGui.QColor, np.ndarray]],
                  title: str = "", scale: str = "linear", quantity: str = "weight") -> None:
        """Draw ``heads``: (name, colour, weights) each, weights (n, n) as the view shows them (NaN: masked or
        hidden, no line); opacity :func:`line_opacity` of ``scale``. ``quantity`` names the value in the hover
        text ("weight", "share of row N")."""
        self.tokens = tuple(str(t) for t in tokens)
        self.heads = [(str(name), QtGui.QColor(colour), np.asarray(w, dtype=np.float64)) for name, colour, w in heads]
        self.quantity = quantity
        self.title.setText(html.escape(title, quote=False), size=f"{self.title_pt:g}pt")
        self.legend.setText(self.legend_html(), size=f"{self.text_pt:g}pt")
        for item in self.queries + self.keys + self.lines:
            self.view.removeItem(item)
        n = len(self.tokens)
        self.queries = [self._token(i, "query") for i in range(n)]
        self.keys = [self._token(i, "key") for i in range(n)]
        self.lines, heads_of, queries, keys = [], [], [], []
        for h, (_, colour, weights) in enumerate(self.heads):
            opacity = line_opacity(weights, scale)
            for q, k in zip(*np.nonzero(np.nan_to_num(opacity, nan=0.0) > 0)):
                color = QtGui.QColor(colour)
                color.setAlphaF(float(opacity[q, k]))
                pen = QtGui.QPen(color)
                pen.setWidthF(LINE_PX)
                pen.setCosmetic(True)
                pen.setCapStyle(QtCore.Qt.PenCapStyle.FlatCap)
                line = QtWidgets.QGraphicsLineItem()
                line.setPen(pen)
                self.view.addItem(line, ignoreBounds=True)
                self.lines.append(line)
                heads_of.append(h), queries.append(int(q)), keys.append(int(k))
        self.line_head, self.line_query, self.line_key = (np.array(a, dtype=int) for a in (heads_of, queries, keys))
        self.hovered = None
        if self.query_row is not None and self.query_row >= n:
            self.query_row = None
        self._place()
        self._isolate()
        self._theme_tokens()

    def legend_html(self, width: float | None = None) -> str:
        """The heads' names in their colours, "━ L3H2", on one line, or on as many as fit ``width`` logical pixels."""
        entries = [(f'<span style="color:{c.name()}">━ {html.escape(name)}</span>', f"━ {name}")
                   for name, c, _ in self.heads]
        if width is None:
            return "  ".join(e for e, _ in entries)
        from .figure_text import fill_lines

        lines = fill_lines([text for _, text in entries], self.text_pt, width, sep="  ")
        return "<br>".join("  ".join(entries[i][0] for i in line) for line in lines)

    def _token(self, i: int, side: str) -> TokenText:
        anchor = (1, 0.5) if side == "query" else (0, 0.5)
        item = TokenText(elide(self.tokens[i], LABEL_CHARS), side, i, self._hover, self._click, anchor, self.text_pt)
        self.view.addItem(item, ignoreBounds=True)
        return item

    # ----------------------------------------------------------------- geometry
    def label_width(self) -> int:
        """The widest token's text in pixels (both columns show the same tokens)."""
        if not self.queries:
            return 0
        return int(math.ceil(max(t.textItem.boundingRect().width() for t in self.queries)))

    def content_size(self, row_px: int = MAX_ROW_PX) -> tuple[int, int]:
        """The view's natural size: both columns of labels, the widest span, ``row_px`` a row."""
        return (2 * (self.label_width() + LABEL_GAP_PX + MARGIN_PX) + MAX_SPAN_PX,
                len(self.tokens) * row_px + 2 * MARGIN_PX)

    def _place(self) -> None:
        """Lay the columns and lines out in the view's pixels: rows share the height (within MIN/MAX_ROW_PX), the
        span the width (within MIN/MAX_SPAN_PX); centred across, from the top down."""
        vb = self.view
        w, h = max(1.0, vb.width()), max(1.0, vb.height())
        vb.setRange(xRange=(0, w), yRange=(0, h), padding=0)
        n = len(self.tokens)
        if not n:
            return
        self.row_px = min(MAX_ROW_PX, max(MIN_ROW_PX, (h - 2 * MARGIN_PX) / n))
        label = self.label_width() + LABEL_GAP_PX
        span = min(MAX_SPAN_PX, max(self.min_span, w - 2 * (label + MARGIN_PX)))
        left = max(MARGIN_PX + label, (w - span) / 2)  # the x of the query labels' right edge + the gap
        top = MARGIN_PX  # under the legend (centred, the columns sat far below it in a tall tab)
        y = [top + (i + 0.5) * self.row_px for i in range(n)]
        for i in range(n):
            self.queries[i].setPos(left - LABEL_GAP_PX, y[i])
            self.keys[i].setPos(left + span + LABEL_GAP_PX, y[i])
        for line, q, k in zip(self.lines, self.line_query, self.line_key):
            line.setLine(left, y[q], left + span, y[k])

    # ----------------------------------------------------------------- hover and selection
    def _hover(self, token: tuple[str, int], entered: bool) -> None:
        """The pointer entered ``token`` (``entered``) or left it (then no token is hovered, unless another already
        took over)."""
        if not entered:
            if self.hovered != token:
                return
            token = None
        if token != self.hovered:
            self.hovered = token
            self._isolate()
            self.token_hovered.emit(token)

    def _click(self, token: tuple[str, int]) -> None:
        if token[0] == "query":
            self.query_clicked.emit(token[1])

    def highlight_row(self, row: int | None) -> None:
        """Frame the selected query row's token and isolate its lines while no token is hovered (None: no row)."""
        self.query_row = row if row is not None and row < len(self.tokens) else None
        self._isolate()

    def _isolate(self) -> None:
        """Show only the hovered token's lines (a query's row, a key's column), else the selected row's, else all."""
        self.isolated = self.hovered or (("query", self.query_row) if self.query_row is not None else None)
        if self.isolated is None:
            keep = np.ones(len(self.lines), dtype=bool)
        else:
            side, index = self.isolated
            keep = (self.line_query if side == "query" else self.line_key) == index
        for line, shown in zip(self.lines, keep):
            line.setVisible(bool(shown))
        hover_fill = QtGui.QColor(theme_colors(self.dark)["foreground"])
        hover_fill.setAlphaF(0.15)
        for item in self.queries + self.keys:
            fill = hover_fill if self.hovered == (item.side, item.index) else None
            frame = (QtGui.QColor(ROW_HIGHLIGHT) if item.side == "query" and item.index == self.query_row else None)
            item.mark(fill, frame)

    def visible_lines(self) -> list[tuple[int, int, int]]:
        """(head, query, key) of every line shown now."""
        return [(int(h), int(q), int(k)) for line, h, q, k in
                zip(self.lines, self.line_head, self.line_query, self.line_key) if line.isVisible()]

    def describe(self, token: tuple[str, int] | None) -> str:
        """The hover line of a token: a query's strongest key in each head drawn, or a key's strongest query:
        "query ' cat' [4] → L3H2: ' the' [3] 0.412 · L3H5: 'The' [0] 0.880" (the value as drawn, before the
        scale)."""
        if token is None or not self.tokens:
            return ""
        side, i = token
        parts = []
        for name, _, weights in self.heads:
            values = weights[i] if side == "query" else weights[:, i]
            if not np.isfinite(values).any():
                parts.append(f"{name}: none")
                continue
            j = int(np.nanargmax(values))
            parts.append(f"{name}: {self.tokens[j]!r} [{j}] {values[j]:.3f}")
        arrow = "→ strongest key" if side == "query" else "← strongest query"
        return f"{side} {self.tokens[i]!r} [{i}] {arrow} ({self.quantity}) " + " · ".join(parts)

    def on_theme(self, dark: bool) -> None:
        """apply_theme's hook: the tokens in the theme's text colour (the lines keep their heads' colours)."""
        self.dark = dark
        self._theme_tokens()
        self._isolate()

    def _theme_tokens(self) -> None:
        for item in self.queries + self.keys:
            item.setColor(theme_colors(self.dark)["foreground"])


def drawn_heads(weights_by_head: Mapping[tuple[int, int], np.ndarray], heads: Sequence[tuple[int, int]],
                n_head: int | None = None, causal: bool = True, hide_first: bool = False) -> list:
    """What :meth:`LinesPlot.set_lines` draws of ``heads``: (name "L3H2", colour :func:`head_colour`, the map as the
    matrix shows it, ``analysis.display.shown_weights``: NaN where masked or hidden, rows renormalised without
    key 0 when ``hide_first``). ``n_head``: heads a layer has (default the largest index drawn + 1)."""
    n_head = n_head or max(h for _, h in heads) + 1
    return [(head_name(layer, head), head_colour(head, n_head),
             shown_weights(weights_by_head[(layer, head)], causal, hide_first)) for layer, head in heads]


def lines_figure(tokens: Sequence[str], weights_by_head: Mapping[tuple[int, int], np.ndarray],
                 heads: Sequence[tuple[int, int]] | None = None, *, n_head: int | None = None,
                 causal: bool = True, hide_first: bool = False, scale: str = "linear", quantity: str = "weight",
                 query_row: int | None = None, title: str = "", dark: bool = False, width: int | None = None,
                 fonts=None, colours: Sequence | None = None) -> LinesPlot:
    """A laid-out offscreen Lines figure for ``save_figure`` (the caller disposes it: figures.dispose_figure).

    ``tokens``: the n tokens; ``weights_by_head``: (layer, head) → that head's (n, n) map, rows queries, columns
    keys (the attention weights, or the value-weighted shares); ``heads``: which of them to draw, in order
    (default: all, sorted); ``n_head``: heads a layer has, for their colours (:func:`head_colour`; default the
    largest head index + 1). The options as the Head tab's: ``causal`` (keys after the query have no line),
    ``hide_first`` (key 0 dropped, each row renormalised over the rest: analysis.display.shown_weights),
    ``scale`` (:func:`line_opacity`), ``query_row`` (framed, its lines alone), ``dark``. ``width``: the figure's
    width in logical pixels, kept (the title and legend wrapped to it, the span down to
    :data:`FIGURE_MIN_SPAN_PX`; None: as wide as its content); ``fonts``: a figure's sizes
    (figure_text.FigureFont; None: the view's own); ``colours``: one a head, in order (None: :func:`head_colour`
    of its index). ``ValueError`` past :data:`LINES_MAX_TOKENS` tokens or for a
    head not in ``weights_by_head``."""
    from ..export.figure_files import settle_layout
    from .figures import fit_title, lay_out_offscreen
    from .plot_items import apply_theme

    heads = sorted(weights_by_head) if heads is None else list(heads)
    missing = [head_name(*h) for h in heads if h not in weights_by_head]
    if missing:
        raise ValueError(f"no weights for {', '.join(missing)}")
    if len(tokens) > LINES_MAX_TOKENS:
        raise ValueError(f"the Lines view draws at most {LINES_MAX_TOKENS} tokens (this text has {len(tokens)})")
    drawn = drawn_heads(weights_by_head, heads, n_head, causal, hide_first)
    if colours is not None:  # one colour each, in order (heads of different layers that share an index)
        drawn = [(name, QtGui.QColor(c), w) for (name, _, w), c in zip(drawn, colours)]
    fig = LinesPlot()
    if fonts is not None:
        fig.text_pt, fig.title_pt = fonts.text, fonts.title
    if width is not None:
        fig.min_span = FIGURE_MIN_SPAN_PX
    fig.set_lines(tokens, drawn, title, scale, quantity)
    fig.highlight_row(query_row)
    natural, height = fig.content_size()
    lay_out_offscreen(fig, natural if width is None else int(width), height + 70)  # + the title's and legend's rows
    apply_theme(fig, dark)
    if width is not None:
        fig.legend.setText(fig.legend_html(width - 24), size=f"{fig.text_pt:g}pt")
        fit_title(fig)  # the title within the width (wrapped)
        for _ in range(2):  # the rows at their full pitch under the title and legend as they came out
            fig.resize(fig.width(), max(120, fig.height() + height - int(fig.view.height())))
            settle_layout()
    else:
        fit_title(fig)
    fig._place()
    return fig
