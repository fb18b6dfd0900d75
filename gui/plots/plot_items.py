"""The pieces every AttnScope figure is built from (pyqtgraph): colormaps with names a newcomer
reads, a theme for light and dark, an image that reports the cell under the mouse and keeps its
tooltip up, and a view box whose zoom stays on the data and can always be reset.
"""
from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import colour_index

TOOLTIP_MS = 60_000  # a value tooltip stays this long while the pointer rests on its cell
LIGHT = {"background": QtGui.QColor("white"), "foreground": QtGui.QColor("black")}
DARK = {"background": QtGui.QColor("#202124"), "foreground": QtGui.QColor("#dddddd")}


def colormap(name: str) -> pg.ColorMap:
    return pg.colormap.get(name)


def plain_tooltip(text: str) -> str:
    """Rich-text markup that shows ``text`` literally (a token like ``<b>`` is never rendered as HTML)."""
    return "<p style='white-space:pre'>" + html.escape(text, quote=False).replace("\n", "<br>") + "</p>"


def theme_colors(dark: bool) -> dict[str, QtGui.QColor]:
    return DARK if dark else LIGHT


def apply_theme(fig: pg.GraphicsView, dark: bool) -> None:
    """Light or dark colours for any figure: background, axes, titles, colour bars (found in its scene)."""
    colors = theme_colors(dark)
    fig.setBackground(colors["background"])
    pen = pg.mkPen(colors["foreground"])
    for item in fig.scene().items():
        if isinstance(item, pg.AxisItem):
            item.setPen(pen)
            item.setTextPen(pen)
        elif isinstance(item, pg.LabelItem):
            item.opts["color"] = colors["foreground"].name()
            item.setText(item.text)
    fig.dark = dark
    on_theme = getattr(fig, "on_theme", None)
    if on_theme is not None:
        on_theme(dark)


def argb_with_nan(image, levels, lut, index: np.ndarray | None = None) -> QtGui.QImage | None:
    """A (rows, columns) float image with NaN cells as an ARGB32 QImage: each value coloured as pyqtgraph colours
    it (the ``lut``'s 256 colours spread over ``levels``, low to high, clipped), NaN transparent. ``index``: the
    image's :func:`analysis.display.colour_index` for these levels when it was made off the GUI thread (then only
    the table look-up is left here). None where this does not apply (no NaN and no ``index``, other shapes, a lut
    that is not 256 colours): pyqtgraph's own render then."""
    if (image is None or image.ndim != 2 or image.dtype.kind != "f" or levels is None or np.ndim(levels) != 1
            or not isinstance(lut, np.ndarray) or lut.dtype != np.uint8 or lut.ndim != 2 or len(lut) != 256
            or lut.shape[1] not in (3, 4)):
        return None
    if index is None:
        if not np.isnan(image).any():
            return None
        index = colour_index(image, levels)
    rgba = lut.astype(np.uint32)
    alpha = rgba[:, 3] if lut.shape[1] == 4 else np.full(256, 255, np.uint32)
    table = np.zeros(257, np.uint32)  # entry 256: NaN, transparent
    table[:256] = (alpha << 24) | (rgba[:, 0] << 16) | (rgba[:, 1] << 8) | rgba[:, 2]
    return pg.functions.ndarray_to_qimage(np.ascontiguousarray(table[index]), QtGui.QImage.Format.Format_ARGB32)


