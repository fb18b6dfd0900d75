"""Requests behind a long job in the window (a scan, an importance map): a new model stops a scan at once, a
new text waits for a scan and says so, and a new text stops an importance map."""
import threading

import pytest

pytest.importorskip("pytestqt")

from helpers import WAIT_MS, hold_at_call, run  # noqa: E402


def long_job(window, total: int, go: threading.Event):
    """A job as the scan dialog makes it (gui.state.jobs.Job, named "scan"), running until ``go`` or its Cancel."""
    from analysis.errors import AnalysisCancelled
    from gui.state.jobs import Job

    job = Job(window.worker, "scan")
    outcome = []
    job.finished.connect(outcome.append)
    job.cancelled.connect(lambda: outcome.append("cancelled"))

    def work(_loaded, progress, cancel):
        progress(total // 4, total)
        for _ in range(3000):  # at most 300 s: as the scan, it looks at its Cancel between batches
            if go.is_set():
                return "scanned"
            if cancel.wait(0.1):
                raise AnalysisCancelled("Scan cancelled.")
        return "scanned"

    job.start(work)
    return job, outcome


def test_a_new_model_stops_a_scan_at_once_and_says_so(qtbot, window, tiny_model_dir):
    """A new model chosen during a 20,000-text scan had not loaded 400 s later, with no message: its load
    waited behind the scan. Now the load ends the scan the moment it is asked for, and the status bar says so."""
    job, outcome = long_job(window, 20_000, threading.Event())
    qtbot.waitUntil(lambda: job.done == 5_000, timeout=WAIT_MS)
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))
        assert window.statusBar().currentMessage() == "Stopped the scan: a new model is loading."
    qtbot.waitUntil(lambda: outcome == ["cancelled"], timeout=WAIT_MS)


def test_a_text_waiting_for_a_scan_that_a_new_model_stops_no_longer_says_it_waits(qtbot, window, tiny_model_dir):
    """The status bar went on saying "waiting for the scan (12 % done)…" beside "Stopped the scan" while the new
    model loaded: the text no longer waits for that scan."""
    job, outcome = long_job(window, 20_000, threading.Event())
    qtbot.waitUntil(lambda: job.done == 5_000, timeout=WAIT_MS)
    window.set_text("A text typed while the scan runs.")
    window.run_text()
    assert window.status_run.text().startswith("waiting for the scan")
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model(str(tiny_model_dir))
        assert "waiting for the scan" not in window.status_run.text()
    qtbot.waitUntil(lambda: outcome == ["cancelled"], timeout=WAIT_MS)


def test_a_text_run_during_a_scan_says_at_once_what_it_waits_for(qtbot, window):
    """A new text does not end a scan (its scores are not the text's): the run waits, and says so at once."""
    go = threading.Event()
    job, outcome = long_job(window, 20, go)
    qtbot.waitUntil(lambda: job.done == 5, timeout=WAIT_MS)
    window.set_text("A text typed while the scan runs.")
    window.run_text()
    assert window.status_run.text() == "waiting for the scan (25 % done) to finish before running the text…"
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        go.set()
    assert outcome == ["scanned"] and window.bundle.result.text == "A text typed while the scan runs."
    assert window.status_run.text().startswith("last run")


def test_a_text_run_during_an_importance_map_stops_it_at_once_and_runs(qtbot, window, monkeypatch):
    """A text typed during an importance map was not analysed 300 s later. The map is of the text on screen,
    so a new text ends it at its next forward (the status bar says so) and the new text runs."""
    import analysis.measures.ablation as ablation_module
    from gui.tabs.ablation.ablation_tab import AblationTab

    run(qtbot, window, "The cat sat on the mat because it was tired.")
    panel = window.tab(AblationTab)
    shown = []
    panel.importance_shown.connect(shown.append)
    monkeypatch.setattr(ablation_module, "STREAM_TOKENS", 1)  # one layer's heads a batch
    calls, reached, go = hold_at_call(monkeypatch, ablation_module, "_decoded_losses", 3)  # baseline, layer 0, layer 1
    panel.start_importance()
    qtbot.waitUntil(reached.is_set, timeout=WAIT_MS)
    window.set_text("Another text, typed while the map runs.")
    window.run_text()
    assert window.statusBar().currentMessage() == "Stopped the importance map: a new text is running."
    with qtbot.waitSignal(window.result_shown, timeout=WAIT_MS):
        go.set()
    assert window.bundle.result.text == "Another text, typed while the map runs."
    assert shown == [] and len(calls) < window.bundle.result.n_layer + 1  # it stopped at layer 1 of 3
