"""The window's layout: the input area above the grid and tabs, its splitters, and the saved, screen-fitted geometry.

The input area (the notes, the text box, the predictions and the token strip) keeps its compact height as
notes come and go, so the plots get the height on a laptop; room the user gives it by dragging the
splitter is kept, and remembered (``window/input_extra``).
"""
from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

MIN_SIZE = (1000, 680)
FRAME_ROOM = (8, 40)  # pixels a title bar and borders may take around the window


class MainArea(QtWidgets.QWidget):
    """The central widget: a vertical splitter with the input area (``above``, top to bottom) above a
    horizontal splitter of ``grid`` beside ``tabs``."""

    def __init__(self, above: list[QtWidgets.QWidget], grid: QtWidgets.QWidget, tabs: QtWidgets.QWidget,
                 settings: QtCore.QSettings, parent=None):
        super().__init__(parent)
        self.splitter = QtWidgets.QSplitter()
        self.splitter.addWidget(grid)
        self.splitter.addWidget(tabs)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setChildrenCollapsible(False)
        self.input_area = QtWidgets.QWidget()
        top = QtWidgets.QVBoxLayout(self.input_area)
        top.setContentsMargins(0, 0, 0, 0)
        top.setSpacing(3)
        for widget in above:
            top.addWidget(widget)
        try:  # pixels the user gave the input area beyond its compact height (a bad stored value: none)
            self.input_extra = max(0, int(settings.value("window/input_extra", 0) or 0))
        except (TypeError, ValueError):
            self.input_extra = 0
        self.vsplitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        self.vsplitter.addWidget(self.input_area)
        self.vsplitter.addWidget(self.splitter)
        self.vsplitter.setStretchFactor(0, 0)
        self.vsplitter.setStretchFactor(1, 1)
        self.vsplitter.setChildrenCollapsible(False)
        self.vsplitter.handle(1).setToolTip("Drag to give the text box more room, or the plots")
        self.vsplitter.splitterMoved.connect(self._input_area_moved)
        self.input_area.installEventFilter(self)
        outer = QtWidgets.QVBoxLayout(self)
        outer.setContentsMargins(6, 4, 6, 2)
        outer.setSpacing(0)
        outer.addWidget(self.vsplitter, 1)

    def fit_input_area(self) -> None:
        """Give the input area its compact height plus the room the user dragged it to; the views the rest."""
        sizes = self.vsplitter.sizes()
        total = sum(sizes)
        if total <= 0:
            return
        want = min(self.input_area.minimumSizeHint().height() + self.input_extra, total - 200)
        if sizes[0] != want:
            self.vsplitter.setSizes([want, total - want])

    def _input_area_moved(self, _pos: int, _index: int) -> None:
        self.input_extra = max(0, self.vsplitter.sizes()[0] - self.input_area.minimumSizeHint().height())

    def eventFilter(self, watched, event):  # noqa: N802
        if watched is self.input_area and event.type() == QtCore.QEvent.Type.LayoutRequest:
            QtCore.QTimer.singleShot(0, self, self.fit_input_area)  # a note came or went: keep the plots' room
        return super().eventFilter(watched, event)

    def restore(self, window: QtWidgets.QWidget, settings: QtCore.QSettings) -> None:
        """Size ``window`` as saved, or to fit its screen the first time, never larger than the screen; the
        splitters as saved."""
        window.setMinimumSize(*MIN_SIZE)
        available = (window.screen() or QtGui.QGuiApplication.primaryScreen()).availableGeometry()
        room = available.adjusted(0, 0, -FRAME_ROOM[0], -FRAME_ROOM[1])  # the window manager's frame needs room too
        if settings.value("window/geometry") is None or not window.restoreGeometry(settings.value("window/geometry")):
            window.resize(min(1400, room.width()), min(900, room.height()))
            self.splitter.setSizes([2 * window.width() // 5, 3 * window.width() // 5])
        if window.width() > room.width() or window.height() > room.height():
            window.resize(min(window.width(), room.width()), min(window.height(), room.height()))
        if settings.value("window/splitter") is not None:
            self.splitter.restoreState(settings.value("window/splitter"))
        self.fit_input_area()

    def save(self, window: QtWidgets.QWidget, settings: QtCore.QSettings) -> None:
        settings.setValue("window/geometry", window.saveGeometry())
        settings.setValue("window/splitter", self.splitter.saveState())
        settings.setValue("window/input_extra", self.input_extra)