class HoverImage(pg.ImageItem):
    """An ImageItem that reports the (row, column) under the mouse (pyqtgraph's subclassing idiom).

    ``text_for(cell)`` gives the cell's tooltip: it becomes this item's own tooltip (the scene shows
    an item's tooltip when Qt asks for one, so it stays while the pointer rests; a tooltip set on the
    widget is hidden by the scene at Qt's ~0.7 s tooltip wake-up) and is shown at once.
    ``on_hover(cell)`` is called after the tooltip is up to date; ``on_click(cell)`` on a left click,
    ``on_double(cell)`` on a double-click. ``cell`` is (row, column) in image pixels, or None; in cells of the map
behind a pooled image (``cells_per_pixel`` cells a side per pixel, ``data_shape`` cells in all).
    After a zoom or pan under a resting pointer, :meth:`refresh_hover` reports the cell now under it."""

    def __init__(self, text_for=None, on_hover=None, on_click=None, on_double=None, **kwargs):
        super().__init__(axisOrder="row-major", **kwargs)
        self.text_for = text_for
        self.on_hover = on_hover
        self.on_click = on_click
        self.on_double = on_double
        self.setAcceptHoverEvents(True)
        self.cell_now: tuple[int, int] | None = None
        self.pointer: QtCore.QPointF | None = None  # where the pointer rests, in scene coordinates (None: outside)
        self.cells_per_pixel = 1  # a pooled image (gui/plots/tiles.py): each pixel covers this many cells a side
        self.data_shape: tuple[int, int] | None = None  # the cells (rows, columns) behind it; None: the image's

    prepared: tuple[np.ndarray, tuple[float, float]] | None = None  # (colour index, its levels): set_image

    def setImage(self, image=None, autoLevels=None, **kwargs):  # noqa: N802
        if image is not None:
            self.prepared = None  # a new image: its colour index, if any, comes from set_image
        super().setImage(image, autoLevels, **kwargs)

    def set_image(self, drawn: np.ndarray, levels: tuple[float, float], index: np.ndarray | None = None) -> None:
        """Show ``drawn`` over ``levels``; ``index``: its :func:`analysis.display.colour_index` for them, made off
        the GUI thread, which :meth:`render` colours with one table look-up."""
        self.setImage(drawn, levels=levels, autoLevels=False)
        self.prepared = None if index is None else (index, tuple(float(v) for v in levels))

    def render(self):
        """pyqtgraph's render, but a one-channel float image with NaN cells (a causal map's future, a hidden key:
        drawn transparent, the background showing) is coloured with one look-up in the colour map's table and a
        transparent entry for NaN (:func:`argb_with_nan`): pyqtgraph's own path finds and blanks every NaN cell's
        pixel one by one after colouring, ~3 ms on a 512 × 512 map, at every new map."""
        index = None
        if self.prepared is not None and self.image is not None and self.prepared[0].shape == self.image.shape \
                and self.levels is not None and tuple(float(v) for v in self.levels) == self.prepared[1]:
            index = self.prepared[0]
        qimage = argb_with_nan(self.image, self.levels, self.lut, index) if not self.autoDownsample else None
        if qimage is None or not hasattr(self, "_renderRequired"):
            return super().render()
        self._processingBuffer = self._displayBuffer = None  # as pyqtgraph's render leaves them after a QImage
        self.qimage = qimage
        self._renderRequired = False
        self._unrenderable = False

    def _cell(self, pos) -> tuple[int, int] | None:
        if self.image is None:
            return None
        s = self.cells_per_pixel
        row, col = int(math.floor(pos.y() * s)), int(math.floor(pos.x() * s))
        h, w = self.image.shape[:2] if self.data_shape is None else self.data_shape
        return (row, col) if 0 <= row < h and 0 <= col < w else None

    def hoverEvent(self, ev):  # noqa: N802
        self.pointer = None if ev.isExit() else QtCore.QPointF(ev.scenePos())
        self.hover_cell(None if ev.isExit() else self._cell(ev.pos()))

    def refresh_hover(self) -> None:
        """The view moved under a resting pointer (wheel zoom, pan): report the cell that is under it now."""
        if self.pointer is None or self.image is None:
            return
        view = self.getViewBox()
        if view is not None:
            view.updateMatrix()  # the view's transform follows a new range lazily
        cell = self._cell(self.mapFromScene(self.pointer))
        if cell != self.cell_now:
            self.hover_cell(cell)

    def hover_cell(self, cell: tuple[int, int] | None) -> None:
        """Update the tooltip for ``cell`` (also after new data under a resting pointer), then report it."""
        self.cell_now = cell
        text = self.text_for(cell) if (self.text_for is not None and cell is not None) else ""
        if not text:
            if self.toolTip():
                self.setToolTip("")
                QtWidgets.QToolTip.hideText()
        else:
            rich = plain_tooltip(text)
            if rich != self.toolTip():
                self.setToolTip(rich)
                views = self.scene().views() if self.scene() is not None else []
                if views and views[0].isVisible():
                    QtWidgets.QToolTip.showText(QtGui.QCursor.pos(), rich, views[0].viewport(), QtCore.QRect(),
                                                TOOLTIP_MS)
        if self.on_hover is not None:
            self.on_hover(cell)

    def mouseClickEvent(self, ev):  # noqa: N802
        cell = self._cell(ev.pos())
        if cell is None or ev.button() != QtCore.Qt.MouseButton.LeftButton:
            ev.ignore()
            return
        handler = self.on_double if ev.double() else self.on_click
        if handler is None:
            ev.ignore()
            return
        ev.accept()
        handler(cell)


class FigureViewBox(pg.ViewBox):
    """A view box whose right-click menu offers "View all" (pyqtgraph's own menu exports through
    the SVG exporter that crashes on Qt 6.11) and whose double-click on empty space resets the zoom."""

    def __init__(self, **kwargs):
        super().__init__(enableMenu=False, **kwargs)
        self.menu_actions: list[QtGui.QAction] = []
        self.reset_action = QtGui.QAction("View all")
        self.reset_action.triggered.connect(self.reset_view)
        self._menu = None

    def reset_view(self) -> None:
        self.enableAutoRange()
        self.autoRange(padding=0)

    def mouseClickEvent(self, ev):  # noqa: N802
        if ev.button() == QtCore.Qt.MouseButton.RightButton:
            ev.accept()
            self._menu = QtWidgets.QMenu()
            self._menu.addAction(self.reset_action)
            for action in self.menu_actions:
                self._menu.addAction(action)
            self._menu.popup(ev.screenPos().toPoint())
        elif ev.double() and ev.button() == QtCore.Qt.MouseButton.LeftButton:
            ev.accept()
            self.reset_view()
        else:
            super().mouseClickEvent(ev)


