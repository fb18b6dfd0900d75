"""The benchmark's GUI-thread work figure (cli/bench/paint.py ``BusyStretches``): the longest stretch of the GUI
thread's own CPU time between two waits of its event loop. A slot that computes for 40 ms is one such stretch; a
slot that sleeps 40 ms is not work (the thread's CPU time does not advance), however long the wall clock says."""
import time

import pytest

pytest.importorskip("pytestqt")


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.parametrize("work, low, high", [(lambda: spin(0.04), 35, 400), (lambda: time.sleep(0.04), 0, 10)])
def test_the_longest_stretch_is_the_gui_threads_own_cpu_time(qtbot, work, low, high):
    from PySide6 import QtCore

    from cli.bench.paint import BusyStretches

    stretches = BusyStretches()
    try:
        stretches.start()
        QtCore.QTimer.singleShot(5, work)
        qtbot.wait(200)
        longest = stretches.stop()
    finally:
        stretches.close()
    assert low <= longest <= high
