"""Never a stale number: while a newer text runs or a new model loads, every view that still shows the previous
result is washed over with one line that says so (gui/widgets.py StaleMark): the token strip and the next-token
predictions, the grid, and the tabs (each tab's pages: tables, From scratch, Rollout, Ablation). The words are the
view state's ``running_note``; the Head and Rollout figures also dim their maps themselves (RunDimmer)."""
from __future__ import annotations

from ..state.view_state import ViewState
from ..widgets import StaleMark


class StaleMarks:
    """One StaleMark over each of ``speaking`` (with the words) and ``quiet`` (the wash alone), shown while
    ``state.running``; their words follow ``state.running_note``."""

    def __init__(self, state: ViewState, speaking, quiet=()):
        self.state = state
        self.marks = [StaleMark(widget) for widget in speaking] + [StaleMark(widget, label=False) for widget in quiet]
        state.running_note_changed.connect(lambda _note: self.update())
        state.running_changed.connect(lambda _running: self.update())

    def update(self) -> None:
        s = self.state
        for mark in self.marks:
            if s.running and s.bundle is not None:
                mark.mark(s.running_note or "The previous result: a new one is on its way…")
            else:
                mark.clear()
