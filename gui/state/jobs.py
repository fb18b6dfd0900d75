"""One cancellable long task on the worker (a scan over many texts, an importance map, an ablation),
with progress, Cancel, and late answers dropped.

The work runs on the model's worker thread (``worker.submit``), so it never races a load or an
analysis. Progress is emitted from that thread through a signal of this object, which lives in the
GUI thread, so Qt queues it to the GUI thread. Cancel sets a ``threading.Event`` the analysis
function checks between its steps (it then raises ``AnalysisCancelled``); the worker checks it too, at
every torch module call, so a forward in flight stops as well. Each run has its own
request id: an answer to a run that is no longer the latest — superseded, dropped, or cancelled — is
never delivered as a result (napari's request-id pattern).

A job's results belong to the model it ran on, so a new model's load ends it (``ended_by``; an
ablation also ends with a new text): the worker sets its Cancel the moment the load is asked for, so the
load never waits behind it, and says so (``Worker.tasks_stopped``). :func:`running_jobs` names the jobs
a request of another kind would wait for, with their progress, for the status bar. A short task (a lens, the
From-scratch numbers of one head) is a Job too, for its request ids and its stale answers dropped, but one the
status bar does not name (``announced=False``) and no newer request ends (``ended_by=()``). An export is a Job
that nothing stops once it started (``cancellable=False``): it finishes, complete or absent.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Callable

from PySide6 import QtCore

from analysis.errors import AnalysisCancelled

from .worker import RequestKind

#: ``work(loaded, progress, cancel) -> value``, run on the worker thread.
Work = Callable[[Any, Callable[[int, int], None], threading.Event], Any]

_JOBS: weakref.WeakSet = weakref.WeakSet()  # every Job made, for running_jobs


def running_jobs(worker, kind: RequestKind = RequestKind.ANALYSE) -> list:
    """The jobs on ``worker`` that are running and that a new request of ``kind`` does not end: what it
    waits for. A job already told to stop is not waited for (it stops at its next module call)."""
    return sorted((job for job in list(_JOBS) if job.worker is worker and job.announced and job.running
                   and not job.stopping and kind not in job.ended_by), key=lambda job: job.request_id)


class Job(QtCore.QObject):
    """Runs ``work`` on the worker; only the latest run's outcome is delivered, as exactly one of
    ``finished(value)``, ``failed(message)`` or ``cancelled()``; a cancelled run that kept what it finished
    (``AnalysisCancelled.partial``) after its own Cancel delivers ``partial(value)`` just before ``cancelled()`` (a run
    ended by a newer request — another text, a model — keeps nothing: its results would be of what is gone)."""

    started = QtCore.Signal()
    progressed = QtCore.Signal(int, int)  # done, total (the latest run only)
    finished = QtCore.Signal(object)
    failed = QtCore.Signal(str)  # one sentence for the user
    cancelled = QtCore.Signal()
    partial = QtCore.Signal(object)  # what a cancelled run finished, before ``cancelled``
    _progress = QtCore.Signal(int, int, int)  # run, done, total: emitted on the worker thread, queued here

    def __init__(self, worker, name: str, parent: QtCore.QObject | None = None, *, label: str = "",
                 ended_by=(RequestKind.LOAD,), announced: bool = True, cancellable: bool = True):
        super().__init__(parent)
        self.worker, self.name = worker, name
        self.label = label or f"the {name}"  # in words, for the status bar ("the importance map")
        self.ended_by = frozenset(ended_by)  # the newer requests that end a run (its results would be stale)
        self.announced = announced  # running_jobs names it: a long job the status bar says a new text waits for
        # False: nothing stops a run once started (an export finishes, complete or absent): no Cancel, no newer
        # request, not the worker stopping; ``cancelled`` never comes
        self.cancellable = cancellable
        self.done = self.total = 0  # the latest run's progress
        self.request_id = 0  # the worker request of the latest run; 0 when none is in flight
        self._runs = itertools.count(1)
        self._run = 0  # the latest run's number (progress carries it: it is known before the request id)
        self._cancel: threading.Event | None = None
        self._cancel_asked = False
        self._progress.connect(self._progressed)
        worker.task_done.connect(self._task_done)
        worker.failed.connect(self._failed)
        _JOBS.add(self)

    @property
    def running(self) -> bool:
        return self.request_id != 0

    @property
    def stopping(self) -> bool:
        """A run is in flight and was told to stop (Cancel, or a request that ends it)."""
        return self.running and self._cancel is not None and self._cancel.is_set()

    def start(self, work: Work) -> int:
        """Run ``work`` on the worker; a run still in flight is stopped and its answer dropped."""
        self.drop()
        run, event = next(self._runs), threading.Event()
        self._run, self._cancel = run, event if self.cancellable else None
        self.done = self.total = 0
        self._cancel_asked = False  # set by cancel(): the run's partial result is wanted
        emit = self._progress.emit

        def task(loaded):
            return work(loaded, lambda done, total: emit(run, int(done), int(total)), event)

        self.request_id = self.worker.submit(self.name, task, cancel=self._cancel, ended_by=self.ended_by,
                                             label=self.label)
        self.started.emit()
        return self.request_id

    def cancel(self) -> None:
        """Ask the run in flight to stop at its next step or module call; ``cancelled`` follows once the worker
        has let it go."""
        if self.running and self._cancel is not None:
            self._cancel_asked = True
            self._cancel.set()

    def drop(self) -> None:
        """Stop the run in flight and forget it: no signal will come for it (its text or model is gone)."""
        if self._cancel is not None:
            self._cancel.set()
        self._cancel, self.request_id = None, 0

    # ----------------------------------------------------------------- from the worker (GUI thread)
    def _progressed(self, run: int, done: int, total: int) -> None:
        if run == self._run and self.running and not self.stopping:
            self.done, self.total = done, total
            self.progressed.emit(done, total)

    def _task_done(self, request_id: int, _name: str, value) -> None:
        if request_id != self.request_id or not self.running:
            return
        cancelling = self.stopping
        self._cancel, self.request_id = None, 0
        if cancelling:  # it finished before it saw the Cancel: the user (or a new model) asked not to have it
            self.cancelled.emit()
        else:
            self.finished.emit(value)

    def _failed(self, failure) -> None:
        if getattr(failure, "request_id", None) != self.request_id or not self.running:
            return
        cancelling = self.stopping
        self._cancel, self.request_id = None, 0
        error = getattr(failure, "error", None)
        if cancelling or (self.cancellable and isinstance(error, AnalysisCancelled)):
            if isinstance(error, AnalysisCancelled) and error.partial is not None and self._cancel_asked:
                self.partial.emit(error.partial)
            self.cancelled.emit()
        else:
            self.failed.emit(failure.message)
