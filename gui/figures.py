"""The heatmaps AttnScope draws, in the GUI and in exported files alike (pyqtgraph).

- :class:`HeadPlot`: one head, query tokens down the left (row 0 at the top), key tokens along
  the bottom (rotated), a colour bar, hover values.
- :class:`GridPlot`: every layer × head as thumbnails in one mosaic image, one colour scale,
  the selected head outlined, optional score badges.
- :func:`save_figure`: PNG (size/DPI), SVG or PDF of a figure widget.
"""
from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pyqtgraph.exporters  # noqa: F401  (registers the exporters)
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import apply_scale, grid_mosaic, without_first_key
from analysis.errors import ExportError
from analysis.inference import THUMBNAIL_PX as GRID_CELL_PX  # the run pools thumbnails to this size

COLORMAPS = ("viridis", "inferno", "magma", "plasma", "cividis", "CET-L1", "CET-L4")
MIN_LABEL_PX = 11  # token labels closer than this are thinned out


def colormap(name: str) -> pg.ColorMap:
    return pg.colormap.get(name)


class TokenAxis(pg.AxisItem):
    """An axis whose ticks are token labels; on the bottom they can be drawn rotated by 90°."""

    def __init__(self, orientation: str, rotate: bool = False, **kwargs):
        super().__init__(orientation, **kwargs)
        self.rotate = rotate and orientation in ("bottom", "top")
        self._labels_by_index: dict[int, str] = {}
        self.setStyle(autoExpandTextSpace=True, tickLength=-3)

    def set_tokens(self, tokens: list[str] | tuple[str, ...], with_index: bool = True, stride: int = 1) -> None:
        labels = [f"{i} {t}" if with_index else t for i, t in enumerate(tokens)]
        if self.rotate:
            labels = [f"{t} {i}" if with_index else t for i, t in enumerate(tokens)]
        ticks = [(i + 0.5, labels[i]) for i in range(0, len(labels), max(1, stride))]
        self._labels_by_index = {int(v - 0.5): label for v, label in ticks}
        self.setTicks([ticks, []])
        if self.rotate:
            metrics = QtGui.QFontMetrics(self.font() if hasattr(self, "font") else QtGui.QFont())
            longest = max((metrics.horizontalAdvance(lbl) for _, lbl in ticks), default=10)
            self.setHeight(min(longest + 14, 220))

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):  # noqa: N802 (Qt naming)
        if not self.rotate:
            return super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
        # pyqtgraph drops labels whose horizontal box would overlap or leave the axis; rotated
        # labels need neither check, so draw one at every tick, found from the tick's position.
        super().drawPicture(p, axisSpec, tickSpecs, [])
        view = self.linkedView()
        if view is None:
            return
        p.setRenderHint(QtGui.QPainter.RenderHint.TextAntialiasing, True)
        if self.style.get("tickFont") is not None:
            p.setFont(self.style["tickFont"])
        p.setPen(self.textPen())
        metrics = p.fontMetrics()
        top = axisSpec[1].y() + 4
        for _pen, p1, _p2 in tickSpecs:
            value = view.mapSceneToView(self.mapToScene(QtCore.QPointF(p1.x(), 0))).x()
            text = self._labels_by_index.get(int(round(value - 0.5)))
            if text is None:
                continue
            width = metrics.horizontalAdvance(text)
            p.save()
            p.translate(p1.x(), top)
            p.rotate(-90)
            p.drawText(QtCore.QRectF(-width - 2, -metrics.height() / 2, width + 2, metrics.height()),
                       QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter, text)
            p.restore()


