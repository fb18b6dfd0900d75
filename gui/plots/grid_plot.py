"""Every head of every layer as thumbnails in one mosaic (a :class:`LayerHeadMap`).

Each thumbnail is max-pooled to the device pixels its cell really has on screen (never more, on its shorter side),
so a one-token-wide pattern such as a previous-token diagonal stays visible at any n and any window
size: Qt drops image rows when it shrinks an image, but never when it enlarges one. The run pools
thumbnails to ``THUMBNAIL_PX`` while it captures the attention; a cell with more pixels than that,
or a grid with the first key hidden and renormalised, is pooled from the full attentions, a few heads
per turn of the event loop when that is more than a small text's maps (the run's 96-pixel thumbnails of 12 × 12
heads take one turn of their own, ~8 ms here, not the turn the new result arrives in; at 1024 tokens one head a turn).

A causal model's masked cells (key > query) are left blank, NaN drawn as background, as the head view
draws them (:func:`mask_future`); an encoder's map has no mask.

The mosaic fills the panel: its layers are wrapped into as many side-by-side blocks as make the cells nearest
square for the panel's shape (gui/plots/head_layout.py: SmolLM2's 30 × 9 heads in two blocks of 15 layers at
1366 × 768), and the cells then take the whole view, no more than MAX_CELL_ASPECT times
wider than tall or taller than wide (past that the spare room is left empty around the grid, so a head's pattern
is never stretched more). The blocks are chosen again when the panel is resized, never while zooming.
"""
from __future__ import annotations

import math

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import apply_scale, pooled_heads

from .head_layout import MAX_CELL_ASPECT, HeadLayout, blocks_for
from .layer_head_map import LayerHeadMap

DEFAULT_CELL_PX = 64  # before the widget has a size
MAX_MOSAIC_PIXELS = 16_000_000  # the cell size is capped so the whole mosaic stays below this
SYNC_ELEMENTS = 600_000  # sources up to this many numbers are pooled in one go (12 × 12 heads of 64 tokens)
STEP_ELEMENTS = 1_600_000  # otherwise about this many per turn of the event loop (1 head at n = 1024; 173 thumbnails)
BAR_LABELS = {"linear": "weight", "power": "√weight", "log": "log₁₀ weight"}


def bar_label(scale: str, hide_first: bool = False, quantity: str = "weight") -> str:
    """A colour bar's label: ``quantity`` on ``scale`` ("weight", "√weight", "log₁₀ rollout R"), and
    "(first key hidden)" when the first key is hidden and rows renormalised."""
    return BAR_LABELS[scale].replace("weight", quantity) + (" (first key hidden)" if hide_first else "")


