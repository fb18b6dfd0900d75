"""TransformerLens-style scores of the text on screen for the Head scores tab: TL's options (its
``error_measure``, ``exclude_bos`` and ``exclude_current_token``) and their computation on the worker
(``analysis.measures.measured.tl_scores_of_result``: the three patterns at once, from every map kept, or from the
run's streamed pass or streamed again for other options when the maps are computed on demand),
with an answer for options or a text no longer on screen dropped."""
from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from ...state.jobs import Job
from .score_sources import TL_MEASURES, TL_NAMES


class TLSource(QtWidgets.QWidget):
    """The TL options row; ``scores`` holds the TL-style scores {name: (L, H)} for the text and options
    of the latest :meth:`ask`, or None while they are computed. ``changed``: an option changed;
    ``ready``: the scores asked for arrived; ``failed(message)``: they could not be computed."""

    changed = QtCore.Signal()
    ready = QtCore.Signal()
    failed = QtCore.Signal(str)

    def __init__(self, worker=None, parent=None):
        super().__init__(parent)
        self.scores: dict[str, np.ndarray] | None = None
        self._key = None
        self._job = Job(worker, "tl_scores", self, label="the TransformerLens-style scores") if worker is not None else None
        if self._job is not None:
            self._job.finished.connect(self._finished)
            self._job.failed.connect(self.failed)
        self.measure_choice = QtWidgets.QComboBox()
        for measure, text in TL_MEASURES.items():
            self.measure_choice.addItem(measure, measure)
            self.measure_choice.setItemData(self.measure_choice.count() - 1, text, QtCore.Qt.ItemDataRole.ToolTipRole)
        self.measure_choice.setToolTip("TransformerLens's error_measure:\n" + "\n".join(TL_MEASURES.values()))
        self.measure_choice.currentIndexChanged.connect(lambda _: self.changed.emit())
        self.exclude_bos_box = QtWidgets.QCheckBox("exclude BOS")
        self.exclude_bos_box.setToolTip("TL's exclude_bos: leave the first key (column 0) out of the comparison")
        self.exclude_current_box = QtWidgets.QCheckBox("exclude current token")
        self.exclude_current_box.setToolTip("TL's exclude_current_token: leave the diagonal (i attends to i) out")
        for box in (self.exclude_bos_box, self.exclude_current_box):
            box.toggled.connect(lambda _: self.changed.emit())
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QtWidgets.QLabel("measure"))
        row.addWidget(self.measure_choice)
        row.addWidget(self.exclude_bos_box)
        row.addWidget(self.exclude_current_box)

    def options(self) -> dict:
        """The keyword arguments of ``tl_scores.detect`` the TL-style columns use."""
        return {"error_measure": self.measure_choice.currentData(), "exclude_bos": self.exclude_bos_box.isChecked(),
                "exclude_current_token": self.exclude_current_box.isChecked()}

    def levels(self) -> tuple[float, float]:
        """The colour range of the measure chosen: "abs" scores run −1 … 1, "mul" 0 … 1."""
        return (-1.0, 1.0) if self.options()["error_measure"] == "abs" else (0.0, 1.0)

    def ask(self, bundle) -> str:
        """Make sure the TL-style scores of ``bundle``'s result, with the options chosen, are here or on
        their way; returns a note for the user ("" without a result)."""
        from analysis.measures.measured import tl_scores_of_result

        result = None if bundle is None else bundle.result
        if result is None:
            return ""
        if result.n_tokens < 2:
            self.scores, self._key = {name: np.full(bundle.scores.shape, np.nan) for name in TL_NAMES}, None
            return "TransformerLens-style scores need at least 2 tokens."
        options = self.options()
        key = (bundle.request_id, id(result), tuple(sorted(options.items())))
        if key == self._key:
            return self._note(result)
        self._key, self.scores = key, None
        def work(_loaded, _progress, _cancel):
            scores = tl_scores_of_result(result, **options)  # either way a result holds its maps
            return key, {name: scores[name] for name in TL_NAMES}

        if self._job is None:  # no worker (a figure, a test): the numpy runs here
            self.scores = work(None, None, None)[1]
        else:
            self._job.start(work)
        return self._note(result)

    @staticmethod
    def _note(result) -> str:
        bos = ("BOS was prepended (key 0), as in TL's default run" if result.bos else
               "no BOS was prepended, unlike TL's default run: switch BOS on to compare")
        return f"TransformerLens-style: TL's head_detector scores of this text's attention, not AttnScope's own; {bos}."

    def _finished(self, value) -> None:
        key, scores = value
        if key != self._key:
            return  # the options or the text changed since
        self.scores = scores
        self.ready.emit()
