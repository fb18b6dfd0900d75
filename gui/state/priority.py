"""The worker's long computations yield the processor to the GUI thread.

On a machine with few cores the worker's forward and streamed pass (torch's threads on every core) and the GUI
thread compete for the processor: the GUI thread, woken by a 10 ms timer or an input event, waited behind them
(bench: the longest GUI-thread stall during a 2,048-token SmolLM2 run, 13–39 ms on 2 cores). A background thread
with a lower scheduling priority (a higher nice value) gives the processor up as soon as the GUI thread wants it and
loses nothing when it does not: an idle machine runs it as fast.

On Linux the priority is per thread (``setpriority`` with the thread's id), and the threads torch starts from the
worker inherit it. Elsewhere ``setpriority`` would lower the whole process, GUI included, so nothing is changed.
"""
from __future__ import annotations

import os
import sys
import threading

#: The nice value added to the worker thread (0 normal … 19 lowest).
WORKER_NICENESS = 5


def lower_this_thread(niceness: int = WORKER_NICENESS) -> bool:
    """Raise the calling thread's nice value by ``niceness`` (Linux only); whether it was changed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + int(niceness)))
    except (OSError, AttributeError):  # a sandbox that refuses it: the worker runs as before
        return False
    return True
