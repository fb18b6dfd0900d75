"""The worker thread: which queued requests run (superseding), typed failures, and a stop that never waits."""
import threading
import time

import pytest

pytest.importorskip("pytestqt")

from analysis.errors import HubUnreachableError, PickleWeightsError  # noqa: E402
from gui.worker import AnalyseRequest, Failure, LoadRequest, RequestKind, TaskRequest, Worker  # noqa: E402
from helpers import worker_held  # noqa: E402


def ids(requests):
    return [r.request_id for r in requests]


def test_only_the_newest_load_and_analyse_of_a_batch_run():
    task = TaskRequest(3, "scratch", None)
    batch = [AnalyseRequest(1, "a", None), AnalyseRequest(2, "ab", None), task, AnalyseRequest(4, "abc", None)]
    assert ids(Worker._without_superseded(batch)) == [3, 4]
    batch = [LoadRequest(1, "gpt2"), LoadRequest(2, "bundled"), AnalyseRequest(3, "x", None)]
    assert ids(Worker._without_superseded(batch)) == [2, 3]


def test_an_analyse_queued_before_a_load_is_dropped():
    batch = [AnalyseRequest(1, "x", None), LoadRequest(2, "bundled"), TaskRequest(3, "export", None)]
    assert ids(Worker._without_superseded(batch)) == [2, 3]  # the window analyses again once the model is there
    batch = [LoadRequest(1, "bundled"), AnalyseRequest(2, "x", None)]
    assert ids(Worker._without_superseded(batch)) == [1, 2]  # after the load: kept


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


def test_stop_does_not_wait_for_work_in_flight(worker):
    worker._loaded = object()
    started = threading.Event()
    worker.submit("slow", lambda _l: (started.set(), time.sleep(3)))
    assert started.wait(10)
    t0 = time.perf_counter()
    worker.stop()
    assert time.perf_counter() - t0 < 0.5
    assert worker._thread.daemon  # the process can exit while the forward pass finishes


def test_an_analysis_says_its_size_before_the_forward_and_honours_the_token_cap(qtbot, worker, tiny_model_dir):
    """analysis_sized carries the tokens to run and layers × heads × tokens² × 4 bytes, before the result."""
    from analysis.loading import load_model

    worker._loaded = load_model(str(tiny_model_dir), device="cpu")  # 3 layers × 4 heads
    seen = []
    worker.analysis_sized.connect(lambda rid, n, size: seen.append(("sized", rid, n, size)))
    worker.analysis_ready.connect(lambda bundle: seen.append(("ready", bundle.request_id, bundle.result)))
    with qtbot.waitSignal(worker.analysis_ready, timeout=60_000):
        request_id = worker.analyse("one two three four five six seven eight", bos=False, max_tokens=5)
    (kind, rid, n, size), (kind2, rid2, result) = seen
    assert (kind, kind2, rid, rid2) == ("sized", "ready", request_id, request_id)
    assert n == result.n_tokens == 5 and result.truncated
    assert size == 3 * 4 * 5 * 5 * 4 == result.attentions.size * 4
