"""Lenses of the result on screen (analysis/measures/lenses.py), computed on the worker when first needed.

:class:`LensData` is the one helper per :class:`ViewState` that asks the worker for them (one
``jobs.Job`` per lens kind, named "lenses") and writes each answer into the state (``state.set_lens``),
which keeps it only while its result is on screen: a late answer for an older result is dropped.
Each lens is computed at most once per result (the state holds it until the next bundle), by its entry in
the registry (``lenses.LENSES``), one task for every kind (:func:`lens_task`); :data:`VIEWS` says what a view
keeps of a lens when it is not the lens's value itself.

- ``"value_norms"`` → :class:`ValueView`: value-weighted attention N = A·‖f_h(x_j)‖ row-normalised
  for display, and the key norms ‖f_h(x_j)‖. Asked for whenever the state's attention view is
  "value-weighted".
- ``"rollout"`` → R (layer, query, key) from ``lenses.rollout``. Asked for by the Rollout tab.

The tasks below run on the worker thread and never touch Qt.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6 import QtCore

from analysis.errors import AttnScopeError

from .jobs import Job
from .view_state import LENS_KINDS, ViewState

TASK_NAME = "lenses"
VALUE_NORMS, ROLLOUT = "value_norms", "rollout"


@dataclass(frozen=True)
class ValueView:
    """Value-weighted attention of one result as the views draw it. Read-only float32 arrays, axis order
    (layer, head, query, key).

    shown[l, h, i, j] = N[i, j] / Σ_k N[i, k] with N[i, j] = A[i, j] · ‖f_h(x_j)‖ (lenses.row_normalise of
    lenses.value_norms): the share of query i's summed contribution norms that key j supplies.
    key_norms[l, h, j] = ‖f_h(x_j)‖, f_h(x) = (x W_V^h + b_V^h) W_O^h, in residual-stream units.
    The raw N is not kept (it would double the memory): :meth:`raw` rebuilds one cell from A and the norm.
    """

    shown: np.ndarray  # (L, H, n, n)
    key_norms: np.ndarray  # (L, H, n)

    def raw(self, attentions: np.ndarray, layer: int, head: int, query: int, key: int) -> float:
        """N[query, key] = A[query, key] · ‖f_h(x_key)‖ of head ``layer``.``head``."""
        return float(attentions[layer, head, query, key]) * float(self.key_norms[layer, head, key])


def value_view(norms) -> ValueView:
    """The :class:`ValueView` of ``lenses.value_norms``' answer (row-normalised layer by layer, float32)."""
    from analysis.measures.lenses import row_normalise

    shown = np.empty(norms.value_norms.shape, dtype=np.float32)
    for layer in range(shown.shape[0]):  # one layer at a time: no float64 copy of every head at once
        shown[layer] = row_normalise(norms.value_norms[layer])
    shown.setflags(write=False)
    return ValueView(shown, norms.key_norms)


#: What the views keep of a lens, where it is not the lens's value itself: its name → a function of the value.
VIEWS = {VALUE_NORMS: value_view}


def lens_task(kind: str, result):
    """A worker task: lens ``kind`` of ``result`` (``lenses.lens_named(kind)``), as the views keep it (:data:`VIEWS`).

    A lens that reads the weights needs the model that produced ``result``; after loading another model the
    result on screen belongs to the old one until the text is run again (``inference.same_model``)."""

    def task(loaded):
        from analysis.measures.lenses import LensInputs, lens_named
        from analysis.run.inference import same_model

        lens = lens_named(kind)
        if lens.needs_model and not same_model(loaded, result):
            raise AttnScopeError("The model changed since this text was run; run it again to see this view.")
        value = lens.compute(LensInputs(result, loaded))
        view = VIEWS.get(kind)
        return value if view is None else view(value)

    return task


class LensData(QtCore.QObject):
    """Asks the worker for the lenses of the bundle on screen and hands the answers to the state."""

    def __init__(self, state: ViewState, worker):
        super().__init__(state)
        self.state, self.worker = state, worker
        # one short job per lens kind; nothing newer ends it (its answer is dropped by the state if stale)
        self._jobs: dict[str, Job] = {} if worker is None else {
            kind: Job(worker, TASK_NAME, self, ended_by=(), announced=False) for kind in LENS_KINDS}
        self._bundle_of: dict[str, int] = {}  # kind → the bundle request id its job's latest run is for
        for kind, job in self._jobs.items():
            job.finished.connect(lambda value, kind=kind: self.state.set_lens(self._bundle_of[kind], kind, value))
            job.failed.connect(lambda message, kind=kind: self.state.set_lens_error(self._bundle_of[kind], kind,
                                                                                     message))
        state.bundle_changed.connect(lambda _: self._want_values())
        state.attention_view_changed.connect(lambda _: self._want_values())
        self._want_values()

    @classmethod
    def for_state(cls, state: ViewState, worker) -> "LensData":
        """The one LensData of ``state`` (made on first use): every view shares its answers."""
        existing = state.findChild(cls)
        return existing if existing is not None else cls(state, worker)

    def request(self, kind: str) -> int | None:
        """Compute lens ``kind`` of the bundle on screen unless it is there or on its way; the worker request id
        when one was sent."""
        s = self.state
        if self.worker is None or s.bundle is None or s.lens(kind) is not None or s.lens_error(kind) is not None:
            return None
        bundle_id = s.bundle.request_id
        if self._jobs[kind].running and self._bundle_of[kind] == bundle_id:
            return None
        # a request for an older bundle is of no use now: forget it (its answer would be dropped anyway)
        for other, job in self._jobs.items():
            if job.running and self._bundle_of[other] != bundle_id:
                job.drop()
        task = lens_task(kind, s.result)
        self._bundle_of[kind] = bundle_id
        return self._jobs[kind].start(lambda loaded, _progress, _cancel: task(loaded))

    def pending(self) -> int:
        """Requests sent and not answered yet."""
        return sum(job.running for job in self._jobs.values())

    def _want_values(self) -> None:
        if self.state.attention_view == "value-weighted":
            self.request(VALUE_NORMS)
