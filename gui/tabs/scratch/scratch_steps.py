"""From scratch → Steps: the selected head's attention recomputed in numpy by its family's own steps,
one small heatmap per step (the norm, Q, K, V, the rotation by position for rotary families, QKᵀ,
the scale, the mask unless an encoder, softmax, weights·V), each cell explained on hover
(gui/tabs/scratch/scratch_explain.py), and the walkthrough of one query row. The page scrolls with the wheel;
Ctrl+wheel zooms a plot.

Which heatmaps, their titles, notes and values come from the family's steps
(``analysis.families.step_views``); this page lays them out and explains their cells.
"""
from __future__ import annotations

import html
import math

import numpy as np
from PySide6 import QtCore, QtWidgets

from analysis.display import elide, head_name
from analysis.families import family_named
from analysis.families.step_views import STEPS, ViewFacts, step_views, view_keys
from analysis.lessons.lab import explain_weight

from ...plots.matrix_view import MatrixView, matrix_table
from .scratch_explain import StepHovers

VIEW_MIN_WIDTH = 170
COLUMN_PX = 230  # a column of small heatmaps per this many pixels of page width (2 to 5 columns)


class StepsPage(QtWidgets.QWidget, StepHovers):
    """The selected head's attention, step by step, from the layer's input, in the steps of its model's family:
    the norm (LayerNorm, RMSNorm, none for post-LN encoders), Q/K/V, the rotation of q and k by position
    (rotary families), which key/value head the query head reads (grouped-query attention), scores, scale,
    the mask (causal, sliding window; none for encoders), softmax, weights·V. Every cell's hover names its
    query and key (or token and dimension) and how it was made."""

    query_chosen = QtCore.Signal(int)  # the user picked a query row to follow

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rec = None
        self.result = None
        self.weights = None  # AttentionWeights of the layer (rotary base, norm), when given
        self.head = 0
        self.query_choice = QtWidgets.QComboBox()
        self.query_choice.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.query_choice.setMinimumContentsLength(12)
        self.query_choice.currentIndexChanged.connect(self._query_changed)
        self.query_choice.activated.connect(self.query_chosen)  # only a user's choice, not focus_query's
        self.info = QtWidgets.QLabel()
        self.info.setWordWrap(True)
        self.info.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.info.setMinimumWidth(200)
        self.shown = {}  # key → the ShownView on screen (its title, note and what its columns are)
        self.views = {key: MatrixView(key, self.hover_for(key)) for key in view_keys()}  # titled in set_data
        for view in self.views.values():
            view.setMinimumWidth(VIEW_MIN_WIDTH)
        self.shown_views: list[str] = list(self.views)  # in order, numbered
        self.grid = QtWidgets.QGridLayout()
        self._columns = 0
        self._lay_out_views(self._columns_for(self.width()))
        self.focus_table = QtWidgets.QTableWidget()  # as tall as its rows: the page scrolls, not the table
        self.focus_table.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.focus_table.setSizeAdjustPolicy(QtWidgets.QAbstractScrollArea.SizeAdjustPolicy.AdjustToContents)
        self.focus_table.setMinimumWidth(200)
        self.focus_label = QtWidgets.QLabel()
        self.focus_label.setWordWrap(True)
        self.focus_label.setMinimumWidth(200)
        follow = QtWidgets.QHBoxLayout()
        follow.addWidget(QtWidgets.QLabel("Follow query token:"))
        follow.addWidget(self.query_choice)
        follow.addStretch(1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.info)
        layout.addLayout(follow)
        layout.addLayout(self.grid)
        layout.addWidget(self.focus_label)
        layout.addWidget(self.focus_table)
        layout.addStretch(1)

    # ---- layout: as many columns of small heatmaps as the width holds
    @staticmethod
    def _columns_for(width: int) -> int:
        return max(2, min(5, width // COLUMN_PX))

    def _lay_out_views(self, columns: int) -> None:
        self._columns = columns
        for view in self.views.values():
            self.grid.removeWidget(view)
            view.setVisible(False)
        for index, name in enumerate(self.shown_views):
            self.grid.addWidget(self.views[name], index // columns, index % columns)
            self.views[name].setVisible(True)

    def resizeEvent(self, ev):  # noqa: N802
        super().resizeEvent(ev)
        columns = self._columns_for(ev.size().width())
        if columns != self._columns:
            self._lay_out_views(columns)

    # ---- data
    @property
    def kv_head(self) -> int:
        return int(self.rec.kv_head_of[self.head]) if self.rec is not None else 0

    def set_data(self, result, rec, head: int, weights=None) -> None:
        """Show head ``head`` of ``rec`` (a FamilyRecomputation);
        ``weights``: the layer's AttentionWeights, for the rotary base and the norm in the hovers."""
        self.result, self.rec, self.head, self.weights = result, rec, head, weights
        h, n = head, result.n_tokens
        steps = rec.steps
        family = rec.family
        facts = ViewFacts(rec, head)
        rotary, window, masked, grouped = facts.rotary, rec.sliding_window, facts.masked, facts.grouped
        n_kv, g, d_k = facts.n_kv_head, facts.kv_head, facts.d_k

        shown = step_views(rec, head, family_named(family).attention_norm)
        names = [view.key for view in shown]
        if names != self.shown_views:
            self.shown_views = names
            self._lay_out_views(self._columns_for(self.width()))
        self.shown = {view.key: view for view in shown}
        for index, view in enumerate(shown):
            self.views[view.key].title = f"{index + 1}. {view.title}"
        for view in shown:
            self.views[view.key].set_matrix(view.values, view.note)

        flow = " → ".join(STEPS[step].label for step in steps)
        lines = [f"{head_name(rec.layer, h)}: layer {rec.layer}, query head {h} ({family}): n = {n} tokens, d_model = {rec.x.shape[1]}, "
                 f"d_k = {d_k}, √d_k = {math.sqrt(d_k):.4f} (scale {rec.scale:.6g}).", f"Steps: {flow}."]
        if grouped:
            lines.append(f"Grouped-query attention: {rec.q.shape[0]} query heads share {n_kv} key/value heads; "
                         f"query head {h} uses key/value head {g} (query head i reads key/value head "
                         f"i // {rec.q.shape[0] // n_kv}).")
        if rotary:
            theta = f"{self.weights.rotary.theta:g}" if self.weights is not None and self.weights.rotary else ""
            dims = (f"all {d_k} dims of each head turn" if rec.rotary_dim == d_k
                    else f"the first {rec.rotary_dim} of each head's {d_k} dims turn")
            lines.append(f"Rotary: {dims} in pairs (i, i + {rec.rotary_dim // 2}) by the angle "
                         f"θ_i = position · {theta or 'base'}^(−2i/{rec.rotary_dim})"
                         + self._scaling_note() + "; hover the rotated Q and K.")
        if not facts.normed:
            lines.append("Post-LN: the block's input enters attention as it is (this model normalises after "
                         "attention, not before).")
        if not masked:
            lines.append("An encoder: every query sees every key, so there is no mask step.")
        elif window is not None:
            lines.append(f"Sliding window: each query sees itself and the {window - 1} keys before it.")
        lines.append("Hover a cell to see how it was made.")
        self.info.setText("\n".join(lines))

        current = self.query_choice.currentIndex()
        self.query_choice.blockSignals(True)
        self.query_choice.clear()
        self.query_choice.addItems([f"{i}: {elide(t)}" for i, t in enumerate(result.tokens)])
        self.query_choice.setCurrentIndex(current if 0 <= current < n else n - 1)
        self.query_choice.blockSignals(False)
        self._query_changed(self.query_choice.currentIndex())

    def _scaling_note(self) -> str:
        rotary = self.weights.rotary if self.weights is not None else None
        if rotary is None or rotary.rope_type == "default":
            return ""
        return f", frequencies rescaled by the model's '{rotary.rope_type}' rope scaling (θ = position · inv_freq_i)"

    def focus_query(self, i: int) -> None:
        self.query_choice.setCurrentIndex(i)

    def _query_changed(self, i: int) -> None:
        if self.rec is None or i < 0:
            return
        rec, h, tokens = self.rec, self.head, self.result.tokens
        masked = bool(np.isneginf(rec.of_head("masked", h)).any()) or rec.causal
        n = len(tokens)
        rows = []
        for j in range(n):
            e = explain_weight(rec, h, i, j)
            row = [e["score"], e["scaled"]] + ([-math.inf if e["masked"] else e["scaled"]] if masked else [])
            rows.append(row + [0.0 if e["masked"] else e["exp"], e["weight"]])
        columns = ["q·k", "× scale"] + (["masked"] if masked else []) + ["exp(s − max)", "weight"]
        matrix_table(np.array(rows), [f"{j}: {t}" for j, t in enumerate(tokens)], columns, table=self.focus_table)
        table = self.focus_table
        table.setFixedHeight(table.horizontalHeader().height() + table.verticalHeader().length()
                             + 2 * table.frameWidth() + table.horizontalScrollBar().sizeHint().height())
        e = explain_weight(rec, h, i, 0)
        out = rec.head_outputs[h, i]
        shown = ", ".join(f"{x:.3f}" for x in out[:6]) + (", …" if out.size > 6 else "")
        weights = rec.of_head("weights", h)[i]
        top = int(np.argmax(weights))
        self.focus_label.setText(
            f"<b>Query {i} '{html.escape(tokens[i])}'</b>: row max {e['row_max']:.4f}, Σ exp = {e['row_sum']:.4f}; "
            f"weights sum to {weights.sum():.6f}; the largest share ({weights[top]:.3f}) goes to "
            f"key {top} '{html.escape(tokens[top])}'. Output = Σ_j w_j·v_j = [{shown}]")
