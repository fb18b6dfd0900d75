"""The from-scratch panel: the arithmetic of the real model's attention, step by step, beside the
model's own numbers; the attention calculator; the √d_k lab; what attention costs.

All numbers come from ``analysis`` (manual_attention, parity, lab); this module only lays them out.
The recomputation of the selected layer and the parity of every head run on the worker thread.
"""
from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.errors import InputError
from analysis.lab import attention_cost, explain_weight, scaling_experiment
from analysis.manual_attention import attend

from .figures import HoverImage, colormap

MASKED_TEXT = "−∞"
PRESETS = {
    "Worked example: server / request / it": {
        "tokens_q": ["it"], "tokens_k": ["server", "request", "it"],
        "Q": [[1.0, 0.0, 0.5, 1.0]],
        "K": [[1.0, 0.0, 0.8, 1.0], [0.0, 1.0, 0.2, 0.0], [0.2, 0.2, 0.4, 0.1]],
        "V": [[0.9, 0.1, 0.7, 0.8], [0.1, 0.9, 0.2, 0.1], [0.3, 0.3, 0.5, 0.2]], "causal": False},
    "3 tokens, causal": {
        "tokens_q": ["the", "cat", "sat"], "tokens_k": ["the", "cat", "sat"],
        "Q": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
        "K": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
        "V": [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], "causal": True},
}


def fmt(x: float, digits: int = 4) -> str:
    if isinstance(x, float) and math.isinf(x) and x < 0:
        return MASKED_TEXT
    return f"{x:.{digits}f}"


class MatrixView(pg.GraphicsLayoutWidget):
    """A small labelled heatmap of one step; masked (−∞) cells drawn as hatched background."""

    def __init__(self, title: str, explain=None, parent=None, height: int = 190):
        super().__init__(parent)
        self.setBackground("w")
        self.setMinimumSize(170, height)
        self.setMaximumHeight(int(1.35 * height))
        self.explain = explain  # (row, col) -> str
        self.title = title
        self.plot = self.addPlot()
        self.plot.invertY(True)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.hideAxis("bottom")
        self.plot.getAxis("left").setStyle(showValues=False)
        self.plot.getViewBox().setBackgroundColor(QtGui.QBrush(QtGui.QColor("#d9d9d9"), QtCore.Qt.BrushStyle.BDiagPattern))
        self.image = HoverImage(on_hover=self._hover)
        self.plot.addItem(self.image)
        self.values: np.ndarray | None = None

    def set_matrix(self, values: np.ndarray, subtitle: str = "", cmap: str = "viridis", symmetric: bool = False) -> None:
        self.values = np.asarray(values)
        shown = np.where(np.isinf(self.values), np.nan, self.values).astype(np.float32)
        finite = shown[np.isfinite(shown)]
        if symmetric:
            top = float(np.abs(finite).max()) if finite.size else 1.0
            levels = (-top or -1.0, top or 1.0)
            cm = colormap("CET-D1") if "CET-D1" in pg.colormap.listMaps() else colormap(cmap)
        else:
            levels = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
            if levels[0] == levels[1]:
                levels = (levels[0] - 0.5, levels[1] + 0.5)
            cm = colormap(cmap)
        self.image.setImage(shown, levels=levels, autoLevels=False)
        self.image.setColorMap(cm)
        rows, cols = shown.shape
        self.plot.setTitle(f"<b>{html.escape(self.title)}</b><br><span style='font-size:8pt'>"
                           f"{rows} × {cols}{html.escape(subtitle)}</span>", size="9pt")
        self.plot.getViewBox().setDefaultPadding(0)
        self.plot.enableAutoRange()

    def _hover(self, cell) -> None:
        if cell is None or self.values is None:
            self.setToolTip("")
            return
        text = self.explain(*cell) if self.explain else f"[{cell[0]}, {cell[1]}] = {fmt(float(self.values[cell]))}"
        self.setToolTip(text)
        QtWidgets.QToolTip.showText(QtGui.QCursor.pos(), text, self)


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


