"""The search for GGUF files on this computer (analysis.model.gguf_scan), on a thread of its own.

Not on the model's worker (gui/state/worker.py): the scan needs no model, and it must neither wait behind a
load (a download can take minutes) nor hold one up. Each :meth:`GgufScanner.start` runs one scan on a new daemon
thread with its own cancel event; the answer is emitted from that thread through a signal of this object, which
lives in the GUI thread, so Qt queues it there; only the latest scan's answer is delivered (``finished``), an
older one is dropped (a new folder was added meanwhile). :meth:`stop` cancels the scan in flight (it ends at its
next folder) and silences it: nothing is emitted once the window has closed. The scan never raises for a bad
file or folder; an unexpected error ends it with an empty answer, never a traceback in the GUI.
"""
from __future__ import annotations

import threading
from typing import Callable

from PySide6 import QtCore

#: ``scan(folders, cancel) -> ScanResult``, run on the scan's thread
Scan = Callable[[list, threading.Event], object]


def default_scan(folders: list, cancel: threading.Event):
    """The default places (``ATTNSCOPE_SCAN_HOME`` and the tools' variables as the process has them) and ``folders``."""
    from analysis.model.gguf_scan import find_gguf_files

    return find_gguf_files(folders, cancel=cancel)


def empty_result():
    from analysis.model.gguf_scan import ScanResult

    return ScanResult((), (), 0)


class GgufScanner(QtCore.QObject):
    started = QtCore.Signal()
    finished = QtCore.Signal(object)  # ScanResult of the latest scan
    _done = QtCore.Signal(int, object)  # scan number, ScanResult: emitted on the scan's thread, queued here

    def __init__(self, parent: QtCore.QObject | None = None, scan: Scan = default_scan):
        super().__init__(parent)
        self.scan = scan
        self.result = None  # the latest ScanResult delivered
        self._number = 0
        self._cancel: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._done.connect(self._delivered)

    @property
    def running(self) -> bool:
        return self._cancel is not None

    def start(self, folders) -> int:
        """Scan the default places and ``folders`` (paths); a scan in flight is cancelled and its answer dropped."""
        if self._stopped:
            return self._number
        if self._cancel is not None:
            self._cancel.set()
        self._number += 1
        number, cancel, folders = self._number, threading.Event(), [str(f) for f in folders]
        self._cancel = cancel
        emit = self._done.emit

        def work() -> None:
            try:
                result = self.scan(folders, cancel)
            except Exception:  # never for a bad file or folder (gguf_scan says so): a bug, not the user's
                result = empty_result()
            if not cancel.is_set():
                try:
                    emit(number, result)
                except RuntimeError:  # this object was deleted with its window
                    pass

        self._thread = threading.Thread(target=work, name="attnscope-gguf-scan", daemon=True)
        self._thread.start()
        self.started.emit()
        return number

    def stop(self, timeout: float = 0.0) -> bool:
        """Cancel the scan in flight and deliver nothing more; wait at most ``timeout`` seconds for its thread.
        Returns whether no scan thread is still running."""
        self._stopped = True
        if self._cancel is not None:
            self._cancel.set()
        self._cancel = None
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the scan thread (tests); True when it has ended."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _delivered(self, number: int, result) -> None:
        if number != self._number or self._stopped or self._cancel is None:
            return  # an older scan's, or after stop()
        self._cancel = None
        self.result = result
        self.finished.emit(result)
