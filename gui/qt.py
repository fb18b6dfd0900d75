"""Creating the QApplication (offscreen when there is no display) before any widget exists."""
from __future__ import annotations

import os
import sys


def ensure_qapp(offscreen: bool | None = None):
    """Return the running QApplication, creating one (headless if no display is there or asked)."""
    if offscreen or (offscreen is None and sys.platform.startswith("linux")
                     and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6 import QtWidgets

    app = QtWidgets.QApplication.instance()
    if app is None:
        app = QtWidgets.QApplication(sys.argv[:1])
        app.setOrganizationName("AttnScope")
        app.setApplicationName("AttnScope")
    import pyqtgraph as pg

    if not hasattr(app, "_attnscope_gc"):
        # Python's cyclic collector, run at any allocation, could destroy a QObject of a reference cycle inside
        # QObject::disconnect (which holds Qt's signal mutex and calls into Python): ~QObject then waits on that
        # mutex for ever (the whole suite hung once in a pyqtgraph setParentItem). pyqtgraph's collector turns
        # automatic collection off and collects on a timer in the GUI thread, between events, where no Qt lock is held.
        from pyqtgraph.util.garbage_collector import GarbageCollector

        app._attnscope_gc = GarbageCollector(interval=1.0)

    pg.setConfigOptions(antialias=True, imageAxisOrder="row-major", background="w", foreground="k")
    return app
