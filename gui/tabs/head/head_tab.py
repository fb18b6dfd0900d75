"""The Head tab: one head's map (HeadPlot) with its controls — colours, scale, hide the first token,
attention weights or value-weighted — a short label of the head above it (all its scores in the label's
tooltip) and the hover line below it. A view of the ViewState.

In the value-weighted view (state.attention_view) the map is N = A·‖f_h(x_j)‖ row-normalised
(gui/state/lens_data.py ValueView.shown), the bars above the map are ‖f_h(x_j)‖ per key column, and the hover
line gives A, ‖f_h(x_j)‖ and the raw N of the cell.

The hover line and the cell's tooltip are one text (:meth:`HeadTab.describe_cell`) about the picture on
screen; both follow a new result, head or view under a resting pointer (HeadPlot.set_head re-reports the
cell), and a value view whose norms are still being computed says so.

*Draw: Lines* (``ViewState.head_drawing``) shows the Lines view instead of the map (lines_panel.py: the selected
head and more heads of its layer as lines between two columns of tokens), for texts of at most
``LINES_MAX_TOKENS`` tokens; a longer text keeps the map, under a one-line note that offers to go back to it.
The hover line then describes the token under the pointer, and the tab's figure (Export's "tab in front",
Copy figure) is the Lines figure."""
from __future__ import annotations

import html
import math

from PySide6 import QtCore, QtWidgets

from analysis.display import SCALE_LABELS, SCALES, format_score, head_name
from analysis.measures.head_scores import SCORE_NAMES

from ...plots.figures import HeadPlot, fit_title, head_title
from ...plots.head_view import KeyNormStrip, draw_head, view_to_draw
from ...plots.lines_plot import LINES_MAX_TOKENS
from ...plots.hover_text import NORMS_NOT_READY, value_hover_text
from ...plots.plot_items import RunDimmer, apply_theme, plain_tooltip
from ...state.head_maps import HeadMaps
from ...state.lens_data import VALUE_NORMS, LensData
from ...state.view_state import (ATTENTION_VIEW_LABELS, ATTENTION_VIEWS, COLORMAP_LABELS, COLORMAPS,
                                 HEAD_DRAWING_LABELS, HEAD_DRAWINGS, ViewState)
from ...widgets import ElidedLabel, add_arrow_keys, choice_box, placeholder_label, show_focus_ring
from .lines_panel import LinesPanel, lines_apply, lines_figure_of, lines_note, lines_too_long
from .query_row import QueryRowView

#: The pattern scores the head label compares: every AttnScope score but entropy (a spread, not a pattern).
HEAD_LABEL_SCORES = tuple(name for name in SCORE_NAMES if name != "entropy")
#: A head is named by its largest pattern score only from this value on (the sink heads' ε): below it no
#: pattern takes even 30% of the head's attention, and the label says "no pattern ≥ 0.3".
STRONG_PATTERN = 0.3
VALUE_VIEW_TIP = ("Value-weighted attention (Kobayashi et al. 2020): N[i, j] = A[i, j] · ‖f_h(x_j)‖, "
                  "f_h(x) = (x W_V^h + b_V^h) W_O^h — how far key j really moves query i's output, not only how "
                  "much it is looked at. Drawn row-normalised (each query row as shares of its sum); the raw N "
                  "and ‖f_h(x_j)‖ are in the hover line, ‖f_h(x_j)‖ per key in the bars above the map. "
                  "Applies to the grid too.")


def label_scores(scores, layer: int, head: int) -> list[tuple[str, float]]:
    """(name, value) of each HEAD_LABEL_SCORES score that applies to the model (``scores.applies``) and is
    defined (finite) for head ``layer``.``head``, in that order."""
    if scores is None:
        return []
    names = [name for name in HEAD_LABEL_SCORES if name in scores.values and scores.applies(name)]
    values = ((name, float(scores[name][layer, head])) for name in names)
    return [(name, value) for name, value in values if math.isfinite(value)]


def strongest_score(scores, layer: int, head: int) -> tuple[str, float] | None:
    """The largest of :func:`label_scores` as (name, value); None when there are no scores or none is defined.
    Each of these scores is a mean attention weight on one pattern (analysis/measures/head_scores.py), so they share
    the scale 0 … 1 and the largest is the head's strongest pattern — a strong one only from STRONG_PATTERN on."""
    found = label_scores(scores, layer, head)
    return max(found, key=lambda item: item[1]) if found else None


