"""A long head map on screen: the whole map max-pooled to the screen, and the part in view at the resolution the
zoom asks for, pooled and coloured off the GUI thread.

A map of n tokens is n² cells; at 8,192 tokens that is 67 M cells, and an image item of all of them costs the
GUI thread about 0.9 s to set and 1.8 s to paint. :class:`HeadPlot` (gui/plots/figures.py) draws instead

- the *overview*: the whole map pooled by :meth:`~analysis.display.ShownMap.pooled` to at most
  :data:`OVERVIEW_CELLS` pixels a side (max-pooled: a one-cell diagonal survives any stride);
- a :class:`DetailTile` over it: the window in view (and a margin for panning) at the stride the view needs,
  ⌈cells in view / pixels⌉, down to 1 (every cell) when zoomed in; also for a map of fewer cells than
  OVERVIEW_CELLS shown on fewer pixels than it has cells. It is made by :class:`TileMaker` on a
  thread of its own (the numpy reductions and the colouring release the GIL), the newest request only, and it is
  shown only while it is still the newest.

The hover line and tooltips always read the full-resolution map: exact at every zoom.
"""
from __future__ import annotations

import concurrent.futures
import math
from dataclasses import dataclass

import numpy as np
import shiboken6
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import OVERVIEW_CELLS, ShownMap, apply_scale, pool_stride  # noqa: F401 (OVERVIEW_CELLS: here too)

from .plot_items import argb_with_nan

#: The detail tile covers the view and this share of the view's width and height more on every side, so that a
#: small pan still finds cells drawn at full detail while the next tile is made.
TILE_MARGIN = 0.25


@dataclass(frozen=True)
class TileRequest:
    """One tile: cells ``rows`` × ``cols`` (start, stop) of the drawn map pooled over ``stride`` × ``stride``
    bins, coloured by ``lut`` over ``levels``. ``token``: the request it answers (an older one is dropped)."""

    token: int
    rows: tuple[int, int]
    cols: tuple[int, int]
    stride: int

    def rect(self, shape: tuple[int, int]) -> QtCore.QRectF:
        """Where a tile of ``shape`` pixels lies, in cells: each pixel covers ``stride`` cells a side (the last
        pixels of a side may reach past the map's edge, which the view never shows)."""
        return QtCore.QRectF(self.cols[0], self.rows[0], shape[1] * self.stride, shape[0] * self.stride)


