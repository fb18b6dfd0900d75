"""The map beside the Head scores table: one score for every head (layers down, heads across), with
its value and rank on hover, the heads that stand out badged, and the sink heads marked; and the clean figure of
it for Export and Copy.

A sink mark is a small corner tick (a right triangle MARK_PX on a side, in the cell's bottom-left corner), never a
dot over the cell's middle: on a model where most heads are sinks (SmolLM2 at ε = 0.3: 224 of 270) every cell's
colour still reads. The line under the map says how many heads are marked and why ("• 224 of 270 heads are sinks:
first-token score above ε = 0.3"), and what the badges say ("no head stands out on previous token").
"""
from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui

from analysis.display import format_score, head_name

from ...plots.badges import LOW_IS_FINDING
from ...plots.layer_head_map import LayerHeadMap, width_for_title
from .score_table import SINK_MARK

MARK_PX = 7  # the sink tick's legs (a right triangle in the cell's bottom-left corner)
MARK_INSET_PX = 2  # its gap to the cell's left and bottom edges (inside the separators)
SINK_NOTE_PREFIX = "sink head: "  # how the Scores tab's note of a mark begins (sink_row.show_sinks)


def corner_tick() -> QtGui.QPainterPath:
    """The mark's symbol in pyqtgraph's unit square (y down on screen): the triangle of the bottom-left corner."""
    path = QtGui.QPainterPath()
    path.moveTo(-0.5, -0.5)
    path.lineTo(-0.5, 0.5)
    path.lineTo(0.5, 0.5)
    path.closeSubpath()
    return path


def mark_offset(vb) -> tuple[float, float]:
    """(dx, dy) in cell units from a cell's bottom-left corner to the mark's centre: MARK_INSET_PX + half the
    mark in pixels, at most half a cell (a cell smaller than the mark gets it centred)."""
    px_x, px_y = vb.viewPixelSize() if vb.width() > 1 and vb.height() > 1 else (0.01, 0.01)
    inset = MARK_INSET_PX + MARK_PX / 2
    return min(0.5, inset * abs(px_x)), min(0.5, inset * abs(px_y))


LEGEND_PT = 8  # the legend's font size under the map