def pass_badge(passed: bool, text: str) -> str:
    colour = "#137333" if passed else "#b3261e"
    word = "PASS" if passed else "FAIL"
    return f"<span style='color:white;background:{colour};padding:2px 6px;font-weight:bold'>&nbsp;{word}&nbsp;</span> {text}"


# ============================================================================= steps + model vs manual
class StepsPage(QtWidgets.QWidget):
    """The selected head's attention, step by step, from the layer's input."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rec = None
        self.result = None
        self.head = 0
        self.query_choice = QtWidgets.QComboBox()
        self.query_choice.currentIndexChanged.connect(self._query_changed)
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
        self.focus_table = QtWidgets.QTableWidget()
        self.focus_table.setMinimumHeight(160)
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
        layout.addWidget(self.focus_table, 1)

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
        self.query_choice.addItems([f"{i}: {t}" for i, t in enumerate(result.tokens)])
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


class ParityPage(QtWidgets.QWidget):
    """Model vs manual for the selected head, the whole layer through W_O, and every head's max error."""

    head_clicked = QtCore.Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model_view = MatrixView("model's attention weights")
        self.manual_view = MatrixView("manual (numpy) weights")
        self.diff_view = MatrixView("|manual − model|")
        self.head_verdict = QtWidgets.QLabel()
        self.layer_verdict = QtWidgets.QLabel()
        self.all_verdict = QtWidgets.QLabel()
        for label in (self.head_verdict, self.layer_verdict, self.all_verdict):
            label.setTextFormat(QtCore.Qt.TextFormat.RichText)
            label.setWordWrap(True)
        self.error_map = pg.GraphicsLayoutWidget()
        self.error_map.setBackground("w")
        self.error_map.setMinimumHeight(220)
        self.error_plot = self.error_map.addPlot(title="max |manual − model| of the weights, every head (log₁₀)")
        self.error_plot.invertY(True)
        self.error_plot.setMenuEnabled(False)
        self.error_plot.hideButtons()
        self.error_plot.setMouseEnabled(False, False)
        self.error_image = HoverImage(on_hover=self._hover_error, on_click=lambda c: self.head_clicked.emit(*c))
        self.error_plot.addItem(self.error_image)
        self.error_bar = pg.ColorBarItem(values=(-9, -4), colorMap=colormap("magma"), interactive=False, width=12)
        self.error_bar.setImageItem(self.error_image, insert_in=self.error_plot)
        row = QtWidgets.QHBoxLayout()
        for view in (self.model_view, self.manual_view, self.diff_view):
            row.addWidget(view)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.head_verdict)
        layout.addLayout(row, 2)
        layout.addWidget(self.layer_verdict)
        layout.addWidget(self.all_verdict)
        layout.addWidget(self.error_map, 2)
        self.report = None

    def set_data(self, result, rec, report, head: int) -> None:
        self.report = report
        layer = rec.layer
        model_w = np.asarray(result.attentions[layer, head], dtype=np.float64)
        manual_w = rec.weights[head].astype(np.float64)
        diff = np.abs(manual_w - model_w)
        tol = report.weight_tolerance
        self.model_view.set_matrix(model_w)
        self.manual_view.set_matrix(manual_w)
        self.diff_view.set_matrix(diff, f", max {diff.max():.2e}", cmap="magma")
        self.head_verdict.setText(pass_badge(
            diff.max() <= tol, f"layer {layer}, head {head}: max |manual − model| = {diff.max():.3e} "
            f"(tolerance {tol:g} for a {report.model_dtype} model; manual computed in {report.manual_dtype})"))
        out_diff = float(report.output_max_abs_diff[layer])
        out_tol = report.output_relative_tolerance * float(report.output_scale[layer])
        self.layer_verdict.setText(pass_badge(
            out_diff <= out_tol, f"whole layer {layer}: heads merged through W_O (c_proj) vs the model's attention "
            f"output: max |diff| = {out_diff:.3e} (tolerance {out_tol:.2e})"))
        worst = np.unravel_index(np.argmax(report.weights_max_abs_diff), report.weights_max_abs_diff.shape)
        self.all_verdict.setText(pass_badge(
            report.passed, f"all {report.weights_max_abs_diff.size} heads: worst max |diff| "
            f"{report.max_abs_diff_weights:.3e} (layer {worst[0]}, head {worst[1]}); "
            f"worst layer output {report.max_abs_diff_output:.3e}; computed in {report.seconds * 1000:.0f} ms"))
        logged = np.log10(np.maximum(report.weights_max_abs_diff, 1e-12)).astype(np.float32)
        self.error_image.setImage(logged, levels=(-9, math.log10(tol)), autoLevels=False)
        L, H = logged.shape
        self.error_plot.getAxis("left").setTicks([[(l + 0.5, f"L{l}") for l in range(L)], []])
        self.error_plot.getAxis("bottom").setTicks([[(h + 0.5, f"H{h}") for h in range(H)], []])
        self.error_plot.enableAutoRange()

    def _hover_error(self, cell) -> None:
        if cell is None or self.report is None:
            return
        v = self.report.weights_max_abs_diff[cell]
        self.error_map.setToolTip(f"layer {cell[0]}, head {cell[1]}: max |diff| {v:.3e}")


