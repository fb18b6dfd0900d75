"""The Head tab: one head's map (HeadPlot) with its controls — colours, scale, hide the first token,
attention weights or value-weighted — a short label of the head above it (all its scores in the label's
tooltip) and the hover line below it. A view of the ViewState.

In the value-weighted view (state.attention_view) the map is N = A·‖f_h(x_j)‖ row-normalised
(gui/state/lens_data.py ValueView.shown), the bars above the map are ‖f_h(x_j)‖ per key column, and the hover
line gives A, ‖f_h(x_j)‖ and the raw N of the cell.

The hover line and the cell's tooltip are one text (:meth:`HeadPanel.describe_cell`) about the picture on
screen; both follow a new result, head or view under a resting pointer (HeadPlot.set_head re-reports the
cell), and a value view whose norms are still being computed says so."""
from __future__ import annotations

import html
import math
from collections.abc import Mapping

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import SCALE_LABELS, SCALES
from analysis.measures.head_scores import SCORE_NAMES

from ...plots.figures import COLORMAP_LABELS, COLORMAPS, HeadPlot, apply_theme, bar_label, settle_layout  # noqa: F401
from ...plots.hover_text import NORMS_NOT_READY, hover_text, value_hover_text  # noqa: F401 (hover_text re-exported)
from ...state.lens_data import VALUE_NORMS, LensData
from ...plots.plot_items import RunDimmer, plain_tooltip
from ...state.view_state import ATTENTION_VIEW_LABELS, ATTENTION_VIEWS, ViewState

FOCUS_STYLE = "QGraphicsView {{ border: 2px solid {}; }}"
FOCUS_COLOUR = "#3d8ee0"
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
STRIP_PX = 44  # height of the key-norm bars above the head map
STRIP_BRUSH = "#7f9fbf"  # readable on the light and the dark background


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


def label_scores(scores, layer: int, head: int) -> list[tuple[str, float]]:
    """(name, value) of each HEAD_LABEL_SCORES score that applies to the model (``scores.applies``) and is
    defined (finite) for head ``layer``.``head``, in that order."""
    if scores is None:
        return []
    applies = getattr(scores, "applies", lambda name: True)
    held = scores.values if isinstance(getattr(scores, "values", None), Mapping) else scores  # HeadScores or a dict
    names = [name for name in HEAD_LABEL_SCORES if name in held and applies(name)]
    values = ((name, float(scores[name][layer, head])) for name in names)
    return [(name, value) for name, value in values if math.isfinite(value)]


def strongest_score(scores, layer: int, head: int) -> tuple[str, float] | None:
    """The largest of :func:`label_scores` as (name, value); None when there are no scores or none is defined.
    Each of these scores is a mean attention weight on one pattern (analysis/measures/head_scores.py), so they share
    the scale 0 … 1 and the largest is the head's strongest pattern — a strong one only from STRONG_PATTERN on."""
    found = label_scores(scores, layer, head)
    return max(found, key=lambda item: item[1]) if found else None


def top_score_text(top: tuple[str, float]) -> str:
    """What follows "top score:" in the head label: "sink 0.93", or "no pattern ≥ 0.3" when even the largest
    pattern score is below STRONG_PATTERN (a head is never named by a weak score; the tooltip names the largest)."""
    score = f"{top[0].replace('_', ' ')} {top[1]:.2f}"
    return score if top[1] >= STRONG_PATTERN else f"no pattern ≥ {STRONG_PATTERN:g}"