class HoverImage(pg.ImageItem):
    """An ImageItem that reports the (row, column) under the mouse (pyqtgraph's subclassing idiom)."""

    def __init__(self, on_hover=None, on_click=None, **kwargs):
        super().__init__(axisOrder="row-major", **kwargs)
        self.on_hover = on_hover
        self.on_click = on_click
        self.setAcceptHoverEvents(True)

    def _cell(self, pos) -> tuple[int, int] | None:
        if self.image is None:
            return None
        row, col = int(math.floor(pos.y())), int(math.floor(pos.x()))
        h, w = self.image.shape[:2]
        return (row, col) if 0 <= row < h and 0 <= col < w else None

    def hoverEvent(self, ev):  # noqa: N802
        if self.on_hover is None:
            return
        self.on_hover(None if ev.isExit() else self._cell(ev.pos()))

    def mouseClickEvent(self, ev):  # noqa: N802
        cell = self._cell(ev.pos())
        if self.on_click is not None and cell is not None and ev.button() == QtCore.Qt.MouseButton.LeftButton:
            ev.accept()
            self.on_click(cell)
        else:
            ev.ignore()


def label_stride(n: int, pixels: float) -> int:
    """Show every k-th token label so that labels are at least MIN_LABEL_PX apart."""
    if n <= 0 or pixels <= 0:
        return 1
    return max(1, math.ceil(MIN_LABEL_PX * n / pixels))


class HeadPlot(pg.GraphicsLayoutWidget):
    """One head's attention map: rows are queries (row 0 on top), columns are keys."""

    cell_hovered = QtCore.Signal(object)  # (query, key) or None
    query_clicked = QtCore.Signal(int)
    matrix: np.ndarray | None = None  # set before __init__ runs: GraphicsView calls resizeEvent early
    tokens: tuple[str, ...] = ()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setBackground("w")
        self.left_axis = TokenAxis("left")
        self.bottom_axis = TokenAxis("bottom", rotate=True)
        self.plot = self.addPlot(axisItems={"left": self.left_axis, "bottom": self.bottom_axis})
        self.plot.invertY(True)
        self.plot.setAspectLocked(True, ratio=1)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.image = HoverImage(on_hover=self._hovered, on_click=lambda cell: self.query_clicked.emit(cell[0]))
        self.plot.addItem(self.image)
        self.row_highlight = QtWidgets.QGraphicsRectItem()
        self.row_highlight.setPen(pg.mkPen("#ff2d55", width=2, cosmetic=True))
        self.row_highlight.setVisible(False)
        self.plot.addItem(self.row_highlight, ignoreBounds=True)
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=colormap("viridis"), interactive=False, width=14)
        self.colorbar.setImageItem(self.image, insert_in=self.plot)
        # zooming in shows more token labels, zooming out thins them
        self.plot.getViewBox().sigRangeChanged.connect(lambda *_: self.update_label_density())

    def set_head(self, weights: np.ndarray, tokens, title: str = "", cmap: str = "viridis", scale: str = "linear",
                 hide_first: bool = False, vmax: float | None = None) -> None:
        """Show ``weights`` (n, n) with token labels; ``vmax`` fixes the top of the colour scale."""
        matrix = without_first_key(weights) if hide_first else np.asarray(weights, dtype=np.float32)
        n = matrix.shape[0]
        matrix = np.where(np.tri(n, dtype=bool), matrix, np.float32(np.nan))  # future keys: drawn as background
        self.matrix, self.tokens = matrix, tuple(tokens)
        self._stride = None  # new tokens: relabel
        top = vmax if vmax is not None else float(np.nanmax(matrix)) if np.isfinite(matrix).any() else 1.0
        drawn, levels = apply_scale(matrix, scale, top)
        self.image.setImage(drawn, levels=levels, autoLevels=False)
        self.colorbar.setColorMap(colormap(cmap))
        self.colorbar.setLevels(levels)
        label = {"linear": "weight", "power": "√weight", "log": "log₁₀ weight"}[scale]
        self.colorbar.axis.setLabel(label)
        n = matrix.shape[0]
        self.plot.setTitle(html.escape(title), size="11pt")
        self.plot.setLabel("left", "query")
        self.plot.setLabel("bottom", "key")
        self.update_label_density()
        self.plot.setLimits(xMin=-10 * n, xMax=11 * n, yMin=-10 * n, yMax=11 * n)
        self.plot.getViewBox().setDefaultPadding(0)
        self.plot.enableAutoRange()

    def update_label_density(self) -> None:
        if self.matrix is None:
            return
        n = self.matrix.shape[0]
        vb = self.plot.getViewBox()
        if vb.height() > 10:
            (x0, x1), (y0, y1) = vb.viewRange()
            rows_per_px = min(n, y1 - y0) / vb.height()  # token rows on screen per pixel
            stride = max(1, math.ceil(MIN_LABEL_PX * rows_per_px))
        else:
            stride = label_stride(n, 400.0)
        if stride == getattr(self, "_stride", None) and n == getattr(self, "_stride_n", None):
            return
        self._stride, self._stride_n = stride, n
        self.left_axis.set_tokens(self.tokens, stride=stride)
        self.bottom_axis.set_tokens(self.tokens, stride=stride)

    def resizeEvent(self, ev):  # noqa: N802
        super().resizeEvent(ev)
        self.update_label_density()

    def highlight_row(self, row: int | None) -> None:
        if row is None or self.matrix is None:
            self.row_highlight.setVisible(False)
            return
        self.row_highlight.setRect(QtCore.QRectF(0, row, self.matrix.shape[1], 1))
        self.row_highlight.setVisible(True)

    def _hovered(self, cell) -> None:
        self.cell_hovered.emit(cell)
        if cell is None or self.matrix is None:
            QtWidgets.QToolTip.hideText()
            return
        q, k = cell
        value = self.matrix[q, k]
        shown = "masked (future token)" if k > q else ("hidden (first key)" if math.isnan(value) else f"{value:.3f}")
        text = f"query '{self.tokens[q]}' [{q}] → key '{self.tokens[k]}' [{k}]: {shown}"
        self.setToolTip(text)
        QtWidgets.QToolTip.showText(QtGui.QCursor.pos(), text, self)


