"""The sink row of the Head scores tab: the sink rate (Gu et al. 2024, ``analysis.measures.lenses.sink_rate``) of
what the tab shows, and the ε spin box, which writes the view state's ``sink_epsilon`` and follows it
(exports write the summary's sink rate at the same ε)."""
from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from .score_table import SINK_MARK


class SinkRow(QtWidgets.QWidget):
    """"Sink heads (•): 5 of 144 — sink rate 3.5%, …" and ε. ``epsilon_changed`` follows the state's
    ``sink_epsilon`` (the spin box only writes it)."""

    epsilon_changed = QtCore.Signal(float)

    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state = state
        self.label = QtWidgets.QLabel()
        self.label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)  # two lines rather than cut, beside a narrow table at 1366 px
        self.label.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        self.spin = QtWidgets.QDoubleSpinBox()
        self.spin.setRange(0.0, 0.99)
        self.spin.setSingleStep(0.05)
        self.spin.setDecimals(2)
        self.spin.setValue(state.sink_epsilon)
        self.spin.setPrefix("ε = ")
        self.spin.setToolTip("A head is a sink head when its first-token score (mean over i ≥ 1 of A[i, 0]) "
                             "is above ε (Gu et al. 2024, 'When Attention Sink Emerges'; default 0.3)")
        self.spin.valueChanged.connect(state.set_sink_epsilon)
        state.sink_epsilon_changed.connect(self._epsilon_changed)
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label, 1)
        row.addWidget(self.spin)

    @property
    def epsilon(self) -> float:
        return self.state.sink_epsilon

    def _epsilon_changed(self, epsilon: float) -> None:
        if abs(self.spin.value() - epsilon) > 1e-9:
            self.spin.blockSignals(True)
            self.spin.setValue(epsilon)  # the spin box shows 2 decimals; the state keeps ε as set
            self.spin.blockSignals(False)
        self.epsilon_changed.emit(epsilon)

    def show_sinks(self, sinks, where: str) -> str:
        """Say what ``sinks`` (a ``lenses.SinkRate``, or None without a result) counts; ``where`` names the
        score compared with ε ("first-token score", "mean first-token score over 7 texts"). Returns the note
        that goes with each sink head's mark ("" without sinks)."""
        if sinks is None:
            self.label.setText("Sink heads: run a text to count them.")
            return ""
        L, H = sinks.mask.shape
        if np.isnan(sinks.scores).all():
            self.label.setText("Sink heads: not defined for a 1-token text (no query sees an earlier token).")
        else:
            self.label.setText(f"Sink heads ({SINK_MARK}): {int(sinks.mask.sum())} of {L * H} — sink rate "
                               f"{sinks.rate:.1%}, the heads whose {where} is above")  # … the box: "ε = 0.30"
        return f"sink head: {where} above ε = {sinks.epsilon:g}"
