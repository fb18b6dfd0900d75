"""The badges of a layer × head map: which heads get one, what it reads, and how it is drawn at any zoom.

A head gets a badge only when it stands out on the score (``analysis.measures.head_scores.standout_heads``: at least
the floor, 0.3, and more than 3 robust standard deviations past the model's median head; for a score where small is
the finding, :data:`LOW_IS_FINDING`, the other side), never a fixed "top k": a model whose best previous-token head
reads 0.14 has no badge, and a model where most heads are sinks has none on sink (the map shows that they all are).

Every standout head is outlined (gold over a dark edge, visible on any colour) at every zoom; its value, written by
``analysis.display.format_score`` ("0.998", the best head's "★ 0.998"), is drawn inside the cell's top-left corner
when the whole text fits the cell as drawn now, and hidden otherwise (:meth:`BadgeLayer.note` then says "zoom in to
read"). The hover text of each head carries its value whether or not a badge fits.
"""
from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import format_score, head_name
from analysis.measures.head_scores import standout_heads

from .head_layout import HeadLayout

#: Scores where a small value is the finding (a focused head's entropy): their standout heads are the low ones.
LOW_IS_FINDING = frozenset({"entropy"})
BADGE_INSET_PX = 2  # a badge's gap to its cell's top and left edges: clear of the separators and selection frame
BADGE_MARGIN_PX = 1  # the empty border of a badge's text box
OUTLINE_INSET_PX = 2.5  # the standout outline's gap to its cell's edges (inside the separators)
OUTLINE_COLOR, OUTLINE_EDGE = "#ffd60a", "#000000"
BEST_BACK, OTHER_BACK = "#ffd60a", "rgba(255,243,176,0.9)"


def standout_order(values: np.ndarray, low: bool = False) -> list[tuple[int, int]]:
    """The heads that stand out on ``values`` (layer, head), best first (highest; with ``low`` lowest), ties in
    layer-major order."""
    values = np.asarray(values, dtype=np.float64)
    chosen = np.flatnonzero(standout_heads(values, low=low))
    flat = values.ravel()[chosen]
    order = chosen[np.argsort(flat if low else -flat, kind="stable")]
    return [divmod(int(i), values.shape[1]) for i in order]


def badge_wordings(value: float, best: bool) -> list[str]:
    """A badge's texts, longest first: ``format_score`` of the value ("0.998"), the best head's first with a ★
    ("★ 0.998", then "0.998": its gold background still marks it). One rounding rule: never a shorter "1.0"."""
    text = format_score(value)
    return [f"★ {text}", text] if best else [text]


def standout_summary(label: str, values: np.ndarray | None, heads: list[tuple[int, int]]) -> str:
    """One sentence naming the heads that stand out on ``label`` by ``head_name`` with their value, best first
    ("2 heads stand out on sink: L1H0 0.998 ★, L3H2 0.876"), or that none does."""
    if values is None:
        return ""
    if not heads:
        return f"No head stands out on {label}."
    named = [f"{head_name(l, h)} {format_score(values[l, h])}" + (" ★" if rank == 0 else "")
             for rank, (l, h) in enumerate(heads)]
    many = len(heads) > 1
    return f"{len(heads)} head{'s' if many else ''} stand{'' if many else 's'} out on {label}: {', '.join(named)}"


