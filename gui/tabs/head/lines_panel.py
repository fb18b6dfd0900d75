"""The Head tab's Lines view: a row of head toggles (the selected head and the more heads of its layer that
``ViewState.line_heads`` names, each in its colour) over a LinesPlot (gui/plots/lines_plot.py) of those heads.
A view of the ViewState: it follows the selected head, the first key hidden, the scale, the value-weighted view
(when its norms are there) and the selected query row, and writes a click back (the query row, a head toggled).

The maps are computed here, on the GUI thread, when they are not kept (``head_view.head_matrix``): the Lines view
draws at most ``LINES_MAX_TOKENS`` tokens, a few milliseconds a head."""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from analysis.display import head_name

from ...plots.head_view import head_matrix, view_to_draw
from ...plots import lines_plot
from ...plots.lines_plot import MIN_ROW_PX, LinesPlot, drawn_heads, head_colour, lines_figure
from ...plots.plot_items import apply_theme
from ...state.lens_data import VALUE_NORMS
from ...state.view_state import ViewState

SHARE = "share of row N"  # what a value-weighted line's opacity is (as the matrix's colour bar says)


def lines_apply(state: ViewState) -> bool:
    """Whether the Lines view draws now: it is chosen and the result on screen has at most LINES_MAX_TOKENS tokens."""
    r = state.result
    return state.head_drawing == "lines" and r is not None and r.n_tokens <= lines_plot.LINES_MAX_TOKENS


def lines_too_long(state: ViewState) -> bool:
    """Whether the Lines view is chosen for a result longer than it draws (the Head tab shows the matrix, and says so)."""
    r = state.result
    return state.head_drawing == "lines" and r is not None and r.n_tokens > lines_plot.LINES_MAX_TOKENS


def lines_note(n_tokens: int) -> str:
    """The note over the map when Lines is chosen for a text too long for it (rich text, a link back to Matrix)."""
    return (f"Lines draws at most {lines_plot.LINES_MAX_TOKENS} tokens and this text has {n_tokens:,}: the matrix "
            "is shown. <a href='matrix'>Draw the matrix</a>")


def lines_weights(state: ViewState) -> tuple[dict, str]:
    """({(layer, head): its (n, n) map as the matrix draws it before masking}, quantity) of every head the Lines
    view draws: the weights, or the row-normalised value-weighted N (``view_to_draw``)."""
    kind = view_to_draw(state)
    weights = {(state.layer, h): head_matrix(state, kind, state.layer, h) for h in state.lines_drawn()}
    return weights, SHARE if kind == "value-weighted" else "weight"


def lines_figure_of(state: ViewState, title: str) -> LinesPlot:
    """The export figure of the Lines view as the state shows it (lines_plot.lines_figure), its text at a figure's
    sizes (figure_text.FigureFont's defaults: tokens and legend 8.5 pt, title 11 pt), as ``main.py figure --drawing
    lines`` and the other figures draw theirs, not the view's own 10 pt."""
    from ...plots.figure_text import FigureFont

    r = state.result
    weights, quantity = lines_weights(state)
    return lines_figure(r.tokens, weights, list(weights), n_head=r.n_head, causal=r.causal,
                        hide_first=state.hide_first, scale=state.scale, quantity=quantity,
                        query_row=state.query_row, title=title, dark=state.dark, fonts=FigureFont())