class GridPlot(pg.GraphicsLayoutWidget):
    """Every head of every layer, drawn as one mosaic image: layers are rows, heads are columns."""

    head_clicked = QtCore.Signal(int, int)

    def __init__(self, parent=None, cell_px: int = GRID_CELL_PX):
        super().__init__(parent)
        self.setBackground("w")
        self.cell_px = cell_px
        self.plot = self.addPlot()
        self.plot.invertY(True)
        self.plot.setAspectLocked(True, ratio=1)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.image = HoverImage(on_hover=self._hovered, on_click=self._clicked)
        self.plot.addItem(self.image)
        self.selection = QtWidgets.QGraphicsRectItem()
        self.selection.setPen(pg.mkPen("#ff2d55", width=3, cosmetic=True))
        self.selection.setZValue(10)
        self.plot.addItem(self.selection, ignoreBounds=True)
        self.badges: list[QtWidgets.QGraphicsItem] = []
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=colormap("viridis"), interactive=False, width=14)
        self.colorbar.setImageItem(self.image, insert_in=self.plot)
        self.shape = (0, 0)
        self.pitch = 1
        self.cell = 1
        self._mosaic_key = None

    def set_attentions(self, attentions: np.ndarray, cmap: str = "viridis", scale: str = "linear",
                       title: str = "", key=None) -> None:
        """Draw all heads (``attentions`` or, faster, ``result.thumbnails``: (layer, head, q, k)).

        ``key`` identifies the data: the mosaic is rebuilt only when it changes."""
        L, H = attentions.shape[:2]
        if key is None or key != self._mosaic_key:
            self._mosaic, self.cell = grid_mosaic(attentions, self.cell_px)
            self._mosaic_key = key
        self.shape, self.pitch = (L, H), self.cell + 1
        vmax = float(np.nanmax(self._mosaic)) if np.isfinite(self._mosaic).any() else 1.0
        drawn, levels = apply_scale(self._mosaic, scale, vmax)
        self.image.setImage(drawn, levels=levels, autoLevels=False)
        self.colorbar.setColorMap(colormap(cmap))
        self.colorbar.setLevels(levels)
        left, bottom = self.plot.getAxis("left"), self.plot.getAxis("bottom")
        left.setTicks([[((l + 0.5) * self.pitch, f"L{l}") for l in range(L)], []])
        bottom.setTicks([[((h + 0.5) * self.pitch, f"H{h}") for h in range(H)], []])
        self.plot.setLabel("left", "layer")
        self.plot.setLabel("bottom", "head")
        if title:
            self.plot.setTitle(html.escape(title), size="11pt")
        w, h = H * self.pitch, L * self.pitch
        # generous limits: with the aspect locked, tight ones would crop the mosaic in a narrow panel
        self.plot.setLimits(xMin=-10 * w, xMax=11 * w, yMin=-10 * h, yMax=11 * h)
        self.plot.getViewBox().setDefaultPadding(0.01)
        self.plot.enableAutoRange()  # fit the whole mosaic, and keep fitting on resize until the user zooms

    def select(self, layer: int, head: int) -> None:
        p = self.pitch
        self.selection.setRect(QtCore.QRectF(head * p - 0.5, layer * p - 0.5, self.cell + 1, self.cell + 1))

    def set_badges(self, values: np.ndarray | None, threshold: float = 0.4) -> None:
        """Write each head's score in its corner; heads at or above ``threshold`` get a bold badge."""
        for item in self.badges:
            self.plot.removeItem(item)
        self.badges = []
        if values is None:
            return
        L, H = values.shape
        for layer in range(L):
            for head in range(H):
                v = values[layer, head]
                if not np.isfinite(v):
                    continue
                strong = v >= threshold
                text = pg.TextItem(html=f"<span style='background:{'#ffd60a' if strong else '#ffffffb0'};"
                                        f"color:#000;font-size:8pt;{'font-weight:bold' if strong else ''}'>"
                                        f"{v:.2f}</span>", anchor=(0, 0))
                text.setPos(head * self.pitch, layer * self.pitch)
                text.setZValue(5)
                self.plot.addItem(text, ignoreBounds=True)
                self.badges.append(text)

    def _cell_head(self, cell) -> tuple[int, int] | None:
        if cell is None:
            return None
        row, col = cell
        layer, head = row // self.pitch, col // self.pitch
        if row % self.pitch >= self.cell or col % self.pitch >= self.cell:
            return None
        return (layer, head) if layer < self.shape[0] and head < self.shape[1] else None

    def _hovered(self, cell) -> None:
        lh = self._cell_head(cell)
        self.setToolTip("" if lh is None else f"layer {lh[0]}, head {lh[1]} — click for detail")

    def _clicked(self, cell) -> None:
        lh = self._cell_head(cell)
        if lh is not None:
            self.head_clicked.emit(*lh)


