"""A small labelled heatmap of one step of the recomputation, and a read-only table of numbers."""
from __future__ import annotations

import html
import math

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from .plot_items import HoverImage, ZoomableFigure, colormap, data_levels, limit_to_data

MASKED_TEXT = "−∞"


def fmt(x: float, digits: int = 4) -> str:
    """``x`` with ``digits`` decimals; −∞ (a masked score) as ``MASKED_TEXT``."""
    if isinstance(x, float) and math.isinf(x) and x < 0:
        return MASKED_TEXT
    return f"{x:.{digits}f}"


class MatrixView(ZoomableFigure):
    """A small labelled heatmap of one step; masked (−∞) cells drawn as hatched background.

    The wheel scrolls the page around it (Ctrl+wheel zooms); zoom stays on the matrix."""

    def __init__(self, title: str, explain=None, parent=None, height: int = 190):
        super().__init__(parent)
        self.setMinimumSize(170, height)
        self.setMaximumHeight(int(1.35 * height))
        self.explain = explain  # (row, col) -> str
        self.title = title
        self.cmap = "viridis"
        self.plot.invertY(True)
        self.plot.hideAxis("bottom")
        self.plot.getAxis("left").setStyle(showValues=False)
        self.plot.getViewBox().setBackgroundColor(QtGui.QBrush(QtGui.QColor("#d9d9d9"), QtCore.Qt.BrushStyle.BDiagPattern))
        self.image = HoverImage(text_for=self._text_for)
        self.plot.addItem(self.image)
        self.values: np.ndarray | None = None
        self.subtitle = ""

    def set_matrix(self, values: np.ndarray, subtitle: str = "", cmap: str | None = None) -> None:
        self.values = np.asarray(values)
        self.subtitle = subtitle
        self.cmap = cmap or self.cmap
        shown = np.where(np.isinf(self.values), np.nan, self.values).astype(np.float32)
        new_shape = self.image.image is None or self.image.image.shape != shown.shape
        self.image.setImage(shown, levels=data_levels(shown), autoLevels=False)
        self.image.setColorMap(colormap(self.cmap))
        rows, cols = shown.shape
        self.plot.setTitle(f"<b>{html.escape(self.title)}</b><br><span style='font-size:8pt'>"
                           f"{rows} × {cols}{html.escape(subtitle)}</span>", size="9pt")
        if new_shape:
            limit_to_data(self.plot, cols, rows)
        self.image.hover_cell(self.image.cell_now if new_shape is False else None)

    def set_colormap(self, cmap: str) -> None:
        self.cmap = cmap
        if self.image.image is not None:
            self.image.setColorMap(colormap(cmap))

    def wheelEvent(self, ev):  # noqa: N802
        if ev.modifiers() & QtCore.Qt.KeyboardModifier.ControlModifier:
            super().wheelEvent(ev)
        else:
            ev.ignore()  # the scroll area around the page scrolls

    def _text_for(self, cell) -> str:
        if self.values is None:
            return ""
        return self.explain(*cell) if self.explain else f"[{cell[0]}, {cell[1]}] = {fmt(float(self.values[cell]))}"


def matrix_table(values: np.ndarray, row_labels, col_labels, digits: int = 4,
                 table: QtWidgets.QTableWidget | None = None) -> QtWidgets.QTableWidget:
    """``values`` (rows × columns) as read-only right-aligned numbers in ``table`` (a new one when None)."""
    table = table or QtWidgets.QTableWidget()
    values = np.atleast_2d(values)
    table.setRowCount(values.shape[0])
    table.setColumnCount(values.shape[1])
    table.setVerticalHeaderLabels([str(x) for x in row_labels])
    table.setHorizontalHeaderLabels([str(x) for x in col_labels])
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            item = QtWidgets.QTableWidgetItem(fmt(float(values[i, j]), digits))
            item.setFlags(item.flags() & ~QtCore.Qt.ItemFlag.ItemIsEditable)
            item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
            table.setItem(i, j, item)
    table.resizeColumnsToContents()
    return table
