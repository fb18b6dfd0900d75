"""The worker thread: which requests run (superseding), what a newer request interrupts, typed failures, and a
stop that interrupts the work in flight."""
import os
import sys
import threading
import time

import pytest

pytest.importorskip("pytestqt")

from analysis.errors import HubUnreachableError, PickleWeightsError  # noqa: E402
from gui.state.worker import Failure, RequestKind, Worker  # noqa: E402
from helpers import worker_held  # noqa: E402


@pytest.fixture
def worker(qtbot):
    from gui.qt import ensure_qapp

    ensure_qapp()
    w = Worker()
    yield w
    w.stop()


def test_the_running_thread_skips_superseded_requests(qtbot, worker, monkeypatch):
    """While one task blocks the thread, three analyses, a load and another analysis queue up:
    only the load and the last analysis run (in that order)."""
    ran = []
    monkeypatch.setattr(worker, "_do_analyse", lambda r: ran.append(("analyse", r.request_id)))
    monkeypatch.setattr(worker, "_do_load", lambda r: ran.append(("load", r.request_id)))
    worker._loaded = object()
    finished = []
    worker.task_done.connect(lambda _rid, name, _value: finished.append(name))
    with worker_held(worker):
        first = worker.analyse("one")
        worker.analyse("two")
        load = worker.load("bundled")
        last = worker.analyse("three")
        marker = worker.submit("marker", lambda _loaded: None)
    qtbot.waitUntil(lambda: "marker" in finished, timeout=10_000)
    assert ran == [("load", load), ("analyse", last)]
    assert first < load < last < marker


def test_failures_carry_the_exception_object(qtbot, worker):
    worker._loaded = object()

    def refuse(_loaded):
        raise PickleWeightsError("only pickle weights", source="/some/folder")

    with qtbot.waitSignal(worker.failed, timeout=10_000) as blocker:
        request_id = worker.submit("load-ish", refuse)
    failure = blocker.args[0]
    assert isinstance(failure, Failure) and failure.request_id == request_id
    assert failure.kind is RequestKind.TASK and failure.name == "load-ish"
    assert isinstance(failure.error, PickleWeightsError) and failure.error.source == "/some/folder"
    assert failure.message == "only pickle weights"
    with qtbot.waitSignal(worker.failed, timeout=10_000) as blocker:
        worker.submit("hub", lambda _l: (_ for _ in ()).throw(HubUnreachableError("offline", source="gpt2")))
    assert isinstance(blocker.args[0].error, HubUnreachableError)


def test_a_bug_is_reported_in_one_sentence_and_the_worker_keeps_serving(qtbot, worker, capsys):
    worker._loaded = object()
    with qtbot.waitSignal(worker.failed, timeout=10_000) as blocker:
        worker.submit("buggy", lambda _l: 1 / 0)
    assert blocker.args[0].message.startswith("Internal error (ZeroDivisionError")
    assert isinstance(blocker.args[0].error, ZeroDivisionError)
    with qtbot.waitSignal(worker.task_done, timeout=10_000) as blocker:
        worker.submit("fine", lambda _l: 42)
    assert blocker.args == [blocker.args[0], "fine", 42]


def module_calls_until_interrupted(started: threading.Event, calls: list):
    """Work that stands for a long forward pass: torch module calls until the worker's pre-hook stops it
    (30 s at most: a test that sees them all failed)."""
    import torch

    layer = torch.nn.Linear(4, 4)

    def work(*_args):
        started.set()
        deadline = time.monotonic() + 30
        with torch.no_grad():
            while time.monotonic() < deadline:
                layer(torch.ones(1, 4))
                calls.append(1)
        return "ran to its end"

    return work


def test_stop_interrupts_the_forward_in_flight_and_the_thread_ends(worker):
    """Closing the window mid-run: the thread once ran on (a daemon), and Python's exit then killed it inside
    torch, aborting the process. Now stop() interrupts it at its next module call and the thread ends."""
    worker._loaded = object()
    started, calls = threading.Event(), []
    worker.submit("importance", module_calls_until_interrupted(started, calls), cancel=threading.Event())
    assert started.wait(10)
    assert worker.stop(timeout=10)  # the work alone would run 30 s
    assert not worker._thread.is_alive()


def test_stop_lets_an_export_finish_and_skips_what_waits(worker):
    worker._loaded = object()
    started, go, done, skipped = threading.Event(), threading.Event(), [], []
    worker.submit("export", lambda _l: (started.set(), go.wait(10), done.append("written")))  # no cancel
    worker.submit("scratch", lambda _l: skipped.append("ran"))
    assert started.wait(10)
    assert not worker.stop(timeout=0)  # the export holds the thread
    go.set()
    assert worker.stop(timeout=20)
    assert done == ["written"] and skipped == []


