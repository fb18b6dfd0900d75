"""From scratch → Steps: the selected head's attention recomputed in numpy, one small heatmap per
step (ln_1, Q, K, V, QKᵀ, ÷√d_k, mask, softmax, weights·V), each cell explained on hover, and the
walkthrough of one query row. The page scrolls with the wheel; Ctrl+wheel zooms a plot.
"""
from __future__ import annotations

import html
import math

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import elide
from analysis.lab import explain_weight

from .plot_items import HoverImage, ZoomableFigure, colormap, data_levels, limit_to_data

MASKED_TEXT = "−∞"


def fmt(x: float, digits: int = 4) -> str:
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



class StepsPage(QtWidgets.QWidget):
    """The selected head's attention, step by step, from the layer's input."""

    query_chosen = QtCore.Signal(int)  # the user picked a query row to follow

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rec = None
        self.result = None
        self.head = 0
        self.query_choice = QtWidgets.QComboBox()
        self.query_choice.currentIndexChanged.connect(self._query_changed)
        self.query_choice.activated.connect(self.query_chosen)  # only a user's choice, not focus_query's
        self.info = QtWidgets.QLabel()
        self.info.setWordWrap(True)
        self.views = {
            "x_ln": MatrixView("1. input after ln_1", self._explain_plain("x_ln")),
            "q": MatrixView("2. Q (this head)", self._explain_plain("q")),
            "k": MatrixView("2. K (this head)", self._explain_plain("k")),
            "v": MatrixView("2. V (this head)", self._explain_plain("v")),
            "scores": MatrixView("3. scores QKᵀ", self._explain_score),
            "scaled": MatrixView("4. scaled QKᵀ/√d_k", self._explain_scaled),
            "masked": MatrixView("5. causal mask", self._explain_masked),
            "weights": MatrixView("6. softmax weights", self._explain_weight),
            "out": MatrixView("7. output = weights·V", self._explain_output),
        }
        grid = QtWidgets.QGridLayout()
        for index, view in enumerate(self.views.values()):
            grid.addWidget(view, index // 5, index % 5)
        self.focus_table = QtWidgets.QTableWidget()  # as tall as its rows: the page scrolls, not the table
        self.focus_table.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.focus_table.setSizeAdjustPolicy(QtWidgets.QAbstractScrollArea.SizeAdjustPolicy.AdjustToContents)
        self.focus_label = QtWidgets.QLabel()
        self.focus_label.setWordWrap(True)
        top = QtWidgets.QHBoxLayout()
        top.addWidget(self.info, 1)
        top.addWidget(QtWidgets.QLabel("Follow query token:"))
        top.addWidget(self.query_choice)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(grid)
        layout.addWidget(self.focus_label)
        layout.addWidget(self.focus_table)
        layout.addStretch(1)

    def set_data(self, result, rec, head: int) -> None:
        self.result, self.rec, self.head = result, rec, head
        h = head
        n = result.n_tokens
        d_k = rec.q.shape[-1]
        self.info.setText(
            f"Layer {rec.layer}, head {head}: n = {n} tokens, d_model = {rec.x.shape[1]}, d_k = {d_k}, "
            f"√d_k = {math.sqrt(d_k):.4f} (scale {rec.scale:.6g}). Hover a cell to see how it was made.")
        self.views["x_ln"].set_matrix(rec.x_ln, " (n × d_model)")
        self.views["q"].set_matrix(rec.q[h], " (n × d_k)")
        self.views["k"].set_matrix(rec.k[h], " (n × d_k)")
        self.views["v"].set_matrix(rec.v[h], " (n × d_k)")
        self.views["scores"].set_matrix(rec.scores[h], " (n × n)")
        self.views["scaled"].set_matrix(rec.scaled[h], f" (÷ √d_k = {math.sqrt(d_k):.3f})")
        self.views["masked"].set_matrix(rec.masked[h], f" (future keys → {MASKED_TEXT})")
        self.views["weights"].set_matrix(rec.weights[h], " (rows sum to 1)")
        self.views["out"].set_matrix(rec.head_outputs[h], " (n × d_k)")
        current = self.query_choice.currentIndex()
        self.query_choice.blockSignals(True)
        self.query_choice.clear()
        self.query_choice.addItems([f"{i}: {elide(t)}" for i, t in enumerate(result.tokens)])
        self.query_choice.setCurrentIndex(current if 0 <= current < n else n - 1)
        self.query_choice.blockSignals(False)
        self._query_changed(self.query_choice.currentIndex())

    def focus_query(self, i: int) -> None:
        self.query_choice.setCurrentIndex(i)

    def _query_changed(self, i: int) -> None:
        if self.rec is None or i < 0:
            return
        rec, h, tokens = self.rec, self.head, self.result.tokens
        n = len(tokens)
        rows = []
        for j in range(n):
            e = explain_weight(rec, h, i, j)
            rows.append([e["score"], e["scaled"], -math.inf if e["masked"] else e["scaled"],
                         0.0 if e["masked"] else e["exp"], e["weight"]])
        values = np.array(rows)
        matrix_table(values, [f"{j}: {t}" for j, t in enumerate(tokens)],
                     ["q·k", "÷ √d_k", "masked", "exp(s − max)", "weight"], table=self.focus_table)
        table = self.focus_table
        table.setFixedHeight(table.horizontalHeader().height() + table.verticalHeader().length()
                             + 2 * table.frameWidth() + table.horizontalScrollBar().sizeHint().height())
        e = explain_weight(rec, h, i, 0)
        out = rec.head_outputs[h, i]
        shown = ", ".join(f"{x:.3f}" for x in out[:6]) + (", …" if out.size > 6 else "")
        top = int(np.argmax(rec.weights[h, i]))
        self.focus_label.setText(
            f"<b>Query {i} '{html.escape(tokens[i])}'</b>: row max {e['row_max']:.4f}, Σ exp = {e['row_sum']:.4f}; "
            f"weights sum to {rec.weights[h, i].sum():.6f}; the largest share ({rec.weights[h, i, top]:.3f}) goes to "
            f"key {top} '{html.escape(tokens[top])}'. Output = Σ_j w_j·v_j = [{shown}]")

    # ---- hover explanations
    def _explain_plain(self, name):
        def explain(i, j):
            if self.rec is None:
                return ""
            array = getattr(self.rec, name)
            value = array[i, j] if array.ndim == 2 else array[self.head, i, j]
            token = self.result.tokens[i]
            return f"{name}[{i} '{token}', {j}] = {value:.4f}"
        return explain

    def _explain_score(self, i, j):
        rec, h = self.rec, self.head
        q, k = rec.q[h, i], rec.k[h, j]
        terms = " + ".join(f"{a:.2f}×{b:.2f}" for a, b in zip(q[:3], k[:3]))
        return (f"q[{i}]·k[{j}] = {terms}{' + …' if q.size > 3 else ''} = {rec.scores[h, i, j]:.4f}"
                f"\nquery '{self.result.tokens[i]}' · key '{self.result.tokens[j]}'")

    def _explain_scaled(self, i, j):
        rec, h = self.rec, self.head
        return f"{rec.scores[h, i, j]:.4f} × {rec.scale:.6g} (= ÷ √d_k) = {rec.scaled[h, i, j]:.4f}"

    def _explain_masked(self, i, j):
        rec, h = self.rec, self.head
        if j > i:
            return f"key {j} comes after query {i}: set to {MASKED_TEXT} before the softmax, so its weight is exactly 0"
        return f"key {j} ≤ query {i}: kept, {rec.masked[h, i, j]:.4f}"

    def _explain_weight(self, i, j):
        e = explain_weight(self.rec, self.head, i, j)
        if e["masked"]:
            return f"masked ({MASKED_TEXT}): exp(−∞) = 0, weight 0"
        return (f"weight = exp(s − row max) / Σ = exp({e['scaled']:.4f} − {e['row_max']:.4f}) / {e['row_sum']:.4f}"
                f" = {e['exp']:.4f} / {e['row_sum']:.4f} = {e['weight']:.4f}")

    def _explain_output(self, i, c):
        rec, h = self.rec, self.head
        w, v = rec.weights[h, i], rec.v[h, :, c]
        top = np.argsort(-w)[:3]
        terms = " + ".join(f"{w[j]:.3f}×{v[j]:.3f}" for j in sorted(top))
        return f"out[{i}, {c}] = Σ_j w[{i}, j]·v[j, {c}] ≈ {terms} + … = {rec.head_outputs[h, i, c]:.4f}"
