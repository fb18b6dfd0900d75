"""The "All heads" panel: every layer × head as thumbnails (GridPlot) and the Badges chooser.
A view of the ViewState: a click selects a head, arrow keys move the selection."""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from analysis.head_scores import SCORE_NAMES

from .figures import GridPlot, apply_theme, grid_source
from .head_panel import add_arrow_keys, show_focus_ring
from .view_state import ViewState


class GridPanel(QtWidgets.QWidget):
    def __init__(self, state: ViewState, parent=None):
        super().__init__(parent)
        self.state = state
        self.plot = GridPlot()
        self.plot.setMinimumSize(160, 160)
        show_focus_ring(self.plot)
        add_arrow_keys(self.plot, state)
        self.plot.setToolTip("Every head; click one (or use the arrow keys) to open it")
        self.plot.head_clicked.connect(state.select)
        self.badge_choice = QtWidgets.QComboBox()
        self.badge_choice.addItem("no badges", None)
        for name in SCORE_NAMES:
            self.badge_choice.addItem(name.replace("_", " "), name)
        self.badge_choice.setCurrentIndex(max(0, self.badge_choice.findData(state.badge_score)))
        self.badge_choice.setToolTip("Write a head score on every cell")
        self.badge_choice.currentIndexChanged.connect(lambda _: state.set_badge_score(self.badge_choice.currentData()))
        bar = QtWidgets.QHBoxLayout()
        title = QtWidgets.QLabel("<b>All heads</b>")
        bar.addWidget(title)
        bar.addStretch(1)
        bar.addWidget(QtWidgets.QLabel("Badges:"))
        bar.addWidget(self.badge_choice)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.plot, 1)
        state.bundle_changed.connect(lambda _: self.redraw())
        for signal in (state.colormap_changed, state.scale_changed, state.hide_first_changed):
            signal.connect(lambda *_: self.redraw())
        state.selection_changed.connect(self.plot.select)
        state.badge_score_changed.connect(self._badge_changed)
        state.dark_changed.connect(lambda dark: apply_theme(self.plot, dark))
        apply_theme(self.plot, state.dark)

    def redraw(self) -> None:
        s = self.state
        if s.bundle is None:
            return
        self.plot.set_attentions(grid_source(s.result), s.colormap, s.scale, key=s.bundle.request_id,
                                 full=s.result.attentions, hide_first=s.hide_first)
        self.plot.select(s.layer, s.head)
        self._show_badges()

    def _badge_changed(self, name) -> None:
        self.badge_choice.blockSignals(True)
        self.badge_choice.setCurrentIndex(max(0, self.badge_choice.findData(name)))
        self.badge_choice.blockSignals(False)
        self._show_badges()

    def _show_badges(self) -> None:
        s = self.state
        name = s.badge_score
        if name is None or s.bundle is None:
            self.plot.set_badges(None)
        else:
            self.plot.set_badges(s.scores[name], self.badge_choice.currentText())

    def offscreen_figure(self):
        """A fresh export figure of the grid (the caller disposes it)."""
        from .figures import offscreen_grid_figure

        s = self.state
        if s.result is None:
            return None
        badges = s.scores[s.badge_score] if s.badge_score else None
        return offscreen_grid_figure(s.result, s.colormap, s.scale, badges=badges, hide_first=s.hide_first,
                                     badge_label=self.badge_choice.currentText())
