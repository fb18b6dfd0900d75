"""The "All heads" panel: every layer × head as thumbnails (GridPlot) and the Badges chooser.
A view of the ViewState: a click selects a head, arrow keys move the selection, and a head selected anywhere (the
score table, the Head scores map, a tab) is brought into view when the grid is zoomed past it. Badges mark only the
heads that stand out on the chosen score (gui/plots/badges.py); the line beside the chooser says how many, that none
does, or that the cells are too small to read them ("zoom in"), and the chooser's tooltip names them. In the value-weighted
view (state.attention_view, switched in the Head tab) every thumbnail is N = A·‖f_h(x_j)‖
row-normalised, once the state has the value norms (gui/state/lens_data.py); until then the weights.
While there is no result, the panel shows the state's placeholder line ("loading the model…")
instead of empty axes."""
from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np
from PySide6 import QtCore, QtWidgets

from analysis.export.figure_options import model_name
from analysis.measures.head_scores import SCORE_NAMES

from ..state.lens_data import HIDDEN_FIRST, VALUE_NORMS
from ..state.view_state import ViewState
from ..widgets import ElidedLabel, add_arrow_keys, placeholder_label, show_focus_ring
from .badges import LOW_IS_FINDING
from .figure_parts import VALUE_QUANTITY, VALUE_TITLE
from .figures import fit_title, grid_source
from .grid_plot import BAR_LABELS, GridPlot
from .plot_items import apply_theme


class QuantityGridPlot(GridPlot):
    """A GridPlot whose colour bar names what it draws: ``quantity`` replaces "weight" in the label."""

    quantity = "weight"

    def set_image(self, image, shape, levels, cmap, title="", bar_label="", layout=None):
        super().set_image(image, shape, levels, cmap, title, bar_label.replace("weight", self.quantity), layout=layout)


BADGES_TIP = ("Badge the heads that stand out on a score: at least 0.3 and far past the model's typical head (more "
              "than 3 robust standard deviations above the median; for entropy, below it). Each is outlined, its "
              "value written in when the cell has room (the best a gold ★); hover any cell for its value")


def grid_figure(view, badge_label: str = ""):
    """A fresh export figure of the grid as ``view`` shows it (a ViewState, or a snapshot with the same
    attributes: result, bundle, scores, lens, attention_view, colormap, scale, hide_first, badge_score):
    the weights, or the value-weighted view when that is on and its norms are there. The caller disposes it."""
    from .figures import offscreen_grid_figure

    r = view.result
    badges = view.scores[view.badge_score] if view.badge_score else None
    fig = offscreen_grid_figure(r, view.colormap, view.scale, badges=badges, hide_first=view.hide_first,
                                badge_label=badge_label, badge_low=view.badge_score in LOW_IS_FINDING)
    data = grid_data(view)
    if data.what:
        from ..export.figure_files import settle_layout
        from .layer_head_map import width_for_title

        title = f"{model_name(r.model_label)} — all heads, {data.what} A·‖f(x)‖ (rows normalised), {r.n_tokens} tokens"
        fig.resize(max(fig.width(), width_for_title(title)), fig.height())  # an export shows its title whole
        settle_layout()
        fig.set_attentions(data.source, view.colormap, view.scale, key=None, full=data.full,
                           hide_first=data.hide_first, sync=True, title=title, causal=r.causal)
        fig.colorbar.axis.setLabel(BAR_LABELS[view.scale].replace("weight", data.quantity)
                                   + (" (first key hidden)" if data.hide_first else ""))
        fit_title(fig)
    return fig


@dataclass(frozen=True)
class GridData:
    """What the grid draws for a view: ``source`` its thumbnails, ``full`` what it pools from when a cell has more
    pixels than they do (every map, or the thumbnails themselves for an on-demand result), ``key`` the pooling key,
    ``quantity`` the colour bar's, ``what`` the title's suffix, ``hide_first`` whether to pool past the first key,
    ``first_hidden`` whether ``source`` was pooled so already (measures.streamed), ``note`` what is still on its way."""

    source: np.ndarray
    full: np.ndarray
    key: object
    quantity: str = "weight"
    what: str = ""
    hide_first: bool = False
    first_hidden: bool = False
    note: str = ""


def grid_data(state: ViewState) -> GridData:
    """What the grid draws for the state (a ViewState or an export's snapshot). A result whose maps are computed on
    demand draws its thumbnails (pooled during the run), never every map: with the first key hidden the thumbnails
    pooled so on the worker (lens_data's HIDDEN_FIRST) once they are there, the value-weighted view its lens's
    thumbnails (pooled with the first key)."""
    r, values, rid = state.result, state.lens(VALUE_NORMS), state.bundle.request_id
    kept = r.maps_kept
    if state.attention_view == "value-weighted" and values is not None:
        if values.shown is not None:
            return GridData(values.shown, values.shown, (rid, VALUE_NORMS), VALUE_QUANTITY, VALUE_TITLE,
                            state.hide_first)
        note = " (first key shown: pooled with it)" if state.hide_first else ""
        return GridData(values.grid, values.grid, (rid, VALUE_NORMS), VALUE_QUANTITY, VALUE_TITLE + note)
    if kept:
        return GridData(grid_source(r), r.attentions, rid, hide_first=state.hide_first)
    hidden = state.lens(HIDDEN_FIRST) if state.hide_first else None
    if hidden is not None:
        return GridData(hidden, hidden, (rid, HIDDEN_FIRST), first_hidden=True)
    note = "pooling past the first key…" if state.hide_first else ""
    return GridData(r.thumbnails, r.thumbnails, rid, note=note)


