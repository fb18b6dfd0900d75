"""The attention calculator: editable Q, K, V and every number of softmax(QKᵀ/√d_k)·V, live.

The numbers are ``analysis.lessons.calculator.attend``'s, the command line's ``calc``; a matrix pasted
as JSON is read by the same ``parse_matrix``. Invalid input clears the results and says why."""
from __future__ import annotations

import html

import numpy as np
from PySide6 import QtCore, QtWidgets

from analysis.errors import InputError
from analysis.lessons.calculator import attend, parse_matrix

from ...plots.matrix_view import matrix_table

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


INPUT_COLUMN_PX = 46  # an input column is never narrower: "abc" or "-0.125" stays readable while typed


class CalculatorPage(QtWidgets.QWidget):
    """Editable Q, K, V; every number of softmax(QKᵀ/√d_k)·V updates as you type."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.preset_choice = QtWidgets.QComboBox()
        self.preset_choice.addItems(list(PRESETS))
        self.preset_choice.currentTextChanged.connect(self.load_preset)
        self.causal_box = QtWidgets.QCheckBox("causal")
        self.causal_box.toggled.connect(lambda _: self.recompute())
        self.causal_box.setToolTip("Hide future keys: with n_q queries and n_k keys, query i sits at key position "
                                   "n_k − n_q + i and sees the keys up to it")
        self.tables = {name: QtWidgets.QTableWidget() for name in ("Q", "K", "V")}
        self.pastes = {name: QtWidgets.QLineEdit() for name in ("Q", "K", "V")}
        for name, table in self.tables.items():
            table.itemChanged.connect(lambda _item, t=table: (t.resizeColumnsToContents(), self.recompute()))
            table.setMinimumHeight(96)  # three rows and a header: the page fits 1366 × 768 without scrolling
            table.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred, QtWidgets.QSizePolicy.Policy.Ignored)
            table.horizontalHeader().setMinimumSectionSize(INPUT_COLUMN_PX)  # room for a number being typed
            paste = self.pastes[name]
            paste.setPlaceholderText("paste JSON, e.g. [[1, 0], [0, 1]], Enter")
            paste.setToolTip(f"Replace {name} with a JSON number, vector or table (rows are tokens), as the command "
                             "line's calc takes it")
            paste.returnPressed.connect(lambda n=name: self.paste(n, self.pastes[n].text()))
        buttons = QtWidgets.QGridLayout()
        for index, (text, slot) in enumerate((
                ("+ query", lambda: self._add_row("Q")), ("− query", lambda: self._remove_row("Q")),
                ("+ key/value", lambda: self._add_row("K", "V")), ("− key/value", lambda: self._remove_row("K", "V")),
                ("+ dimension", self._add_dim), ("− dimension", self._remove_dim))):
            button = QtWidgets.QPushButton(text)
            button.clicked.connect(slot)
            buttons.addWidget(button, index % 2, index // 2)
        buttons.setColumnStretch(3, 1)
        self.scores_table, self.scaled_table = QtWidgets.QTableWidget(), QtWidgets.QTableWidget()
        self.weights_table, self.output_table = QtWidgets.QTableWidget(), QtWidgets.QTableWidget()
        for table in self.result_tables():
            table.setMinimumWidth(80)
            table.setMinimumHeight(56)  # two rows of them must not make the tab panel taller than one row did
            table.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred, QtWidgets.QSizePolicy.Policy.Ignored)
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
            inputs.addWidget(self.pastes[name], 2, col)
        inputs.setRowStretch(1, 1)  # the tables take the height, not their titles
        outputs = QtWidgets.QGridLayout()
        for col, (label, table) in enumerate((("scores QKᵀ", self.scores_table), ("scaled ÷ √d_k", self.scaled_table),
                                             ("weights | row sum", self.weights_table),
                                             ("output = weights·V", self.output_table))):
            title = QtWidgets.QLabel(f"<b>{label}</b>")
            title.setWordWrap(True)
            # two by two: four tables in a row left each ~190 px at 1366 px and cut the row sums off
            outputs.addWidget(title, 2 * (col // 2), col % 2)
            outputs.addWidget(table, 2 * (col // 2) + 1, col % 2)
        outputs.setRowStretch(1, 1)
        outputs.setRowStretch(3, 1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(inputs, 1)  # the height left over goes to the tables
        layout.addLayout(buttons)
        layout.addLayout(outputs, 1)
        layout.addWidget(self.message)
        self.result = None
        self.load_preset(self.preset_choice.currentText())

    def result_tables(self) -> tuple[QtWidgets.QTableWidget, ...]:
        return self.scores_table, self.scaled_table, self.weights_table, self.output_table

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
                    raise InputError(f"{name}[{i}, {j}] is not a number: '{text}'.") from None
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

    def paste(self, name: str, text: str) -> bool:
        """Replace ``name`` (Q, K or V) by a JSON matrix (``parse_matrix``, as the command line reads it);
        K and V keep their row labels when the number of rows stays. False (and the reason shown) if invalid."""
        try:
            values = parse_matrix(text, name)
        except InputError as exc:
            self._show_error(str(exc))
            return False
        labels = self._labels(name)
        if len(labels) != values.shape[0]:
            labels = [f"t{i}" for i in range(values.shape[0])]
        self._fill(name, values, labels)
        self.pastes[name].clear()
        self.recompute()
        return True

    # ---- computing
    def _show_error(self, message: str) -> None:
        """Invalid input: no stale numbers stay on screen; the tables empty and the reason is shown."""
        self.result = None
        for table in self.result_tables():
            table.clear()
            table.setRowCount(0)
            table.setColumnCount(0)
            table.setEnabled(False)
        self.message.setText(f"<span style='color:#b3261e'>{html.escape(message)}</span> "
                             "<span style='color:gray'>(no results until the input is valid)</span>")

    def recompute(self) -> None:
        causal = self.causal_box.isChecked()
        try:
            q, k, v = self._values("Q"), self._values("K"), self._values("V")
            r = attend(q, k, v, causal=causal)  # the command line's calc: one rule for the causal positions
        except InputError as exc:
            self._show_error(str(exc))
            return
        for table in self.result_tables():
            table.setEnabled(True)
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
            + (self._causal_note(q.shape[0], k.shape[0]) if causal else "")
            + "".join(f"<br><i>{html.escape(note)}</i>" for note in r.notes))

    @staticmethod
    def _causal_note(n_q: int, n_k: int) -> str:
        where = ("query i sits at key position i" if n_q == n_k else
                 f"the {n_q} queries are the last of the {n_k} key positions: query i sits at position "
                 f"{n_k - n_q} + i (n_k − n_q + i)")
        return f"Causal: {where} and sees the keys up to it; masked keys (−∞) get weight exactly 0."
