"""One long-lived worker thread that owns the model; the UI talks to it with requests and
hears back through past-tense Qt signals (``model_loaded``, ``analysis_ready``, ``failed`` …).

- The thread is a plain Python daemon thread reading a request queue; signals emitted from
  it are queued to the receivers in the GUI thread.
- A newer request of the same kind supersedes older ones still waiting (typing fast sends
  many analyse requests: only the latest runs). Results carry their request id, so the window
  can also drop a late answer to an old request.
- Every request is wrapped: an exception becomes a ``failed`` signal carrying a frozen
  :class:`Failure` (the request id, what kind of request it was, the exception object itself and a
  one-line message), and the worker keeps serving (a failed load leaves the previous model in
  place). The UI decides what to offer from the exception's class (``PickleWeightsError`` → "Load
  anyway", ``HubUnreachableError`` → "Retry"), never from the message text.
- The thread is a daemon: closing the window never waits for a forward pass or a download to end.
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from enum import Enum
from typing import Any

from PySide6 import QtCore

from analysis.errors import AttnScopeError


@dataclass(frozen=True)
class LoadRequest:
    request_id: int
    source: str
    device: str = "auto"
    dtype: str = "float32"
    allow_pickle: bool = False


@dataclass(frozen=True)
class AnalyseRequest:
    request_id: int
    text: str
    bos: bool | None
    max_tokens: int | None = None  # the token cap (None: inference.DEFAULT_MAX_TOKENS)


@dataclass(frozen=True)
class TaskRequest:
    """Any other work that needs the model (parity, exports): ``task(loaded) -> value``."""

    request_id: int
    name: str
    task: Any


@dataclass(frozen=True)
class AnalysisBundle:
    """What an analyse request produced: the frozen result and every head score."""

    request_id: int
    result: Any  # AttentionResult
    scores: Any  # HeadScores
    seconds: float


class RequestKind(Enum):
    LOAD = "load"
    ANALYSE = "analyse"
    TASK = "task"


@dataclass(frozen=True)
class Failure:
    """Why a request failed. ``message`` is one sentence for the user; ``error`` is the exception raised
    (an ``AttnScopeError`` subclass for every failure a user can cause); ``name`` is the task name for
    ``RequestKind.TASK`` (e.g. "scratch", "export") and the kind's value otherwise."""

    request_id: int
    kind: RequestKind
    name: str
    error: BaseException
    message: str


_STOP = object()


