"""The map beside the Head scores table: one score for every head (layers down, heads across), with
its value and rank on hover and the sink heads marked; and the clean figure of it for Export and Copy."""
from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg

from ...plots.layer_head_map import LayerHeadMap, width_for_title
from .score_table import SINK_MARK

MARK_PX = 9  # the sink mark's diameter
MARK_INSET_PX = 3  # its gap to the cell's left and bottom edges


def mark_offset(vb) -> tuple[float, float]:
    """(dx, dy) in cell units from a cell's bottom-left corner to the mark's centre: MARK_INSET_PX + the
    radius in pixels, at most half a cell (a cell smaller than the mark gets it centred)."""
    px_x, px_y = vb.viewPixelSize() if vb.width() > 1 and vb.height() > 1 else (0.01, 0.01)
    inset = MARK_INSET_PX + MARK_PX / 2
    return min(0.5, inset * abs(px_x)), min(0.5, inset * abs(px_y))


class ScoreMap(LayerHeadMap):
    """One score for every head: layers down, heads across; hover shows the value and its rank.
    Sink heads can be marked (:meth:`set_marks`) with a small ● inside the cell's bottom-left corner, a few
    pixels in from its edges whatever the cell's size, so it is plain which head it marks and the value
    badge (top-left, LayerHeadMap.set_badges) keeps its room."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.values: np.ndarray | None = None
        self.std: np.ndarray | None = None
        self.name = self.label = self.note = ""
        self.marks = pg.ScatterPlotItem(symbol="o", size=MARK_PX, pen=pg.mkPen("#000000", width=1.2),
                                        brush=pg.mkBrush("#ffffff"))
        self.marks.setZValue(6)
        self.plot.addItem(self.marks, ignoreBounds=True)
        vb = self.plot.getViewBox()  # the marks sit a fixed number of pixels in from the corner: follow the view
        vb.sigResized.connect(lambda *_: self._draw_marks())
        vb.sigRangeChanged.connect(lambda *_: self._draw_marks())
        self.marked: np.ndarray | None = None
        self.mark_note = ""

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
        self.set_badges(self.values, self.label)
        self._draw_marks()

    def set_marks(self, marked: np.ndarray | None, note: str = "") -> None:
        """Mark the heads where ``marked`` (L, H) is True (the sink heads); None clears the marks."""
        self.marked, self.mark_note = (None if marked is None else np.asarray(marked, dtype=bool)), note
        self._draw_marks()

    def _draw_marks(self) -> None:
        if self.marked is None or self.marked.shape != tuple(self.shape):
            self.marks.setData([], [])
            return
        layers, heads = np.nonzero(self.marked)
        dx, dy = mark_offset(self.plot.getViewBox())
        self.marks.setData(heads + dx, layers + 1 - dy)  # inside the bottom-left corner (badges sit top-left)

    def hover_text(self, layer: int, head: int) -> str:
        if self.values is None:
            return ""
        v = self.values[layer, head]
        if not np.isfinite(v):
            return f"layer {layer}, head {head}: {self.label} not defined here"
        rank = int((self.values > v).sum()) + 1  # heads with a strictly higher score, plus one
        value = f"{v:.3f}" if self.std is None else f"{v:.3f} ± {self.std[layer, head]:.3f}"
        text = (f"layer {layer}, head {head}: {self.label} = {value}{' ' + self.note if self.note else ''} "
                f"(rank {rank} of {int(np.isfinite(self.values).sum())})")
        if self.marked is not None and self.marked.shape == self.values.shape and self.marked[layer, head]:
            text += f"\n{SINK_MARK} {self.mark_note}"
        return text + "\ndouble-click or Enter: open"


def offscreen_score_figure(shown: ScoreMap, cmap: str, model_label: str) -> ScoreMap:
    """A fresh, clean copy of the map ``shown`` (same score, levels, std and marks), sized for its
    heads and titled with the model, for Export and Copy figure."""
    from ...export.figure_files import settle_layout
    from ...plots.figures import lay_out_offscreen

    fig = ScoreMap()
    L, H = shown.values.shape
    title = f"{model_label} — {shown.label}" + (f", {shown.note}" if shown.note else "")
    lay_out_offscreen(fig, int(min(2400, max(520, 200 + 48 * H, width_for_title(title)))),
                      int(min(3000, 120 + 40 * L)))
    fig.set_score(shown.name, shown.values, cmap, label=shown.label, levels=tuple(shown.colorbar.levels()),
                  std=shown.std, note=shown.note)
    fig.set_marks(shown.marked, shown.mark_note)
    if shown.marked is not None and shown.marked.any():  # the figure explains its marks itself
        fig.plot.setLabel("bottom", html.escape(f"head      {SINK_MARK} {shown.mark_note}", quote=False))
    fig.set_title(title)
    settle_layout()  # the title's height moves the plot down once
    return fig