class GridPlot(LayerHeadMap):
    """Layers are rows, heads are columns; ``head_clicked`` / ``head_activated`` as in LayerHeadMap."""

    mosaic_ready = QtCore.Signal()  # a freshly pooled mosaic is on screen

    def __init__(self, parent=None):
        super().__init__(parent)
        self._thumbnails = None
        self._full = None
        self._key = None
        self._hide_first = False
        self._first_hidden = False
        self._cmap, self._scale, self._title = "viridis", "linear", ""
        self._quantity = "weight"
        self.causal = False  # blank the masked future cells (a decoder's); set_attentions(causal=…)
        self._mosaic: np.ndarray | None = None  # the thumbnails wrapped into self.layout's image
        self._cells: np.ndarray | None = None  # (layer, head, c, c): every head's pooled thumbnail, masked
        self.cell = 0  # the pooled size of one head in the mosaic now (pixels of the image)
        self._job = None
        self._job_timer = QtCore.QTimer(self)
        self._job_timer.setInterval(0)
        self._job_timer.timeout.connect(self._step_job)
        self._resize_timer = QtCore.QTimer(self)
        self._resize_timer.setSingleShot(True)
        self._resize_timer.setInterval(80)
        self._resize_timer.timeout.connect(lambda: self._repool(sync=False))
        self.plot.getViewBox().sigRangeChanged.connect(lambda *_: self._resize_timer.start())
        self.plot.getViewBox().sigResized.connect(lambda *_: self._resize_timer.start())
        self.frame = QtWidgets.QGraphicsRectItem()  # the view when all shows, drawn as nothing: "View all" shows it
        self.frame.setPen(QtGui.QPen(QtCore.Qt.PenStyle.NoPen))
        self.plot.addItem(self.frame)
        self.plot.getViewBox().sigResized.connect(lambda *_: self.fit())

    def set_attentions(self, attentions: np.ndarray, cmap: str = "viridis", scale: str = "linear", title: str = "",
                       key=None, *, full: np.ndarray | None = None, hide_first: bool = False,
                       sync: bool = False, quantity: str = "weight", causal: bool | None = None,
                       first_hidden: bool = False) -> None:
        """Draw all heads. ``attentions``: (layer, head, q, k), the run's thumbnails (``grid_source``) or the
        attentions themselves; ``full``: the full attentions, pooled from when a cell has more pixels than
        the thumbnails or ``hide_first`` (drop key 0 and renormalise each row, as the head plot does).
        ``key`` identifies the data (pooling is redone only when it, the cell size or hide_first change);
        ``sync`` pools at once (exports) instead of a layer per event-loop turn for large attentions;
        ``quantity`` names what the colour bar measures ("weight", "share of row N", …). ``causal``: leave
        the masked cells (key > query) blank, as the head view does; None keeps the figure's setting
        (False until told: an encoder's future keys are real weights). ``first_hidden``: the thumbnails were pooled
        with the first key hidden already (an on-demand result's, measures.streamed): the colour bar says so."""
        causal = self.causal if causal is None else bool(causal)
        if key is None or key != self._key or hide_first != self._hide_first or causal != self.causal:
            self._key, self._hide_first, self.causal = key, hide_first, causal
            self._job = None  # a pooling of the previous data is of no use now
            self._job_timer.stop()
            self._thumbnails, self._full = attentions, full if full is not None else attentions
            self._mosaic, self._cells, self.cell = None, None, 0
        self._cmap, self._scale, self._title, self._quantity = cmap, scale, title, quantity
        self._first_hidden = bool(first_hidden)
        if not self._repool(sync) and self._mosaic is not None:
            self._draw()

    # ----------------------------------------------------------------- pooling
    def layout_for_view(self) -> HeadLayout:
        """The layout the view's size asks for (:func:`blocks_for`), one block before the view has a size."""
        L, H = self._full.shape[:2]
        vb = self.plot.getViewBox()
        return HeadLayout(L, H, blocks_for(L, H, vb.width(), vb.height()) if vb.width() > 10 and vb.height() > 10
                          else 1)

    def target_cell(self) -> int:
        """Device pixels one head's cell has now (its shorter side), capped by n and the mosaic budget."""
        L, H, n, _ = self._full.shape
        vb = self.plot.getViewBox()
        if vb.width() > 10 and vb.height() > 10:
            layout = self.layout_for_view()
            (x0, x1), (y0, y1) = vb.viewRange()
            # the view shows at most the whole grid; before it shows this grid at all, assume it will
            if self.layout != layout:
                x_span, y_span = layout.columns, layout.rows
            else:
                x_span, y_span = min(layout.columns, x1 - x0), min(layout.rows, y1 - y0)
            px = min(vb.width() / max(1e-9, x_span), vb.height() / max(1e-9, y_span)) * self.devicePixelRatioF()
        else:
            px = DEFAULT_CELL_PX
        cap = int(math.sqrt(MAX_MOSAIC_PIXELS / (L * H)))
        return max(1, min(n, cap, int(px)))

    def _repool(self, sync: bool) -> bool:
        """Start pooling if the cell size changed enough; True if pooling was started."""
        if self._full is None:
            return False
        target = self.target_cell()
        if self._mosaic is not None and self.cell <= target <= 1.25 * self.cell:
            return False  # never more pixels than the cell has; a little fewer is fine
        if self._job is not None and self._job[0] == target:
            return True
        thumbs = self._thumbnails
        use_thumbs = not self._hide_first and thumbs is not None and target <= thumbs.shape[-1]
        source = thumbs if use_thumbs else self._full
        L, H, n, _ = source.shape
        blocks = np.empty((L, H, min(target, n), min(target, n)), np.float32)
        per_step = max(1, STEP_ELEMENTS // (n * n))  # heads pooled in one turn of the event loop
        self._job = (target, source, blocks, iter([(layer, h, min(H, h + per_step))
                                                   for layer in range(L) for h in range(0, H, per_step)]))
        if sync or source.size <= SYNC_ELEMENTS:
            self._job_timer.stop()
            while self._job is not None:
                self._step_job()
        else:
            self._job_timer.start()
        return True

    def _step_job(self) -> None:
        """Pool a few heads; when all are done, show the new mosaic."""
        target, source, blocks, steps = self._job
        step = next(steps, None)
        if step is not None:
            layer, h0, h1 = step
            blocks[layer, h0:h1] = pooled_heads(source[layer : layer + 1, h0:h1], target, self._hide_first)[0]
            return
        self._job_timer.stop()
        self._job = None
        if self.causal:
            mask_future(blocks)
        self._cells, self.cell = blocks, blocks.shape[-1]
        self._mosaic = None  # wrapped for the layout the view asks for, in _draw
        self._draw()
        self.mosaic_ready.emit()

    def _draw(self) -> None:
        """Wrap the thumbnails for the view's layout (when it changed) and show them on the colour scale."""
        layout = self.layout_for_view()
        if self._mosaic is None or layout != self.layout:
            self._mosaic = layout.wrap(self._cells)  # (rows·c, columns·c)
        drawn, levels = apply_scale(self._mosaic, self._scale)
        self.set_image(drawn, (layout.n_layer, layout.n_head), levels, self._cmap,
                       self._title, bar_label(self._scale, self._hide_first or self._first_hidden, self._quantity),
                       layout=layout)

    def set_image(self, image, shape, levels, cmap, title="", bar_label="", layout=None):
        super().set_image(image, shape, levels, cmap, title, bar_label, layout=layout)
        self.fit()

    def fit(self) -> None:
        """Fill the view: wrap the layers into the blocks its size asks for (the mosaic drawn again when they
        change), then let "View all" (and the view before any zoom) show the whole grid over the whole view, its
        cells as wide and tall as the view gives them, but at most MAX_CELL_ASPECT times longer on one side than the
        other: past that the grid is centred in the spare room of the long side. Zoom and pan reach that rectangle."""
        L, H = self.shape
        vb = self.plot.getViewBox()
        if not L or not H or vb.width() <= 10 or vb.height() <= 10:
            return
        if self._cells is not None and self._cells.shape[:2] == (L, H) and self.layout_for_view() != self.layout:
            self._draw()  # a new layout: set_image comes back here with it
            return
        columns, rows = self.layout.columns, self.layout.rows
        w, h = vb.width() / columns, vb.height() / rows  # pixels of a cell when the whole grid fills the view
        w, h = min(w, MAX_CELL_ASPECT * h), min(h, MAX_CELL_ASPECT * w)
        span_x, span_y = vb.width() / w, vb.height() / h  # ≥ columns and ≥ rows: the view when all shows
        x0, y0 = (columns - span_x) / 2, (rows - span_y) / 2
        self.frame.setRect(QtCore.QRectF(x0, y0, span_x, span_y))
        vb.setLimits(xMin=x0, xMax=x0 + span_x, yMin=y0, yMax=y0 + span_y, maxXRange=span_x, maxYRange=span_y,
                     minXRange=min(columns, 1), minYRange=min(rows, 1))
        if vb.autoRangeEnabled()[0] or vb.autoRangeEnabled()[1]:
            vb.setRange(xRange=(x0, x0 + span_x), yRange=(y0, y0 + span_y), padding=0, disableAutoRange=False)

    def hover_text(self, layer: int, head: int) -> str:
        return super().hover_text(layer, head) + "\nclick: select · double-click: open"


def mask_future(cells: np.ndarray) -> None:
    """Set the masked pixels of a causal model's thumbnails ``cells`` (layer, head, c, c) to NaN, in place.

    A pixel of a pooled thumbnail is masked when every source cell (query i, key j) it pools has j > i.
    Thumbnails are pooled over contiguous, increasing bins of tokens, the same bins for queries and keys
    (``analysis.display.pool_edges``): bin b's first key is ≥ every query of bin a exactly when b > a, so
    the masked pixels are those with key bin > query bin, the strict upper triangle of each c × c cell
    (c = n: the model's own mask, key > query)."""
    c = cells.shape[-1]
    cells[..., ~np.tri(c, dtype=bool)] = np.nan  # (c, c): key bin > query bin
