"""The Composition page (``analysis.measures.composition.model_composition``, Elhage et al. 2021): from the weights
only, how strongly each earlier head's OV circuit feeds a later head's queries (Q), keys (K) or values (V); the
strongest pairs as a table sorted by the baseline-corrected score (score − the mean score of random matrices of the
same shapes, ``Composition.baseline``). The score is ‖W_OV^e W^l‖_F / (‖W_OV^e‖_F ‖W^l‖_F) with W^l the later head's
W_QK (Q), W_QKᵀ (K) or W_OV (V); the module's docstring has the details. A row's click selects the later head,
a double-click opens it. The result belongs to the model alone (no text)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from PySide6 import QtCore, QtWidgets

from analysis.display import format_duration, head_name

from ...state.jobs import Job
from ...state.worker import RequestKind
from .page import Page, wrapped_label
from .snippets import Origin, composition_code, origin_of

KINDS = {"k": "K-composition (earlier OV → later keys)", "q": "Q-composition (earlier OV → later queries)",
         "v": "V-composition (earlier OV → later values)"}
COLUMNS = ("earlier head", "later head", "corrected", "score")


@dataclass(frozen=True)
class CompositionShown:
    composition: object  # analysis.measures.composition.Composition
    origin: Origin
    model_key: int


class CompositionPage(Page):
    title = "Composition"
    shown_changed = QtCore.Signal(object)

    def __init__(self, state, worker, tie, parent=None):
        super().__init__(state, worker, tie, parent)
        self.job = Job(worker, "composition", self, label="the composition scores", ended_by=(RequestKind.LOAD,))
        self.job.finished.connect(self._ready)
        self.job.progressed.connect(self._progress)
        self.job.failed.connect(lambda message: self._stopped(message, error=True))
        self.job.cancelled.connect(lambda: self._stopped("Composition cancelled." + (
            " The table shown is the last one computed." if self.shown is not None else "")))
        self.kind = QtWidgets.QComboBox()
        for key, text in KINDS.items():
            self.kind.addItem(text, key)
        self.kind.currentIndexChanged.connect(lambda _i: self._fill())
        self.top = QtWidgets.QSpinBox()
        self.top.setRange(5, 500)
        self.top.setValue(25)
        self.top.setPrefix("top ")
        self.top.valueChanged.connect(lambda _v: self._fill())
        self.add_run_controls("Compute", "Composition scores of every earlier → later head pair, from the weights "
                              "(no text)")
        self._started = 0.0
        self.table = QtWidgets.QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.table.horizontalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Stretch)
        self.table.cellClicked.connect(lambda row, _c: self._select_row(row))
        self.table.cellDoubleClicked.connect(lambda row, _c: self._open_row(row))
        self.note = wrapped_label("From the weights only (no text): ‖W_OV(earlier) · W(later)‖_F / (‖W_OV‖_F ‖W‖_F), "
                                  "W the later head's W_QK (Q), W_QKᵀ (K) or W_OV (V); 'corrected' subtracts what "
                                  "random matrices of these shapes score. Click a row: select the later head; "
                                  "double-click: open it.")
        self.baseline = wrapped_label()
        self.lay_out(self.buttons_after(self.run_button, self.cancel_button, self.progress, self.kind, self.top),
                     self.note, self.baseline, self.message,
                     main=self.table)
        self._pairs: list[tuple[int, int, int, int, float]] = []
        self._model_key = None
        tie.changed.connect(self._changed)
        self._changed()

    def _changed(self) -> None:
        self.run_button.setEnabled(not self.tie.why_not() and not self.job.running)
        if self.tie.model_key == self._model_key:
            return
        self._model_key = self.tie.model_key
        self.job.drop()
        self.progress.hide()
        self.cancel_button.setEnabled(False)
        self.shown = None
        self._pairs = []
        self.table.setRowCount(0)
        self.baseline.setText("")
        self.show_message("")
        self._update_buttons()
        self.shown_changed.emit(None)

    def run(self) -> int | None:
        from analysis.measures.composition import model_composition

        if self.tie.why_not():
            return None
        model_key = self.tie.model_key

        def work(loaded, progress, cancel):
            return CompositionShown(model_composition(loaded, progress, cancel),
                                    origin_of(loaded, "", False, False, None), model_key)

        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setRange(0, 0)
        self.progress.setFormat("reading the weights")
        self.progress.show()
        self._started = time.monotonic()
        self.show_message("Computing every earlier → later pair from the weights…")
        return self.job.start(work)

    def _progress(self, done: int, total: int) -> None:
        """Steps: each layer's factors, then each later layer's scores (the later ones score more pairs, so the
        estimate, elapsed × steps left / steps done, errs short)."""
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        elapsed = time.monotonic() - self._started
        left = elapsed * (total - done) / done if done else float("nan")
        self.progress.setFormat("%v of %m" + (f" · about {format_duration(left)} left" if left == left and done < total
                                              else ""))

    def _stopped(self, message: str, error: bool = False) -> None:
        self.run_button.setEnabled(not self.tie.why_not())
        self.cancel_button.setEnabled(False)
        self.progress.hide()
        self.show_message(message, error)

    def _ready(self, shown: CompositionShown) -> None:
        self._stopped("")
        if shown.model_key != self.tie.model_key:
            return
        self.shown = shown
        self.baseline.setText(f"Baseline (the mean score of random matrices of these shapes): "
                              f"{shown.composition.baseline:.4f}.")
        self._fill()
        self._update_buttons()
        self.shown_changed.emit(shown)

    def pairs(self) -> list[tuple[int, int, int, int, float]]:
        """The rows shown: (earlier layer, head, later layer, head, corrected score), strongest first."""
        return list(self._pairs)

    def _fill(self) -> None:
        if self.shown is None:
            return
        kind = self.kind.currentData()
        c = self.shown.composition
        self._pairs = c.strongest(kind, self.top.value())
        raw = getattr(c, kind)
        self.table.setRowCount(len(self._pairs))
        for i, (el, eh, ll, lh, corrected) in enumerate(self._pairs):
            cells = (head_name(el, eh), head_name(ll, lh), f"{corrected:+.4f}", f"{raw[el, eh, ll, lh]:.4f}")
            for j, text in enumerate(cells):
                item = QtWidgets.QTableWidgetItem(text)
                if j >= 2:
                    item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
                item.setToolTip(f"{head_name(el, eh)}'s output feeds {head_name(ll, lh)}'s "
                                f"{ {'q': 'queries', 'k': 'keys', 'v': 'values'}[kind]}: score {raw[el, eh, ll, lh]:.4f}"
                                f", baseline {c.baseline:.4f}")
                self.table.setItem(i, j, item)

    def _select_row(self, row: int) -> None:
        if 0 <= row < len(self._pairs) and self.state.result is not None:
            self.state.select(self._pairs[row][2], self._pairs[row][3])

    def _open_row(self, row: int) -> None:
        if 0 <= row < len(self._pairs):
            self.head_activated.emit(self._pairs[row][2], self._pairs[row][3])

    def code(self) -> str:
        return composition_code(self.shown.origin, self.kind.currentData(), self.top.value())

    def metadata(self) -> dict:
        return {"kind": KINDS[self.kind.currentData()], "baseline": self.shown.composition.baseline,
                "values": "corrected = score − baseline; score = ‖W_OV W‖_F / (‖W_OV‖_F ‖W‖_F)"}

    def map_data(self):
        kind = self.kind.currentData()
        c = self.shown.composition
        values = np.array([[p[4], getattr(c, kind)[p[0], p[1], p[2], p[3]]] for p in self._pairs]).reshape(-1, 2)
        rows = [f"{head_name(p[0], p[1])} → {head_name(p[2], p[3])}" for p in self._pairs]
        data = {"page": "composition", "kind": kind, "baseline": c.baseline,
                "strongest": [{"earlier": head_name(a, b), "later": head_name(x, y), "corrected": s}
                              for a, b, x, y, s in self._pairs]}
        return values, rows, ["corrected", "score"], "earlier → later", data
