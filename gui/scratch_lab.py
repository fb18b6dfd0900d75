"""Two small lessons of the From-scratch tab: why attention divides by √d_k, and what attention costs."""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from analysis.lab import attention_cost, scaling_experiment


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
        layout.addWidget(QtWidgets.QLabel(
            "q and k are sampled from a standard normal; q·k then has variance d_k. Dividing by √d_k brings it back "
            "to 1 and keeps the softmax out of its saturated, nearly one-hot regime."))
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

    def set_data(self, n_tokens: int, d_model: int, n_head: int, n_layer: int, params_counted: int) -> None:
        now = attention_cost(n_tokens, d_model, n_head, n_layer, params_counted)
        doubled = attention_cost(2 * n_tokens, d_model, n_head, n_layer, params_counted)
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
        diff = params_counted - now.params_per_layer_formula
        self.note.setText(
            f"The weights hold {params_counted:,} parameters per attention layer: 4·d² = "
            f"{now.params_per_layer_formula:,} plus {diff:,} biases (4·d = {4 * d_model:,}) — the heads share the d-wide "
            f"budget, so it does not grow with the number of heads. Doubling n multiplies the score memory and the "
            f"QKᵀ and weights·V FLOPs by 4; the projections only by 2.")