def limit_to_data(plot: pg.PlotItem, width: float, height: float, min_span: float = 1.0) -> None:
    """Zoom and pan stay on the data rectangle (0, 0)–(width, height); zoom in down to ``min_span``."""
    vb = plot.getViewBox()
    vb.setLimits(xMin=0, xMax=width, yMin=0, yMax=height, maxXRange=width, maxYRange=height,
                 minXRange=min(width, min_span), minYRange=min(height, min_span))
    vb.setDefaultPadding(0)
    vb.enableAutoRange()


class ZoomableFigure(pg.GraphicsLayoutWidget):
    """A figure with one plot: Home (or double-click, the right-click menu, the ⤢ button) shows all."""

    def __init__(self, parent=None, axisItems=None):  # noqa: N803 (pyqtgraph's spelling)
        super().__init__(parent)
        self.dark = False
        self.setBackground("w")
        self.setFocusPolicy(QtCore.Qt.FocusPolicy.StrongFocus)
        self.plot = self.addPlot(viewBox=FigureViewBox(), axisItems=axisItems or {})
        self.plot.setMenuEnabled(False)  # FigureViewBox has its own menu
        self.plot.hideButtons()
        self.reset_button = QtWidgets.QToolButton(self)
        self.reset_button.setText("⤢")
        self.reset_button.setToolTip("Show all (Home, double-click, right-click → View all)")
        self.reset_button.setAutoRaise(True)
        self.reset_button.clicked.connect(self.reset_view)
        self.reset_button.setVisible(False)
        self.plot.getViewBox().sigRangeChangedManually.connect(lambda *_: self.reset_button.setVisible(True))
        self.plot.getViewBox().sigRangeChanged.connect(lambda *_: self.refresh_hover())

    def lay_out_now(self) -> None:
        """Apply the layout a new drawing asked for (an axis grown for its labels or its title) now, not from the
        layout request Qt posts: that request waited behind the scene's paint, which painted the figure with the
        old geometry and then, laid out, a second time (bench: two ~6 ms paints of every axis after a new result)."""
        if hasattr(self, "plot"):  # (pyqtgraph's __init__ resizes before there is one)
            for layout in (self.plot.layout, self.ci.layout):
                layout.activate()

    def refresh_hover(self) -> None:
        """After a zoom or pan, every hover image reports the cell now under the resting pointer."""
        for item in self.plot.items:
            if isinstance(item, HoverImage):
                item.refresh_hover()

    def reset_view(self) -> None:
        self.plot.getViewBox().reset_view()
        self.reset_button.setVisible(False)

    def keyPressEvent(self, ev):  # noqa: N802
        if ev.key() == QtCore.Qt.Key.Key_Home:
            self.reset_view()
            ev.accept()
            return
        super().keyPressEvent(ev)

    def resizeEvent(self, ev):  # noqa: N802
        super().resizeEvent(ev)
        if hasattr(self, "reset_button"):
            hint = self.reset_button.sizeHint()
            self.reset_button.setGeometry(self.width() - hint.width() - 4, 4, hint.width(), hint.height())


def data_levels(values: np.ndarray) -> tuple[float, float]:
    """(min, max) of the finite values, widened when they are equal; (0, 1) when there are none."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return 0.0, 1.0
    low, high = float(finite.min()), float(finite.max())
    return (low - 0.5, high + 0.5) if low == high else (low, high)


DIM_OPACITY = 0.45  # a figure that still shows the previous text's result while a new text runs


class RunDimmer(QtCore.QObject):
    """Dims ``widget`` while the view state says a newer text is being analysed
    (``ViewState.running``, which the window sets for the newest request only): what the widget shows is
    then the previous text's. ``on_change(updating)`` is called too (e.g. to say "updating…" in a title).
    A figure with an ``image`` item (a HeadPlot) has that item drawn at DIM_OPACITY: the scene repaints the image's
    rectangle from its cached picture, nothing else. (A QGraphicsOpacityEffect on the whole figure, as before, made
    the window lay out and paint every axis and label of the figure again through an offscreen pixmap: 50–80 ms
    on the GUI thread at the start of every run, measured with main.py bench's gui_stall_ms.) Any other widget
    gets the opacity effect."""

    def __init__(self, widget: QtWidgets.QWidget, state, on_change=None):
        super().__init__(widget)
        self.widget, self.on_change, self.updating = widget, on_change, False
        state.running_changed.connect(self.set_updating)

    def set_updating(self, updating: bool) -> None:
        if updating == self.updating:
            return
        self.updating = updating
        image = getattr(self.widget, "image", None)
        if isinstance(image, QtWidgets.QGraphicsItem):
            image.setOpacity(DIM_OPACITY if updating else 1.0)
        elif updating:
            effect = QtWidgets.QGraphicsOpacityEffect(self.widget)
            effect.setOpacity(DIM_OPACITY)
            self.widget.setGraphicsEffect(effect)  # the widget owns it; None below deletes it
        else:
            self.widget.setGraphicsEffect(None)
        if self.on_change is not None:
            self.on_change(updating)