def score_text(name: str, value: float) -> str:
    """One score of the head label and its tooltip: "sink 0.930" (``format_score``, as the Head scores table)."""
    return f"{name.replace('_', ' ')} {format_score(value)}"


def top_score_text(top: tuple[str, float]) -> str:
    """What follows "top score:" in the head label: "sink 0.930", or "no pattern ≥ 0.3" when even the largest
    pattern score is below STRONG_PATTERN (a head is never named by a weak score; the tooltip names the largest)."""
    return score_text(*top) if top[1] >= STRONG_PATTERN else f"no pattern ≥ {STRONG_PATTERN:g}"



NO_RESULT = "Run a text to see a head's attention."
REVEAL_MS = 1  # the first map's figure is shown this long after it was drawn, in a turn of its own (redraw)
DRAWING_TIP = ("Matrix: the head's map, queries down, keys across. Lines: a line from each query (left) to each "
               f"key (right), its opacity the weight; hover a token for its lines alone; up to {LINES_MAX_TOKENS} "
               "tokens, and more heads of the layer in their own colours")


class HeadTab(QtWidgets.QWidget):
    """Tab protocol: ``title``, ``HeadTab(state, worker)``, ``offscreen_figure()``."""

    title = "Head"
    figure_asked = QtCore.Signal()  # the Figure… button: the window opens File › Figure… (a figure of this head)

    def __init__(self, state: ViewState, worker=None, parent=None):
        super().__init__(parent)
        self.state = state
        self.plot = HeadPlot(describe=self.describe_cell)  # the cell's tooltip is the hover line's text
        self.plot.setMinimumSize(200, 200)
        self.plot.ci.setContentsMargins(1, 1, 1, 5)  # on screen only (exports are fresh figures); "key" needs 5 below
        self.plot.title_px = 24
        show_focus_ring(self.plot)
        add_arrow_keys(self.plot, state)
        self.plot.query_clicked.connect(state.toggle_query_row)
        self.plot.cell_hovered.connect(self._hovered)
        self.colormap_choice = choice_box(COLORMAPS, COLORMAP_LABELS, state.colormap, state.set_colormap,
                                          "Colour map of every heatmap", chars=7)
        self.scale_choice = choice_box(SCALES, SCALE_LABELS, state.scale, state.set_scale,
                                       "How weights map to colours: linear, log₁₀, or √ (shows small weights)",
                                       chars=6)
        self.hide_first_box = QtWidgets.QCheckBox("Hide first token")
        self.hide_first_box.setChecked(state.hide_first)
        self.hide_first_box.setToolTip("Drop key 0 (often an attention sink) and renormalise each row over the rest "
                                       "(in the head map and the grid)")
        self.hide_first_box.toggled.connect(state.set_hide_first)
        self.view_choice = choice_box(ATTENTION_VIEWS, ATTENTION_VIEW_LABELS, state.attention_view,
                                      state.set_attention_view, VALUE_VIEW_TIP, chars=10)
        self.drawing_choice = choice_box(HEAD_DRAWINGS, HEAD_DRAWING_LABELS, state.head_drawing,
                                         state.set_head_drawing, DRAWING_TIP, chars=6)
        self.lines = LinesPanel(state)
        self.lines.token_hovered.connect(self._token_hovered)
        self.lines_note = QtWidgets.QLabel()
        self.lines_note.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.lines_note.linkActivated.connect(lambda _link: state.set_head_drawing("matrix"))
        self.lines_note.setVisible(False)
        self.strip = KeyNormStrip(self.plot)
        self.lenses = LensData.for_state(state, worker)
        self.head_maps = HeadMaps.for_state(state, worker)  # an on-demand result's head: computed on the worker
        self.head_maps.ready.connect(self._map_ready)
        self.head_maps.failed.connect(self._map_failed)
        self.pending = None  # (kind, layer, head) whose map is being computed: the picture is the one before it
        self.dimmer = RunDimmer(self.plot, state)  # while a new text runs the map is the previous text's: dimmed
        self.drawn = "weights"  # what the map shows now
        self.head_label = ElidedLabel()  # the whole of it is in its tooltip
        self.hover_label = QtWidgets.QLabel(" ")
        self.hover_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.hover_label.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        controls = QtWidgets.QHBoxLayout()  # one row, so that the map gets the height (a laptop has ~700 px)
        controls.addWidget(self.head_label, 1)
        controls.addSpacing(12)  # "… previous token 0.767" never runs into "Show"
        for name, widget in (("Show", self.view_choice), ("Colours", self.colormap_choice),
                             ("Scale", self.scale_choice)):
            controls.addWidget(QtWidgets.QLabel(name))
            controls.addWidget(widget)
        controls.addWidget(self.hide_first_box)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addLayout(controls)
        layout.addWidget(self.lines_note)
        # no result (no model loaded, a load that failed): a line saying so where the map goes, never empty axes
        self.placeholder = placeholder_label()
        self.stack = QtWidgets.QStackedLayout()
        self.stack.addWidget(self.plot)
        self.stack.addWidget(self.placeholder)
        self.stack.addWidget(self.lines)
        layout.addLayout(self.stack, 1)
        if state.bundle is None:
            self._show_placeholder()
        self.query_view = QueryRowView()  # one query's row, under the map: shown while a query row is chosen
        self.query_view.closed.connect(lambda: state.set_query_row(None))
        layout.addWidget(self.query_view)
        # the drawing's choice beside the hover line: the row of controls above has no room left at 1366 px
        bottom = QtWidgets.QHBoxLayout()
        bottom.addWidget(self.hover_label, 1)
        bottom.addSpacing(12)  # a long hover line never runs into "Draw"
        bottom.addWidget(QtWidgets.QLabel("Draw"))
        bottom.addWidget(self.drawing_choice)
        self.figure_button = QtWidgets.QPushButton("Figure…")
        self.figure_button.setToolTip("A figure of this head for a paper or a slide: size, labels, colours, token "
                                      "range (File › Figure…, Ctrl+Shift+F)")
        self.figure_button.clicked.connect(self.figure_asked)
        bottom.addWidget(self.figure_button)
        layout.addLayout(bottom)
        # a new result's labels made before its first map arrives, each axis in its own turn (TokenAxis.prime_tokens)
        state.on_bundle(lambda b: b is not None and self.plot.left_axis.prime_tokens(b.result.tokens), "query labels")
        state.on_bundle(lambda b: b is not None and self.plot.bottom_axis.prime_tokens(b.result.tokens), "key labels")
        state.on_bundle(lambda _: self.redraw(), "head tab")
        state.placeholder_changed.connect(lambda _: self.redraw())
        state.selection_changed.connect(lambda *_: self.redraw())
        for signal in (state.colormap_changed, state.scale_changed, state.hide_first_changed,
                       state.attention_view_changed):
            signal.connect(lambda *_: self.redraw())
        state.lens_changed.connect(lambda kind: kind == VALUE_NORMS and self.redraw())
        state.attention_view_changed.connect(lambda name: self._show_choice(self.view_choice, name))
        state.head_drawing_changed.connect(lambda name: self._show_choice(self.drawing_choice, name))
        state.head_drawing_changed.connect(lambda _: self.redraw())
        state.colormap_changed.connect(lambda name: self._show_choice(self.colormap_choice, name))
        state.scale_changed.connect(lambda name: self._show_choice(self.scale_choice, name))
        state.hide_first_changed.connect(self.hide_first_box.setChecked)
        state.query_row_changed.connect(self.plot.highlight_row)
        state.query_row_changed.connect(lambda _row: self._show_query_row())
        state.dark_changed.connect(self._theme)
        self._theme(state.dark)

    def _theme(self, dark: bool) -> None:
        apply_theme(self.plot, dark)
        apply_theme(self.query_view.plot, dark)

    @staticmethod
    def _show_choice(box: QtWidgets.QComboBox, name: str) -> None:
        box.blockSignals(True)
        box.setCurrentIndex(box.findData(name))
        box.blockSignals(False)

    def redraw(self) -> None:
        s = self.state
        self.hover_label.setText(" ")  # a cell of an earlier picture means nothing now
        self.colormap_choice.setEnabled(s.head_drawing == "matrix")  # lines take their heads' colours
        too_long = lines_too_long(s)
        self.lines_note.setVisible(too_long)
        if too_long:
            self.lines_note.setText(lines_note(s.result.n_tokens))
        if s.bundle is None:
            self.query_view.hide()
            self._show_placeholder()
            self.head_label.set_texts(" ")
            return
        layer, head = s.layer, s.head
        kind = view_to_draw(s)
        matrix = self.head_maps.get(kind, layer, head)
        shown = self.lines if lines_apply(s) else self.plot
        first_map = shown is self.plot and self.plot.matrix is None
        if matrix is None and first_map:  # no map drawn yet: a line saying so, not empty axes
            self.placeholder.setText(f"Computing {head_name(layer, head)}'s map…")
            shown = self.placeholder
        # the first map is drawn while the figure is hidden and shown in the next turn: its drawing and its first
        # layout and paint in two turns of the event loop, not one (bench: ~9 ms, then ~12 ms at 2,048 tokens)
        reveal = matrix is not None and first_map and self.stack.currentWidget() is self.placeholder
        if not reveal:
            self.stack.setCurrentWidget(shown)
        if matrix is None:  # an on-demand result's head, on its way from the worker (_map_ready draws it)
            self.pending = (kind, layer, head)
            self._label_head(layer, head)
            self.query_view.hide()  # the row would be the previous head's
            return
        self.pending = None
        # known before drawing: set_head re-reports the cell under a resting pointer, described as drawn now
        self.drawn = kind
        draw_head(self.plot, self.strip, s, layer, head, head_name(layer, head), matrix,
                  prepared=self.head_maps.prepared(kind, layer, head))
        self.plot.highlight_row(s.query_row)
        self._label_head(layer, head)
        self._show_query_row()
        if reveal:
            QtCore.QTimer.singleShot(REVEAL_MS, self, self._reveal_first_map)

    def _reveal_first_map(self) -> None:
        """Show the figure that its first map was drawn into (:meth:`redraw`), unless the tab has moved on since."""
        s = self.state
        if (s.bundle is not None and self.pending is None and self.plot.matrix is not None
                and self.stack.currentWidget() is self.placeholder and not lines_apply(s)):
            self.stack.setCurrentWidget(self.plot)

    def _show_placeholder(self) -> None:
        """No result: the state's line (or :data:`NO_RESULT`) where the map goes."""
        self.placeholder.setText(self.state.placeholder or NO_RESULT)
        self.stack.setCurrentWidget(self.placeholder)

    def _show_query_row(self) -> None:
        """The query-row view of the chosen query row of the map on screen, or hidden (no row chosen, no map yet)."""
        s, q = self.state, self.state.query_row
        if q is None or s.result is None or self.plot.matrix is None or self.pending is not None \
                or q >= self.plot.matrix.shape[0]:
            self.query_view.hide()
            return
        quantity = "share of the row's N" if self.drawn == "value-weighted" else "weight"
        if s.hide_first:
            quantity += " (first key hidden, renormalised)"
        self.query_view.show_row(s.result.tokens, q, self.plot.shown_row(q), quantity)

    def _map_ready(self, kind: str, layer: int, head: int) -> None:
        if self.pending == (kind, layer, head):
            self.redraw()

    def _map_failed(self, message: str) -> None:
        if self.pending is not None:
            self.head_label.set_texts(f"<b>{head_name(*self.pending[1:])}</b> — "
                                      f"<i>{html.escape(f'could not compute its map: {message}')}</i>")
            self.head_label.setToolTip(plain_tooltip(message))
            if self.stack.currentWidget() is self.placeholder:  # no longer "Computing …'s map…"
                self.placeholder.setText(f"Could not compute {head_name(*self.pending[1:])}'s map: {message}")

    def _label_head(self, layer: int, head: int) -> None:
        """The label above the map: "L1H2 · top score: sink 0.930", where that is too wide "L1H2 · sink 0.930",
        then "L1H2" (or what the value view is waiting for), short enough for the row of controls at 1366 px; the head's every label score is in its tooltip."""
        s = self.state
        top = strongest_score(s.scores, layer, head)
        name = f"<b>{head_name(layer, head)}</b>"
        texts = [name]
        note = None  # what the value view is waiting for (plain text), whole in the tooltip too
        if self.pending is not None:
            note = f"computing this head's map ({s.result.n_tokens:,} tokens, computed on demand)…"
            texts = [f"{name} — <i>{html.escape(note)}</i>"]
        elif s.attention_view == "value-weighted" and self.drawn == "weights":
            error = s.lens_error(VALUE_NORMS)
            note = f"value-weighted view: {error} Showing the weights." if error else "computing the value norms…"
            texts = [f"{name} — <i>{html.escape(note)}</i>"]
        elif top is not None:
            score = html.escape(top_score_text(top), quote=False)
            # narrower: the same score without its caption (one wording at every width, never "top:")
            texts = [f"{name} · top score: {score}", f"{name} · {score}", name]
        self.head_label.set_texts(*texts)
        tip = [f"Layer {layer}, head {head}."]
        if note is not None:
            tip.append(note)
        scores = [score_text(n, value) for n, value in label_scores(s.scores, layer, head)]
        if scores:
            tip.append("Scores (each a mean attention weight on one pattern, 0 … 1; all of them in the Head "
                       "scores tab): " + ", ".join(scores) + "." + (
                f" The top score is the largest of them (entropy, a spread, is not a pattern): "
                f"{score_text(*top)}. A head is named by it only from {STRONG_PATTERN:g} "
                f"on, else \"no pattern ≥ {STRONG_PATTERN:g}\"." if top is not None else ""))
        self.head_label.setToolTip(plain_tooltip(" ".join(tip)))

    def describe_cell(self, q: int, k: int, value: float) -> str:
        """The one text of cell (query ``q``, key ``k``, ``value`` as drawn) of the map on screen: the hover
        line and the cell's tooltip both show it. Weights: the weight (renormalised without the first key, and
        the weight before, when it is hidden). Value-weighted: the share of the row, A, ‖f_h(x_j)‖ and N.
        The value view chosen while its norms are being computed: the weight drawn, and that said."""
        s, r = self.state, self.state.result
        if r is None or self.plot.matrix is None or max(q, k) >= len(r.tokens) or self.pending is not None:
            return ""  # no result, or the picture is not yet this head's
        shown = math.isfinite(value) and not (r.causal and k > q)
        if self.drawn == "value-weighted":
            values = s.lens(VALUE_NORMS)
            before = self.plot.before_hiding  # the shares before the first key was dropped, as set_head got them
            before = float(before[q, k]) if shown and before is not None else None
            attention = float(r.maps.weights(s.layer, [s.head], [q])[0, 0, k])  # one row, whichever way maps are held
            key_norm = None if values is None else float(values.key_norms[s.layer, s.head, k])
            return value_hover_text(r.tokens, (q, k, value), attention, key_norm, r.causal, before)
        text = self.plot.weight_text(q, k, value)
        if shown and s.attention_view == "value-weighted":  # chosen, but the weights are drawn
            text += (" (the weight: the value-weighted view is not available)" if s.lens_error(VALUE_NORMS)
                     else f" (the weight: {NORMS_NOT_READY})")
        return text

    def _hovered(self, cell) -> None:
        """The hover line for HeadPlot.cell_hovered's (query, key, value as drawn), or None (outside)."""
        text = "" if cell is None else self.describe_cell(*cell)
        self.hover_label.setText(text or " ")

    def _token_hovered(self, token) -> None:
        """The hover line for the Lines view's token under the pointer (None: none)."""
        self.hover_label.setText(self.lines.plot.describe(token) or " ")

    def offscreen_figure(self):
        """A fresh export figure of the head shown (the caller disposes it): the map, or the Lines figure."""
        from ...plots.figures import offscreen_head_figure

        s = self.state
        if s.result is None:
            return None
        if lines_apply(s):
            drawn = s.lines_drawn()
            name = head_name(s.layer, s.head) if len(drawn) == 1 else \
                f"L{s.layer} heads {', '.join(str(h) for h in drawn)}"
            view = " — value-weighted, rows normalised" if view_to_draw(s) == "value-weighted" else ""
            return lines_figure_of(s, f"{s.result.model_label} — {name}{view}")
        fig = offscreen_head_figure(s.result, s.layer, s.head, s.colormap, s.scale, s.hide_first)
        if s.attention_view == "value-weighted" and s.lens(VALUE_NORMS) is not None:
            draw_head(fig, KeyNormStrip(fig), s, s.layer, s.head,
                      head_title(s.result.model_label, s.layer, s.head))
            fit_title(fig)  # laid out without the strip and for a shorter title
            fig.update_label_density()
        return fig
