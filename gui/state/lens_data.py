"""Lenses of the result on screen (analysis/measures/lenses.py), computed on the worker when first needed.

:class:`LensData` is the one helper per :class:`ViewState` that asks the worker for them (one
``jobs.Job`` per lens kind, named "lenses") and writes each answer into the state (``state.set_lens``),
which keeps it only while its result is on screen: a late answer for an older result is dropped.
Each lens is computed at most once per result (the state holds it until the next bundle), by its entry in
the registry (``lenses.LENSES``), one task for every kind (:func:`lens_task`); :data:`VIEWS` says what a view
keeps of a lens when it is not the lens's value itself.

- ``"value_norms"`` → :class:`ValueView`: value-weighted attention N = A·‖f_h(x_j)‖ row-normalised
  for display, and the key norms ‖f_h(x_j)‖. Asked for whenever the state's attention view is
  "value-weighted". Of a result whose maps are computed on demand (``result.attentions`` None) only the key norms
  and the grid's max-pooled thumbnails of the row-normalised N (one streamed pass, measures.streamed), never every
  head's map: the Head tab's one head comes from gui/state/head_maps.py (measures.streamed.value_weighted).
- ``"rollout"`` → R (layer, query, key) from ``lenses.rollout``. Asked for by the Rollout tab. Of an on-demand
  result, one layer at a time as the tab shows it (``streamed.rollout_layer``: R(l) composes layers 0…l): the value
  is then {layer: R(layer) (n, n)}, the layers computed so far (:meth:`LensData.request` with the layer).
- ``"thumbnails_hidden_first"`` → (L, H, c, c): the grid's thumbnails pooled with the first key hidden and each
  row renormalised (``streamed.streamed_thumbnails(hide_first=True)``), for an on-demand result's grid (a kept
  result's grid pools its maps itself).

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
VALUE_NORMS, ROLLOUT, HIDDEN_FIRST = "value_norms", "rollout", "thumbnails_hidden_first"


@dataclass(frozen=True)
class ValueView:
    """Value-weighted attention of one result as the views draw it. Read-only float32 arrays, axis order
    (layer, head, query, key).

    shown[l, h, i, j] = N[i, j] / Σ_k N[i, k] with N[i, j] = A[i, j] · ‖f_h(x_j)‖ (lenses.row_normalise of
    lenses.value_norms): the share of query i's summed contribution norms that key j supplies.
    key_norms[l, h, j] = ‖f_h(x_j)‖, f_h(x) = (x W_V^h + b_V^h) W_O^h, in residual-stream units.
    The raw N is not kept (it would double the memory): :meth:`raw` rebuilds one cell from A and the norm.
    Of an on-demand result ``shown`` is None (every head's map is not kept: one head's is computed when it is drawn,
    gui/state/head_maps.py) and ``thumbnails`` holds the grid's max-pooled (L, H, c, c) of ``shown``.
    """

    shown: np.ndarray | None  # (L, H, n, n); None: computed a head at a time
    key_norms: np.ndarray  # (L, H, n)
    thumbnails: np.ndarray | None = None  # (L, H, c, c) max-pooled shares, when ``shown`` is None

    @property
    def grid(self) -> np.ndarray:
        """What the grid pools from: every map, or the pooled thumbnails."""
        return self.shown if self.shown is not None else self.thumbnails

    @staticmethod
    def raw(attention: float, key_norm: float) -> float:
        """N[query, key] = A[query, key] · ‖f_h(x_key)‖ of one cell, from its weight and its key's norm."""
        return float(attention) * float(key_norm)


def value_view(norms) -> ValueView:
    """The :class:`ValueView` of ``lenses.value_norms``' answer (row-normalised layer by layer, float32)."""
    from analysis.measures.lenses import row_normalise

    shown = np.empty(norms.value_norms.shape, dtype=np.float32)
    for layer in range(shown.shape[0]):  # one layer at a time: no float64 copy of every head at once
        shown[layer] = row_normalise(norms.value_norms[layer])
    shown.setflags(write=False)
    return ValueView(shown, norms.key_norms)


def on_demand_value_view(result) -> ValueView:
    """The :class:`ValueView` of an on-demand result: every head's key norms ‖f_h(x_j)‖ (the capture's, what
    lenses.value_norms computes from the model's v) and the grid's thumbnails of the row-normalised N, max-pooled in
    one streamed pass (measures.streamed.streamed_pass(weighted=True)); no head's whole map."""
    from analysis.measures.streamed import streamed_pass
    from analysis.run.capture import THUMBNAIL_PX

    maps = result.maps
    norms = np.stack([np.asarray(maps.key_norms(layer), dtype=np.float32) for layer in range(maps.n_layer)])
    pooled = streamed_pass(maps, result.token_ids, scores=None, tl_options=None, thumbnail_px=THUMBNAIL_PX,
                           weighted=True).weighted_thumbnails
    norms.setflags(write=False)
    return ValueView(None, norms, pooled)