class KeyNormStrip:
    """‖f_h(x_j)‖ per key as bars directly above a HeadPlot's map. The bars live in the plot's own layout,
    in the (hidden) top axis's place, x-linked to the map: each bar stays over its key column at any
    zoom and any width of the token labels."""

    def __init__(self, figure: HeadPlot):
        plot = figure.plot
        top = plot.getAxis("top")
        plot.layout.removeItem(top)
        top.hide()
        self.view = pg.ViewBox(enableMouse=False, enableMenu=False, defaultPadding=0)
        self.view.setXLink(plot.getViewBox())
        self.bars = pg.BarGraphItem(x0=[], height=[], width=1.0, brush=STRIP_BRUSH, pen=None)
        self.view.addItem(self.bars)
        self.label = pg.LabelItem("", size="8pt", justify="right")
        plot.layout.addItem(self.view, 1, 1)
        plot.layout.addItem(self.label, 1, 0)
        self.norms: np.ndarray | None = None
        self.set_norms(None)

    def set_norms(self, norms: np.ndarray | None) -> None:
        """Show the key norms (n,), or hide the strip (None)."""
        self.norms = None if norms is None else np.asarray(norms, dtype=np.float64)
        shown = self.norms is not None
        height = STRIP_PX if shown else 0
        for item in (self.view, self.label):
            item.setVisible(shown)
            item.setMinimumHeight(height)
            item.setMaximumHeight(height)
        if not shown:
            self.bars.setOpts(x0=[], height=[], width=1.0)
            return
        n = len(self.norms)
        self.bars.setOpts(x0=np.arange(n) + 0.1, height=self.norms, width=0.8)
        top = float(self.norms.max()) if n else 1.0
        self.view.setYRange(0, top if top > 0 else 1.0, padding=0.05)
        self.label.setText(f"‖f(x)‖<br>max {top:.3g}")


def fit_title(fig) -> None:
    """Lay an offscreen figure out again, widened so its title fits over the map: a title wider than the
    map pushes the colour bar out of the picture."""
    settle_layout()
    need = fig.ci.effectiveSizeHint(QtCore.Qt.SizeHint.MinimumSize).width() + 24  # the whole layout, title included
    fig.resize(max(fig.width() + 1, int(need)), fig.height())  # any resize lays the figure out again
    settle_layout()


def view_to_draw(state: ViewState) -> str:
    """What :func:`draw_head` draws for the state now: "value-weighted" when that view is chosen and its value
    norms are there, else "weights"."""
    wanted = state.attention_view == "value-weighted" and state.lens(VALUE_NORMS) is not None
    return "value-weighted" if wanted else "weights"


def draw_head(figure: HeadPlot, strip: KeyNormStrip | None, state: ViewState, layer: int, head: int,
              title: str) -> None:
    """Draw head ``layer``.``head`` of the state's result as the state says (:func:`view_to_draw`: weights, or
    value-weighted when its value norms are there)."""
    r, values = state.result, state.lens(VALUE_NORMS)
    if view_to_draw(state) == "value-weighted":
        figure.set_head(values.shown[layer, head], r.tokens, f"{title} — value-weighted, rows normalised",
                        cmap=state.colormap, scale=state.scale, hide_first=state.hide_first, causal=r.causal,
                        quantity="share of row N")
        if strip is not None:
            strip.set_norms(values.key_norms[layer, head])
        return
    figure.set_head(r.attentions[layer, head], r.tokens, title, cmap=state.colormap, scale=state.scale,
                    hide_first=state.hide_first, causal=r.causal)
    if strip is not None:
        strip.set_norms(None)


class ElidingComboBox(QtWidgets.QComboBox):
    """A combo box that ends its current text in "…" when the box is narrower than it (Qt's styles cut it)."""

    def paintEvent(self, ev):  # noqa: N802
        style = QtWidgets.QStyle
        painter = QtWidgets.QStylePainter(self)
        option = QtWidgets.QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(style.ComplexControl.CC_ComboBox, option)
        field = self.style().subControlRect(style.ComplexControl.CC_ComboBox, option,
                                            style.SubControl.SC_ComboBoxEditField, self)
        option.currentText = self.fontMetrics().elidedText(option.currentText, QtCore.Qt.TextElideMode.ElideRight,
                                                           field.width())
        painter.drawControl(style.ControlElement.CE_ComboBoxLabel, option)


def choice_box(ids, labels: dict, current: str, setter, tooltip: str, chars: int | None = None) -> QtWidgets.QComboBox:
    """A combo box of ``ids`` shown by their ``labels``; ``chars``: the box is that many characters wide and
    elides a longer choice (its open list shows every choice whole)."""
    box = ElidingComboBox()
    for name in ids:
        box.addItem(labels.get(name, name), name)
    if chars is not None:
        box.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        box.setMinimumContentsLength(chars)
    box.setCurrentIndex(box.findData(current))
    box.setToolTip(tooltip)
    box.currentIndexChanged.connect(lambda _: setter(box.currentData()))
    return box


