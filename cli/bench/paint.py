"""The GUI side of the benchmark: painting the grid and one head offscreen, and the longest stall of the
real window's GUI thread while a run is in flight and painted."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .workload import median_time, text_of_length


class BusyStretches:
    """The GUI thread's stretches of work between two waits of its event loop, in that thread's own CPU time
    (``time.thread_time``): the CPU time from one ``aboutToBlock`` of the event dispatcher to the next, which is every
    event handled in one pass (paints included), since waiting takes none. What AttnScope asks of the GUI thread, which
    another process's load does not lengthen (the wall clock's gaps it does). ``longest_ms`` the longest since
    :meth:`start`."""

    def __init__(self):
        from PySide6 import QtCore

        self.dispatcher = QtCore.QAbstractEventDispatcher.instance()
        self.last: float | None = None
        self.longest_ms = 0.0
        self.dispatcher.aboutToBlock.connect(self._blocking)

    def start(self) -> None:
        self.longest_ms, self.last = 0.0, time.thread_time()

    def stop(self) -> float:
        self._blocking()
        self.last = None
        return self.longest_ms

    def _blocking(self) -> None:
        if self.last is not None:
            now = time.thread_time()
            self.longest_ms = max(self.longest_ms, (now - self.last) * 1000)
            self.last = now

    def close(self) -> None:
        self.dispatcher.aboutToBlock.disconnect(self._blocking)


def timer_stall_ms(app, work) -> float:
    """The longest gap between ticks of a 10 ms timer while ``work()`` runs (it runs the event loop itself), less the
    10 ms, ms: 0 is a window that never missed a tick."""
    from PySide6 import QtCore

    ticks = [time.perf_counter()]
    timer = QtCore.QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start()
    work()
    timer.stop()
    ticks.append(time.perf_counter())
    return max(0.0, (max(b - a for a, b in zip(ticks, ticks[1:])) - 0.010) * 1000)


def run_events_for(app, seconds: float, until=None) -> None:
    """Run the event loop until ``until()`` is true (None: at once), then ``seconds`` more."""
    from PySide6 import QtCore

    while until is not None and not until():
        app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 5)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 5)


def floor_stall_ms(app, loaded, ids) -> float:
    """The same timer's longest gap while a plain thread, as low in priority as the worker (gui/state/priority.py),
    runs the bare sdpa forward of ``ids`` and the GUI thread does nothing else: the stall this machine gives any
    window while a forward runs, the floor under :func:`gui_stall_ms`."""
    import threading

    from gui.state.priority import lower_this_thread

    from .real import _sdpa_forward

    done = threading.Event()

    def work():
        lower_this_thread()
        try:
            _sdpa_forward(loaded, ids)
        finally:
            done.set()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    stall = timer_stall_ms(app, lambda: run_events_for(app, 0.3, until=done.is_set))  # and its paint after
    thread.join()
    return stall


def gui_stall_ms(folder: Path | str, ns: list[int], views: dict | None = None,
                 settle_text: bool = True, busy: dict | None = None, floor: dict | None = None) -> dict[int, float]:
    """Longest gap between ticks of a 10 ms timer in the real window while each run is in flight and painted, less
    the 10 ms: 0 is a window that never missed a tick.

    ``busy``: filled with {n: the GUI thread's longest stretch of work, ms of its own CPU time} (:class:`BusyStretches`)
    during that run; ``floor``: with {n: :func:`floor_stall_ms`}, the bare forward of the same tokens in the same
    window, measured after the run.

    ``settle_text``: the text is set and its own layout and paint (a pasted text of n tokens) done before the timer
    starts, so that the figure is the run's alone (False: as before issue 20, the text's relayout counted too).
    ``views``: filled with {n: (view, ms)}, the slowest view of the sliced delivery of that run's result
    (ViewState.slice_times): which view a stall came from. ``folder``: a model folder or what ``--model`` takes
    ("smollm2"); the session's token cap is the largest n, so no run is cut."""
    from PySide6 import QtCore

    from gui.chrome.window import MainWindow
    from gui.qt import ensure_qapp

    app = ensure_qapp()
    with tempfile.TemporaryDirectory() as tmp:
        settings = QtCore.QSettings(str(Path(tmp) / "s.ini"), QtCore.QSettings.Format.IniFormat)
        window = MainWindow(settings)
        window.text_input.auto_box.setChecked(False)
        window.token_limit.use_for_session(max(ns))
        window.resize(1400, 900)
        window.show()
        loop = QtCore.QEventLoop()
        window.model_ready.connect(lambda _info: loop.quit())
        window.load_model(str(folder))
        loop.exec()
        from analysis.model.loading import load_model

        loaded = load_model(str(folder), device="cpu")
        tokenizer = loaded.tokenizer
        stretches = BusyStretches()
        stalls = {}
        for n in ns:
            text = text_of_length(tokenizer, n)
            window.set_text(text)
            if settle_text:
                run_events_for(app, 0.3)
            done = QtCore.QEventLoop()

            def shown(_rid):
                QtCore.QTimer.singleShot(300, done.quit)  # keep ticking while it paints

            window.result_shown.connect(shown)
            stretches.start()
            stalls[n] = timer_stall_ms(app, lambda: (window.run_text(), done.exec()))
            longest_busy = stretches.stop()
            window.result_shown.disconnect(shown)
            if busy is not None:
                busy[n] = longest_busy
            if floor is not None:
                ids = tokenizer(text, return_tensors="pt").input_ids[:, :n]
                floor[n] = floor_stall_ms(app, loaded, ids)
            if views is not None and window.state.slice_times:
                views[n] = max(window.state.slice_times, key=lambda item: item[1])
        stretches.close()
        window.close()
        app.processEvents()
    return stalls


def paint_times(result, repeats: int) -> tuple[float, float]:
    from gui.plots.figures import HeadPlot, dispose_figure, grid_source, lay_out_offscreen
    from gui.plots.grid_plot import GridPlot

    grid, detail = GridPlot(), HeadPlot()
    lay_out_offscreen(grid, 700, 800)
    lay_out_offscreen(detail, 900, 900)
    counter = iter(range(10**9))

    def paint_grid():
        grid.set_attentions(grid_source(result), key=next(counter))  # a new key: nothing is reused
        grid.grab()

    def paint_detail():
        detail.set_head(result.head_map(3 % result.n_layer, 1 % result.n_head), result.tokens, "bench")
        detail.grab()

    paint_grid(), paint_detail()  # warm up
    grid_s, detail_s = median_time(paint_grid, repeats), median_time(paint_detail, repeats)
    dispose_figure(grid)
    dispose_figure(detail)
    return grid_s, detail_s