def tile_for_view(view: tuple[tuple[float, float], tuple[float, float]], pixels: tuple[float, float],
                  shape: tuple[int, int], overview_stride: int) -> tuple[tuple[int, int], tuple[int, int], int] | None:
    """The tile a view needs: ((row start, stop), (column start, stop), stride), or None when the overview is what
    the view shows (its stride is the view's). A view finer than the overview gets detail; a view coarser than it
    (a map of more pixels than the screen shows, e.g. a 1,000-token map in 600 pixels) gets a tile pooled to the
    screen, or the screen's own scaling would drop whole rows and columns (a one-cell diagonal among them). ``view`` ((x0, x1), (y0, y1)) in cells, ``pixels`` (width, height) of the
    view on screen, ``shape`` (rows, columns) of the map. The stride is the finer of the two sides'
    :func:`~analysis.display.pool_stride`; the window is the view plus :data:`TILE_MARGIN`, clamped to the map,
    its start a multiple of the stride (so tiles of one stride share their bins)."""
    (x0, x1), (y0, y1) = view
    stride = max(1, min(pool_stride(math.ceil(x1 - x0), pixels[0]), pool_stride(math.ceil(y1 - y0), pixels[1])))
    if stride == overview_stride:
        return None
    mx, my = (x1 - x0) * TILE_MARGIN, (y1 - y0) * TILE_MARGIN
    rows, cols = shape

    def span(low: float, high: float, limit: int) -> tuple[int, int]:
        start = max(0, int(math.floor(low)) // stride * stride)
        return start, min(limit, int(math.ceil(high)))

    return span(y0 - my, y1 + my, rows), span(x0 - mx, x1 + mx, cols), stride


def render_tile(shown: ShownMap, request: TileRequest, scale: str, levels: tuple[float, float], lut: np.ndarray):
    """(request, the tile's ARGB QImage, its pooled values): what the thread makes. The cells pooled
    (:meth:`~analysis.display.ShownMap.pooled`), then ``scale``d and coloured over the overview's ``levels``;
    NaN cells are transparent, as in the overview (:func:`~gui.plots.plot_items.argb_with_nan`)."""
    pooled = shown.pooled(request.rows, request.cols, request.stride)
    drawn, _ = apply_scale(pooled, scale)
    image = argb_with_nan(drawn, np.asarray(levels), lut)
    if image is None:  # no NaN in the tile: the same colouring, every cell opaque
        low, high = levels
        index = np.clip((drawn.astype(np.float64) - low) * (256 / (high - low if high != low else 1)), 0, 255)
        rgba = lut.astype(np.uint32)
        alpha = rgba[:, 3] if lut.shape[1] == 4 else np.full(256, 255, np.uint32)
        table = (alpha << 24) | (rgba[:, 0] << 16) | (rgba[:, 1] << 8) | rgba[:, 2]
        import pyqtgraph as pg

        image = pg.functions.ndarray_to_qimage(np.ascontiguousarray(table[index.astype(np.uint16)]),
                                               QtGui.QImage.Format.Format_ARGB32)
    return request, image.copy(), pooled  # a copy: the QImage owns its pixels, not the numpy buffer


class _Relay(QtCore.QObject):
    """Carries a finished tile from the tile thread to the GUI thread. It lives as long as the module (it is never
    deleted), so the tile thread never emits on an object the GUI thread may be deleting: a figure closed while its
    tile is made is checked on the GUI thread, where it is deleted, not across threads."""

    done = QtCore.Signal(object, object)  # the TileMaker, the finished future


class TileMaker(QtCore.QObject):
    """Makes tiles on one thread of its own; ``ready(request, image, pooled)`` arrives on the GUI thread for the
    newest request only (:meth:`request` and :meth:`drop` make earlier ones stale)."""

    ready = QtCore.Signal(object, object, object)

    _pool: concurrent.futures.ThreadPoolExecutor | None = None  # one thread for every figure's tiles
    _relay: _Relay | None = None  # made on the GUI thread by the first request, kept for good

    def __init__(self, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.token = 0

    @classmethod
    def pool(cls) -> concurrent.futures.ThreadPoolExecutor:
        if cls._pool is None:
            cls._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="attnscope-tiles")
        return cls._pool

    @classmethod
    def relay(cls) -> _Relay:
        if cls._relay is None:
            cls._relay = _Relay()
            cls._relay.done.connect(_deliver, QtCore.Qt.ConnectionType.QueuedConnection)
        return cls._relay

    def request(self, shown: ShownMap, rows, cols, stride: int, scale: str, levels, lut) -> TileRequest:
        """Make the tile of ``shown`` (its weights unchanged while it is made) for rows × cols at ``stride``."""
        self.token += 1
        job = TileRequest(self.token, tuple(rows), tuple(cols), int(stride))
        relay = self.relay()
        future = self.pool().submit(render_tile, shown, job, scale, tuple(levels), np.asarray(lut))
        future.add_done_callback(lambda done, maker=self: relay.done.emit(maker, done))  # on the tile thread
        return job

    def drop(self) -> None:
        """Whatever is being made is not wanted any more (a new map, a new colour scale)."""
        self.token += 1


def _deliver(maker: TileMaker, future) -> None:
    """On the GUI thread: the tile to its maker, if the maker still exists and still wants it."""
    if not shiboken6.isValid(maker) or future.cancelled() or future.exception() is not None:
        return
    request, image, pooled = future.result()
    if request.token == maker.token:
        maker.ready.emit(request, image, pooled)


class DetailTile(QtWidgets.QGraphicsObject):
    """A QImage drawn over a rectangle of cells (the detail over a pooled overview); no mouse or hover of its
    own: the overview under it reports the cells."""

    def __init__(self):
        super().__init__()
        self.image: QtGui.QImage | None = None
        self.pooled: np.ndarray | None = None  # the tile's values, as drawn
        self.request: TileRequest | None = None
        self.area = QtCore.QRectF()
        self.background = QtGui.QColor("white")  # the figure's: a masked (NaN) cell hides the overview under it
        self.setAcceptHoverEvents(False)
        self.setAcceptedMouseButtons(QtCore.Qt.MouseButton.NoButton)

    def show_tile(self, request: TileRequest, image: QtGui.QImage, pooled: np.ndarray) -> None:
        self.prepareGeometryChange()
        self.request, self.image, self.pooled = request, image, pooled
        self.area = request.rect(pooled.shape)
        self.setVisible(True)
        self.update()

    def clear(self) -> None:
        self.prepareGeometryChange()
        self.request = self.image = self.pooled = None
        self.area = QtCore.QRectF()
        self.setVisible(False)

    def boundingRect(self) -> QtCore.QRectF:  # noqa: N802
        return self.area

    def paint(self, painter, option, widget=None) -> None:
        if self.image is not None:
            painter.fillRect(self.area, self.background)
            painter.drawImage(self.area, self.image)
