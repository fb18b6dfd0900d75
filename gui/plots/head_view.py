"""One head's map drawn as the view state says: the attention weights, or value-weighted attention with
the key norms ‖f_h(x_j)‖ as bars above the map (:class:`KeyNormStrip`). The Head tab draws it on screen and
the exporter draws it into files (gui/export/exporting.py), the same way."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from ..state.lens_data import VALUE_NORMS
from ..state.view_state import ViewState
from .figures import HeadPlot

STRIP_PX = 44  # height of the key-norm bars above the head map
STRIP_BRUSH = "#7f9fbf"  # readable on the light and the dark background

class KeyNormStrip:
    """‖f_h(x_j)‖ per key as bars directly above a HeadPlot's map. The bars live in the plot's own layout,
    in the (hidden) top axis's place, x-linked to the map: each bar stays over its key column at any
    zoom and any width of the token labels."""

    def __init__(self, figure: HeadPlot):
        plot = figure.plot
        top = plot.getAxis("top")
        plot.layout.removeItem(top)
        top.hide()
        self.view = pg.ViewBox(enableMouse=False, enableMenu=False, defaultPadding=0)
        self.view.setXLink(plot.getViewBox())
        self.bars = pg.BarGraphItem(x0=[], height=[], width=1.0, brush=STRIP_BRUSH, pen=None)
        self.view.addItem(self.bars)
        self.label = pg.LabelItem("", size="8pt", justify="right")
        plot.layout.addItem(self.view, 1, 1)
        plot.layout.addItem(self.label, 1, 0)
        self.norms: np.ndarray | None = None
        self.set_norms(None)

    def set_norms(self, norms: np.ndarray | None) -> None:
        """Show the key norms (n,), or hide the strip (None)."""
        self.norms = None if norms is None else np.asarray(norms, dtype=np.float64)
        shown = self.norms is not None
        height = STRIP_PX if shown else 0
        for item in (self.view, self.label):
            item.setVisible(shown)
            item.setMinimumHeight(height)
            item.setMaximumHeight(height)
        if not shown:
            self.bars.setOpts(x0=[], height=[], width=1.0)
            return
        n = len(self.norms)
        self.bars.setOpts(x0=np.arange(n) + 0.1, height=self.norms, width=0.8)
        top = float(self.norms.max()) if n else 1.0
        self.view.setYRange(0, top if top > 0 else 1.0, padding=0.05)
        self.label.setText(f"‖f(x)‖<br>max {top:.3g}")


def view_to_draw(state: ViewState) -> str:
    """What :func:`draw_head` draws for the state now: "value-weighted" when that view is chosen and its value
    norms are there, else "weights"."""
    wanted = state.attention_view == "value-weighted" and state.lens(VALUE_NORMS) is not None
    return "value-weighted" if wanted else "weights"


def head_matrix(state: ViewState, kind: str, layer: int, head: int) -> np.ndarray:
    """(n, n) what :func:`draw_head` draws of head ``layer``.``head`` for ``kind`` (:func:`view_to_draw`), computed
    here when the result's maps are computed on demand (an export's figures; the Head tab asks the worker first,
    gui/state/head_maps.py): the weights ``result.head_map``, or the row-normalised N (the value lens's, or
    ``measures.streamed.value_weighted``)."""
    r = state.result
    if kind == "value-weighted":
        values = state.lens(VALUE_NORMS)
        if values.shown is not None:
            return values.shown[layer, head]
        from analysis.measures.streamed import value_weighted

        return value_weighted(r.maps, layer, head)
    return r.head_map(layer, head)


def draw_head(figure: HeadPlot, strip: KeyNormStrip | None, state: ViewState, layer: int, head: int,
              title: str, matrix: np.ndarray | None = None, prepared=None) -> None:
    """Draw head ``layer``.``head`` of the state's result as the state says (:func:`view_to_draw`: weights, or
    value-weighted when its value norms are there); ``matrix``: that map when the caller has it (else
    :func:`head_matrix`); ``prepared``: its drawing made off the GUI thread
    (:class:`analysis.display.PreparedHead`, gui/state/head_maps.py), used where it fits."""
    r, values = state.result, state.lens(VALUE_NORMS)
    kind = view_to_draw(state)
    matrix = head_matrix(state, kind, layer, head) if matrix is None else matrix
    if kind == "value-weighted":
        figure.set_head(matrix, r.tokens, f"{title} — value-weighted, rows normalised",
                        cmap=state.colormap, scale=state.scale, hide_first=state.hide_first, causal=r.causal,
                        quantity="share of row N", prepared=prepared)
        if strip is not None:
            strip.set_norms(values.key_norms[layer, head])
        return
    figure.set_head(matrix, r.tokens, title, cmap=state.colormap, scale=state.scale,
                    hide_first=state.hide_first, causal=r.causal, prepared=prepared)
    if strip is not None:
        strip.set_norms(None)
