"""The query-row view under the Head tab's map: one query's row of the head on screen, for texts too long to read a
row off the map. Its values over every key as bars (max-pooled to the strip's pixels, so no peak is lost at 8,192
keys; zoom with the wheel, exact values in the tooltip), and its top keys, each in the text around it.

It shows what the map shows (the weights, renormalised without the first key when that is hidden, or the
value-weighted shares): ``HeadPlot.shown_row``. Shown while a query row is chosen (a click on a row of the map, on
a query's label, or on a token of the strip above the text); its × clears the choice."""
from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from analysis.display import in_context, pooled_row, top_keys

from ...plots.plot_items import plain_tooltip

TOP_KEYS = 5  # the keys listed under the strip
STRIP_PX = 54  # the bars' height
BAR_BRUSH = "#3b75af"


class QueryRowView(QtWidgets.QFrame):
    """``show_row(tokens, query, values, quantity)``; ``closed`` when its × is clicked."""

    closed = QtCore.Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.tokens: tuple[str, ...] = ()
        self.values: np.ndarray | None = None  # the row as the map shows it (n_key,), NaN where masked or hidden
        self.query: int | None = None
        self.quantity = "weight"
        self.title = QtWidgets.QLabel()
        self.title.setTextFormat(QtCore.Qt.TextFormat.RichText)
        close = QtWidgets.QToolButton()
        close.setText("×")
        close.setAutoRaise(True)
        close.setToolTip("Close the query row (or click the row again)")
        close.clicked.connect(self.closed)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setFixedHeight(STRIP_PX)
        self.plot.setMouseEnabled(x=True, y=False)
        self.plot.hideAxis("left")
        self.plot.getAxis("bottom").setHeight(16)
        self.plot.setMenuEnabled(False)
        self.plot.getPlotItem().hideButtons()
        self.bars = pg.BarGraphItem(x0=[], height=[], width=1.0, brush=BAR_BRUSH, pen=None)
        self.plot.addItem(self.bars)
        self.stride = 1  # keys per bar now
        view = self.plot.getViewBox()
        view.sigXRangeChanged.connect(lambda *_: self._draw_bars())
        view.sigResized.connect(lambda *_: self._draw_bars())
        self.plot.scene().sigMouseMoved.connect(self._hover)
        self.keys = QtWidgets.QLabel()
        self.keys.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.keys.setWordWrap(True)
        head = QtWidgets.QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.title, 1)
        head.addWidget(close)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(1)
        layout.addLayout(head)
        layout.addWidget(self.plot)
        layout.addWidget(self.keys)
        self.hide()

    def show_row(self, tokens, query: int, values: np.ndarray, quantity: str = "weight") -> None:
        """Show query ``query``'s ``values`` (n_key,) over the keys ``tokens``; ``quantity`` names them."""
        self.tokens, self.query, self.quantity = tuple(tokens), int(query), quantity
        self.values = np.asarray(values, dtype=np.float32)
        self.title.setText(f"<b>Query {query}</b> “{html.escape(self.tokens[query])}” — its {html.escape(quantity)} "
                           f"over all {len(self.values):,} keys (bars: the largest of each bar's keys)")
        finite = self.values[np.isfinite(self.values)]
        top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
        self.plot.setLimits(xMin=0, xMax=len(self.values), minXRange=min(8, len(self.values)))
        self.plot.setYRange(0, top, padding=0.02)
        self.plot.setXRange(0, len(self.values), padding=0)
        self.keys.setText(self.top_keys_html())
        self._draw_bars()
        self.show()

    def top_keys_html(self) -> str:
        """The TOP_KEYS largest keys, each "#j “token” value …before ⟦token⟧ after…"."""
        items = []
        for j, value in top_keys(self.values, TOP_KEYS):
            before, token, after = in_context(self.tokens, j)
            items.append(f"<b>#{j}</b> “{html.escape(token)}” {value:.3f} "
                         f"<span style='color:gray'>{html.escape(before)}<u>{html.escape(token)}</u>"
                         f"{html.escape(after)}</span>")
        return ("Top keys: " + " &nbsp;·&nbsp; ".join(items)) if items else "No key is visible to this query."

    def _draw_bars(self) -> None:
        """The keys in view as bars, max-pooled to the strip's pixels (:func:`analysis.display.pooled_row`)."""
        if self.values is None:
            return
        view = self.plot.getViewBox()
        (x0, x1), _ = view.viewRange()
        start = max(0, int(math.floor(x0)))
        stop = min(len(self.values), int(math.ceil(x1)))
        if stop <= start:
            return
        heights, self.stride = pooled_row(self.values[start:stop], max(1, int(view.width())))
        heights = np.nan_to_num(heights, nan=0.0)
        self.bars.setOpts(x0=start + np.arange(len(heights)) * self.stride, height=heights, width=self.stride)

    def _hover(self, pos) -> None:
        if self.values is None:
            return
        view = self.plot.getViewBox()
        if not view.sceneBoundingRect().contains(pos):
            self.plot.setToolTip("")
            return
        j = int(math.floor(view.mapSceneToView(pos).x()))
        if not 0 <= j < len(self.values):
            return
        value = self.values[j]
        said = f"{value:.4f}" if math.isfinite(value) else "masked or hidden"
        self.plot.setToolTip(plain_tooltip(f"key '{self.tokens[j]}' [{j}]: {said}"))