class HeadToggles(QtWidgets.QWidget):
    """One button per head of the layer, in its colour: checked when the Lines view draws it. The selected head is
    always drawn (its button stays checked); a click on another toggles it (``ViewState.toggle_line_head``)."""

    def __init__(self, state: ViewState, parent=None):
        super().__init__(parent)
        self.state = state
        self.layout_ = QtWidgets.QHBoxLayout(self)
        self.layout_.setContentsMargins(4, 0, 4, 0)
        self.layout_.setSpacing(2)
        self.caption = QtWidgets.QLabel("Heads:")
        self.layout_.addWidget(self.caption)
        self.buttons: list[QtWidgets.QToolButton] = []
        self.only = QtWidgets.QToolButton()
        self.only.setText("Only selected")
        self.only.setToolTip("Draw the selected head alone")
        self.only.clicked.connect(lambda: state.set_line_heads(()))
        self.layout_.addStretch(1)
        self.layout_.addWidget(self.only)
        for signal in (state.selection_changed, state.line_heads_changed, state.bundle_changed):
            signal.connect(lambda *_: self.show_heads())

    def show_heads(self) -> None:
        r = self.state.result
        n_head = 0 if r is None else r.n_head
        if len(self.buttons) != n_head:
            for button in self.buttons:
                self.layout_.removeWidget(button)
                button.deleteLater()
            self.buttons = [self._button(h, n_head) for h in range(n_head)]
            for h, button in enumerate(self.buttons):
                self.layout_.insertWidget(1 + h, button)
        drawn = set(self.state.lines_drawn()) if r is not None else set()
        for h, button in enumerate(self.buttons):
            button.blockSignals(True)
            button.setChecked(h in drawn)
            button.blockSignals(False)
            name = head_name(self.state.layer, h)
            button.setToolTip(f"{name}: the selected head (always drawn)" if h == self.state.head
                              else f"{name}: draw its lines too" if h not in drawn else f"{name}: drawn; click to hide")
        self.only.setEnabled(len(drawn) > 1)

    def _button(self, h: int, n_head: int) -> QtWidgets.QToolButton:
        colour = head_colour(h, n_head).name()
        button = QtWidgets.QToolButton()
        button.setText(str(h))
        button.setCheckable(True)
        button.setStyleSheet(f"QToolButton {{ color: {colour}; font-weight: bold; padding: 0 3px; }}"
                             f"QToolButton:checked {{ background: {colour}; color: white; }}")
        button.toggled.connect(lambda _on, h=h: self._toggled(h))
        return button

    def _toggled(self, h: int) -> None:
        if h != self.state.head:
            self.state.toggle_line_head(h)
        self.show_heads()  # the selected head's button stays checked


class LinesPanel(QtWidgets.QWidget):
    """The head toggles over the LinesPlot, in a scroll area when the rows do not fit (at least MIN_ROW_PX each)."""

    token_hovered = QtCore.Signal(object)  # the LinesPlot's: None or (side, index)

    def __init__(self, state: ViewState, parent=None):
        super().__init__(parent)
        self.state = state
        self.toggles = HeadToggles(state)
        self.plot = LinesPlot()
        self.plot.title.setVisible(False)  # the Head tab's label names the head; the legend the heads drawn
        self.plot.ci.layout.setRowMaximumHeight(0, 0)
        self.plot.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self.plot.query_clicked.connect(state.toggle_query_row)
        self.plot.token_hovered.connect(self.token_hovered)
        self.scroll = QtWidgets.QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self.scroll.setWidget(self.plot)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addWidget(self.toggles)
        layout.addWidget(self.scroll, 1)
        state.on_bundle(lambda _: self.redraw(), "head lines")
        for signal in (state.selection_changed, state.hide_first_changed, state.scale_changed,
                       state.attention_view_changed, state.line_heads_changed, state.head_drawing_changed):
            signal.connect(lambda *_: self.redraw())
        state.lens_changed.connect(lambda kind: kind == VALUE_NORMS and self.redraw())
        state.query_row_changed.connect(self.plot.highlight_row)
        state.dark_changed.connect(lambda dark: apply_theme(self.plot, dark))
        apply_theme(self.plot, state.dark)

    def redraw(self) -> None:
        """Draw the heads the state names, when the Lines view applies (:func:`lines_apply`); else nothing."""
        s = self.state
        if not lines_apply(s):
            return
        weights, quantity = lines_weights(s)
        r = s.result
        heads = drawn_heads(weights, list(weights), r.n_head, r.causal, s.hide_first)
        self.plot.set_lines(r.tokens, heads, "", s.scale, quantity)
        self.plot.highlight_row(s.query_row)
        _, natural = self.plot.content_size(row_px=0)
        # rows of at least MIN_ROW_PX: a taller text scrolls; the legend's row above the columns (~24 px)
        self.plot.setMinimumHeight(natural + r.n_tokens * MIN_ROW_PX + 30)
        self.toggles.show_heads()
