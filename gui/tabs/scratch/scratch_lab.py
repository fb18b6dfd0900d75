"""Two small lessons of the From-scratch tab: why attention divides by √d_k, and what attention costs."""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from analysis.display import format_bytes
from analysis.lessons.lab import attention_cost, scaling_experiment


# ============================================================================= √d_k lab
class ScalingPage(QtWidgets.QWidget):
    """q·k with and without ÷ √d_k: histograms and the softmax entropy, for a d_k and a seed."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.dk_spin = QtWidgets.QSpinBox()
        self.dk_spin.setRange(1, 4096)
        self.dk_spin.setValue(64)
        self.seed_spin = QtWidgets.QSpinBox()
        self.seed_spin.setRange(0, 10**6)
        self.dk_spin.valueChanged.connect(lambda _: self.recompute())
        self.seed_spin.valueChanged.connect(lambda _: self.recompute())
        self.plot = pg.PlotWidget(background="w")
        self.plot.addLegend()
        self.plot.setLabel("bottom", "q·k")
        self.plot.setLabel("left", "count")
        self.numbers = QtWidgets.QLabel()
        self.numbers.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.numbers.setWordWrap(True)
        top = QtWidgets.QHBoxLayout()
        top.addWidget(QtWidgets.QLabel("d_k"))
        top.addWidget(self.dk_spin)
        top.addWidget(QtWidgets.QLabel("seed"))
        top.addWidget(self.seed_spin)
        top.addStretch(1)
        layout = QtWidgets.QVBoxLayout(self)
        lesson = QtWidgets.QLabel(
            "q and k are sampled from a standard normal; q·k then has variance d_k. Dividing by √d_k brings it back "
            "to 1 and keeps the softmax out of its saturated, nearly one-hot regime.")
        lesson.setWordWrap(True)  # a long line would set the whole panel's minimum width
        layout.addWidget(lesson)
        layout.addLayout(top)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.numbers)
        self.experiment = None
        self.recompute()

    def recompute(self) -> None:
        e = scaling_experiment(self.dk_spin.value(), seed=self.seed_spin.value())
        self.experiment = e
        self.draw(self.plot)
        self.numbers.setText(
            f"<b>d_k = {e.d_k}</b> (√d_k = {math.sqrt(e.d_k):.3f}), 10,000 pairs, seed {e.seed}: "
            f"std unscaled <b>{e.std_unscaled:.3f}</b>, std scaled <b>{e.std_scaled:.3f}</b>.<br>"
            f"Softmax over a row of {e.row_length} scores: entropy unscaled <b>{e.entropy_unscaled:.3f}</b> nats "
            f"(largest weight {e.max_weight_unscaled:.2f}), scaled <b>{e.entropy_scaled:.3f}</b> nats "
            f"(largest weight {e.max_weight_scaled:.2f}); uniform would be {e.max_entropy:.3f}.")

    def draw(self, plot: pg.PlotWidget) -> None:
        """The two histograms of the current experiment, into ``plot`` (the page's, or an export figure)."""
        e = self.experiment
        plot.clear()
        span = max(4.0, float(np.abs(e.unscaled).max()))
        bins = np.linspace(-span, span, 81)
        for values, colour, name in ((e.unscaled, "#d62728", "unscaled q·k"), (e.scaled, "#1f77b4", "scaled q·k/√d_k")):
            counts, edges = np.histogram(values, bins=bins)
            plot.plot(edges, counts, stepMode="center", pen=pg.mkPen(colour, width=2), name=name)
        plot.setTitle(f"q·k for d_k = {e.d_k}, with and without ÷ √d_k")


# ============================================================================= cost
class CostPage(QtWidgets.QWidget):
    """Memory and FLOPs of attention at n tokens and at 2n, from the model's shape and weights."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.table = QtWidgets.QTableWidget()
        self.table.verticalHeader().setVisible(False)
        self.note = QtWidgets.QLabel()
        self.note.setWordWrap(True)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.note)

    def set_data(self, n_tokens: int, d_model: int, n_head: int, n_layer: int, params_counted: int,
                 n_kv_head: int | None = None, d_head: int | None = None, causal: bool = True) -> None:
        """The table for n and 2n tokens; ``n_kv_head`` < ``n_head`` with grouped-query attention."""
        kw = dict(n_kv_head=n_kv_head, d_head=d_head)
        now = attention_cost(n_tokens, d_model, n_head, n_layer, params_counted, **kw)
        doubled = attention_cost(2 * n_tokens, d_model, n_head, n_layer, params_counted, **kw)
        self.cost = now
        rows_now, rows_doubled = now.as_rows(), doubled.as_rows()
        self.table.setRowCount(len(rows_now))
        self.table.setColumnCount(3)
        self.table.setHorizontalHeaderLabels(["", f"n = {n_tokens}", f"n = {2 * n_tokens} (doubled)"])
        for i, ((label, a), (_, b)) in enumerate(zip(rows_now, rows_doubled)):
            for j, text in enumerate((label, a, b)):
                item = QtWidgets.QTableWidgetItem(text)
                item.setFlags(item.flags() & ~QtCore.Qt.ItemFlag.ItemIsEditable)
                self.table.setItem(i, j, item)
        self.table.resizeColumnsToContents()
        h, g, dk = now.n_head, now.n_kv_head, now.d_head
        biases = params_counted - now.params_per_layer_formula
        parts = [f"The weights hold {params_counted:,} parameters per attention layer: "
                 f"{now.params_per_layer_formula:,} in the four projections"
                 + (f" plus {biases:,} in biases." if biases > 0 else " (no biases).")]
        if now.grouped:
            parts.append(
                f"Grouped-query attention: {h} query heads share {g} key/value heads ({h // g} each), so W_K and W_V "
                f"are d × g·dk = {d_model} × {g * dk} instead of {d_model} × {h * dk}: "
                f"{now.params_per_layer_formula:,} instead of {now.params_per_layer_formula_without_gqa:,} "
                f"parameters, and the KV cache holds {g} keys and values per token and layer instead of {h} "
                f"({format_bytes(now.kv_cache_bytes_total)} instead of "
                f"{format_bytes(now.kv_cache_bytes_total_without_gqa)} at n = {n_tokens}).")
        else:
            parts.append("The heads share the d-wide budget, so the parameters do not grow with the number of heads.")
        if causal:
            parts.append("A KV cache is what a decoder keeps while it generates: each new token's keys and values, "
                         "so earlier tokens are not projected again; it grows linearly with n.")
        else:
            parts.append("An encoder reads the whole text at once and keeps no KV cache; the row shows what one "
                         "would hold.")
        parts.append("Doubling n multiplies the score memory and the QKᵀ and weights·V FLOPs by 4; the projections "
                     "and the KV cache only by 2.")
        self.note.setText(" ".join(parts))
