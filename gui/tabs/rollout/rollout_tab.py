"""The Rollout tab: attention rollout R(l) (Abnar & Zuidema 2020) of the result on screen, for one layer.

R(l)[i, j] is how much input token j feeds position i after layers 0…l, every head averaged and the
residual connection counted as the identity (analysis/measures/lenses.py ``rollout``). Query tokens down, input
tokens along (a HeadPlot); the layer follows the selected head's layer (choosing one in the spin box selects no head),
colours, scale and dark mode follow the state. *Hide first token, renormalise* (the state's own
``rollout_skip_first``, apart from the Head tab's hide-first) draws lenses.rollout_skip_first of R(l): the first
input's column hidden, each row renormalised, R[i, j] / (1 − R[i, 0]) for j ≥ 1 (the HeadPlot's hide-first,
display.without_first_key, which is that function), the colour range and the hover over those values; the line
under the controls says the column is hidden. Computed on the worker
(gui/state/lens_data.py) the first time the tab is shown for a result (of a result whose maps are computed on
demand, the layer shown, when it is shown: streamed.rollout_layer); until it is there (or when it failed) a line in
the plot's place says so, never empty axes. The *Scale* box is the state's scale (the Head tab's): a long text's
rollout is mostly small numbers, dark on a linear scale. When the first input takes most of R(l)
(lenses.first_input_share ≥ FIRST_INPUT_DOMINATES, a decoder with a sink) and it is not hidden, the status line
says how much and points to the box.
"""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from analysis.display import SCALE_LABELS, SCALES
from analysis.measures.lenses import FIRST_INPUT_DOMINATES, first_input_share

from ...plots.figures import HeadPlot
from ...plots.plot_items import RunDimmer, apply_theme
from ...state.lens_data import ROLLOUT, LensData
from ...state.view_state import ViewState
from ...widgets import choice_box, placeholder_label, show_focus_ring

EXPLANATION = ("Rollout (Abnar & Zuidema 2020): each layer's Â = 0.5·mean over heads of A + 0.5·I (the "
               "residual), rows renormalised; R(l) = Â(l)·…·Â(0) — which input tokens each position draws on "
               "after layers 0…l.")


UPDATING = "updating… (the map is the previous text's)"
LAYER_LABEL = "Up to layer"
SKIP_FIRST_LABEL = "Hide first token, renormalise"
SKIP_FIRST_NOTE = ("The first input token's column is hidden and each row renormalised over the other inputs: "
                   "R[i, j] / (1 − R[i, 0]) for j ≥ 1. A position that draws on nothing else (a decoder's first) "
                   "is blank.")


