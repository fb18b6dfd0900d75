"""The one layer × head map: every figure that has a cell per head (the grid of thumbnails, the
score map, the parity error map) is a :class:`LayerHeadMap`.

Data coordinates are fixed: head ``h`` of layer ``l`` is the unit square x ∈ [h, h+1], y ∈ [l, l+1]
(layer 0 on top), whatever the image behind it holds (one pixel per head for a score, a c × c
pooled thumbnail for the grid). So the selection outline, the badges, hover and clicks are the same
code for all three, and the grid can change its pooling without moving anything.
"""
from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from .plot_items import HoverImage, ZoomableFigure, colormap, limit_to_data, theme_colors

SELECTION_COLOR = "#ff2d55"
BADGE_INSET_PX = 2  # a badge's gap to its cell's top and left edges: clear of the separators and selection frame
BADGE_MARGIN_PX = 1  # the empty border of a badge's text box


def compact_value(v: float) -> str:
    """``v`` in fewer characters that still read right: 0.891 → ".89", -0.123 → "-.12", 2.345 → "2.3",
    12.6 → "13" (rounded, never cut)."""
    if not math.isfinite(v):
        return f"{v}"
    if abs(round(v, 2)) < 1:
        return f"{v:.2f}".replace("0.", ".", 1)
    return f"{v:.1f}" if abs(v) < 9.95 else f"{v:.0f}"


def badge_wordings(v: float, best: bool) -> list[str]:
    """A badge's texts, longest first: the value to 2 decimals, then :func:`compact_value`; the best head's
    with a ★ (dropped last: its gold background still marks it)."""
    full, short = f"{v:.2f}", compact_value(v)
    if best:
        return [f"★ {full}", f"★{short}", short]
    return [full, short] if short != full else [full]


def tick_stride(count: int, pixels: float, label_px: float) -> int:
    """Show every k-th of ``count`` labels so that labels ``label_px`` long fit in ``pixels``."""
    if count <= 0 or pixels <= 0:
        return 1
    return max(1, math.ceil((label_px + 2) * count / pixels))