def test_a_load_interrupts_a_model_bound_task_at_once_and_says_so(qtbot, worker, monkeypatch):
    """Issue 17 #5: a new model chosen during a 20,000-text scan waited 400 s behind it, with no message. A
    task ended by a load (a scan, an importance map) is interrupted the moment the load is asked for."""
    from analysis.errors import AnalysisCancelled

    loads, analyses = [], []
    monkeypatch.setattr(worker, "_do_load", lambda r: loads.append(r.request_id))
    monkeypatch.setattr(worker, "_do_analyse", lambda r: analyses.append(r.request_id))
    worker._loaded = object()
    started, calls, stopped, failures = threading.Event(), [], [], []
    worker.tasks_stopped.connect(lambda labels, kind: stopped.append((labels, kind)))
    worker.failed.connect(failures.append)
    scan = worker.submit("scan", module_calls_until_interrupted(started, calls), cancel=threading.Event(),
                         ended_by=(RequestKind.LOAD,), label="the scan")
    assert started.wait(10)
    worker.analyse("a text waits behind the scan: it does not end it")
    assert stopped == []
    load = worker.load("bundled")
    assert stopped == [(["the scan"], RequestKind.LOAD)]  # said at once, on the GUI thread
    # the load runs on the worker thread (appended there at once) while the scan's failure is a queued signal:
    # wait for both, or the failure may not have reached this thread yet
    qtbot.waitUntil(lambda: loads == [load] and any(f.request_id == scan for f in failures), timeout=10_000)
    (failure,) = [f for f in failures if f.request_id == scan]
    assert isinstance(failure.error, AnalysisCancelled) and failure.kind is RequestKind.TASK
    assert analyses == []  # the analysis queued before the load was superseded by it: never run


def test_a_new_text_ends_an_analysis_in_flight_silently_and_runs(qtbot, worker, monkeypatch):
    """The running analysis is interrupted at its next module call (its answer would be dropped) and says
    nothing; the newest one runs."""
    started, calls, ran, failures = threading.Event(), [], [], []
    long_forward = module_calls_until_interrupted(started, calls)

    def analyse(request):
        ran.append(request.text)
        if request.text == "old":
            long_forward()

    monkeypatch.setattr(worker, "_do_analyse", analyse)
    worker.failed.connect(failures.append)
    worker.analyse("old")
    assert started.wait(10)
    worker.analyse("new")
    marker = []
    worker.task_done.connect(lambda _rid, name, _value: marker.append(name))
    worker._loaded = object()
    worker.submit("marker", lambda _l: None)
    qtbot.waitUntil(lambda: marker == ["marker"], timeout=10_000)
    assert ran == ["old", "new"] and failures == []


def test_a_task_without_a_cancel_is_never_interrupted(qtbot, worker):
    """An export (no cancel event) runs to its end whatever comes after it."""
    worker._loaded = object()
    started, calls = threading.Event(), []
    gate = threading.Event()

    def export(_loaded):
        started.set()
        gate.wait(10)
        return "complete"

    with qtbot.waitSignal(worker.task_done, timeout=20_000) as blocker:
        worker.submit("export", export)
        assert started.wait(10)
        worker.load("bundled")
        worker.analyse("text")
        gate.set()
    assert blocker.args[1:] == ["export", "complete"]


def test_the_interrupt_hook_leaves_other_threads_alone():
    """torch's global pre-hook only stops a worker thread: a module call here runs whatever workers do."""
    import torch

    from gui.state.worker import _INTERRUPTS, _install_interrupt_hook

    _install_interrupt_hook()
    event = threading.Event()
    event.set()
    _INTERRUPTS[-1] = event  # a stopped worker elsewhere
    try:
        assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).shape == (1, 2)
    finally:
        _INTERRUPTS.pop(-1)


def test_an_analysis_says_its_size_before_the_forward_and_honours_the_token_cap(qtbot, worker, tiny_model_dir):
    """analysis_sized carries the tokens to run and the run's plan (every map kept: layers × heads × tokens² × 4
    bytes), before the result; the bundle carries the plan too."""
    from analysis.model.loading import load_model

    worker._loaded = load_model(str(tiny_model_dir), device="cpu")  # 3 layers × 4 heads
    seen = []
    worker.analysis_sized.connect(lambda rid, n, size: seen.append(("sized", rid, n, size)))
    worker.analysis_ready.connect(lambda bundle: seen.append(("ready", bundle.request_id, bundle.result)))
    with qtbot.waitSignal(worker.analysis_ready, timeout=60_000):
        request_id = worker.analyse("one two three four five six seven eight", bos=False, max_tokens=5)
    (kind, rid, n, size), (kind2, rid2, result) = seen
    assert (kind, kind2, rid, rid2) == ("sized", "ready", request_id, request_id)
    assert n == result.n_tokens == 5 and result.truncated
    assert size.keeps_maps and size.need_bytes == 3 * 4 * 5 * 5 * 4 == result.attentions.size * 4


