"""The Figure… dialog's live preview: the figure the options say, drawn as Save draws it, shown small.

The figure is made by gui/plots/figure_make.py ``make_figure`` (the routine ``write_figure`` saves) and drawn by
pyqtgraph's ImageExporter as a saved PNG is (gui/export/exporting.py ``figure_image``), only at the preview's width:
what is seen is what is saved, scaled. Figures are Qt widgets, so they are drawn on the GUI thread; a change
restarts a :data:`DEBOUNCE_MS` timer and the figure is drawn once typing pauses, never on every key.
``last_ms``: how long the latest drawing took (make and draw), for the status line and the tests."""
from __future__ import annotations

import time

from PySide6 import QtCore, QtGui, QtWidgets

from analysis.errors import AttnScopeError

DEBOUNCE_MS = 300  # ms after the last change before the preview is drawn again
PREVIEW_WIDTH = 440  # logical pixels of the preview picture


def preview_image(result, options, width: int) -> QtGui.QImage:
    """The figure ``options`` ask for, ``width`` pixels wide (the saved figure scaled): make_figure, then the PNG
    exporter's drawing."""
    from ..plots.figure_make import make_figure
    from ..plots.figures import dispose_figure
    from .exporting import figure_image

    fig, _shown = make_figure(result, options)
    try:
        return figure_image(fig, width)
    finally:
        dispose_figure(fig)


class FigurePreview(QtWidgets.QLabel):
    """A picture of the figure; ``refused(message)`` when the options cannot be drawn, ``drawn(ms)`` after each
    drawing. ``request(make_options)``: draw ``make_options()`` (it may raise InputError) after the debounce."""

    refused = QtCore.Signal(str)
    drawn = QtCore.Signal(float)

    def __init__(self, result, parent=None):
        super().__init__(parent)
        self.result = result
        self.last_ms = 0.0
        self.options = None  # the options last drawn
        self._make = None
        self.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
        self.setMinimumSize(PREVIEW_WIDTH // 2, 160)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding, QtWidgets.QSizePolicy.Policy.Expanding)
        self.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.setText("Preview…")
        self.timer = QtCore.QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(DEBOUNCE_MS)
        self.timer.timeout.connect(self.draw_now)

    def request(self, make_options) -> None:
        self._make = make_options
        self.timer.start()

    def draw_now(self) -> None:
        """Draw the latest options now (the timer's end; tests call it directly)."""
        self.timer.stop()
        if self._make is None:
            return
        try:
            options = self._make()
            started = time.perf_counter()
            ratio = self.devicePixelRatioF()
            width = max(120, min(self.width() - 8, PREVIEW_WIDTH * 2))
            image = preview_image(self.result, options, int(width * ratio))
            self.last_ms = (time.perf_counter() - started) * 1000
        except AttnScopeError as exc:
            self.setPixmap(QtGui.QPixmap())
            self.setText("No preview.")
            self.refused.emit(str(exc))
            return
        image.setDevicePixelRatio(ratio)
        pixmap = QtGui.QPixmap.fromImage(image)
        if pixmap.height() > (self.height() - 8) * ratio:  # a tall figure (the grid): shown whole
            pixmap = pixmap.scaledToHeight(int((self.height() - 8) * ratio),
                                           QtCore.Qt.TransformationMode.SmoothTransformation)
            pixmap.setDevicePixelRatio(ratio)
        self.options = options
        self.setPixmap(pixmap)
        self.drawn.emit(self.last_ms)