class RolloutTab(QtWidgets.QWidget):
    """Tab protocol: ``title``, ``RolloutTab(state, worker)``, ``offscreen_figure()``."""

    title = "Rollout"

    def __init__(self, state: ViewState, worker=None, parent=None):
        super().__init__(parent)
        self.state = state
        self.lenses = LensData.for_state(state, worker)
        self.plot = HeadPlot(describe=self.describe_cell)  # the cell's tooltip is the hover line's text
        self.plot.setMinimumSize(200, 200)
        show_focus_ring(self.plot)
        self.plot.cell_hovered.connect(self._hovered)
        self.layer = state.layer  # R(layer) is drawn: the selected head's layer, or the one chosen in this tab
        self.layer_box = QtWidgets.QSpinBox()
        self.layer_box.setRange(0, 0)
        self.layer_box.setToolTip("R(l): layers 0…l composed. Set to the selected head's layer whenever a head is "
                                  "selected; choosing a layer here selects no head")
        self.layer_box.valueChanged.connect(self._layer_chosen)
        self.layer_slider = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
        self.layer_slider.setRange(0, 0)
        self.layer_slider.setToolTip(self.layer_box.toolTip())
        self.layer_slider.valueChanged.connect(self._layer_chosen)
        self.skip_first_box = QtWidgets.QCheckBox(SKIP_FIRST_LABEL)
        self.skip_first_box.setChecked(state.rollout_skip_first)
        self.skip_first_box.setToolTip("Hide the first input token (on a decoder often an attention sink, which "
                                       "dominates rollout) and renormalise each row of R over the other inputs; "
                                       "a data export writes this rollout too (export --rollout-skip-first)")
        self.skip_first_box.toggled.connect(state.set_rollout_skip_first)
        self.scale_choice = choice_box(SCALES, SCALE_LABELS, state.scale, state.set_scale,
                                       "How values map to colours (every map's scale): linear, log₁₀, or √ "
                                       "(shows the small shares a long text's rollout is made of)", chars=6)
        self.skip_note = QtWidgets.QLabel(SKIP_FIRST_NOTE)
        self.skip_note.setWordWrap(True)
        self.skip_note.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.skip_note.setVisible(state.rollout_skip_first)
        explanation = QtWidgets.QLabel(EXPLANATION)
        explanation.setWordWrap(True)
        explanation.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.status = QtWidgets.QLabel(" ")
        self.status.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        self.hover_label = QtWidgets.QLabel(" ")
        self.hover_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.hover_label.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        controls = QtWidgets.QHBoxLayout()
        controls.addWidget(QtWidgets.QLabel(LAYER_LABEL))
        controls.addWidget(self.layer_box)
        controls.addWidget(self.layer_slider, 1)
        controls.addWidget(QtWidgets.QLabel("Scale"))
        controls.addWidget(self.scale_choice)
        controls.addWidget(self.skip_first_box)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(explanation)
        layout.addLayout(controls)
        layout.addWidget(self.skip_note)
        layout.addWidget(self.status)  # computing…, updating…, or where to look past a sink
        self.placeholder = placeholder_label()
        self.stack = QtWidgets.QStackedLayout()  # the plot once R is there; until then a line saying why not
        self.stack.addWidget(self.plot)
        self.stack.addWidget(self.placeholder)
        layout.addLayout(self.stack, 1)
        layout.addWidget(self.hover_label)
        # while a new text runs the map is the previous text's: dimmed, and the status says so
        self.dimmer = RunDimmer(self.plot, state, self._updating)
        state.on_bundle(lambda _: self._bundle_changed(), "rollout tab")
        state.selection_changed.connect(lambda *_: self._follow_selection())
        for signal in (state.colormap_changed, state.scale_changed, state.rollout_skip_first_changed):
            signal.connect(lambda *_: self.redraw())
        state.scale_changed.connect(self._show_scale)
        state.rollout_skip_first_changed.connect(self.skip_first_box.setChecked)
        state.rollout_skip_first_changed.connect(self.skip_note.setVisible)
        state.lens_changed.connect(lambda kind: kind == ROLLOUT and self.redraw())
        state.query_row_changed.connect(self.plot.highlight_row)
        state.dark_changed.connect(lambda dark: apply_theme(self.plot, dark))
        apply_theme(self.plot, state.dark)
        self.redraw()

    def showEvent(self, event):  # noqa: N802
        super().showEvent(event)
        self.redraw()  # asks for R when first needed for the result on screen

    def shown_rollout(self):
        """(n, n) R(l) of the tab's layer (:attr:`layer`), or None while it is not (yet) there: every layer's R of a result that
        kept its maps, or the layers computed so far of an on-demand result (lens_data's {layer: R})."""
        s = self.state
        r = None if s.result is None else s.lens(ROLLOUT)
        if r is None:
            return None
        return r.get(self.layer) if isinstance(r, dict) else r[self.layer]

    def _bundle_changed(self) -> None:
        r = self.state.result
        top = 0 if r is None else r.n_layer - 1
        self.layer = min(self.state.layer, top)  # a new result starts at the selected head's layer
        for widget in (self.layer_box, self.layer_slider):
            widget.blockSignals(True)
            widget.setRange(0, top)
            widget.blockSignals(False)
        self.redraw()

    def _follow_selection(self) -> None:
        self.layer = self.state.layer
        self.redraw()

    def _layer_chosen(self, layer: int) -> None:
        """The user's layer: R(layer) is drawn; the selected head stays (the Head tab, Ablation and the export
        keep the head picked elsewhere: a walk found them all moved to L29 by this box)."""
        if self.state.result is not None and layer != self.layer:
            self.layer = layer
            self.redraw()

    def redraw(self) -> None:
        s = self.state
        self.hover_label.setText(" ")
        for widget in (self.layer_box, self.layer_slider):
            widget.blockSignals(True)
            widget.setValue(self.layer)
            widget.blockSignals(False)
        if s.bundle is None:
            self._placeholder("Run a text to see its rollout.")
            return
        r = self.shown_rollout()
        if r is None:
            if self.isVisible():
                self.lenses.request(ROLLOUT, self.layer)  # of an on-demand result: this layer's R alone
            error = s.lens_error(ROLLOUT)
            self.status.setText(error or "computing…")
            self._placeholder(error or self._computing_note())
            return
        self.status.setText(UPDATING if self.dimmer.updating else self._sink_hint(r))
        self.stack.setCurrentWidget(self.plot)
        self._draw(self.plot, r, f"{self._what()}: layers 0…{self.layer} composed")
        self.plot.highlight_row(s.query_row)

    def _show_scale(self, name: str) -> None:
        self.scale_choice.blockSignals(True)
        self.scale_choice.setCurrentIndex(self.scale_choice.findData(name))
        self.scale_choice.blockSignals(False)

    def _sink_hint(self, r) -> str:
        """The status line under a drawn R: where the first input takes most of it and is shown, how much and the
        box that hides it; otherwise blank."""
        if self.state.rollout_skip_first:
            return " "
        share = first_input_share(r)
        if not share >= FIRST_INPUT_DOMINATES:
            return " "
        return (f"The first input takes {share:.0%} of every later position's rollout (an attention sink): tick "
                f"“{SKIP_FIRST_LABEL}” to see what else each position draws on.")

    def _what(self) -> str:
        """The map's name in its title: "rollout R(l)", and the first input hidden when it is."""
        s = self.state
        return f"rollout R({self.layer})" + (", first input hidden, rows renormalised" if s.rollout_skip_first else "")

    def _computing_note(self) -> str:
        s = self.state
        if s.result.maps_kept:
            return "Computing the rollout…"
        return (f"Computing R({self.layer}): it composes layers 0…{self.layer}, each layer's every head computed from the "
                f"queries and keys of {s.result.n_tokens:,} tokens and one {s.result.n_tokens:,} × "
                f"{s.result.n_tokens:,} product per layer; on a long text this takes a while.")

    def _updating(self, updating: bool) -> None:
        if self.stack.currentWidget() is self.plot:
            r = self.shown_rollout()
            self.status.setText(UPDATING if updating else " " if r is None else self._sink_hint(r))

    def _placeholder(self, text: str) -> None:
        """Show ``text`` where the plot goes (never an empty plot while R is being computed)."""
        self.placeholder.setText(text)
        self.stack.setCurrentWidget(self.placeholder)

    def _draw(self, figure: HeadPlot, r, title: str) -> None:
        s = self.state
        # hide_first: display.without_first_key of R, i.e. lenses.rollout_skip_first (the values an export writes)
        figure.set_head(r, s.result.tokens, title, cmap=s.colormap, scale=s.scale, hide_first=s.rollout_skip_first,
                        causal=s.result.causal, quantity="rollout R")
        figure.plot.setLabel("bottom", "input token")

    def describe_cell(self, q: int, k: int, value: float) -> str:
        """The one text of cell (position ``q``, input ``k``, ``value`` of R as drawn): the hover line and the
        cell's tooltip both show it. R itself, or R renormalised without the first input and R before, when the
        first token is hidden; a causal model's future input is its mask."""
        return self.plot.weight_text(q, k, value, to="draws on input")

    def _hovered(self, cell) -> None:
        """The hover line for HeadPlot.cell_hovered's (query, key, value as drawn), or None (outside)."""
        self.hover_label.setText(" " if cell is None else self.describe_cell(*cell))

    def offscreen_figure(self):
        """A fresh export figure of the rollout shown (the caller disposes it); None before it is computed."""
        from ...export.figure_files import settle_layout
        from ...plots.figures import offscreen_head_figure

        s = self.state
        r = self.shown_rollout()
        if r is None:
            return None
        fig = offscreen_head_figure(s.result, self.layer, s.head, s.colormap, s.scale, s.rollout_skip_first)
        self._draw(fig, r, f"{s.result.model_label} — {self._what()}, layers 0…{self.layer} composed")
        settle_layout()
        fig.update_label_density()
        return fig