class GridPanel(QtWidgets.QWidget):
    def __init__(self, state: ViewState, parent=None):
        super().__init__(parent)
        self.state = state
        self.plot = QuantityGridPlot()
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
        self.badge_choice.setToolTip(BADGES_TIP)
        self.badge_choice.currentIndexChanged.connect(lambda _: state.set_badge_score(self.badge_choice.currentData()))
        self.badge_note = ElidedLabel()  # how many heads stand out, that none does, or "zoom in to read"
        self.plot.badges_changed.connect(lambda _note: self._show_badge_note())
        bar = QtWidgets.QHBoxLayout()
        self.title = QtWidgets.QLabel("<b>All heads</b>")
        bar.addWidget(self.title)
        bar.addWidget(self.badge_note, 1)
        bar.addWidget(QtWidgets.QLabel("Badges:"))
        bar.addWidget(self.badge_choice)
        self.placeholder = placeholder_label(self)
        self.stack = QtWidgets.QStackedLayout()
        self.stack.addWidget(self.plot)
        self.stack.addWidget(self.placeholder)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addLayout(self.stack, 1)
        state.placeholder_changed.connect(lambda _: self._show_placeholder())
        self._show_placeholder()
        state.on_bundle(lambda _: (self._show_placeholder(), self.redraw()), "grid")
        for signal in (state.colormap_changed, state.scale_changed, state.hide_first_changed,
                       state.attention_view_changed):
            signal.connect(lambda *_: self.redraw())
        state.lens_changed.connect(lambda kind: kind in (VALUE_NORMS, HIDDEN_FIRST) and self.redraw())
        state.selection_changed.connect(self.plot.select)
        state.badge_score_changed.connect(self._badge_changed)
        state.dark_changed.connect(lambda dark: apply_theme(self.plot, dark))
        apply_theme(self.plot, state.dark)

    def _show_placeholder(self) -> None:
        """The placeholder line while there is no result (and one to show); the grid otherwise."""
        s = self.state
        text = s.placeholder if s.bundle is None else None
        self.placeholder.setText(text or "")
        self.stack.setCurrentWidget(self.placeholder if text else self.plot)

    def redraw(self) -> None:
        s = self.state
        if s.bundle is None:
            return
        data = grid_data(s)
        self.plot.quantity = data.quantity
        self.plot.set_attentions(data.source, s.colormap, s.scale, key=data.key, full=data.full,
                                 hide_first=data.hide_first, causal=s.result.causal,  # a decoder's masked cells blank
                                 first_hidden=data.first_hidden)
        suffix = " — ".join(part for part in (data.what, data.note) if part)
        self.title.setText("<b>All heads</b>" + (f" — {suffix}" if suffix else ""))
        self.title.setToolTip("Value-weighted attention N = A·‖f_h(x_j)‖, each query row normalised to sum to 1 "
                              "for display; the Head tab's hover line has the raw N" if data.what else "")
        self.plot.select(s.layer, s.head)
        self._offer_badges()
        self._show_badges()

    def _offer_badges(self) -> None:
        """Offer only the scores that apply to this model (``scores.applies``): a causal model's "next
        token" is 0 by construction, not a finding. A badge score that no longer applies is turned off."""
        scores = self.state.scores
        items = self.badge_choice.model()
        for index in range(1, self.badge_choice.count()):
            name = self.badge_choice.itemData(index)
            applies = scores is None or scores.applies(name)
            items.item(index).setEnabled(applies)
            items.item(index).setToolTip("" if applies else "Not applicable to this model")
        if scores is not None and self.state.badge_score is not None and not scores.applies(self.state.badge_score):
            self.state.set_badge_score(None)

    def _badge_changed(self, name) -> None:
        self.badge_choice.blockSignals(True)
        self.badge_choice.setCurrentIndex(max(0, self.badge_choice.findData(name)))
        self.badge_choice.blockSignals(False)
        self._show_badges()

    def _show_badges(self) -> None:
        s = self.state
        name = s.badge_score
        if name is None or s.bundle is None or s.scores is None:
            self.plot.set_badges(None)
        else:
            self.plot.set_badges(s.scores[name], self.badge_choice.currentText(), low=name in LOW_IS_FINDING)
        self._show_badge_note()

    def _show_badge_note(self) -> None:
        """The line beside the chooser (the plot's :attr:`badge_note`, elided to its room, whole in its tooltip)
        and the chooser's tooltip: what badges are, then which heads stand out now, by name."""
        note = self.plot.badge_note
        self.badge_note.set_texts(html.escape(note, quote=False), html.escape(self.plot.badge_layer.short_note()))
        self.badge_note.setToolTip(note)
        summary = self.plot.badge_layer.summary()
        self.badge_choice.setToolTip(BADGES_TIP + (f"\n\n{summary}" if summary else ""))

    def offscreen_figure(self):
        """A fresh export figure of the grid as shown (the caller disposes it); None without a result."""
        if self.state.result is None:
            return None
        return grid_figure(self.state, self.badge_choice.currentText())