def wrap_to_width(text: str, metrics: QtGui.QFontMetrics, width: int) -> list[str]:
    """``text`` broken at spaces into lines no wider than ``width`` pixels in ``metrics`` (a word longer than
    that gets a line of its own)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and metrics.horizontalAdvance(f"{lines[-1]} {word}") <= width:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return lines


def sinks_legend(marked: np.ndarray | None, note: str) -> str:
    """"• 212 of 270 heads are sinks: first-token score above ε = 0.3" (the mark, the count, and ``note``, the
    Scores tab's reason of a mark, without its "sink head: "); "" without marks."""
    if marked is None:
        return ""
    n, total = int(marked.sum()), int(marked.size)
    why = note[len(SINK_NOTE_PREFIX):] if note.startswith(SINK_NOTE_PREFIX) else note
    heads = f"{n} of {total} heads {'is a sink' if n == 1 else 'are sinks'}"
    return f"{SINK_MARK} {heads}" + (f": {why}" if why else "")


class ScoreMap(LayerHeadMap):
    """One score for every head: layers down, heads across; hover shows the value and its rank.
    Sink heads can be marked (:meth:`set_marks`) with a corner tick inside the cell's bottom-left corner, a few
    pixels in from its edges whatever the cell's size, so it is plain which head it marks, the value badge
    (top-left, LayerHeadMap.set_badges) keeps its room, and the cell's colour shows around it. ``legend`` is the
    line under the map (the sinks' count, the badges' note)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.values: np.ndarray | None = None
        self.std: np.ndarray | None = None
        self.name = self.label = self.note = ""
        self.marks = pg.ScatterPlotItem(symbol=corner_tick(), size=MARK_PX, pen=pg.mkPen("#000000", width=1),
                                        brush=pg.mkBrush("#ffffff"))
        self.marks.setZValue(6)
        self.plot.addItem(self.marks, ignoreBounds=True)
        vb = self.plot.getViewBox()  # the marks sit a fixed number of pixels in from the corner: follow the view
        vb.sigResized.connect(lambda *_: self._draw_marks())
        vb.sigRangeChanged.connect(lambda *_: self._draw_marks())
        self.legend_lines: list[str] = []
        self.marked: np.ndarray | None = None
        self.mark_note = ""
        self.legend = ""
        self.badges_changed.connect(lambda _note: self._show_legend())

    def set_score(self, name: str, values: np.ndarray, cmap: str = "viridis", *, label: str | None = None,
                  levels: tuple[float, float] | None = None, std: np.ndarray | None = None, note: str = "") -> None:
        """Show ``values`` (L, H); ``std`` (over many texts) goes into the hover, ``note`` after the title.
        ``levels`` default to 0 … 1 (entropy) or 0 … max(1, the top value)."""
        self.values, self.name = np.asarray(values, dtype=np.float64), name
        self.std = None if std is None else np.asarray(std, dtype=np.float64)
        self.label, self.note = label or name.replace("_", " "), note
        finite = self.values[np.isfinite(self.values)]
        top = float(finite.max()) if finite.size else 1.0
        if levels is None:
            levels = (0.0, 1.0 if name == "entropy" else max(1.0, top))
        missing = "" if finite.size else " — not defined for this text"
        title = self.label + (f", {note}" if note else "") + missing
        self.set_image(self.values.astype(np.float32), self.values.shape, levels, cmap, title, self.label)
        self.set_badges(self.values, self.label, low=name in LOW_IS_FINDING)
        self._draw_marks()
        self._show_legend()

    def set_marks(self, marked: np.ndarray | None, note: str = "") -> None:
        """Mark the heads where ``marked`` (L, H) is True (the sink heads); None clears the marks. ``note``: why a
        head is marked ("sink head: first-token score above ε = 0.3"), in each marked head's hover and the legend."""
        self.marked, self.mark_note = (None if marked is None else np.asarray(marked, dtype=bool)), note
        self._draw_marks()
        self._show_legend()

    def _draw_marks(self) -> None:
        if self.marked is None or self.marked.shape != tuple(self.shape):
            self.marks.setData([], [])
            return
        layers, heads = np.nonzero(self.marked)
        dx, dy = mark_offset(self.plot.getViewBox())
        self.marks.setData(heads + dx, layers + 1 - dy)  # inside the bottom-left corner (badges sit top-left)

    def _show_legend(self) -> None:
        """The lines under the map: "head", then the sinks' legend and the badges' note, each when there is one,
        each wrapped to the figure's width (``legend_lines``): a legend wider than a narrow map is never cut."""
        marked = self.marked if self.marked is not None and self.marked.shape == tuple(self.shape) else None
        parts = [part for part in (sinks_legend(marked, self.mark_note) if marked is not None and marked.any() else "",
                                   self.badge_note) if part]
        self.legend = " · ".join(parts)
        font = QtGui.QFont(self.font())
        font.setPointSizeF(LEGEND_PT)
        room = max(80, self.width() - 24)
        self.legend_lines = [line for part in parts for line in wrap_to_width(part, QtGui.QFontMetrics(font), room)]
        shown = "<br>".join(html.escape(line, quote=False) for line in self.legend_lines)
        label = "head" + (f"<br><span style='font-size:{LEGEND_PT}pt'>{shown}</span>" if shown else "")
        if label != getattr(self, "_legend_label", None):
            self._legend_label = label
            self.plot.setLabel("bottom", label)
        self.plot.getAxis("bottom").label.setToolTip(self.legend)

    def resizeEvent(self, ev):  # noqa: N802
        super().resizeEvent(ev)
        if hasattr(self, "legend_lines"):
            self._show_legend()

    def set_image(self, *args, **kwargs):
        super().set_image(*args, **kwargs)
        if hasattr(self, "legend"):  # set_image writes the plain "head" label: the legend goes back under it
            self._legend_label = None
            self._show_legend()

    def hover_text(self, layer: int, head: int) -> str:
        if self.values is None:
            return ""
        v = self.values[layer, head]
        if not np.isfinite(v):
            return f"{head_name(layer, head)} (layer {layer}, head {head}): {self.label} not defined here"
        rank = int((self.values > v).sum()) + 1  # heads with a strictly higher score, plus one
        value = format_score(v) if self.std is None else f"{format_score(v)} ± {format_score(self.std[layer, head])}"
        text = (f"{head_name(layer, head)} (layer {layer}, head {head}): {self.label} = {value}{' ' + self.note if self.note else ''} "
                f"(rank {rank} of {int(np.isfinite(self.values).sum())})")
        if (layer, head) in self.badge_layer.heads:
            text += "\nstands out on " + self.label
        if self.marked is not None and self.marked.shape == self.values.shape and self.marked[layer, head]:
            text += f"\n{SINK_MARK} {self.mark_note}"
        return text + "\ndouble-click or Enter: open"


def offscreen_score_figure(shown: ScoreMap, cmap: str, model_label: str) -> ScoreMap:
    """A fresh, clean copy of the map ``shown`` (same score, levels, std and marks, so the same legend under it),
    sized for its heads and titled with the model, for Export and Copy figure."""
    from ...export.figure_files import settle_layout
    from ...plots.figures import lay_out_offscreen

    fig = ScoreMap()
    L, H = shown.values.shape
    title = f"{model_label} — {shown.label}" + (f", {shown.note}" if shown.note else "")
    lay_out_offscreen(fig, int(min(2400, max(520, 200 + 48 * H, width_for_title(title), width_for_title(
        shown.legend, 120)))), int(min(3000, 140 + 40 * L)))
    fig.set_score(shown.name, shown.values, cmap, label=shown.label, levels=tuple(shown.colorbar.levels()),
                  std=shown.std, note=shown.note)
    fig.set_marks(shown.marked, shown.mark_note)
    fig.set_title(title)
    settle_layout()  # the title's height moves the plot down once
    return fig
