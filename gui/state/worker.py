"""One long-lived worker thread that owns the model; the UI talks to it with requests and
hears back through past-tense Qt signals (``model_loaded``, ``analysis_ready``, ``failed`` …).

- The thread is a plain Python daemon thread reading a request queue (a daemon, so that a worker
  nobody stopped never keeps a process alive). It never emits a public signal itself: it hands each
  one to the GUI thread (``_carried``, a queued connection to a slot of the worker), which emits it
  there, so every receiver is called on the GUI thread directly. A Python callable connected to a
  signal emitted from a foreign thread gets a queued call that can outlive the connection (a
  pytest-qt blocker disconnected while a second ``task_done`` waited in the queue crashed the
  suite).
- A newer request supersedes the older ones it makes worthless, the moment it is made: a load
  supersedes every load, analysis and model-bound task before it (their answers would be about the
  old model), an analysis every analysis before it (typing fast sends many: only the latest runs).
  A superseded request still waiting is skipped; one running is interrupted at its next module
  call (a forward pre-hook on every torch module, :func:`_check_interrupt`), so a long forward pass
  never holds up the new model or text. Tasks say what ends them when submitted (``ended_by``):
  gui/state/jobs.py's scans and importance maps are ended by a load, the ablations also by a new text;
  ``tasks_stopped`` tells the window which, so the status bar can say so.
- Results carry their request id, so the window can also drop a late answer to an old request.
- Every request is wrapped: an exception becomes a ``failed`` signal carrying a frozen
  :class:`Failure` (the request id, what kind of request it was, the exception object itself and a
  one-line message), and the worker keeps serving (a failed load leaves the previous model in
  place). The UI decides what to offer from the exception's class (``PickleWeightsError`` → "Load
  anyway", ``HubUnreachableError`` → "Retry"), never from the message text.
- Stopping (the window closes) interrupts what runs the same way (an export, which has no cancel,
  finishes: complete or absent) and skips what waits. The app waits for the thread before Qt and Python
  go away (gui/app.py): a daemon thread still inside torch when the interpreter finalises is
  killed by a forced unwind that aborts the process ("terminate called without an active exception").
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from PySide6 import QtCore

from analysis.errors import AnalysisCancelled, AttnScopeError

from .priority import lower_this_thread


#: Milliseconds between the worker's hand-over reaching the GUI thread and its signal being emitted there
#: (Worker._deliver: a timer, so that what receives it does not run in one pass with the paints).
DELIVERY_GAP_MS = 1


class RequestKind(Enum):
    LOAD = "load"
    ANALYSE = "analyse"
    TASK = "task"


def _event() -> threading.Event:
    return field(default_factory=threading.Event, compare=False, repr=False)


@dataclass(frozen=True)
class LoadRequest:
    request_id: int
    source: str
    device: str = "auto"
    dtype: str = "float32"
    allow_pickle: bool = False
    cancel: threading.Event = _event()  # set: the Cancel button, a newer load, or the worker stopping


@dataclass(frozen=True)
class AnalyseRequest:
    request_id: int
    text: str
    bos: bool | None
    max_tokens: int | None = None  # the token cap (None: inference.DEFAULT_MAX_TOKENS)
    chat: bool = False  # the text as one user turn of the model's chat template (run_text's chat; bos not used)
    cancel: threading.Event = _event()  # set: a newer analysis or load, or the worker stopping


@dataclass(frozen=True)
class TaskRequest:
    """Any other work that needs the model (parity, exports): ``task(loaded) -> value``.

    ``cancel``: the event the task's own work checks (gui/state/jobs.py passes its Cancel); with it the task
    can be interrupted, and ``ended_by`` names the newer requests that end it. Without it the task
    always runs to its end (an export)."""

    request_id: int
    name: str
    task: Any
    cancel: threading.Event | None = field(default=None, compare=False, repr=False)
    ended_by: frozenset = frozenset()  # RequestKind.LOAD, RequestKind.ANALYSE
    label: str = ""  # the task in words, for the status bar ("the importance map")


@dataclass(frozen=True)
class AnalysisBundle:
    """What an analyse request produced: the frozen result and every head score."""

    request_id: int
    result: Any  # AttentionResult
    scores: Any  # HeadScores
    seconds: float
    plan: Any = None  # run.memory.RunPlan: how the run held its attention and what that took (None: not known)


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


class Interrupt(BaseException):
    """Raised in the worker thread at a module call once the request running there was superseded or
    the worker stopped. A BaseException, so that no ``except Exception`` on the way (a family adapter's,
    a load's check) turns it into a message: the worker catches it itself (:meth:`Worker._handle`)."""


_INTERRUPTS: dict[int, threading.Event] = {}  # worker thread id → the event of the request it runs
_HOOK_LOCK = threading.Lock()
_hook_installed = False


def _check_interrupt(_module, _args) -> None:
    """torch's global forward pre-hook: raise :class:`Interrupt` in a worker thread whose request is over.
    Any other thread (a test, the command line) finds no event and runs on."""
    event = _INTERRUPTS.get(threading.get_ident())
    if event is not None and event.is_set():
        raise Interrupt


def _install_interrupt_hook() -> None:
    global _hook_installed
    with _HOOK_LOCK:
        if not _hook_installed:
            from torch.nn.modules.module import register_module_forward_pre_hook

            register_module_forward_pre_hook(_check_interrupt)
            _hook_installed = True


_STOP = object()


class Worker(QtCore.QObject):
    devices_found = QtCore.Signal(list)
    load_started = QtCore.Signal(int, str)
    load_progress = QtCore.Signal(str, object, object)  # message, done bytes, total bytes (ints may exceed 2^31)
    # request id, why the model just loaded has no chat format to run a text in (analysis.run.chat.chat_problem,
    # one sentence) or None when it has one: sent just before its model_loaded
    chat_format_checked = QtCore.Signal(int, object)
    model_loaded = QtCore.Signal(int, object)  # request id, ModelInfo
    analysis_started = QtCore.Signal(int)
    # request id, tokens to run, how the run will hold its attention and what it takes (run.memory.RunPlan; None
    # when it will not fit: the run's failure says why): sent after tokenising, before the forward pass, so a long
    # run says what it costs while it runs
    analysis_sized = QtCore.Signal(int, int, object)
    # request id, layers streamed, layers in all: an on-demand run's pass over every layer after its forward
    # (measures.measured.run_measured's on_layer), at most ten a second and always the last
    analysis_progress = QtCore.Signal(int, int, int)
    # request id, blocks done, blocks in all: the run's forward pass, block by block (hooks on the model's blocks),
    # at most ten a second and always the last; never backwards (a second, shorter forward, e.g. the induction probe's,
    # is not counted again)
    forward_progress = QtCore.Signal(int, int, int)
    analysis_ready = QtCore.Signal(object)  # AnalysisBundle
    task_done = QtCore.Signal(int, str, object)  # request id, name, value
    failed = QtCore.Signal(object)  # Failure
    # emitted on the GUI thread when a load or an analysis request ends tasks in flight: their labels
    # ("the scan") and the RequestKind that ended them
    tasks_stopped = QtCore.Signal(list, object)
    # the worker thread's emits on their way to the GUI thread: the public signal, its arguments (see _emit)
    _carried = QtCore.Signal(object, object)

    def __init__(self):
        super().__init__()
        self._carried.connect(self._deliver, QtCore.Qt.ConnectionType.QueuedConnection)
        self._ids = itertools.count(1)
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._live: dict[int, Any] = {}  # requests made and not yet ended (waiting or running), by id
        self._loaded = None
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="attnscope-worker", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- requests (GUI thread)
    def next_id(self) -> int:
        return next(self._ids)

    def load(self, source: str, device: str = "auto", dtype: str = "float32", allow_pickle: bool = False) -> int:
        return self._put(LoadRequest(self.next_id(), source, device, dtype, allow_pickle), RequestKind.LOAD)

    def cancel_load(self) -> None:
        with self._lock:
            for request in self._live.values():
                if isinstance(request, LoadRequest):
                    request.cancel.set()

    def analyse(self, text: str, bos: bool | None = None, max_tokens: int | None = None, chat: bool = False) -> int:
        return self._put(AnalyseRequest(self.next_id(), text, bos, max_tokens, bool(chat)), RequestKind.ANALYSE)

    def submit(self, name: str, task, cancel: threading.Event | None = None, ended_by=(), label: str = "") -> int:
        """Queue ``task(loaded)``; with ``cancel`` it can be interrupted, and the newer requests of the
        kinds in ``ended_by`` end it (see :class:`TaskRequest`)."""
        return self._put(TaskRequest(self.next_id(), name, task, cancel, frozenset(ended_by), label or f"the {name}"),
                         RequestKind.TASK)

    def _put(self, request, kind: RequestKind) -> int:
        stopped = []
        with self._lock:
            for old in self._live.values():
                if self._supersedes(kind, old) and not old.cancel.is_set():
                    old.cancel.set()
                    if isinstance(old, TaskRequest):
                        stopped.append(old.label)
            self._live[request.request_id] = request
        self._queue.put(request)
        if stopped:
            self.tasks_stopped.emit(stopped, kind)
        return request.request_id

    @staticmethod
    def _supersedes(kind: RequestKind, old) -> bool:
        """Whether a new request of ``kind`` makes ``old`` worthless (see the module docstring)."""
        if isinstance(old, TaskRequest):
            return old.cancel is not None and kind in old.ended_by
        if isinstance(old, LoadRequest):
            return kind is RequestKind.LOAD
        return kind in (RequestKind.LOAD, RequestKind.ANALYSE)

    def stop(self, timeout: float = 0.1) -> bool:
        """End the thread: what runs is interrupted (an export finishes), what waits is skipped; wait at
        most ``timeout`` seconds for it. From now on the thread emits nothing. Returns whether it has ended."""
        self._stopping = True  # from now on the thread emits nothing (see _emit) and starts no request
        with self._lock:
            for request in self._live.values():
                if request.cancel is not None:
                    request.cancel.set()
        self._queue.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ----------------------------------------------------------------- the thread
    def _emit(self, signal, *args) -> None:
        """Have ``signal`` emitted on the GUI thread (:meth:`_deliver`) unless the worker was stopped: a thread
        still finishing a load or a forward after its window closed must not signal into Qt while the GUI
        thread builds or tears down other windows."""
        if not self._stopping:
            self._carried.emit(signal, args)

    @QtCore.Slot(object, object)
    def _deliver(self, signal, args) -> None:
        """On the GUI thread: emit what the worker thread handed over, unless the worker was stopped since, from a
        :data:`DELIVERY_GAP_MS` timer rather than from the queued call itself.

        The queued call is a posted event, and Qt delivers the events posted while it delivers posted events in the
        same pass, timers only after them: a result drawn from the posted call chained its receivers' work with the
        paint it asked for and the paints already waiting (bench: a new head's map, 9 ms of drawing, then 12 ms of
        painting, one 21 ms stretch at 2,048 tokens). From a timer the receivers run in the timer phase of one
        turn and their paint in the next, with the other timers served between them. The order of what the worker
        hands over is kept (timers of one interval fire in the order they were started)."""
        if not self._stopping:
            QtCore.QTimer.singleShot(DELIVERY_GAP_MS, self, lambda: self._emit_here(signal, args))

    def _emit_here(self, signal, args) -> None:
        if not self._stopping:
            signal.emit(*args)

    def _serve(self) -> None:
        lower_this_thread()  # before torch starts its threads from here: they inherit it (gui/state/priority.py)
        try:
            from analysis.model.devices import available_devices

            self._emit(self.devices_found, available_devices())
        except Exception:  # torch missing or broken: loading will say why
            self._emit(self.devices_found, ["auto", "cpu"])
        try:
            _install_interrupt_hook()
        except Exception:  # no torch: nothing to interrupt
            pass
        while True:
            request = self._queue.get()
            if request is _STOP:
                return
            try:
                self._handle(request)
            finally:
                with self._lock:
                    self._live.pop(request.request_id, None)

    def _handle(self, request) -> None:
        if isinstance(request, LoadRequest):
            kind, name = RequestKind.LOAD, RequestKind.LOAD.value
        elif isinstance(request, AnalyseRequest):
            kind, name = RequestKind.ANALYSE, RequestKind.ANALYSE.value
        else:
            kind, name = RequestKind.TASK, request.name
        cancel = request.cancel
        try:
            if self._stopping:
                return  # the window is gone: nothing new starts
            if cancel is not None and cancel.is_set():
                raise Interrupt  # superseded (or cancelled) while it waited
            if cancel is not None:
                _INTERRUPTS[threading.get_ident()] = cancel
            try:
                if kind is RequestKind.LOAD:
                    self._do_load(request)
                elif kind is RequestKind.ANALYSE:
                    self._do_analyse(request)
                else:
                    if self._loaded is None:
                        raise AttnScopeError("No model is loaded yet.")
                    self._emit(self.task_done, request.request_id, request.name, request.task(self._loaded))
            finally:
                _INTERRUPTS.pop(threading.get_ident(), None)
        except Interrupt:
            # a superseded analysis ends in silence (a newer one is on its way); a load or a task says it
            # was cancelled, for the window to ignore (superseded) or show (its own Cancel)
            if kind is not RequestKind.ANALYSE:
                error = AnalysisCancelled("Cancelled.")
                if kind is RequestKind.LOAD:
                    from analysis.model.hub import DownloadCancelled

                    error = DownloadCancelled("Loading cancelled.")
                self._emit(self.failed, Failure(request.request_id, kind, name, error, str(error)))
        except AttnScopeError as exc:
            if kind is RequestKind.ANALYSE and cancel.is_set():
                return  # superseded: as above
            self._emit(self.failed, Failure(request.request_id, kind, name, exc, str(exc)))
        except MemoryError as exc:
            self._emit(self.failed, Failure(request.request_id, kind, name, exc,
                                     "Out of memory: try a shorter text or a smaller model."))
        except Exception as exc:  # a bug: report it, keep serving
            if not self._stopping:  # after the window closed nobody can act on it
                traceback.print_exc()
            self._emit(self.failed, Failure(request.request_id, kind, name, exc,
                                     f"Internal error ({type(exc).__name__}: {exc}); please report it."))

    def _do_load(self, request: LoadRequest) -> None:
        from analysis.model.loading import load_model
        from analysis.run.chat import chat_problem

        self._emit(self.load_started, request.request_id, request.source)
        last = [0.0, ""]

        def progress(message: str, done: int, total: int) -> None:
            # at most ten a second, but never a new step's first message (it may be the last for a while)
            now = time.monotonic()
            if now - last[0] > 0.1 or (total and done >= total) or message != last[1]:
                last[0], last[1] = now, message
                self._emit(self.load_progress, message, int(done), int(total))

        loaded = load_model(request.source, request.device, request.dtype, request.allow_pickle,
                            progress=progress, cancel=request.cancel)
        problem = chat_problem(loaded)
        self._loaded = loaded  # the previous model is released here, after the new one loaded
        self._emit(self.chat_format_checked, request.request_id, problem)
        self._emit(self.model_loaded, request.request_id, loaded.info)

    def _do_analyse(self, request: AnalyseRequest) -> None:
        from analysis.errors import InputError
        from analysis.measures.head_scores import all_scores
        from analysis.measures.measured import run_measured
        from analysis.run.memory import plan_run_of

        loaded = self._loaded
        if loaded is None:
            raise AttnScopeError("No model is loaded yet.")
        self._emit(self.analysis_started, request.request_id)
        started = time.perf_counter()
        plans = []
        last = [0.0]

        def sized(n_tokens: int) -> None:
            try:
                plans.append(plan_run_of(loaded, n_tokens))  # what run_text plans next (it refuses what cannot run)
            except InputError:
                plans.append(None)
            self._emit(self.analysis_sized, request.request_id, n_tokens, plans[-1])

        def streamed(layer: int) -> None:
            now = time.monotonic()
            if now - last[0] > 0.1 or layer == loaded.n_layer - 1:
                last[0] = now
                self._emit(self.analysis_progress, request.request_id, layer + 1, loaded.n_layer)

        blocks = list(loaded.family.blocks(loaded.model))
        forward_done = [0, 0.0]  # the most blocks reported done, when last reported

        def block_done(index: int):
            def hook(_module, _args, _output):
                now = time.monotonic()
                if index + 1 > forward_done[0] and (now - forward_done[1] > 0.1 or index + 1 == len(blocks)):
                    forward_done[:] = [index + 1, now]
                    self._emit(self.forward_progress, request.request_id, index + 1, len(blocks))
            return hook

        handles = [block.register_forward_hook(block_done(index)) for index, block in enumerate(blocks)]
        try:
            result = run_measured(loaded, request.text, on_layer=streamed, bos=request.bos,
                                  request_id=request.request_id, max_tokens=request.max_tokens, on_sized=sized,
                                  chat=request.chat)
        finally:
            for handle in handles:
                handle.remove()
        scores = all_scores(result)
        self._emit(self.analysis_ready, AnalysisBundle(request.request_id, result, scores, time.perf_counter() - started,
                                                       plans[-1] if plans else None))