# ============================================================================= calculator
class CalculatorPage(QtWidgets.QWidget):
    """Editable Q, K, V; every number of softmax(QKᵀ/√d_k)·V updates as you type."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.preset_choice = QtWidgets.QComboBox()
        self.preset_choice.addItems(list(PRESETS))
        self.preset_choice.currentTextChanged.connect(self.load_preset)
        self.causal_box = QtWidgets.QCheckBox("causal")
        self.causal_box.toggled.connect(lambda _: self.recompute())
        self.tables = {name: QtWidgets.QTableWidget() for name in ("Q", "K", "V")}
        for table in self.tables.values():
            table.itemChanged.connect(lambda _item: self.recompute())
            table.setMinimumHeight(120)
        buttons = QtWidgets.QHBoxLayout()
        for text, slot in (("+ query", lambda: self._add_row("Q")), ("− query", lambda: self._remove_row("Q")),
                           ("+ key/value", lambda: self._add_row("K", "V")),
                           ("− key/value", lambda: self._remove_row("K", "V")),
                           ("+ dimension", self._add_dim), ("− dimension", self._remove_dim)):
            button = QtWidgets.QPushButton(text)
            button.clicked.connect(slot)
            buttons.addWidget(button)
        buttons.addStretch(1)
        self.scores_table, self.scaled_table = QtWidgets.QTableWidget(), QtWidgets.QTableWidget()
        self.weights_table, self.output_table = QtWidgets.QTableWidget(), QtWidgets.QTableWidget()
        self.message = QtWidgets.QLabel()
        self.message.setWordWrap(True)
        self.message.setTextFormat(QtCore.Qt.TextFormat.RichText)
        top = QtWidgets.QHBoxLayout()
        top.addWidget(QtWidgets.QLabel("Preset"))
        top.addWidget(self.preset_choice, 1)
        top.addWidget(self.causal_box)
        inputs = QtWidgets.QGridLayout()
        for col, name in enumerate(("Q", "K", "V")):
            inputs.addWidget(QtWidgets.QLabel(f"<b>{name}</b>"), 0, col)
            inputs.addWidget(self.tables[name], 1, col)
        outputs = QtWidgets.QGridLayout()
        for col, (label, table) in enumerate((("scores QKᵀ", self.scores_table), ("scaled ÷ √d_k", self.scaled_table),
                                             ("weights (softmax) | row sum", self.weights_table),
                                             ("output = weights·V", self.output_table))):
            outputs.addWidget(QtWidgets.QLabel(f"<b>{label}</b>"), 0, col)
            outputs.addWidget(table, 1, col)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(inputs)
        layout.addLayout(buttons)
        layout.addLayout(outputs)
        layout.addWidget(self.message)
        self.result = None
        self.load_preset(self.preset_choice.currentText())

    # ---- editing
    def load_preset(self, name: str) -> None:
        preset = PRESETS[name]
        self._fill("Q", preset["Q"], preset["tokens_q"])
        self._fill("K", preset["K"], preset["tokens_k"])
        self._fill("V", preset["V"], preset["tokens_k"])
        self.causal_box.blockSignals(True)
        self.causal_box.setChecked(preset["causal"])
        self.causal_box.blockSignals(False)
        self.recompute()

    def _fill(self, name: str, values, labels) -> None:
        table = self.tables[name]
        table.blockSignals(True)
        values = np.atleast_2d(values)
        table.setRowCount(values.shape[0])
        table.setColumnCount(values.shape[1])
        table.setVerticalHeaderLabels(list(labels))
        table.setHorizontalHeaderLabels([f"d{j}" for j in range(values.shape[1])])
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                table.setItem(i, j, QtWidgets.QTableWidgetItem(f"{values[i, j]:g}"))
        table.resizeColumnsToContents()
        table.blockSignals(False)

    def _values(self, name: str) -> np.ndarray:
        table = self.tables[name]
        rows = []
        for i in range(table.rowCount()):
            row = []
            for j in range(table.columnCount()):
                item = table.item(i, j)
                text = item.text().strip() if item else ""
                try:
                    row.append(float(text))
                except ValueError:
                    raise InputError(f"{name}[{i}, {j}] is not a number: '{text}'") from None
            rows.append(row)
        return np.array(rows, dtype=float)

    def _labels(self, name: str) -> list[str]:
        table = self.tables[name]
        return [table.verticalHeaderItem(i).text() if table.verticalHeaderItem(i) else str(i)
                for i in range(table.rowCount())]

    def _add_row(self, *names) -> None:
        for name in names:
            values = self._values(name)
            labels = self._labels(name) + [f"t{len(values)}"]
            self._fill(name, np.vstack([values, np.zeros((1, values.shape[1]))]), labels)
        self.recompute()

    def _remove_row(self, *names) -> None:
        if any(self.tables[n].rowCount() <= 1 for n in names):
            return
        for name in names:
            self._fill(name, self._values(name)[:-1], self._labels(name)[:-1])
        self.recompute()

    def _add_dim(self) -> None:
        for name in ("Q", "K", "V"):
            values = self._values(name)
            self._fill(name, np.hstack([values, np.zeros((values.shape[0], 1))]), self._labels(name))
        self.recompute()

    def _remove_dim(self) -> None:
        if self.tables["Q"].columnCount() <= 1:
            return
        for name in ("Q", "K", "V"):
            self._fill(name, self._values(name)[:, :-1], self._labels(name))
        self.recompute()

    # ---- computing
    def recompute(self) -> None:
        try:
            q, k, v = self._values("Q"), self._values("K"), self._values("V")
            causal = self.causal_box.isChecked()
            if causal and q.shape[0] != k.shape[0]:
                raise InputError("A causal mask needs as many queries as keys (query i sees keys 0…i).")
            r = attend(q, k, v, causal=causal)
        except InputError as exc:
            self.message.setText(f"<span style='color:#b3261e'>{html.escape(str(exc))}</span>")
            return
        self.result = r
        qs, ks = self._labels("Q"), self._labels("K")
        matrix_table(r.scores, qs, ks, table=self.scores_table)
        matrix_table(r.masked if causal else r.scaled, qs, ks, table=self.scaled_table)
        sums = r.weights.sum(axis=1, keepdims=True)
        matrix_table(np.hstack([r.weights, sums]), qs, ks + ["Σ"], table=self.weights_table)
        matrix_table(r.output, qs, [f"d{j}" for j in range(r.output.shape[1])], table=self.output_table)
        inside = bool(((r.output >= v.min(axis=0) - 1e-12) & (r.output <= v.max(axis=0) + 1e-12)).all())
        self.message.setText(
            f"d_k = {r.d_k}, √d_k = {r.sqrt_d_k:.4f}. Every row of weights sums to 1 "
            f"({', '.join(f'{s:.4f}' for s in sums.ravel())}). "
            + ("Each output is a convex mixture of the value rows: it lies inside their range in every dimension. "
               if inside else "Some output lies outside the value rows' range?! ")
            + ("Masked keys (−∞) get weight exactly 0." if causal else ""))


# ============================================================================= √d_k lab
class ScalingPage(QtWidgets.QWidget):
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
        self.plot.clear()
        span = max(4.0, float(np.abs(e.unscaled).max()))
        bins = np.linspace(-span, span, 81)
        for values, colour, name in ((e.unscaled, "#d62728", "unscaled q·k"), (e.scaled, "#1f77b4", "scaled q·k/√d_k")):
            counts, edges = np.histogram(values, bins=bins)
            self.plot.plot(edges, counts, stepMode="center", pen=pg.mkPen(colour, width=2), name=name)
        self.numbers.setText(
            f"<b>d_k = {e.d_k}</b> (√d_k = {math.sqrt(e.d_k):.3f}), 10,000 pairs, seed {e.seed}: "
            f"std unscaled <b>{e.std_unscaled:.3f}</b>, std scaled <b>{e.std_scaled:.3f}</b>.<br>"
            f"Softmax over a row of {e.row_length} scores: entropy unscaled <b>{e.entropy_unscaled:.3f}</b> nats "
            f"(largest weight {e.max_weight_unscaled:.2f}), scaled <b>{e.entropy_scaled:.3f}</b> nats "
            f"(largest weight {e.max_weight_scaled:.2f}); uniform would be {e.max_entropy:.3f}.")


# ============================================================================= cost
class CostPage(QtWidgets.QWidget):
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


# ============================================================================= the panel
class ScratchPanel(QtWidgets.QTabWidget):
    """Tabs: Steps, Model vs manual, Calculator, Why √d_k, Cost."""

    head_clicked = QtCore.Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.dtype_choice = QtWidgets.QComboBox()
        self.dtype_choice.addItems(["float32", "float64"])
        self.dtype_choice.setToolTip("Precision of the numpy recomputation")
        self.status = QtWidgets.QLabel("Run a text to see the arithmetic of the selected head.")
        corner = QtWidgets.QWidget()
        corner_layout = QtWidgets.QHBoxLayout(corner)
        corner_layout.setContentsMargins(0, 0, 4, 0)
        corner_layout.addWidget(self.status)
        corner_layout.addWidget(QtWidgets.QLabel("numpy in"))
        corner_layout.addWidget(self.dtype_choice)
        self.setCornerWidget(corner)
        self.steps = StepsPage()
        self.parity = ParityPage()
        self.parity.head_clicked.connect(self.head_clicked)
        self.calculator = CalculatorPage()
        self.scaling = ScalingPage()
        self.cost = CostPage()
        steps_scroll = QtWidgets.QScrollArea()
        steps_scroll.setWidgetResizable(True)
        steps_scroll.setWidget(self.steps)
        self.addTab(steps_scroll, "Steps")
        self.addTab(self.parity, "Model vs manual")
        self.addTab(self.calculator, "Calculator")
        self.addTab(self.scaling, "Why √dₖ")
        self.addTab(self.cost, "Cost")

    def show_data(self, data) -> None:
        """``data`` is a ScratchData from the worker."""
        self.steps.set_data(data.result, data.recomputation, data.head)
        self.parity.set_data(data.result, data.recomputation, data.report, data.head)
        info = data.result
        self.cost.set_data(info.n_tokens, data.recomputation.x.shape[1], info.n_head, info.n_layer, data.params_counted)
        self.status.setText(f"layer {data.recomputation.layer}, head {data.head}")
