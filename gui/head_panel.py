"""The Head tab: one head's map (HeadPlot) with its controls — colours, scale, hide the first token —
the head's name and scores above it and the hover line below it. A view of the ViewState."""
from __future__ import annotations

import math

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import SCALE_LABELS, SCALES

from .figures import COLORMAP_LABELS, COLORMAPS, HeadPlot, apply_theme
from .view_state import ViewState

FOCUS_STYLE = "QGraphicsView {{ border: 2px solid {}; }}"
FOCUS_COLOUR = "#3d8ee0"
HEAD_LABEL_SCORES = ("previous_token", "sink", "induction_probe")


def show_focus_ring(figure: QtWidgets.QGraphicsView) -> None:
    """Draw a coloured frame round ``figure`` while it has the keyboard focus (transparent otherwise)."""

    class Ring(QtCore.QObject):
        def eventFilter(self, obj, event):  # noqa: N802
            if event.type() == QtCore.QEvent.Type.FocusIn:
                obj.setStyleSheet(FOCUS_STYLE.format(FOCUS_COLOUR))
            elif event.type() == QtCore.QEvent.Type.FocusOut:
                obj.setStyleSheet(FOCUS_STYLE.format("transparent"))
            return False

    figure.setStyleSheet(FOCUS_STYLE.format("transparent"))
    figure.setFocusPolicy(QtCore.Qt.FocusPolicy.StrongFocus)
    ring = Ring(figure)
    figure.installEventFilter(ring)


def add_arrow_keys(widget: QtWidgets.QWidget, state: ViewState) -> None:
    """Plain arrow keys move the selected head while ``widget`` (or a child) has the focus."""
    for key, step in (("Left", (0, -1)), ("Right", (0, 1)), ("Up", (-1, 0)), ("Down", (1, 0))):
        shortcut = QtGui.QShortcut(QtGui.QKeySequence(key), widget)
        shortcut.setContext(QtCore.Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(lambda s=step: state.move_selection(*s))


def hover_text(tokens, cell) -> str:
    """The hover line for ``cell`` = (query, key, value as drawn) from HeadPlot.cell_hovered; plain text."""
    if cell is None:
        return " "
    q, k, value = cell
    where = f"query '{tokens[q]}' [{q}] → key '{tokens[k]}' [{k}]"
    if k > q:
        return f"{where}: masked (a future token)"
    if value is None or not math.isfinite(value):
        return f"{where}: hidden (first key)"
    return f"{where}: {value:.3f}"


def choice_box(ids, labels: dict, current: str, setter, tooltip: str) -> QtWidgets.QComboBox:
    box = QtWidgets.QComboBox()
    for name in ids:
        box.addItem(labels.get(name, name), name)
    box.setCurrentIndex(box.findData(current))
    box.setToolTip(tooltip)
    box.currentIndexChanged.connect(lambda _: setter(box.currentData()))
    return box


class HeadPanel(QtWidgets.QWidget):
    """Tab protocol: ``title``, ``HeadPanel(state, worker)``, ``offscreen_figure()``."""

    title = "Head"

    def __init__(self, state: ViewState, worker=None, parent=None):
        super().__init__(parent)
        self.state = state
        self.plot = HeadPlot()
        self.plot.setMinimumSize(200, 200)
        show_focus_ring(self.plot)
        add_arrow_keys(self.plot, state)
        self.plot.query_clicked.connect(state.toggle_query_row)
        self.plot.cell_hovered.connect(self._hovered)
        self.colormap_choice = choice_box(COLORMAPS, COLORMAP_LABELS, state.colormap, state.set_colormap,
                                          "Colour map of every heatmap")
        self.scale_choice = choice_box(SCALES, SCALE_LABELS, state.scale, state.set_scale,
                                       "How weights map to colours: linear, log₁₀, or √ (shows small weights)")
        self.hide_first_box = QtWidgets.QCheckBox("Hide first token")
        self.hide_first_box.setChecked(state.hide_first)
        self.hide_first_box.setToolTip("Drop key 0 (often an attention sink) and renormalise each row over the rest "
                                       "(in the head map and the grid)")
        self.hide_first_box.toggled.connect(state.set_hide_first)
        self.head_label = QtWidgets.QLabel()
        self.head_label.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.head_label.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.hover_label = QtWidgets.QLabel(" ")
        self.hover_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.hover_label.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        controls = QtWidgets.QHBoxLayout()
        controls.addWidget(QtWidgets.QLabel("Colours"))
        controls.addWidget(self.colormap_choice)
        controls.addWidget(QtWidgets.QLabel("Scale"))
        controls.addWidget(self.scale_choice)
        controls.addWidget(self.hide_first_box)
        controls.addStretch(1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.head_label)
        layout.addLayout(controls)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.hover_label)
        state.bundle_changed.connect(lambda _: self.redraw())
        state.selection_changed.connect(lambda *_: self.redraw())
        for signal in (state.colormap_changed, state.scale_changed, state.hide_first_changed):
            signal.connect(lambda *_: self.redraw())
        state.colormap_changed.connect(lambda name: self._show_choice(self.colormap_choice, name))
        state.scale_changed.connect(lambda name: self._show_choice(self.scale_choice, name))
        state.hide_first_changed.connect(self.hide_first_box.setChecked)
        state.query_row_changed.connect(self.plot.highlight_row)
        state.dark_changed.connect(lambda dark: apply_theme(self.plot, dark))
        apply_theme(self.plot, state.dark)

    @staticmethod
    def _show_choice(box: QtWidgets.QComboBox, name: str) -> None:
        box.blockSignals(True)
        box.setCurrentIndex(box.findData(name))
        box.blockSignals(False)

    def redraw(self) -> None:
        s = self.state
        self.hover_label.setText(" ")  # a cell of an earlier picture means nothing now
        if s.bundle is None:
            return
        r, layer, head = s.result, s.layer, s.head
        self.plot.set_head(r.attentions[layer, head], r.tokens, f"layer {layer}, head {head}",
                           cmap=s.colormap, scale=s.scale, hide_first=s.hide_first)
        self.plot.highlight_row(s.query_row)
        scores = s.scores
        parts = [f"{k.replace('_', ' ')} {scores[k][layer, head]:.2f}" for k in HEAD_LABEL_SCORES
                 if np.isfinite(scores[k][layer, head])]
        self.head_label.setText(f"<b>Layer {layer}, head {head}</b> — " + ", ".join(parts))

    def _hovered(self, cell) -> None:
        result = self.state.result
        self.hover_label.setText(" " if result is None else hover_text(result.tokens, cell))

    def offscreen_figure(self):
        """A fresh export figure of the head shown (the caller disposes it)."""
        from .figures import offscreen_head_figure

        s = self.state
        if s.result is None:
            return None
        return offscreen_head_figure(s.result, s.layer, s.head, s.colormap, s.scale, s.hide_first)
