"""The Circuits tab's maps: a signed value per head on the shared layer × head map (direct logit attribution,
the patching effect of each head), and a layer × column map for what is not per head (the residual stream per
position, the attention / MLP output per layer)."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui

from analysis.display import format_score, head_name

from ...plots.layer_head_map import LayerHeadMap
from ...plots.layer_head_map import tick_stride
from ...plots.plot_items import HoverImage, ZoomableFigure, apply_theme, colormap, limit_to_data

DIVERGING = "CET-D1"  # blue → white → red: both a contribution and an effect have a sign, 0 is white


def symmetric_levels(values: np.ndarray) -> tuple[float, float]:
    """(−m, m), m the largest finite |value| (1 when there is none): 0 is the colour bar's middle."""
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.max()) if finite.size else 1.0
    return (-top, top) if top > 0 else (-1.0, 1.0)


def effect_levels(values: np.ndarray) -> tuple[float, float]:
    """(−m, m), m = max(1, the largest finite |value|): for a patching effect, where 1 is the clean value and 0
    the corrupted one. A map of small effects (a cancelled run's first layer, ±0.005) stays pale instead of being
    stretched to full colour as if it were as strong as a head that restores the answer."""
    low, high = symmetric_levels(values)
    return (min(low, -1.0), max(high, 1.0))


SIGNED_TICK_PX = 46  # "−0.005" whole beside its colour bar: pyqtgraph's measured width let the bar's label cover it


def roomy_ticks(colorbar: pg.ColorBarItem) -> None:
    """Room for signed tick labels of a few digits on ``colorbar``'s axis (fixed: the automatic width, plus the
    label's, came out short by a digit when the minor ticks' text was wider than the major ticks')."""
    colorbar.axis.enableAutoSIPrefix(False)
    colorbar.axis.setStyle(autoExpandTextSpace=False, tickTextWidth=SIGNED_TICK_PX)


class HeadValueMap(LayerHeadMap):
    """One signed number per head (``values`` (L, H)); click selects, double-click opens (LayerHeadMap).
    ``describe(layer, head, value)`` gives the hover's first line."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.values: np.ndarray | None = None
        self.describe: Callable[[int, int, float], str] | None = None
        if self.colorbar is not None:
            roomy_ticks(self.colorbar)

    def set_values(self, values: np.ndarray, title: str, bar_label: str,
                   describe: Callable[[int, int, float], str] | None = None, levels=None,
                   cmap: str = DIVERGING) -> None:
        """``cmap``: the diverging map centred on 0 (a signed value) unless told (the Compare page's side-by-side
        scores, which have no sign, in the app's colour map over common levels)."""
        self.values = np.asarray(values, dtype=np.float64)
        self.describe = describe
        self.set_image(self.values.astype(np.float32), self.values.shape, levels or symmetric_levels(self.values),
                       cmap, title, bar_label)
        # the heads that stand out by size, either sign, as the pages' "largest" lists rank them
        # (walk 7: the badges wrote |value|, so L24H4's −1.310 read "1.310"): ranked by size, written with the sign
        self.set_badges(np.abs(self.values), f"{bar_label.split(' (')[0]} by size", written=self.values)

    def forget(self) -> None:
        self.values = None
        self.set_badges(None)

    def hover_text(self, layer: int, head: int) -> str:
        if self.values is None:
            return ""
        v = float(self.values[layer, head])
        if v != v:
            return f"{head_name(layer, head)}: not measured (cancelled before this layer)"
        finite = np.abs(self.values[np.isfinite(self.values)])
        rank = int((finite > abs(v)).sum()) + 1  # by size, as the outlines and the "largest" lists
        first = self.describe(layer, head, v) if self.describe else f"{head_name(layer, head)}: {format_score(v, True)}"
        return f"{first} (rank {rank} of {finite.size} by |value|)\ndouble-click or Enter: open"


class LayerColumnMap(ZoomableFigure):
    """Layers down (L0 on top), ``columns`` across (the text's tokens, or attention / MLP); hover shows
    ``describe(layer, column, value)``."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.plot.invertY(True)
        self.image = HoverImage(text_for=self._text_for)
        self.plot.addItem(self.image)
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=colormap(DIVERGING), interactive=False, width=14)
        self.colorbar.setImageItem(self.image, insert_in=self.plot)
        roomy_ticks(self.colorbar)
        self.values: np.ndarray | None = None
        self.columns: Sequence[str] = ()
        self.rows: Sequence[str] = ()
        self.describe: Callable[[int, int, float], str] | None = None
        self.full_title = ""
        self.plot.getViewBox().sigResized.connect(lambda *_: self._ticks())

    def set_values(self, values: np.ndarray, columns: Sequence[str], title: str, bar_label: str,
                   column_axis: str, describe: Callable[[int, int, float], str] | None = None, levels=None,
                   rows: Sequence[str] | None = None) -> None:
        """``rows``: the rows' labels (default L0, L1, …: a row per layer; the head × position strip: one head)."""
        self.values = np.asarray(values, dtype=np.float64)
        self.columns, self.describe = tuple(columns), describe
        self.rows = tuple(rows) if rows is not None else tuple(f"L{l}" for l in range(self.values.shape[0]))
        L, C = self.values.shape
        levels = levels or symmetric_levels(self.values)
        self.image.setImage(self.values.astype(np.float32), levels=levels, autoLevels=False)
        self.image.setRect(QtCore.QRectF(0, 0, C, L))
        self.colorbar.setLevels(levels)
        self.colorbar.axis.setLabel(bar_label)
        self.full_title = title
        self.plot.setTitle(title, size="11pt")
        self.plot.setLabel("left", "head" if rows is not None else
                           "layer (the block's input)" if column_axis == "position" else "layer")
        self.plot.setLabel("bottom", column_axis)
        limit_to_data(self.plot, C, L)
        self._ticks()
        apply_theme(self, self.dark)  # the new title and labels in the theme's colours

    def _ticks(self) -> None:
        if self.values is None:
            return
        L, C = self.values.shape
        vb = self.plot.getViewBox()
        metrics = QtGui.QFontMetrics(self.font())
        widest = max((metrics.horizontalAdvance(c) for c in self.columns), default=20)
        across = tick_stride(C, vb.width() if vb.width() > 10 else 400, widest + 6)
        down = tick_stride(L, vb.height() if vb.height() > 10 else 300, metrics.height())
        self.plot.getAxis("bottom").setTicks([[(c + 0.5, self.columns[c]) for c in range(0, C, across)], []])
        self.plot.getAxis("left").setTicks([[(l + 0.5, self.rows[l]) for l in range(0, L, down)], []])

    def forget(self) -> None:
        self.values = None
        self.image.clear()

    def _text_for(self, cell) -> str:
        if self.values is None or cell is None:
            return ""
        layer, column = cell
        v = float(self.values[layer, column])
        if v != v:
            return f"{self.rows[layer]}, {self.columns[column]}: not measured (cancelled before this layer)"
        if self.describe:
            return self.describe(layer, column, v)
        return f"{self.rows[layer]}, {self.columns[column]}: {format_score(v, True)}"
