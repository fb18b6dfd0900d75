"""One cancellable long task on the worker (a scan over many texts, an importance map, an ablation),
with progress, Cancel, and late answers dropped.

The work runs on the model's worker thread (``worker.submit``), so it never races a load or an
analysis. Progress is emitted from that thread through a signal of this object, which lives in the
GUI thread, so Qt queues it to the GUI thread. Cancel sets a ``threading.Event`` the analysis
function checks between its steps (it then raises ``AnalysisCancelled``). Each run has its own
request id: an answer to a run that is no longer the latest — superseded, dropped, or cancelled — is
never delivered as a result (napari's request-id pattern).
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Callable

from PySide6 import QtCore

from analysis.errors import AnalysisCancelled

#: ``work(loaded, progress, cancel) -> value``, run on the worker thread.
Work = Callable[[Any, Callable[[int, int], None], threading.Event], Any]


class Job(QtCore.QObject):
    """Runs ``work`` on the worker; only the latest run's outcome is delivered, as exactly one of
    ``finished(value)``, ``failed(message)`` or ``cancelled()``."""

    started = QtCore.Signal()
    progressed = QtCore.Signal(int, int)  # done, total (the latest run only)
    finished = QtCore.Signal(object)
    failed = QtCore.Signal(str)  # one sentence for the user
    cancelled = QtCore.Signal()
    _progress = QtCore.Signal(int, int, int)  # run, done, total: emitted on the worker thread, queued here

    def __init__(self, worker, name: str, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.worker, self.name = worker, name
        self.request_id = 0  # the worker request of the latest run; 0 when none is in flight
        self._runs = itertools.count(1)
        self._run = 0  # the latest run's number (progress carries it: it is known before the request id)
        self._cancel: threading.Event | None = None
        self._cancelling = False
        self._progress.connect(self._progressed)
        worker.task_done.connect(self._task_done)
        worker.failed.connect(self._failed)

    @property
    def running(self) -> bool:
        return self.request_id != 0

    @property
    def cancelling(self) -> bool:
        return self.running and self._cancelling

    def start(self, work: Work) -> int:
        """Run ``work`` on the worker; a run still in flight is stopped and its answer dropped."""
        self.drop()
        run, event = next(self._runs), threading.Event()
        self._run, self._cancel, self._cancelling = run, event, False
        emit = self._progress.emit

        def task(loaded):
            return work(loaded, lambda done, total: emit(run, int(done), int(total)), event)

        self.request_id = self.worker.submit(self.name, task)
        self.started.emit()
        return self.request_id

    def cancel(self) -> None:
        """Ask the run in flight to stop at its next step; ``cancelled`` follows once the worker has let it go."""
        if self.running and self._cancel is not None:
            self._cancel.set()
            self._cancelling = True

    def drop(self) -> None:
        """Stop the run in flight and forget it: no signal will come for it (its text or model is gone)."""
        if self._cancel is not None:
            self._cancel.set()
        self._cancel, self.request_id, self._cancelling = None, 0, False

    # ----------------------------------------------------------------- from the worker (GUI thread)
    def _progressed(self, run: int, done: int, total: int) -> None:
        if run == self._run and self.running and not self._cancelling:
            self.progressed.emit(done, total)

    def _task_done(self, request_id: int, _name: str, value) -> None:
        if request_id != self.request_id or not self.running:
            return
        cancelling = self._cancelling
        self._cancel, self.request_id, self._cancelling = None, 0, False
        if cancelling:  # it finished before it saw the Cancel: the user asked not to have it
            self.cancelled.emit()
        else:
            self.finished.emit(value)

    def _failed(self, failure) -> None:
        if getattr(failure, "request_id", None) != self.request_id or not self.running:
            return
        cancelling = self._cancelling
        self._cancel, self.request_id, self._cancelling = None, 0, False
        if cancelling or isinstance(getattr(failure, "error", None), AnalysisCancelled):
            self.cancelled.emit()
        else:
            self.failed.emit(failure.message)