class BadgeLayer:
    """The badges and outlines of one map's plot (a ``pg.PlotItem``) over a :class:`HeadLayout`."""

    def __init__(self, plot: pg.PlotItem, z: float):
        self.plot, self.z = plot, z
        self.items: list[pg.TextItem] = []  # every badge, shown or hidden for want of room
        self.texts: list[tuple[int, int, list[str]]] = []  # (layer, head, wordings longest first, as HTML)
        self.shown: list[pg.TextItem] = []  # the badges whose text is drawn now
        self.heads: list[tuple[int, int]] = []  # the standout heads, best first
        self.values: np.ndarray | None = None
        self.written: np.ndarray | None = None  # what the badges write (the values unless told)
        self.label = ""
        self.outline_edge = QtWidgets.QGraphicsPathItem()
        self.outline = QtWidgets.QGraphicsPathItem()
        self.outline_edge.setPen(pg.mkPen(OUTLINE_EDGE, width=3.5, cosmetic=True))
        self.outline.setPen(pg.mkPen(OUTLINE_COLOR, width=1.5, cosmetic=True))
        for depth, item in enumerate((self.outline_edge, self.outline)):
            item.setZValue(z - 1 + 0.1 * depth)
            plot.addItem(item, ignoreBounds=True)

    def set_values(self, values: np.ndarray | None, label: str, low: bool, written: np.ndarray | None = None) -> None:
        """Badge the heads that stand out on ``values``; each badge writes ``written`` (layer, head) when given (a
        signed map ranked by |value| writes the value with its sign), else the value ranked."""
        for item in self.items:
            self.plot.removeItem(item)
        self.items, self.texts, self.shown = [], [], []
        self.values, self.label = (None if values is None else np.asarray(values, dtype=np.float64)), label
        self.written = self.values if written is None or values is None else np.asarray(written, dtype=np.float64)
        self.heads = [] if values is None else standout_order(self.values, low)
        for rank, (layer, head) in enumerate(self.heads):
            best = rank == 0
            text = pg.TextItem(anchor=(0, 0))
            text.textItem.document().setDocumentMargin(BADGE_MARGIN_PX)
            text.setZValue(self.z)
            self.plot.addItem(text, ignoreBounds=True)
            self.items.append(text)
            back = BEST_BACK if best else OTHER_BACK
            self.texts.append((layer, head, [
                f"<span style='background:{back};{'font-weight:bold;' if '★' in w else ''}color:#000;"
                f"font-size:8pt'>{html.escape(w)}</span>" for w in badge_wordings(self.written[layer, head], best)]))

    def lay_out(self, layout: HeadLayout, px: tuple[float, float]) -> None:
        """Place each badge BADGE_INSET_PX in from its cell's top-left corner in the longest wording whose whole box
        fits inside the cell drawn ``px`` (the data units of one screen pixel, x and y) now; hide it when none fits.
        The outlines follow too."""
        px_x, px_y = px
        inside = lambda layer, head: layer < layout.n_layer and head < layout.n_head  # noqa: E731
        room_w, room_h = 1 / px_x - 2 * BADGE_INSET_PX, 1 / px_y - 2 * BADGE_INSET_PX
        shown = []
        for item, (layer, head, wordings) in zip(self.items, self.texts):
            if not inside(layer, head):  # scores before the map's image (a long run's thumbnails come later)
                item.setVisible(False)
                continue
            fits = False
            for wording in wordings:
                if getattr(item, "wording", None) != wording:  # setHtml re-lays the text out: only on a change
                    item.setHtml(wording)
                    item.wording = wording
                size = item.textItem.boundingRect()
                if size.width() <= room_w and size.height() <= room_h:
                    fits = True
                    break
            x, y = layout.origin(layer, head)
            item.setPos(x + BADGE_INSET_PX * px_x, y + BADGE_INSET_PX * px_y)
            item.setVisible(fits)
            if fits:
                shown.append(item)
        self.shown = shown
        path = QtGui.QPainterPath()
        dx, dy = min(0.25, OUTLINE_INSET_PX * px_x), min(0.25, OUTLINE_INSET_PX * px_y)
        for layer, head in (lh for lh in self.heads if inside(*lh)):
            x, y = layout.origin(layer, head)
            path.addRect(QtCore.QRectF(x + dx, y + dy, 1 - 2 * dx, 1 - 2 * dy))
        self.outline.setPath(path)
        self.outline_edge.setPath(path)

    def note(self) -> str:
        """What the badges say as a whole, for a label beside the chooser: "" with no score; "no head stands out on
        sink"; "2 heads outlined: zoom in to read their badges" when some badge's text does not fit its cell; "2 heads
        stand out" when every badge reads."""
        if self.values is None:
            return ""
        n = len(self.heads)
        if not n:
            return f"no head stands out on {self.label}"
        heads = f"{n} head{'s' if n > 1 else ''}"
        if len(self.shown) < n:
            return f"{heads} outlined: zoom in to read {'their badges' if n > 1 else 'its badge'}"
        return f"{heads} stand{'' if n > 1 else 's'} out"

    def short_note(self) -> str:
        """:meth:`note` in fewer words, for a narrow panel: "none stands out", "zoom in to read badges", "2 stand out"."""
        if self.values is None:
            return ""
        n = len(self.heads)
        if not n:
            return "none stands out"
        return "zoom in to read badges" if len(self.shown) < n else f"{n} stand{'' if n > 1 else 's'} out"

    def summary(self) -> str:
        """:func:`standout_summary` of the values shown."""
        return standout_summary(self.label, self.written, self.heads)
