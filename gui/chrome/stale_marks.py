"""Never a stale number: while a newer text runs or a new model loads, every view that still shows the previous
result carries one line that says so (gui/widgets.py StaleMark): the token strip with the next-token predictions,
the grid, and the tabs (each tab's pages: tables, From scratch, Rollout, Ablation). The words are the view state's
``running_note``. The maps dim themselves (plot_items.RunDimmer: the Head and Rollout figures', the grid's here),
the next-token predictions grey out."""
from __future__ import annotations

from ..plots.plot_items import RunDimmer
from ..state.view_state import ViewState
from ..widgets import StaleMark


class StaleMarks:
    """A StaleMark over each of ``marked``, a RunDimmer on each figure of ``dimmed``, and ``greyed`` widgets
    disabled (greyed, their text kept), while ``state.running``; the marks' words follow ``state.running_note``."""

    def __init__(self, state: ViewState, marked, dimmed=(), greyed=()):
        self.state = state
        self.marks = [StaleMark(widget) for widget in marked]
        self.dimmers = [RunDimmer(figure, state) for figure in dimmed]
        self.greyed = list(greyed)
        state.running_note_changed.connect(lambda _note: self.update())
        state.running_changed.connect(lambda _running: self.update())

    def update(self) -> None:
        s = self.state
        stale = s.running and s.bundle is not None
        for mark in self.marks:
            if stale:
                mark.mark(s.running_note or "The previous result: a new one is on its way…")
            else:
                mark.clear()
        for widget in self.greyed:
            widget.setEnabled(not stale)
