"""The logit lens as a table (a Qt item model: only the cells in view are asked for, so a long text costs what a
screen costs): a row per layer, a column per position, and a last row of each position's surprisal.

Two readings of the same lens (``analysis.measures.logit_lens.LogitLens``), switched by :attr:`LensModel.reading`:

- ``top``: the lens's top token at (layer, position) and its probability (cell "␣Mary 0.41"), shaded by p;
- ``rank``: the rank of the final prediction (the last row's top token at that position) in that layer's lens,
  0 = on top (shaded darker the nearer the top).

Tokens are shown as the app shows them (␣ a leading space, ↵ a newline) and as plain text: a token "<b>" is the
four characters, never markup.
"""
from __future__ import annotations

import math

import numpy as np
from PySide6 import QtCore, QtGui

READINGS = {"top": "top token · p", "rank": "rank of the final prediction (0 = top)"}
SURPRISAL_ROW = "surprisal (nats)"


class LensModel(QtCore.QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.shown = None  # LensShown
        self.reading = "top"

    def set_shown(self, shown) -> None:
        self.beginResetModel()
        self.shown = shown
        self.endResetModel()

    def set_reading(self, reading: str) -> None:
        self.beginResetModel()
        self.reading = reading
        self.endResetModel()

    def rowCount(self, parent=QtCore.QModelIndex()):  # noqa: N802
        return 0 if self.shown is None or parent.isValid() else self.shown.lens.top.shape[0] + 1

    def columnCount(self, parent=QtCore.QModelIndex()):  # noqa: N802
        return 0 if self.shown is None or parent.isValid() else self.shown.lens.top.shape[1]

    def headerData(self, section, orientation, role=QtCore.Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if self.shown is None:
            return None
        L = self.shown.lens.top.shape[0]
        horizontal = orientation == QtCore.Qt.Orientation.Horizontal
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            if horizontal:
                return f"{section} {self.shown.tokens[section]}"
            if section == L:
                return SURPRISAL_ROW
            return f"L{section}" + (" (output)" if section == L - 1 else "")
        if role == QtCore.Qt.ItemDataRole.ToolTipRole:
            if horizontal:
                return f"position {section}: the text's token {self.shown.tokens[section]}"
            if section == L:
                return "−ln p(the actual next token) from the model's own logits: the loss at each position"
            return f"the residual stream after block {section} read through the final norm and the unembedding"
        return None

    def cell(self, layer: int, position: int) -> str:
        """The cell's text as shown."""
        lens = self.shown.lens
        if layer == lens.top.shape[0]:
            v = float(lens.surprisal[position])
            return "—" if math.isnan(v) else f"{v:.2f}"
        if self.reading == "rank":
            return str(int(lens.final_rank[layer, position]))
        return f"{self.shown.top[layer][position]}  {lens.prob[layer, position]:.2f}"

    def tooltip(self, layer: int, position: int) -> str:
        s, lens = self.shown, self.shown.lens
        if layer == lens.top.shape[0]:
            if position + 1 >= len(s.tokens):
                return "the last position has no next token in the text"
            return (f"−ln p({s.tokens[position + 1]} | tokens 0…{position}) = {lens.surprisal[position]:.4f} nats")
        return (f"L{layer}, position {position} ({s.tokens[position]}): the lens reads {s.top[layer][position]} "
                f"(p = {lens.prob[layer, position]:.4f}); the final prediction {s.top[-1][position]} is at rank "
                f"{int(lens.final_rank[layer, position])} here (0 = top)")

    def data(self, index, role=QtCore.Qt.ItemDataRole.DisplayRole):
        if self.shown is None or not index.isValid():
            return None
        layer, position = index.row(), index.column()
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            return self.cell(layer, position)
        if role == QtCore.Qt.ItemDataRole.ToolTipRole:
            return self.tooltip(layer, position)
        if role == QtCore.Qt.ItemDataRole.BackgroundRole:
            return QtGui.QBrush(self._shade(layer, position))
        if role == QtCore.Qt.ItemDataRole.ForegroundRole:
            return QtGui.QBrush(QtGui.QColor("#111111"))  # on the light shades, in either theme
        if role == QtCore.Qt.ItemDataRole.TextAlignmentRole:
            return int(QtCore.Qt.AlignmentFlag.AlignCenter)
        return None

    def _shade(self, layer: int, position: int) -> QtGui.QColor:
        """Light to mid: white at 0, a blue at the most (p 1; rank 0; the largest surprisal, in orange)."""
        lens = self.shown.lens
        if layer == lens.top.shape[0]:
            top = np.nanmax(lens.surprisal) if np.isfinite(lens.surprisal).any() else 1.0
            v = float(lens.surprisal[position])
            t = 0.0 if math.isnan(v) or top <= 0 else min(1.0, v / top)
            return _mix(QtGui.QColor("#f4a259"), t)
        if self.reading == "rank":
            rank = int(lens.final_rank[layer, position])
            t = 1.0 / (1.0 + math.log10(1 + rank) * 1.5)  # 0 → 1, 10 → 0.4, 1000 → 0.18
        else:
            t = float(lens.prob[layer, position])
        return _mix(QtGui.QColor("#6fa8dc"), t)


def _mix(color: QtGui.QColor, t: float) -> QtGui.QColor:
    t = max(0.0, min(1.0, t))
    return QtGui.QColor(round(255 + (color.red() - 255) * t), round(255 + (color.green() - 255) * t),
                        round(255 + (color.blue() - 255) * t))