class Worker(QtCore.QObject):
    devices_found = QtCore.Signal(list)
    load_started = QtCore.Signal(int, str)
    load_progress = QtCore.Signal(str, object, object)  # message, done bytes, total bytes (ints may exceed 2^31)
    model_loaded = QtCore.Signal(int, object)  # request id, ModelInfo
    analysis_started = QtCore.Signal(int)
    # request id, tokens to run, bytes their attention will take (inference.attention_memory_bytes): sent
    # after tokenising, before the forward pass, so a long run says what it costs while it runs
    analysis_sized = QtCore.Signal(int, int, object)
    analysis_ready = QtCore.Signal(object)  # AnalysisBundle
    task_done = QtCore.Signal(int, str, object)  # request id, name, value
    failed = QtCore.Signal(object)  # Failure

    def __init__(self):
        super().__init__()
        self._ids = itertools.count(1)
        self._queue: queue.Queue = queue.Queue()
        self._cancel_load = threading.Event()
        self._loaded = None
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="attnscope-worker", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- requests (GUI thread)
    def next_id(self) -> int:
        return next(self._ids)

    def load(self, source: str, device: str = "auto", dtype: str = "float32", allow_pickle: bool = False) -> int:
        request = LoadRequest(self.next_id(), source, device, dtype, allow_pickle)
        self._cancel_load.clear()
        self._queue.put(request)
        return request.request_id

    def cancel_load(self) -> None:
        self._cancel_load.set()

    def analyse(self, text: str, bos: bool | None = None, max_tokens: int | None = None) -> int:
        request = AnalyseRequest(self.next_id(), text, bos, max_tokens)
        self._queue.put(request)
        return request.request_id

    def submit(self, name: str, task) -> int:
        request = TaskRequest(self.next_id(), name, task)
        self._queue.put(request)
        return request.request_id

    def stop(self, timeout: float = 0.1) -> bool:
        """Ask the thread to finish (cancelling a download) and wait at most ``timeout`` seconds.

        A forward pass cannot be interrupted; the thread is a daemon, so a process that is quitting
        never waits for it. Returns whether the thread has ended."""
        self._stopping = True  # from now on the thread emits nothing (see _emit)
        self._cancel_load.set()
        self._queue.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ----------------------------------------------------------------- the thread
    def _emit(self, signal, *args) -> None:
        """Emit ``signal`` unless the worker was stopped: a thread still finishing a load or a forward after
        its window closed must not signal into Qt while the GUI thread builds or tears down other windows."""
        if not self._stopping:
            signal.emit(*args)

    def _serve(self) -> None:
        try:
            from analysis.devices import available_devices

            self._emit(self.devices_found, available_devices())
        except Exception:  # torch missing or broken: loading will say why
            self._emit(self.devices_found, ["auto", "cpu"])
        while True:
            batch = [self._queue.get()]
            while True:  # take everything waiting, so stale requests can be skipped
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if any(r is _STOP for r in batch):
                return
            for request in self._without_superseded(batch):
                self._handle(request)

    @staticmethod
    def _without_superseded(batch: list) -> list:
        """The requests of ``batch`` (in order) worth running: only the newest load and the newest analyse
        (an older one's answer would be dropped anyway), and no analyse that a later load would make stale
        (the window analyses again once the new model is there). Tasks always run."""
        last_of_kind = {}
        for index, request in enumerate(batch):
            if isinstance(request, (LoadRequest, AnalyseRequest)):
                last_of_kind[type(request)] = index
        kept = []
        for index, request in enumerate(batch):
            if isinstance(request, (LoadRequest, AnalyseRequest)) and last_of_kind[type(request)] != index:
                continue
            if isinstance(request, AnalyseRequest) and any(isinstance(r, LoadRequest) for r in batch[index + 1:]):
                continue  # the model will change: analyse again after the load instead
            kept.append(request)
        return kept

    def _handle(self, request) -> None:
        if isinstance(request, LoadRequest):
            kind, name = RequestKind.LOAD, RequestKind.LOAD.value
        elif isinstance(request, AnalyseRequest):
            kind, name = RequestKind.ANALYSE, RequestKind.ANALYSE.value
        else:
            kind, name = RequestKind.TASK, request.name
        try:
            if kind is RequestKind.LOAD:
                self._do_load(request)
            elif kind is RequestKind.ANALYSE:
                self._do_analyse(request)
            else:
                if self._loaded is None:
                    raise AttnScopeError("No model is loaded yet.")
                self._emit(self.task_done, request.request_id, request.name, request.task(self._loaded))
        except AttnScopeError as exc:
            self._emit(self.failed, Failure(request.request_id, kind, name, exc, str(exc)))
        except MemoryError as exc:
            self._emit(self.failed, Failure(request.request_id, kind, name, exc,
                                     "Out of memory: try a shorter text or a smaller model."))
        except Exception as exc:  # a bug: report it, keep serving
            traceback.print_exc()
            self._emit(self.failed, Failure(request.request_id, kind, name, exc,
                                     f"Internal error ({type(exc).__name__}: {exc}); please report it."))

    def _do_load(self, request: LoadRequest) -> None:
        from analysis.loading import load_model

        self._emit(self.load_started, request.request_id, request.source)
        last = [0.0]

        def progress(message: str, done: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] > 0.1 or (total and done >= total):
                last[0] = now
                self._emit(self.load_progress, message, int(done), int(total))

        loaded = load_model(request.source, request.device, request.dtype, request.allow_pickle,
                            progress=progress, cancel=self._cancel_load)
        self._loaded = loaded  # the previous model is released here, after the new one loaded
        self._emit(self.model_loaded, request.request_id, loaded.info)

    def _do_analyse(self, request: AnalyseRequest) -> None:
        from analysis.head_scores import all_scores
        from analysis.inference import attention_memory_bytes, run_text, tokenize

        loaded = self._loaded
        if loaded is None:
            raise AttnScopeError("No model is loaded yet.")
        self._emit(self.analysis_started, request.request_id)
        started = time.perf_counter()
        use_bos = loaded.prepend_bos_default if request.bos is None else bool(request.bos)
        use_bos = use_bos and bool(loaded.special_ids([], special=True))  # as run_text decides it
        n_tokens = len(tokenize(loaded, request.text, use_bos, request.max_tokens)[0])
        self._emit(self.analysis_sized, request.request_id, n_tokens,
                                 attention_memory_bytes(loaded.n_layer, loaded.n_head, n_tokens))
        result = run_text(loaded, request.text, bos=request.bos, request_id=request.request_id,
                          max_tokens=request.max_tokens)
        scores = all_scores(result)
        self._emit(self.analysis_ready, AnalysisBundle(request.request_id, result, scores, time.perf_counter() - started))