class LayerHeadMap(ZoomableFigure):
    """Layers down (L0 on top), heads across. Click selects (``head_clicked``), double-click or Enter
    activates (``head_activated``), arrow keys move the selection, hover shows :meth:`hover_text`."""

    head_clicked = QtCore.Signal(int, int)
    head_activated = QtCore.Signal(int, int)
    head_hovered = QtCore.Signal(object)  # (layer, head) or None

    def __init__(self, parent=None, colorbar: bool = True):
        super().__init__(parent)
        self.plot.invertY(True)
        self.image = HoverImage(text_for=self._text_for, on_hover=self._hovered, on_click=self._clicked,
                                on_double=self._double_clicked)
        self.plot.addItem(self.image)
        self.separators = QtWidgets.QGraphicsPathItem()
        self.separators.setZValue(2)
        self.plot.addItem(self.separators, ignoreBounds=True)
        self.selection = QtWidgets.QGraphicsRectItem()
        self.selection.setPen(pg.mkPen(SELECTION_COLOR, width=3, cosmetic=True))
        self.selection.setZValue(10)
        self.selection.setVisible(False)
        self.plot.addItem(self.selection, ignoreBounds=True)
        self.badges: list[pg.TextItem] = []  # the value badges shown now (set_badges)
        self._badge_items: list[pg.TextItem] = []  # every badge, shown or hidden for want of room
        self._badge_texts: list[tuple[int, int, list[str]]] = []  # (layer, head, wordings longest first)
        self.colorbar = None
        if colorbar:
            self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=colormap("viridis"), interactive=False, width=14)
            self.colorbar.setImageItem(self.image, insert_in=self.plot)
            self.colorbar.axis.enableAutoSIPrefix(False)  # weights as they are: a top of 0.9997 is never "900 (x0.001)"
        self.shape = (0, 0)  # (layers, heads)
        self.selected: tuple[int, int] | None = None
        self.badge_values: np.ndarray | None = None
        self.badge_label = ""
        self.plot.getViewBox().sigRangeChanged.connect(lambda *_: self._update_ticks())
        self.plot.getViewBox().sigResized.connect(lambda *_: self._update_ticks())
        self.plot.getViewBox().sigRangeChanged.connect(lambda *_: self._layout_badges())
        self.plot.getViewBox().sigResized.connect(lambda *_: self._layout_badges())

    # ----------------------------------------------------------------- drawing
    def set_image(self, image: np.ndarray, shape: tuple[int, int], levels: tuple[float, float], cmap: str,
                  title: str = "", bar_label: str = "") -> None:
        """Show ``image`` ((layers·c, heads·c), already scaled) over the unit cells of ``shape``."""
        L, H = shape
        new_shape = shape != self.shape
        self.shape = (L, H)
        self.image.setImage(image, levels=levels, autoLevels=False)
        self.image.setRect(QtCore.QRectF(0, 0, H, L))
        if self.colorbar is not None:
            self.colorbar.setColorMap(colormap(cmap))
            self.colorbar.setLevels(levels)
            self.colorbar.axis.setLabel(bar_label)
        else:
            self.image.setColorMap(colormap(cmap))
        self.set_title(title)
        self.plot.setLabel("left", "layer")
        self.plot.setLabel("bottom", "head")
        if new_shape:
            path = QtGui.QPainterPath()
            for layer in range(1, L):
                path.moveTo(0, layer)
                path.lineTo(H, layer)
            for head in range(1, H):
                path.moveTo(head, 0)
                path.lineTo(head, L)
            self.separators.setPath(path)
            self.on_theme(self.dark)
            limit_to_data(self.plot, H, L)
            self._tick_strides = None
            self._update_ticks()
            if self.selected is not None:
                self.select(*self.selected)

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
        self.separators.setPen(pg.mkPen(theme_colors(dark)["background"], width=2, cosmetic=True))

    def _update_ticks(self) -> None:
        L, H = self.shape
        vb = self.plot.getViewBox()
        if not L or not H:
            return
        metrics = QtGui.QFontMetrics(self.plot.getAxis("left").style.get("tickFont") or self.font())
        (x0, x1), (y0, y1) = vb.viewRange()
        rows_px = vb.height() / max(1e-9, y1 - y0) * L if vb.height() > 10 else 400  # all rows, as drawn
        cols_px = vb.width() / max(1e-9, x1 - x0) * H if vb.width() > 10 else 400
        strides = (tick_stride(L, rows_px, metrics.height()),
                   tick_stride(H, cols_px, metrics.horizontalAdvance(f"H{H - 1}") + 4))
        if strides == getattr(self, "_tick_strides", None):
            return
        self._tick_strides = strides
        self.plot.getAxis("left").setTicks([[(l + 0.5, f"L{l}") for l in range(0, L, strides[0])], []])
        self.plot.getAxis("bottom").setTicks([[(h + 0.5, f"H{h}") for h in range(0, H, strides[1])], []])

    def resizeEvent(self, ev):  # noqa: N802
        super().resizeEvent(ev)
        if hasattr(self, "shape"):
            self._fit_title()
            self._update_ticks()

    # ----------------------------------------------------------------- selection
    def select(self, layer: int, head: int) -> None:
        self.selected = (int(layer), int(head))
        self.selection.setRect(QtCore.QRectF(head, layer, 1, 1))
        self.selection.setVisible(True)

    def set_badges(self, values: np.ndarray | None, label: str = "") -> None:
        """Mark the heads that stand out for a score: the top k (k = 10% of the heads, 3 to 10) get a
        badge with their value inside the cell's top-left corner, the best one a gold ★ badge. Every head's
        value is in its tooltip. A badge never leaves its cell: :meth:`_layout_badges` picks the longest
        wording that fits the cell as drawn now ("★ 0.89", "★.89", ".89") and hides the badge when none does."""
        for item in self._badge_items:
            self.plot.removeItem(item)
        self._badge_items, self._badge_texts, self.badges = [], [], []
        self.badge_values, self.badge_label = values, label
        if values is None:
            return
        for rank, (layer, head) in enumerate(top_heads(values)):
            best = rank == 0
            back = "background:#ffd60a" if best else "background:rgba(255,243,176,0.85)"
            wordings = badge_wordings(float(values[layer, head]), best)
            text = pg.TextItem(anchor=(0, 0))
            text.textItem.document().setDocumentMargin(BADGE_MARGIN_PX)
            text.setZValue(self.selection.zValue() + 1)  # over the selection frame: it never hides a digit
            self.plot.addItem(text, ignoreBounds=True)
            self._badge_items.append(text)
            bold = ";font-weight:bold"  # the best one's ★ wordings; its last, narrowest, is plain on gold
            self._badge_texts.append((layer, head, [f"<span style='{back}{bold if '★' in w else ''};color:#000;"
                                                    f"font-size:8pt'>{html.escape(w)}</span>" for w in wordings]))
        self._layout_badges()

    def _layout_badges(self) -> None:
        """Place each badge BADGE_INSET_PX in from its cell's top-left corner (clear of the separators and the
        selection frame) in the longest wording whose whole box fits inside the cell; hide it when none fits.
        ``self.badges`` is the badges shown now."""
        items = getattr(self, "_badge_items", [])
        if not items:
            self.badges = []
            return
        vb = self.plot.getViewBox()
        if vb.width() > 1 and vb.height() > 1:
            px_x, px_y = (abs(v) for v in vb.viewPixelSize())
        else:
            px_x = px_y = 0.01  # not laid out yet: lay out as for large cells, redone on the first resize
        room_w, room_h = 1 / px_x - 2 * BADGE_INSET_PX, 1 / px_y - 2 * BADGE_INSET_PX
        shown = []
        for item, (layer, head, wordings) in zip(items, self._badge_texts):
            fits = False
            for wording in wordings:
                if getattr(item, "wording", None) != wording:  # setHtml re-lays the text out: only on a change
                    item.setHtml(wording)
                    item.wording = wording
                size = item.textItem.boundingRect()
                if size.width() <= room_w and size.height() <= room_h:
                    fits = True
                    break
            item.setPos(head + BADGE_INSET_PX * px_x, layer + BADGE_INSET_PX * px_y)
            item.setVisible(fits)
            if fits:
                shown.append(item)
        self.badges = shown

    # ----------------------------------------------------------------- mouse and keys
    def cell_head(self, cell) -> tuple[int, int] | None:
        """(layer, head) of an image pixel (row, column), or None."""
        if cell is None or self.image.image is None or not self.shape[0]:
            return None
        c_rows = self.image.image.shape[0] // self.shape[0]
        c_cols = self.image.image.shape[1] // self.shape[1]
        layer, head = cell[0] // c_rows, cell[1] // c_cols
        return (layer, head) if layer < self.shape[0] and head < self.shape[1] else None

    def hover_text(self, layer: int, head: int) -> str:
        """The tooltip of a head; subclasses add their values."""
        text = f"layer {layer}, head {head}"
        if self.badge_values is not None and np.isfinite(self.badge_values[layer, head]):
            text += f"\n{self.badge_label or 'score'} {self.badge_values[layer, head]:.3f}"
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


def top_heads(values: np.ndarray) -> list[tuple[int, int]]:
    """The heads to badge, best first: the top k finite values, k = 10% of the heads clipped to 3…10."""
    L, H = values.shape
    k = min(10, max(3, math.ceil(0.1 * L * H)))
    flat = np.where(np.isfinite(values), values, -np.inf).ravel()
    order = [int(i) for i in np.argsort(-flat, kind="stable")[:k] if np.isfinite(flat[i])]
    return [divmod(i, H) for i in order]