def test_an_on_demand_analysis_streams_every_layer_and_says_so(qtbot, worker, tiny_model_dir, monkeypatch):
    """ATTNSCOPE_KEEP_MAPS_MB=0: the run computes its maps on demand (run_measured): the plan says so, the streamed
    pass reports each layer up to the last, and the bundle's scores are the streamed ones."""
    from analysis.model.loading import load_model
    from analysis.run.memory import KEEP_MAPS_ENV

    monkeypatch.setenv(KEEP_MAPS_ENV, "0")
    worker._loaded = load_model(str(tiny_model_dir), device="cpu")  # 3 layers × 4 heads
    plans, layers, bundles = [], [], []
    worker.analysis_sized.connect(lambda rid, n, plan: plans.append(plan))
    worker.analysis_progress.connect(lambda rid, done, total: layers.append((done, total)))
    worker.analysis_ready.connect(bundles.append)
    with qtbot.waitSignal(worker.analysis_ready, timeout=60_000):
        worker.analyse("one two three four five six seven eight", bos=False)
    (plan,), (bundle,) = plans, bundles
    assert not plan.keeps_maps and plan.describe().startswith("attention on demand") and bundle.plan is plan
    assert bundle.result.attentions is None and bundle.result.streamed is not None
    assert layers[-1] == (3, 3) and all(total == 3 for _done, total in layers)
    assert bundle.scores is bundle.result.streamed.scores


def test_python_collects_reference_cycles_only_between_qt_events(qtbot):
    """The suite once hung for ever: Python's collector, run by an allocation inside QObject::disconnect (Qt's
    signal mutex held, PySide looking for a Python override), destroyed a QObject of a reference cycle, whose
    destructor waits on that mutex. Collection is automatic no more; a GUI-thread timer collects between events."""
    import gc

    from gui.qt import ensure_qapp

    app = ensure_qapp()
    assert not gc.isenabled() and app._attnscope_gc.timer.isActive()


def test_the_forward_reports_its_blocks_in_order_to_the_last(qtbot, worker, tiny_model_dir):
    """Worker.forward_progress: the forward pass block by block (hooks on the blocks), never backwards, ending at
    (L, L); the hooks are gone afterwards (a later forward of the model reports nothing)."""
    from analysis.model.loading import load_model

    worker._loaded = loaded = load_model(str(tiny_model_dir), device="cpu")  # 3 layers
    hooks_before = [len(block._forward_hooks) for block in loaded.family.blocks(loaded.model)]
    seen = []
    worker.forward_progress.connect(lambda rid, done, total: seen.append((done, total)))
    with qtbot.waitSignal(worker.analysis_ready, timeout=60_000):
        worker.analyse("one two three four five six seven eight", bos=False)
    assert seen and seen[-1] == (3, 3) and [d for d, _ in seen] == sorted(set(d for d, _ in seen))
    assert [len(block._forward_hooks) for block in loaded.family.blocks(loaded.model)] == hooks_before


def test_a_runs_estimate_is_the_pace_of_its_layers_so_far():
    from analysis.display import format_duration, seconds_left

    assert seconds_left(6.0, 3, 27) == pytest.approx(54.0)
    assert seconds_left(2.0, 0, 29) is None  # no layer done: no pace
    assert format_duration(54.4) == "54 s" and format_duration(125) == "2 min" and format_duration(None) == "?"
    assert format_duration(3900) == "1 h 05 min"


def test_receivers_are_called_on_the_gui_thread_and_never_after_they_disconnect(qtbot, worker):
    """Two tasks end while the GUI thread is busy; the receiver disconnects after the first answer: it never hears
    the second (a queued call to a disconnected Python callable crashed the suite), and it ran on the GUI thread."""
    worker._loaded = object()
    heard, threads = [], []

    def receive(_rid, name, _value):
        heard.append(name)
        threads.append(threading.get_ident())
        worker.task_done.disconnect(receive)

    worker.task_done.connect(receive)
    worker.submit("first", lambda _loaded: None)
    worker.submit("second", lambda _loaded: None)
    worker.submit("last", lambda _loaded: None)
    time.sleep(0.5)  # the GUI thread is busy: all three answers wait for it
    ended = []
    worker.task_done.connect(lambda _rid, name, _value: ended.append(name))
    qtbot.waitUntil(lambda: "last" in ended, timeout=10_000)
    assert heard == ["first"]
    assert threads == [threading.get_ident()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own priority is Linux's")
def test_the_worker_thread_yields_the_processor_to_the_gui_thread(worker):
    """gui/state/priority.py: the worker runs at a higher nice value than the GUI thread, and the threads torch
    starts from it inherit it (one started here, in the worker's place, does)."""
    from gui.state.priority import WORKER_NICENESS, lower_this_thread

    gui = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert os.getpriority(os.PRIO_PROCESS, worker._thread.native_id) == min(19, gui + WORKER_NICENESS)
    seen = {}

    def background():
        lower_this_thread()
        child = threading.Thread(target=lambda: seen.update(child=os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        child.start()
        child.join()

    t = threading.Thread(target=background)
    t.start()
    t.join()
    assert seen["child"] == min(19, gui + WORKER_NICENESS)