#: What the views keep of a lens, where it is not the lens's value itself: its name → a function of the value.
VIEWS = {VALUE_NORMS: value_view}


def lens_task(kind: str, result, layer: int | None = None):
    """A worker task: lens ``kind`` of ``result`` (``lenses.lens_named(kind)``), as the views keep it (:data:`VIEWS`).
    Of a result whose maps are computed on demand: the value view's norms and thumbnails (:func:`on_demand_value_view`),
    rollout's ``layer`` alone (``streamed.rollout_layer``), the thumbnails past the first key.

    A lens that reads the weights needs the model that produced ``result``; after loading another model the
    result on screen belongs to the old one until the text is run again (``inference.same_model``)."""

    def task(loaded):
        from analysis.measures import streamed
        from analysis.measures.lenses import LensInputs, lens_named
        from analysis.run.capture import THUMBNAIL_PX
        from analysis.run.inference import same_model

        if kind == HIDDEN_FIRST:
            return streamed.streamed_thumbnails(result.maps, THUMBNAIL_PX, hide_first=True)
        if not result.maps_kept and kind == ROLLOUT:
            return layer, streamed.rollout_layer(result.maps, layer)
        if not result.maps_kept and kind == VALUE_NORMS:
            return on_demand_value_view(result)
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
        self._layer_of: dict[str, int | None] = {}  # kind → the layer its job's latest run computes (on-demand rollout)
        for kind, job in self._jobs.items():
            job.finished.connect(lambda value, kind=kind: self._finished(kind, value))
            job.failed.connect(lambda message, kind=kind: self.state.set_lens_error(self._bundle_of[kind], kind,
                                                                                     message))
        state.bundle_changed.connect(lambda _: self._want_values())
        state.attention_view_changed.connect(lambda _: self._want_values())
        state.hide_first_changed.connect(lambda _: self._want_values())
        self._want_values()

    @classmethod
    def for_state(cls, state: ViewState, worker) -> "LensData":
        """The one LensData of ``state`` (made on first use): every view shares its answers."""
        existing = state.findChild(cls)
        return existing if existing is not None else cls(state, worker)

    def has(self, kind: str, layer: int | None = None) -> bool:
        """Whether lens ``kind`` of the bundle on screen is there (an on-demand rollout: that ``layer`` of it)."""
        value = self.state.lens(kind)
        if value is None:
            return False
        return not (isinstance(value, dict) and layer is not None and layer not in value)

    def request(self, kind: str, layer: int | None = None) -> int | None:
        """Compute lens ``kind`` of the bundle on screen unless it is there or on its way (of an on-demand result,
        rollout's ``layer``: the layer shown); the worker request id when one was sent."""
        s = self.state
        if self.worker is None or s.bundle is None or s.lens_error(kind) is not None:
            return None
        layer = layer if kind == ROLLOUT and not s.result.maps_kept else None
        if self.has(kind, layer):
            return None
        bundle_id = s.bundle.request_id
        job = self._jobs[kind]
        if job.running and self._bundle_of[kind] == bundle_id and self._layer_of.get(kind) == layer:
            return None
        # a request for an older bundle is of no use now: forget it (its answer would be dropped anyway)
        for other, other_job in self._jobs.items():
            if other_job.running and self._bundle_of[other] != bundle_id:
                other_job.drop()
        task = lens_task(kind, s.result, layer)
        self._bundle_of[kind], self._layer_of[kind] = bundle_id, layer
        return job.start(lambda loaded, _progress, _cancel: task(loaded))

    def _finished(self, kind: str, value) -> None:
        bundle_id = self._bundle_of[kind]
        if kind == ROLLOUT and isinstance(value, tuple):  # one layer of an on-demand result: added to the others
            layer, r = value
            r.setflags(write=False)
            before = self.state.lens(ROLLOUT) if self.state.bundle is not None and \
                self.state.bundle.request_id == bundle_id else None
            value = {**(before or {}), layer: r}
        self.state.set_lens(bundle_id, kind, value)

    def pending(self) -> int:
        """Requests sent and not answered yet."""
        return sum(job.running for job in self._jobs.values())

    def _want_values(self) -> None:
        s = self.state
        if s.attention_view == "value-weighted":
            self.request(VALUE_NORMS)
        if s.hide_first and s.result is not None and not s.result.maps_kept:
            self.request(HIDDEN_FIRST)  # the grid of an on-demand result cannot pool its maps itself