class ElidedLabel(QtWidgets.QLabel):
    """A one-line rich-text label that ends in "…" when it is wider than its room, cut between words (never
    inside one, nor right after a dash, colon or comma). ``text()`` keeps the whole text (and the caller puts
    it in the tooltip); only the painting is cut."""

    DANGLING = "—–-·:,;&"  # a cut right after one of these reads as a half sentence: cut before its word too

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.shorter: tuple[str, ...] = ()  # shorter wordings of the text, shown (whole) when it does not fit

    def set_texts(self, text: str, *shorter: str) -> None:
        """Show ``text``, or the first of the ``shorter`` wordings that fits; the last one is elided if need be."""
        self.shorter = shorter
        self.setText(text)
        self.update()

    def _document(self, text: str | None = None) -> QtGui.QTextDocument:
        doc = QtGui.QTextDocument()
        doc.setDefaultFont(self.font())
        doc.setDocumentMargin(0)
        option = QtGui.QTextOption()
        option.setWrapMode(QtGui.QTextOption.WrapMode.NoWrap)
        doc.setDefaultTextOption(option)
        doc.setHtml(self.text() if text is None else text)
        return doc

    def shown_document(self) -> QtGui.QTextDocument:
        """The text as painted: the text or the first shorter wording that fits whole, else the shortest
        wording cut before a space and ended with "…"."""
        room = self.contentsRect().width()
        for text in (self.text(), *self.shorter):
            doc = self._document(text)
            if doc.idealWidth() <= room:
                return doc
        # the shortest wording (``text``, HTML) is cut in its own rich document, so that its bold and italics and
        # its escaped "&lt;" stay as they are; its plain text only finds where the words end
        end = doc.characterCount() - 1  # without the closing paragraph separator
        plain = doc.toPlainText()  # one block: character i is document position i
        cuts = [0] + [i for i in range(1, len(plain)) if plain[i].isspace() and not plain[i - 1].isspace()
                      and plain[i - 1] not in self.DANGLING]

        def cut(keep: int) -> QtGui.QTextDocument:
            shorter = self._document(text)
            cursor = QtGui.QTextCursor(shorter)
            cursor.setPosition(keep)
            cursor.setPosition(end, QtGui.QTextCursor.MoveMode.KeepAnchor)
            cursor.insertText("…")
            return shorter

        low, high = 0, len(cuts) - 1  # the longest kept run of words whose cut text fits (binary search)
        while low < high:
            middle = (low + high + 1) // 2
            if cut(cuts[middle]).idealWidth() <= room:
                low = middle
            else:
                high = middle - 1
        return cut(cuts[low])

    def plain_text(self) -> str:
        return self._document().toPlainText()

    def is_elided(self) -> bool:
        return self.shown_document().toPlainText() != self.plain_text()

    def paintEvent(self, ev):  # noqa: N802
        doc = self.shown_document()
        painter = QtGui.QPainter(self)
        rect = self.contentsRect()
        painter.translate(rect.left(), rect.top() + (rect.height() - doc.size().height()) / 2)
        context = QtGui.QAbstractTextDocumentLayout.PaintContext()
        roles = QtGui.QPalette.ColorRole
        context.palette.setColor(roles.Text, self.palette().color(roles.WindowText))
        context.clip = QtCore.QRectF(0, 0, rect.width(), doc.size().height())
        doc.documentLayout().draw(painter, context)
        painter.end()


