"""The one layer × head map: every figure that has a cell per head (the grid of thumbnails, the
score map, the parity error map, the importance map) is a :class:`LayerHeadMap`.

Each head is a unit square in data coordinates, placed by the map's :class:`~gui.plots.head_layout.HeadLayout`
(one block: head ``h`` of layer ``l`` is x ∈ [h, h+1], y ∈ [l, l+1], layer 0 on top; the grid may wrap its layers
into several blocks side by side), whatever the image behind it holds (one pixel per head for a score, a c × c
pooled thumbnail for the grid). So the selection outline, the badges, hover and clicks are the same code for all,
and the grid can change its pooling or its blocks without anything losing its head.
"""
from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import format_score, head_name

from .badges import BadgeLayer
from .head_layout import HeadLayout
from .plot_items import HoverImage, ZoomableFigure, colormap, limit_to_data, theme_colors

SELECTION_COLOR = "#ff2d55"
BLOCK_GAP_PX = 6  # the background line between two blocks of layers (cells inside a block: 2 px)
REVEAL_MARGIN = 0.25  # a head brought into view (select) keeps this much of a cell clear of the view's edge


def tick_stride(count: int, pixels: float, label_px: float) -> int:
    """Show every k-th of ``count`` labels so that labels ``label_px`` long fit in ``pixels``."""
    if count <= 0 or pixels <= 0:
        return 1
    return max(1, math.ceil((label_px + 2) * count / pixels))