# ----------------------------------------------------------------------------- saving
def save_figure(widget: pg.GraphicsLayoutWidget, path: Path, width_px: int | None = None) -> Path:
    """Write the figure as PNG (``width_px`` wide), SVG or PDF, chosen by the file's extension."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    QtWidgets.QApplication.processEvents()
    try:
        if fmt == "png":
            exporter = pg.exporters.ImageExporter(widget.scene())
            if width_px:
                exporter.parameters()["width"] = int(width_px)
            exporter.parameters()["antialias"] = True
            ok = exporter.export(str(path))
            if ok is False:
                raise OSError("the image could not be saved")
        elif fmt in ("svg", "pdf"):
            # Vector output through Qt's own paint devices: pyqtgraph 0.14's SVGExporter fails on
            # Qt 6.11's path data ("not enough values to unpack"), and it has no PDF exporter.
            scene = widget.scene()
            source = widget.mapToScene(widget.viewport().rect()).boundingRect()
            if fmt == "svg":
                from PySide6.QtSvg import QSvgGenerator

                device = QSvgGenerator()
                device.setFileName(str(path))
                device.setSize(source.size().toSize())
                device.setViewBox(QtCore.QRectF(0, 0, source.width(), source.height()))
                device.setTitle(widget.windowTitle() or "AttnScope figure")
            else:
                device = QtGui.QPdfWriter(str(path))
                device.setResolution(96)
                device.setPageSize(QtGui.QPageSize(QtCore.QSizeF(source.width(), source.height()),
                                                   QtGui.QPageSize.Unit.Point))
                device.setPageMargins(QtCore.QMarginsF(0, 0, 0, 0))
            painter = QtGui.QPainter()
            if not painter.begin(device):
                raise OSError(f"the {fmt.upper()} file could not be opened for writing")
            scene.render(painter, QtCore.QRectF(0, 0, source.width(), source.height()) if fmt == "svg"
                         else QtCore.QRectF(painter.viewport()), source)
            painter.end()
            del painter, device  # finish the file now, not at interpreter exit
        else:
            raise ExportError(f"Unknown image format '{fmt}'; use png, svg or pdf.")
    except OSError as exc:
        raise ExportError(f"Cannot write {path}: {exc}") from None
    if not path.exists() or path.stat().st_size == 0:
        raise ExportError(f"Cannot write {path}: nothing was written (is the folder writable?).")
    return path


def grid_source(result) -> np.ndarray:
    """What the grid draws: the thumbnails pooled during the run, or the attentions themselves."""
    return result.thumbnails if result.thumbnails is not None else result.attentions


def _lay_out_offscreen(fig: pg.GraphicsLayoutWidget, width: int, height: int) -> None:
    """Give a figure that is never shown on screen real geometry, so its layout is computed."""
    fig.setAttribute(QtCore.Qt.WidgetAttribute.WA_DontShowOnScreen, True)
    fig.resize(width, height)
    fig.show()
    QtWidgets.QApplication.processEvents()


def head_figure_size(n_tokens: int) -> tuple[int, int]:
    side = int(min(2400, max(420, 14 * n_tokens)))
    return side + 220, side + 200


def offscreen_head_figure(result, layer: int, head: int, cmap="viridis", scale="linear", hide_first=False) -> HeadPlot:
    fig = HeadPlot()
    _lay_out_offscreen(fig, *head_figure_size(result.n_tokens))
    fig.set_head(result.attentions[layer, head], result.tokens, f"{result.model_label} — layer {layer}, head {head}",
                 cmap=cmap, scale=scale, hide_first=hide_first)
    fig.update_label_density()
    return fig


def offscreen_grid_figure(result, cmap="viridis", scale="linear", badges=None) -> GridPlot:
    fig = GridPlot()
    L, H = result.attentions.shape[:2]
    _lay_out_offscreen(fig, int(min(3000, 160 + 70 * H)), int(min(4000, 110 + 70 * L)))
    fig.set_attentions(grid_source(result), cmap=cmap, scale=scale,
                       title=f"{result.model_label} — all heads, {result.n_tokens} tokens")
    if badges is not None:
        fig.set_badges(badges)
    return fig


def write_result_images(result, folder: Path, fmt: str = "png", cmap: str = "viridis", scale: str = "linear",
                        heads: bool = True) -> list[Path]:
    """``grid.<fmt>`` and, if asked, ``heads/L{layer}H{head}.<fmt>`` for every head, into ``folder``."""
    from .qt import ensure_qapp

    ensure_qapp()
    folder = Path(folder)
    written = []
    grid = offscreen_grid_figure(result, cmap, scale)
    written.append(save_figure(grid, folder / f"grid.{fmt}"))
    dispose_figure(grid)
    if heads:
        (folder / "heads").mkdir(exist_ok=True)
        fig = offscreen_head_figure(result, 0, 0, cmap, scale)
        for layer in range(result.n_layer):
            for head in range(result.n_head):
                fig.set_head(result.attentions[layer, head], result.tokens,
                             f"{result.model_label} — layer {layer}, head {head}", cmap=cmap, scale=scale)
                written.append(save_figure(fig, folder / "heads" / f"L{layer}H{head}.{fmt}"))
        dispose_figure(fig)
    return written


def dispose_figure(widget: QtWidgets.QWidget) -> None:
    """Destroy an offscreen figure now, while the QApplication is alive (not at interpreter exit)."""
    widget.hide()  # not close(): pyqtgraph's GraphicsView.close() drops the viewport and crashes Qt 6.11
    widget.deleteLater()
    QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