class HeadPanel(QtWidgets.QWidget):
    """Tab protocol: ``title``, ``HeadPanel(state, worker)``, ``offscreen_figure()``."""

    title = "Head"

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
        self.strip = KeyNormStrip(self.plot)
        self.lenses = LensData.for_state(state, worker)
        self.dimmer = RunDimmer(self.plot, state)  # while a new text runs the map is the previous text's: dimmed
        self.drawn = "weights"  # what the map shows now
        self.head_label = ElidedLabel()  # the whole of it is in its tooltip
        self.hover_label = QtWidgets.QLabel(" ")
        self.hover_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.hover_label.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        controls = QtWidgets.QHBoxLayout()  # one row, so that the map gets the height (a laptop has ~700 px)
        controls.addWidget(self.head_label, 1)
        for name, widget in (("Show", self.view_choice), ("Colours", self.colormap_choice),
                             ("Scale", self.scale_choice)):
            controls.addWidget(QtWidgets.QLabel(name))
            controls.addWidget(widget)
        controls.addWidget(self.hide_first_box)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addLayout(controls)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.hover_label)
        state.bundle_changed.connect(lambda _: self.redraw())
        state.selection_changed.connect(lambda *_: self.redraw())
        for signal in (state.colormap_changed, state.scale_changed, state.hide_first_changed,
                       state.attention_view_changed):
            signal.connect(lambda *_: self.redraw())
        state.lens_changed.connect(lambda kind: kind == VALUE_NORMS and self.redraw())
        state.attention_view_changed.connect(lambda name: self._show_choice(self.view_choice, name))
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
        layer, head = s.layer, s.head
        # known before drawing: set_head re-reports the cell under a resting pointer, described as drawn now
        self.drawn = view_to_draw(s)
        draw_head(self.plot, self.strip, s, layer, head, f"layer {layer}, head {head}")
        self.plot.highlight_row(s.query_row)
        self._label_head(layer, head)

    def _label_head(self, layer: int, head: int) -> None:
        """The label above the map: "L1 H2 · top score: sink 0.93" (or what the value view is waiting for),
        short enough for the row of controls at 1366 px; the head's every label score is in its tooltip."""
        s = self.state
        top = strongest_score(s.scores, layer, head)
        name = f"<b>L{layer} H{head}</b>"
        texts = [name]
        note = None  # what the value view is waiting for (plain text), whole in the tooltip too
        if s.attention_view == "value-weighted" and self.drawn == "weights":
            error = s.lens_error(VALUE_NORMS)
            note = f"value-weighted view: {error} Showing the weights." if error else "computing the value norms…"
            texts = [f"{name} — <i>{html.escape(note)}</i>"]
        elif top is not None:
            score = html.escape(top_score_text(top), quote=False)
            texts = [f"{name} · top score: {score}", f"{name} · top: {score}", name]
        self.head_label.set_texts(*texts)
        tip = [f"Layer {layer}, head {head}."]
        if note is not None:
            tip.append(note)
        scores = [f"{n.replace('_', ' ')} {value:.2f}" for n, value in label_scores(s.scores, layer, head)]
        if scores:
            tip.append("Scores (each a mean attention weight on one pattern, 0 … 1; all of them in the Head "
                       "scores tab): " + ", ".join(scores) + "." + (
                f" The top score is the largest of them (entropy, a spread, is not a pattern): "
                f"{top[0].replace('_', ' ')} {top[1]:.2f}. A head is named by it only from {STRONG_PATTERN:g} "
                f"on, else \"no pattern ≥ {STRONG_PATTERN:g}\"." if top is not None else ""))
        self.head_label.setToolTip(plain_tooltip(" ".join(tip)))

    def describe_cell(self, q: int, k: int, value: float) -> str:
        """The one text of cell (query ``q``, key ``k``, ``value`` as drawn) of the map on screen: the hover
        line and the cell's tooltip both show it. Weights: the weight (renormalised without the first key, and
        the weight before, when it is hidden). Value-weighted: the share of the row, A, ‖f_h(x_j)‖ and N.
        The value view chosen while its norms are being computed: the weight drawn, and that said."""
        s, r = self.state, self.state.result
        if r is None or self.plot.matrix is None or max(q, k) >= len(r.tokens):
            return ""
        shown = math.isfinite(value) and not (r.causal and k > q)
        if self.drawn == "value-weighted":
            values = s.lens(VALUE_NORMS)
            before = self.plot.before_hiding  # the shares before the first key was dropped, as set_head got them
            before = float(before[q, k]) if shown and before is not None else None
            attention = float(r.attentions[s.layer, s.head, q, k])
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

    def offscreen_figure(self):
        """A fresh export figure of the head shown (the caller disposes it)."""
        from ...plots.figures import offscreen_head_figure

        s = self.state
        if s.result is None:
            return None
        fig = offscreen_head_figure(s.result, s.layer, s.head, s.colormap, s.scale, s.hide_first)
        if s.attention_view == "value-weighted" and s.lens(VALUE_NORMS) is not None:
            draw_head(fig, KeyNormStrip(fig), s, s.layer, s.head,
                      f"{s.result.model_label} — layer {s.layer}, head {s.head}")
            fit_title(fig)  # laid out without the strip and for a shorter title
            fig.update_label_density()
        return fig