class LayerHeadMap(ZoomableFigure):
    """Layers down (L0 on top), heads across. Click selects (``head_clicked``), double-click or Enter
    activates (``head_activated``), arrow keys move the selection, hover shows :meth:`hover_text`.
    :meth:`select` brings the selected head into view when the map is zoomed in past it.
    ``badges_changed`` carries :meth:`BadgeLayer.note` whenever the badges or their room change."""

    head_clicked = QtCore.Signal(int, int)
    head_activated = QtCore.Signal(int, int)
    head_hovered = QtCore.Signal(object)  # (layer, head) or None
    badges_changed = QtCore.Signal(str)

    def __init__(self, parent=None, colorbar: bool = True):
        super().__init__(parent)
        self.plot.invertY(True)
        self.image = HoverImage(text_for=self._text_for, on_hover=self._hovered, on_click=self._clicked,
                                on_double=self._double_clicked)
        self.plot.addItem(self.image)
        self.separators = QtWidgets.QGraphicsPathItem()
        self.separators.setZValue(2)
        self.plot.addItem(self.separators, ignoreBounds=True)
        self.block_separators = QtWidgets.QGraphicsPathItem()
        self.block_separators.setZValue(2)
        self.plot.addItem(self.block_separators, ignoreBounds=True)
        self.selection = QtWidgets.QGraphicsRectItem()
        self.selection.setPen(pg.mkPen(SELECTION_COLOR, width=3, cosmetic=True))
        self.selection.setZValue(10)
        self.selection.setVisible(False)
        self.plot.addItem(self.selection, ignoreBounds=True)
        self.badge_layer = BadgeLayer(self.plot, z=self.selection.zValue() + 1)  # over the frame: no digit is cut
        self._badge_note = ""
        self.colorbar = None
        if colorbar:
            self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=colormap("viridis"), interactive=False, width=14)
            self.colorbar.setImageItem(self.image, insert_in=self.plot)
            self.colorbar.axis.enableAutoSIPrefix(False)  # weights as they are: a top of 0.9997 is never "900 (x0.001)"
        self.shape = (0, 0)  # (layers, heads)
        self.layout = HeadLayout(0, 0)
        self.selected: tuple[int, int] | None = None
        self.plot.getViewBox().sigRangeChanged.connect(lambda *_: self._update_ticks())
        self.plot.getViewBox().sigResized.connect(lambda *_: self._update_ticks())
        self.plot.getViewBox().sigRangeChanged.connect(lambda *_: self._layout_badges())
        self.plot.getViewBox().sigResized.connect(lambda *_: self._layout_badges())

    # ----------------------------------------------------------------- badges (gui/plots/badges.py)
    @property
    def badges(self) -> list[pg.TextItem]:
        """The badges whose text is drawn now."""
        return self.badge_layer.shown

    @property
    def badge_values(self) -> np.ndarray | None:
        return self.badge_layer.values

    @property
    def badge_label(self) -> str:
        return self.badge_layer.label

    @property
    def badge_note(self) -> str:
        return self.badge_layer.note()

    # ----------------------------------------------------------------- drawing
    def set_image(self, image: np.ndarray, shape: tuple[int, int], levels: tuple[float, float], cmap: str,
                  title: str = "", bar_label: str = "", layout: HeadLayout | None = None) -> None:
        """Show ``image`` (already scaled: (rows·c, columns·c) of ``layout``, by default one block, i.e.
        (layers·c, heads·c)) over the unit cells of ``shape`` (layers, heads)."""
        L, H = shape
        layout = layout or HeadLayout(L, H)
        new_layout = layout != self.layout
        self.shape, self.layout = (L, H), layout
        self.image.setImage(image, levels=levels, autoLevels=False)
        self.image.setRect(QtCore.QRectF(0, 0, layout.columns, layout.rows))
        if self.colorbar is not None:
            self.colorbar.setColorMap(colormap(cmap))
            self.colorbar.setLevels(levels)
            self.colorbar.axis.setLabel(bar_label)
        else:
            self.image.setColorMap(colormap(cmap))
        self.set_title(title)
        self.plot.setLabel("left", "layer")
        self.plot.setLabel("bottom", layout.axis_label())
        if new_layout:
            self._draw_separators()
            self.on_theme(self.dark)
            limit_to_data(self.plot, layout.columns, layout.rows)
            self._tick_strides = None
            self._update_ticks()
            self._layout_badges()
            if self.selected is not None:
                self.select(*self.selected)
        self.lay_out_now()  # the axes' titles and labels laid out before the scene paints

    def _draw_separators(self) -> None:
        """Thin lines between the cells of each block (only over its layers), a wide one between two blocks."""
        layout, H = self.layout, self.layout.n_head
        path, between = QtGui.QPainterPath(), QtGui.QPainterPath()
        for b in range(layout.blocks):
            x0, rows = b * H, len(layout.block_layers(b))
            for row in range(1, rows):
                path.moveTo(x0, row)
                path.lineTo(x0 + H, row)
            for head in range(1, H):
                path.moveTo(x0 + head, 0)
                path.lineTo(x0 + head, rows)
            if b:
                between.moveTo(x0, 0)
                between.lineTo(x0, layout.rows)
        self.separators.setPath(path)
        self.block_separators.setPath(between)

    def set_title(self, title: str) -> None:
        """Show ``title`` above the map, elided to the figure's width (the whole title in its tooltip):
        a title wider than the figure would push the cells and the colour bar out of sight."""
        self.full_title = title
        self._fit_title()

    def _fit_title(self) -> None:
        title = getattr(self, "full_title", "")
        label = self.plot.titleLabel
        if not title:
            self.plot.setTitle(None)
            label.setToolTip("")
            return
        font = QtGui.QFont(self.font())
        font.setPointSizeF(11)
        beside = self.plot.getAxis("left").width() + 40  # the title sits over the cells (and its text margins)
        if self.colorbar is not None:
            beside += self.colorbar.boundingRect().width()
        room = max(40, int(self.width() - beside))
        shown = QtGui.QFontMetrics(font).elidedText(title, QtCore.Qt.TextElideMode.ElideRight, room)
        self.plot.setTitle(html.escape(shown, quote=False), size="11pt")
        label.setMinimumWidth(0)  # never wider than the figure, whatever the font says
        label.setToolTip(title if shown != title else "")

    def on_theme(self, dark: bool) -> None:
        background = theme_colors(dark)["background"]
        self.separators.setPen(pg.mkPen(background, width=2, cosmetic=True))
        self.block_separators.setPen(pg.mkPen(background, width=BLOCK_GAP_PX, cosmetic=True))

    def _update_ticks(self) -> None:
        """Layer labels down the left ("L0"; with blocks, every block's layer of that row: "L0 · L15"), head labels
        under every block, each thinned so that neighbours never touch."""
        layout = self.layout
        L, H = self.shape
        vb = self.plot.getViewBox()
        if not L or not H:
            return
        metrics = QtGui.QFontMetrics(self.plot.getAxis("left").style.get("tickFont") or self.font())
        (x0, x1), (y0, y1) = vb.viewRange()
        rows_px = vb.height() / max(1e-9, y1 - y0) * layout.rows if vb.height() > 10 else 400  # all rows, as drawn
        block_px = vb.width() / max(1e-9, x1 - x0) * H if vb.width() > 10 else 400  # one block's heads
        strides = (tick_stride(layout.rows, rows_px, metrics.height()),
                   tick_stride(H, block_px, metrics.horizontalAdvance(f"H{H - 1}") + 4), layout)
        if strides == getattr(self, "_tick_strides", None):
            return
        self._tick_strides = strides
        rows = [(row + 0.5, " · ".join(f"L{layer}" for layer in range(row, L, layout.rows)))
                for row in range(0, layout.rows, strides[0])]
        heads = [(b * H + h + 0.5, f"H{h}") for b in range(layout.blocks) for h in range(0, H, strides[1])]
        self.plot.getAxis("left").setTicks([rows, []])
        self.plot.getAxis("bottom").setTicks([heads, []])

    def resizeEvent(self, ev):  # noqa: N802
        super().resizeEvent(ev)
        if hasattr(self, "shape"):
            self._fit_title()
            self._update_ticks()

    # ----------------------------------------------------------------- selection
    def cell_rect(self, layer: int, head: int) -> QtCore.QRectF:
        """Head ``head`` of ``layer``'s unit cell in data coordinates."""
        x, y = self.layout.origin(layer, head)
        return QtCore.QRectF(x, y, 1, 1)

    def select(self, layer: int, head: int) -> None:
        """Outline head (``layer``, ``head``) and, when the map is zoomed so that its cell is not wholly in view,
        pan (keeping the zoom) until it is, REVEAL_MARGIN of a cell clear of the edge where there is room."""
        self.selected = (int(layer), int(head))
        if not (0 <= layer < self.shape[0] and 0 <= head < self.shape[1]):
            self.selection.setVisible(False)
            return
        self.selection.setRect(self.cell_rect(layer, head))
        self.selection.setVisible(True)
        self.reveal(layer, head)

    def reveal(self, layer: int, head: int) -> None:
        """Pan the view (its zoom kept) so that head (``layer``, ``head``)'s cell is in view; nothing when it is."""
        vb = self.plot.getViewBox()
        if vb.width() <= 10 or vb.height() <= 10 or all(vb.autoRangeEnabled()):
            return  # not laid out, or about to show every head: its range now may be a stale default
        cell = self.cell_rect(layer, head)
        (x0, x1), (y0, y1) = vb.viewRange()
        eps = 1e-6
        if x0 - eps <= cell.left() and cell.right() <= x1 + eps and y0 - eps <= cell.top() and cell.bottom() <= y1 + eps:
            return

        def shift(low: float, high: float, a: float, b: float) -> float:
            span = high - low
            margin = min(REVEAL_MARGIN, max(0.0, (span - (b - a)) / 2))
            if a - margin < low:
                return a - margin - low
            if b + margin > high:
                return b + margin - high
            return 0.0

        dx, dy = shift(x0, x1, cell.left(), cell.right()), shift(y0, y1, cell.top(), cell.bottom())
        vb.setRange(xRange=(x0 + dx, x1 + dx), yRange=(y0 + dy, y1 + dy), padding=0)

    def set_badges(self, values: np.ndarray | None, label: str = "", low: bool = False,
                   written: np.ndarray | None = None) -> None:
        """Badge the heads that stand out on a score ``values`` (layer, head) named ``label`` (gui/plots/badges.py:
        ``standout_heads``, the low side with ``low``): each outlined, its value in the cell's top-left corner when
        it fits the cell as drawn now, the best one's a gold ★ badge. Every head's value is in its tooltip. None
        clears them. ``written``: what each badge says instead of its value (BadgeLayer.set_values)."""
        self.badge_layer.set_values(values, label, low, written)
        self._layout_badges()

    def _layout_badges(self) -> None:
        """Lay the badges out for the cells as drawn now (:meth:`BadgeLayer.lay_out`); say when their note changes."""
        layer = getattr(self, "badge_layer", None)
        if layer is None:
            return
        vb = self.plot.getViewBox()
        if vb.width() > 1 and vb.height() > 1:
            px = tuple(abs(v) for v in vb.viewPixelSize())
        else:
            px = (0.01, 0.01)  # not laid out yet: lay out as for large cells, redone on the first resize
        layer.lay_out(self.layout, px)
        note = layer.note()
        if note != self._badge_note:
            self._badge_note = note
            self.badges_changed.emit(note)

    # ----------------------------------------------------------------- mouse and keys
    def cell_head(self, cell) -> tuple[int, int] | None:
        """(layer, head) of an image pixel (row, column), or None (outside, or a cell with no head)."""
        if cell is None or self.image.image is None or not self.shape[0]:
            return None
        layout = self.layout
        c_rows = self.image.image.shape[0] // layout.rows
        c_cols = self.image.image.shape[1] // layout.columns
        return layout.head_at(cell[0] // c_rows, cell[1] // c_cols)

    def hover_text(self, layer: int, head: int) -> str:
        """The tooltip of a head; subclasses add their values."""
        text = f"{head_name(layer, head)} (layer {layer}, head {head})"
        values = self.badge_values
        if values is not None and np.isfinite(values[layer, head]):
            text += f"\n{self.badge_label or 'score'} {format_score(values[layer, head])}"
            if (layer, head) in self.badge_layer.heads:
                text += " — stands out"
        return text

    def _text_for(self, cell) -> str:
        lh = self.cell_head(cell)
        return "" if lh is None else self.hover_text(*lh)

    def _hovered(self, cell) -> None:
        self.head_hovered.emit(self.cell_head(cell))

    def _clicked(self, cell) -> None:
        lh = self.cell_head(cell)
        if lh is not None:
            self.head_clicked.emit(*lh)

    def _double_clicked(self, cell) -> None:
        lh = self.cell_head(cell)
        if lh is not None:
            self.head_clicked.emit(*lh)
            self.head_activated.emit(*lh)

    def keyPressEvent(self, ev):  # noqa: N802
        key, Key = ev.key(), QtCore.Qt.Key
        moves = {Key.Key_Up: (-1, 0), Key.Key_Down: (1, 0), Key.Key_Left: (0, -1), Key.Key_Right: (0, 1)}
        if self.selected is not None and self.shape[0] and key in moves:
            dl, dh = moves[key]
            layer = min(max(self.selected[0] + dl, 0), self.shape[0] - 1)
            head = min(max(self.selected[1] + dh, 0), self.shape[1] - 1)
            self.head_clicked.emit(layer, head)
            ev.accept()
        elif self.selected is not None and key in (Key.Key_Return, Key.Key_Enter):
            self.head_activated.emit(*self.selected)
            ev.accept()
        else:
            super().keyPressEvent(ev)


def width_for_title(title: str, room: int = 200) -> int:
    """The figure width that shows ``title`` (11 pt) whole: an export figure is widened to it, not elided.
    ``room``: the axis, colour bar and margins beside the cells."""
    font = QtGui.QFont(QtWidgets.QApplication.font())
    font.setPointSizeF(11)
    return QtGui.QFontMetrics(font).horizontalAdvance(title) + room

