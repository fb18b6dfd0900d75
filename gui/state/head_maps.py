"""One head's whole map of the result on screen, for the views that draw one head (the Head tab).

A result that kept every map (``result.attentions``) has them at hand: :meth:`HeadMaps.get` returns the map at once.
A result whose maps are computed on demand (``result.attentions`` None) has none: the head asked for is computed on
the worker (one short ``jobs.Job``, the newest request only: a head left before its map arrived is dropped) and kept,
with the few drawn last, until the next bundle; ``ready`` says it arrived and the view draws it. Never every head:
memory is a few (n, n) maps.

Kinds: ``"weights"`` A = ``result.head_map(layer, head)`` (qk_capture.head_weights, the model's own arithmetic) and
``"value-weighted"`` the row-normalised N = A·‖f_h(x_j)‖ (``measures.streamed.value_weighted``; a kept result's is
the value lens's ``ValueView.shown``).
"""
from __future__ import annotations

import numpy as np
from PySide6 import QtCore

from .jobs import Job
from .lens_data import VALUE_NORMS
from .view_state import ViewState

WEIGHTS, VALUE_WEIGHTED = "weights", "value-weighted"
KEPT = 4  # maps kept of an on-demand result (SmolLM2 at 2,048 tokens: 16 MiB each; at 8,192: 256 MiB)
#: From this many tokens a head's drawing is made on the worker even when the result kept its maps: a 1,024-token
#: GPT-2 map took 25 ms of the GUI thread to mask, scale and colour (bench, the GUI thread's longest work); 256² cells
#: take under 2 ms.
DRAWN_ON_WORKER_FROM = 256


def head_map_task(result, kind: str, layer: int, head: int, hide_first: bool = False, scale: str = "linear",
                  values: np.ndarray | None = None):
    """A worker task: (kind, layer, head, the (n, n) float32 map, read-only, its drawing
    :class:`~analysis.display.PreparedHead` with ``hide_first`` and ``scale``, ``hide_first``): a long map's pooling
    (~90 ms at 8,192 tokens) and its colouring (~20 ms at 2,048) are done here, off the GUI thread, not when the
    figure draws it. ``values``: the map when it is at hand already (kept, or computed for another drawing)."""
    from analysis.display import PreparedHead

    def task(_loaded):
        if values is not None:
            return kind, layer, head, values, PreparedHead(values, result.causal, hide_first, scale), hide_first
        if kind == VALUE_WEIGHTED:
            from analysis.measures.streamed import value_weighted

            made = value_weighted(result.maps, layer, head)
            made.setflags(write=False)
        else:
            made = result.head_map(layer, head)  # read-only already, and the result keeps it: no second copy
        return kind, layer, head, made, PreparedHead(made, result.causal, hide_first, scale), hide_first

    return task


class HeadMaps(QtCore.QObject):
    """The one head-map helper of a :class:`ViewState` (:meth:`for_state`)."""

    ready = QtCore.Signal(str, int, int)  # kind, layer, head: its map of the bundle on screen arrived
    failed = QtCore.Signal(str)  # why the map asked for could not be computed (one sentence)

    def __init__(self, state: ViewState, worker):
        super().__init__(state)
        self.state, self.worker = state, worker
        self._maps: dict[tuple, np.ndarray] = {}  # (bundle id, kind, layer, head) → map, the last KEPT
        self._drawings: dict[tuple, object] = {}  # (bundle id, kind, layer, head) → its PreparedHead, made with it
        self._asked = None  # the key of the request in flight
        self._job = None if worker is None else Job(worker, "head map", self, ended_by=(), announced=False)
        if self._job is not None:
            self._job.finished.connect(self._finished)
            self._job.failed.connect(self.failed)
        state.bundle_changed.connect(lambda _: self._forget())

    @classmethod
    def for_state(cls, state: ViewState, worker) -> "HeadMaps":
        existing = state.findChild(cls)
        return existing if existing is not None else cls(state, worker)

    def get(self, kind: str, layer: int, head: int) -> np.ndarray | None:
        """(n, n) the map ``kind`` of head ``layer``.``head`` of the result on screen, or None while it is computed
        (``ready`` follows; the value view of a kept result: until its lens is there). A map of
        :data:`DRAWN_ON_WORKER_FROM` tokens or more comes once its drawing for the state's hide-first and scale is
        made too (:meth:`prepared`), kept maps included. Without a worker (a figure, a test) it is all made here."""
        s = self.state
        r = s.result
        if r is None:
            return None
        if kind == VALUE_WEIGHTED:
            values = s.lens(VALUE_NORMS)
            if values is not None and values.shown is not None:
                return values.shown[layer, head]
            if r.maps_kept:
                return None  # the value lens of every map is on its way
        elif r.maps_kept and r.n_tokens < DRAWN_ON_WORKER_FROM:
            return r.head_map(layer, head)
        key = (s.bundle.request_id, kind, int(layer), int(head))
        drawn_here = r.n_tokens < DRAWN_ON_WORKER_FROM
        if key in self._maps and (drawn_here or self._fits(key, self._maps[key])):
            return self._maps[key]
        known = self._maps.get(key, r.head_map(layer, head) if r.maps_kept else None)
        task = head_map_task(r, kind, int(layer), int(head), s.hide_first, s.scale, values=known)
        if self._job is None:
            self._keep(key, *task(None)[3:5])
            return self._maps[key]
        asked = (*key, bool(s.hide_first), s.scale)
        if self._asked != asked or not self._job.running:
            self._asked = asked
            self._job.start(lambda loaded, _progress, _cancel: task(loaded))
        return None

    def _fits(self, key: tuple, values: np.ndarray) -> bool:
        """Whether the drawing kept for ``key`` is of ``values`` with the state's hide-first and scale now."""
        drawing = self._drawings.get(key)
        s = self.state
        return drawing is not None and drawing.fits(values, s.result.causal, s.hide_first, s.scale)

    def prepared(self, kind: str, layer: int, head: int):
        """The drawing of head ``layer``.``head``'s map ``kind`` made with it on the worker
        (:class:`~analysis.display.PreparedHead`), or None (a kept result's map; none made). The figure uses it only
        where it fits the state's hide-first and scale now (``PreparedHead.fits``), else draws the map itself."""
        s = self.state
        if s.bundle is None:
            return None
        return self._drawings.get((s.bundle.request_id, kind, int(layer), int(head)))

    def _keep(self, key: tuple, values: np.ndarray, prepared=None) -> None:
        while len(self._maps) >= KEPT:
            old = next(iter(self._maps))
            self._maps.pop(old)
            self._drawings.pop(old, None)
        self._maps[key] = values
        if prepared is not None:
            self._drawings[key] = prepared

    def _finished(self, answer) -> None:
        kind, layer, head, values, prepared, _hide_first = answer
        asked, self._asked = self._asked, None
        key = None if asked is None else asked[:4]
        if key is None or self.state.bundle is None or key != (self.state.bundle.request_id, kind, layer, head):
            return  # of an older bundle
        self._keep(key, values, prepared)
        self.ready.emit(kind, layer, head)

    def _forget(self) -> None:
        self._maps.clear()
        self._drawings.clear()
        self._asked = None
        if self._job is not None:
            self._job.drop()
