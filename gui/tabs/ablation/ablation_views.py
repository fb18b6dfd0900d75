"""The Ablation tab's two views of a result: the importance map (the loss change per head, on the
shared layer × head map) and a box of the text's loss and top next tokens, before or after ablating."""
from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from analysis.display import format_score, head_name
from analysis.measures.ablation import TOP_K

from ...plots.layer_head_map import LayerHeadMap

DIVERGING = "CET-D1"  # blue → white → red: a loss change has a sign, 0 is white


class ImportanceView(LayerHeadMap):
    """Loss change per head ablated alone (nats): red raises the loss (the head helps), blue lowers it."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.importance = None  # analysis.measures.ablation.ImportanceMap
        if self.colorbar is not None:
            self.colorbar.axis.enableAutoSIPrefix(False)  # nats as they are, never "500 m"

    def set_importance(self, importance, title: str = "") -> None:
        self.importance = importance
        change = np.asarray(importance.loss_change, dtype=np.float64)
        finite = change[np.isfinite(change)]
        top = float(np.abs(finite).max()) if finite.size else 1.0
        top = top if top > 0 else 1.0
        self.set_image(change.astype(np.float32), change.shape, (-top, top), DIVERGING,
                       # short enough for 1366 px (it was cut to "loss change, each head z…"); the mode is on the bar
                       title or "loss change per head", f"loss change (nats), {importance.mode}-ablated alone")
        self.set_badges(change, "loss change")

    def forget(self) -> None:
        """Nothing to show (the owner hides the figure): forget the map and its badges."""
        self.importance = None
        self.set_badges(None)

    def hover_text(self, layer: int, head: int) -> str:
        """"L1H0: loss change +0.770 nats (zero-ablated alone: 3.412 vs baseline 2.642; rank 1 of 12)": the loss
        change is ablated − baseline loss (nats, ``format_score`` signed), the rank among the heads measured."""
        imp = self.importance
        if imp is None:
            return ""
        change = imp.loss_change
        v = float(change[layer, head])
        if v != v:  # NaN: a partial map, cancelled before this head
            return f"{head_name(layer, head)}: not measured (the importance map was cancelled first)"
        rank = int((change > v).sum()) + 1
        return (f"{head_name(layer, head)}: loss change {format_score(v, signed=True)} nats "
                f"({imp.mode}-ablated alone: {imp.ablated_loss[layer, head]:.3f} vs baseline {imp.baseline_loss:.3f}; "
                f"rank {rank} of {int(np.isfinite(change).sum())})\ndouble-click or Enter: open")


class Predictions(QtWidgets.QGroupBox):
    """One side of the comparison: the loss and the top-5 next tokens."""

    def __init__(self, title: str, parent=None):
        super().__init__(title, parent)
        self.loss = QtWidgets.QLabel("—")
        self.loss.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.loss.setWordWrap(True)  # "loss 4.975 nats  (−0.009 vs baseline)" in a half-width box
        self.table = QtWidgets.QTableWidget(TOP_K, 2)
        self.table.setHorizontalHeaderLabels(["next token", "p"])
        self.table.verticalHeader().setVisible(True)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(0, QtWidgets.QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(1, QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        self.table.verticalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Fixed)
        header = self.table.horizontalHeader().sizeHint().height()
        self.table.setFixedHeight(self.table.verticalHeader().defaultSectionSize() * TOP_K + header
                                  + 2 * self.table.frameWidth() + 2)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addWidget(self.loss)
        layout.addWidget(self.table)

    def show_outcome(self, outcome, extra: str = "") -> None:
        self.loss.setText(f"loss {outcome.loss:.3f} nats{extra}")
        for row in range(TOP_K):
            token, p = outcome.top[row] if row < len(outcome.top) else ("", None)
            self.table.setItem(row, 0, QtWidgets.QTableWidgetItem(token))
            item = QtWidgets.QTableWidgetItem("" if p is None else f"{p:.3f}")
            item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(row, 1, item)

    def clear(self) -> None:
        self.loss.setText("—")
        self.table.clearContents()

    def tokens(self) -> list[tuple[str, str]]:
        return [(self.table.item(r, 0).text(), self.table.item(r, 1).text()) for r in range(TOP_K)
                if self.table.item(r, 0) is not None and self.table.item(r, 0).text()]
