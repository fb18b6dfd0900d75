"""A figure's text: its sizes in points from ``FigureOptions.font_pt`` (:class:`FigureFont`), set on its axes and colour
bar (:func:`set_figure_font`, :func:`measure_axes`), and titles wrapped or elided to the width asked
(:func:`wrap_text`, :func:`elided`). It imports no other plot module (figures.py and figure_parts.py both use it)."""
from __future__ import annotations

import html
from dataclasses import dataclass

import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

DEFAULT_FONT_PT = 8.5  # a figure's text without --font-pt: the size of the app's token labels
TITLE_SCALE = 11 / 8.5  # a figure's title: this many times its text (11 pt over 8.5 pt labels)
PANEL_TITLE_SCALE = 9 / 8.5  # a panel's head name ("L3H1"), over its scores at the text's size


@dataclass(frozen=True)
class FigureFont:
    """The sizes in points of a figure's text, from ``FigureOptions.font_pt`` (``text``; None:
    :data:`DEFAULT_FONT_PT`): ``text`` for every label (the token labels of both axes, the axes' titles, the colour
    bar's numbers and label, a panel's scores, the badge legend, the Lines view's tokens and legend), ``title`` =
    ``text`` · :data:`TITLE_SCALE` for the figure's title, ``panel_title`` = ``text`` · :data:`PANEL_TITLE_SCALE`
    for a panel's head name. The family is the application's; the sizes never are (a figure is the same from the
    window and from ``main.py figure``, and drawing it leaves the application's font alone)."""

    text: float = DEFAULT_FONT_PT

    @classmethod
    def of(cls, font_pt: float | None) -> "FigureFont":
        return cls(DEFAULT_FONT_PT if font_pt is None else float(font_pt))

    @property
    def title(self) -> float:
        return round(self.text * TITLE_SCALE, 2)

    @property
    def panel_title(self) -> float:
        return round(self.text * PANEL_TITLE_SCALE, 2)

    def qfont(self, points: float | None = None) -> QtGui.QFont:
        """The application's family at ``points`` (default ``text``) points."""
        font = QtGui.QFont(QtWidgets.QApplication.font())
        font.setPointSizeF(float(self.text if points is None else points))
        return font


def set_axis_font(axis, font: QtGui.QFont) -> None:
    """A pyqtgraph axis' numbers (tick labels) and its title in ``font`` (a colour bar's, a grid's)."""
    axis.setStyle(tickFont=font)
    if axis.orientation == "right" and axis.fixedWidth is not None:  # a colour bar's (pyqtgraph fixes 45 px):
        axis.setWidth(None)  # as wide as its numbers and its title in this font (measure_axes)
    if axis.label is not None:
        axis.label.setFont(font)
        axis.resizeEvent()  # the title placed again for its new height


def measure_axes(fig) -> None:
    """Every pyqtgraph axis of ``fig`` (but a rotated token axis, which sizes itself) measures its numbers now, as it
    would while painting (AxisItem.generateDrawSpecs → _updateMaxTextSize), and the figure is laid out for them:
    a colour bar's numbers in a figure's larger font would otherwise be measured by the saved file's own drawing,
    after its layout, and overlap the bar's label."""
    from ..export.figure_files import settle_layout

    image = QtGui.QImage(4, 4, QtGui.QImage.Format.Format_ARGB32)
    painter = QtGui.QPainter(image)
    try:
        for item in fig.scene().items():
            if isinstance(item, pg.AxisItem) and item.isVisible() and not getattr(item, "rotate", False):
                item.generateDrawSpecs(painter)
    finally:
        painter.end()
    settle_layout()


def set_figure_font(target, font_pt: float | None) -> None:
    """Every text of a figure at :class:`FigureFont` ``of(font_pt)``: ``target`` a HeadPlot (its token axes, their
    titles, the colour bar, the title's size, set before its ``set_head``) or the token axes of a panel. The token
    axes are also told they are a figure's (``fit_drawn``: a rotated axis as tall as the labels it draws)."""
    from .token_axis import LabelSizes

    fonts = FigureFont.of(font_pt)
    font = fonts.qfont()
    axes = target
    if hasattr(target, "left_axis"):  # a HeadPlot
        axes = (target.left_axis, target.bottom_axis)
        target.title_pt = fonts.title
        set_axis_font(target.colorbar.axis, font)
    for axis in axes:
        set_axis_font(axis, QtGui.QFont(font))
        axis.sizes = LabelSizes(font)
        axis.fit_drawn = True
        axis.setStyle(hideOverlappingLabels=False)  # room past the ends: the end labels are not cut in half
        axis._tokens_key = None  # measured again with the new font at the next set_tokens


def fill_lines(pieces: list[str], points: float, width: float, sep: str = " ") -> list[list[int]]:
    """``pieces`` filled greedily into lines, each a list of the pieces' indices: a piece joins the line before (with
    ``sep`` between) while the line's text stays within ``width`` logical pixels at ``points``, else starts the next
    (a piece wider than ``width`` alone keeps its line: the caller elides it)."""
    metrics = QtGui.QFontMetricsF(FigureFont(points).qfont())
    lines: list[list[int]] = []
    text = ""  # the last line's text
    for i, piece in enumerate(pieces):
        if lines and metrics.horizontalAdvance(text + sep + piece) <= width:
            lines[-1].append(i)
            text += sep + piece
        else:
            lines.append([i])
            text = piece
    return lines


def wrap_text(text: str, points: float, width: float) -> str:
    """``text`` as escaped HTML broken at spaces into lines (<br>) none wider than ``width`` logical pixels in the
    application's family at ``points``; a word wider than ``width`` alone is elided ("…"). A figure's title then
    fits the width asked for, whatever its length (the figure keeps that width)."""
    width = max(1.0, float(width))
    words = text.split()
    lines = [elided(" ".join(words[i] for i in line), points, width) for line in fill_lines(words, points, width)]
    return "<br>".join(html.escape(line, quote=False) for line in lines) or html.escape(text, quote=False)


def elided(text: str, points: float, width: float) -> str:
    """``text``, or, when it is wider than ``width`` logical pixels at ``points``, its start and "…" within it."""
    metrics = QtGui.QFontMetricsF(FigureFont(points).qfont())
    if metrics.horizontalAdvance(text) <= width:
        return text
    return metrics.elidedText(text, QtCore.Qt.TextElideMode.ElideRight, max(1.0, float(width)))
