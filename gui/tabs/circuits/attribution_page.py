"""The Attribution page: direct logit attribution (``analysis.measures.attribution.attribute``) of the text on
screen at a position chosen in *at* (the last by default: the next token's prediction; at an earlier position p, what
each head adds to the prediction after token p, where the text's own next token is the natural answer).

Each head's direct contribution to logit(answer) − logit(wrong) (logit(answer) alone without a wrong token),
through the final norm with its scale frozen at the run's value, on the shared layer × head map; beside it the
other components — the MLPs (Σ over layers), the embeddings, the biases — and the residual error, with the sum rule
value = Σ heads + Σ MLPs + embeddings + biases + residual error written out. The answer is picked from the run's
top predictions or typed. A click on a head selects it, a double-click opens it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6 import QtCore, QtWidgets

from analysis.display import format_score, head_name

from ...state.jobs import Job
from ...state.worker import RequestKind
from .answers import Answer, AnswerPicker
from .maps import HeadValueMap
from .page import Page, wrapped_label
from .snippets import Origin, attribution_code, origin_of

ENDED_BY = (RequestKind.LOAD, RequestKind.ANALYSE)  # a new text or model: the attribution would be of what is gone


@dataclass(frozen=True)
class AttributionShown:
    """An Attribution and what it was computed from."""

    result: object  # analysis.measures.attribution.Attribution
    origin: Origin
    answer: Answer
    wrong: Answer | None
    tokens: tuple[str, ...]  # the text's tokens as displayed
    key: object  # ResultTie.key it belongs to


def components(a) -> list[tuple[str, float, str]]:
    """(name, logits, what it is) of each share of the sum rule, then the sum and the model's own value."""
    return [("heads (Σ of the map)", float(a.heads.sum()), "Σ over every head of z_h W_O^h read through the frozen "
             "final norm and the answer direction"),
            ("MLPs (Σ over layers)", float(a.mlps.sum()), "each MLP's output (block output − block input − "
             "attention output), read the same way"),
            ("embeddings", float(a.embeddings), "the first block's input (token + position embeddings)"),
            ("biases", float(a.biases), "attention output biases, the final norm's β, the unembedding's bias"),
            ("residual error", float(a.residual_error), "value − Σ of the rows above: float round-off when the "
             "norm's scale is frozen")]


def sum_rule(a) -> str:
    """"logit(' Mary') − logit(' John') = 6.120 = heads 5.071 + MLPs 1.239 + embeddings … + residual error …"."""
    def number(value):
        return (f"{value:.3f}" if abs(value) >= 5e-4 or value == 0 else f"{value:.1e}").replace("-", "−")

    parts = " + ".join(f"{name.split(' (')[0]} {number(value)}" for name, value, _ in components(a))
    return f"{a.metric} = {number(a.value)} = {parts}"


class AttributionPage(Page):
    """See the module docstring."""

    title = "Attribution"
    shown_changed = QtCore.Signal(object)  # AttributionShown now on screen (None: cleared)

    def __init__(self, state, worker, tie, parent=None):
        super().__init__(state, worker, tie, parent)
        self.job = Job(worker, "attribution", self, label="the attribution", ended_by=ENDED_BY, announced=False)
        self.job.finished.connect(self._ready)
        self.job.failed.connect(lambda message: self._stopped(message, error=True))
        self.job.cancelled.connect(lambda: self._stopped(""))
        self._build()
        tie.changed.connect(self._key_changed)
        state.selection_changed.connect(self.map.select)
        self._key_changed()

    def _build(self) -> None:
        self.answer = AnswerPicker()
        self.answer.setToolTip("The answer token: one of the run's top predictions, or type one (␣ for a space)")
        self.wrong = AnswerPicker(optional=True)
        self.wrong.setToolTip("Optional: a wrong token; the metric is then logit(answer) − logit(wrong)")
        self.answer.picked.connect(self.run)
        self.wrong.picked.connect(self.run)
        self.position = QtWidgets.QComboBox()
        self._positions = QtCore.QStringListModel(self)  # "last", then "p token" of every position
        self.position.setModel(self._positions)
        self.position.setToolTip("The position read: the logits after this token (the answer list is the last "
                                 "position's predictions; at an earlier position type the token, e.g. the text's next "
                                 "one)")
        self.position.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.position.setMinimumContentsLength(12)
        self.position.activated.connect(lambda _i: self.run())
        self.run_button = QtWidgets.QPushButton("Attribute")
        self.run_button.setToolTip("Direct logit attribution of the text on screen at the position chosen")
        self.run_button.clicked.connect(self.run)
        row = QtWidgets.QHBoxLayout()
        row.addWidget(QtWidgets.QLabel("Answer"))
        row.addWidget(self.answer, 1)
        row.addWidget(QtWidgets.QLabel("wrong"))
        row.addWidget(self.wrong, 1)
        row.addWidget(QtWidgets.QLabel("at"))
        row.addWidget(self.position)
        row.addWidget(self.run_button)
        row.addWidget(self.copy_button)
        row.addWidget(self.save_button)
        self.note = wrapped_label()
        self.rule = wrapped_label()
        self.rule.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.map = HeadValueMap()
        self.map.head_clicked.connect(self._select)
        self.map.head_activated.connect(self.head_activated)
        self.map.setMinimumWidth(320)
        from ...plots.plot_items import apply_theme

        apply_theme(self.map, self.state.dark)
        self.state.dark_changed.connect(lambda dark: apply_theme(self.map, dark))
        self.table = QtWidgets.QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["component", "logits"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(0, QtWidgets.QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(1, QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        self.top_heads = wrapped_label()
        side = QtWidgets.QWidget()
        side.setMinimumWidth(240)
        side.setMaximumWidth(380)
        side_layout = QtWidgets.QVBoxLayout(side)
        side_layout.setContentsMargins(0, 0, 0, 0)
        side_layout.addWidget(self.table, 1)
        side_layout.addWidget(self.top_heads)
        splitter = QtWidgets.QSplitter()
        splitter.addWidget(self.map)
        splitter.addWidget(side)
        splitter.setChildrenCollapsible(False)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        self.splitter = splitter
        self.lay_out(row, self.note, self.rule, self.message, main=splitter)

    # ----------------------------------------------------------------- what the result belongs to
    def _key_changed(self) -> None:
        self.job.drop()
        self._forget()
        r = self.state.result
        why = self.tie.why_not()
        predictions = () if r is None or why else r.predictions
        self.answer.set_predictions(predictions)
        self.wrong.set_predictions(predictions)
        self._fill_positions(() if r is None or why else r.tokens)
        for widget in (self.answer, self.wrong, self.position, self.run_button):
            widget.setEnabled(not why)
        self.note.setText(why or "Each head's direct contribution to the metric at the position chosen: its output "
                                 "z_h W_O read through the final norm (its scale frozen at this run's value) and the "
                                 "unembedding; red pushes toward the answer.")
        if not why and self.isVisible():
            self.run()

    def _fill_positions(self, tokens) -> None:
        """"last" first (whatever the text's length), then every position "p token"; a position chosen before is
        kept when the new text has it."""
        before = self.chosen_position()
        self.position.blockSignals(True)
        # one list set at once: 8,192 addItem calls held the GUI thread 15 ms on a new result (bench, SmolLM2)
        self._positions.setStringList([f"last ({len(tokens) - 1} {tokens[-1]})"] + [f"{i} {t}" for i, t in
                                                                                   enumerate(tokens)]
                                      if tokens else [])
        self.position.setCurrentIndex(before + 1 if before is not None and before < len(tokens) else 0)
        self.position.blockSignals(False)

    def chosen_position(self) -> int | None:
        """The position read (None: the last): item 0 is "last", item i + 1 position i."""
        index = self.position.currentIndex()
        return None if index <= 0 else index - 1

    def choose_position(self, position: int | None) -> None:
        """Select ``position`` (None: the last) as a user would, and read it."""
        self.position.setCurrentIndex(0 if position is None else position + 1)
        self.position.activated.emit(self.position.currentIndex())

    def _forget(self) -> None:
        self.shown = None
        self.map.forget()
        self.map.image.clear()
        self.map.set_title("")
        self.table.setRowCount(0)
        self.rule.setText("")
        self.top_heads.setText("")
        self.show_message("")
        self._update_buttons()
        self.shown_changed.emit(None)

    def showEvent(self, ev):  # noqa: N802 - computed when looked at
        super().showEvent(ev)
        if self.shown is None and not self.job.running and not self.tie.why_not() and not self.has_message():
            self.run()

    def _select(self, layer: int, head: int) -> None:
        if self.state.result is not None:
            self.state.select(layer, head)

    # ----------------------------------------------------------------- run
    def run(self) -> int | None:
        """Attribute the text on screen for the tokens picked, on the worker; the request id (None: nothing sent)."""
        from analysis.errors import InputError
        from analysis.measures.ablation import text_tokens
        from analysis.measures.attribution import attribute

        if self.tie.why_not():
            return None
        answer, wrong = self.answer.answer(), self.wrong.answer()
        if answer is None:
            self.show_message("Pick or type an answer token first.", error=True)
            return None
        r, key = self.state.result, self.tie.key
        text, bos, cap, chat = r.text, bool(r.bos), int(r.max_tokens), bool(r.chat)
        position = self.chosen_position()
        self.show_message("")
        self.run_button.setEnabled(False)

        def work(loaded, _progress, _cancel):
            a = answer.resolve(loaded, "answer")
            b = None if wrong is None else wrong.resolve(loaded, "wrong answer")
            if a == b:
                raise InputError(f"The answer and the wrong token are the same token ({answer.shown}): the logit "
                                 "difference would be 0; pick another wrong token or (none).")
            ids = list(text_tokens(loaded, text, bos, cap, chat).ids)
            tokens = loaded.family.display_tokens(loaded.tokenizer, loaded.tokenizer.convert_ids_to_tokens(ids))
            return AttributionShown(attribute(loaded, ids, a, b, position), origin_of(loaded, text, bos, chat, cap), answer,
                                    wrong, tuple(tokens), key)

        return self.job.start(work)

    def _stopped(self, message: str, error: bool = False) -> None:
        self.run_button.setEnabled(not self.tie.why_not())
        self.show_message(message, error)

    def _ready(self, shown: AttributionShown) -> None:
        self.run_button.setEnabled(not self.tie.why_not())
        if shown.key != self.tie.key:
            return
        self.shown = shown
        a = shown.result
        position = f"position {a.position} ({shown.tokens[a.position]})"

        def describe(layer, head, value):
            return f"{head_name(layer, head)}: {format_score(value, True)} logits of {a.metric} at {position}"

        self.map.set_values(a.heads, f"direct logit attribution, {a.metric}", "logits (direct contribution)",
                            describe)
        self.map.select(self.state.layer, self.state.head)
        rows = components(a) + [("Σ = value", float(a.value), "the metric from the model's own logits")]
        self.table.setRowCount(len(rows))
        for i, (name, value, tip) in enumerate(rows):
            label = QtWidgets.QTableWidgetItem(name)
            number = QtWidgets.QTableWidgetItem((f"{value:+.4f}" if abs(value) >= 1e-4 or value == 0
                                                 else f"{value:+.2e}").replace("-", "−"))
            number.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
            if name.startswith("MLPs"):
                tip += "\n" + "\n".join(f"L{l}: {v:+.4f}" for l, v in enumerate(a.mlps))
            for item in (label, number):
                item.setToolTip(tip)
            self.table.setItem(i, 0, label)
            self.table.setItem(i, 1, number)
        self.rule.setText(sum_rule(a) + f"   (at {position})")
        order = np.argsort(-np.abs(a.heads), axis=None, kind="stable")[:5]
        heads = ", ".join(f"{head_name(*np.unravel_index(i, a.heads.shape))} {format_score(a.heads.flat[i], True)}"
                          for i in order)
        mlp = int(np.argmax(np.abs(a.mlps)))
        self.top_heads.setText(f"Largest heads (|logits|): {heads}. Largest MLP: L{mlp} "
                               f"{format_score(a.mlps[mlp], True)}.")
        self._update_buttons()
        self.shown_changed.emit(shown)

    # ----------------------------------------------------------------- copy, save, figure
    def code(self) -> str:
        s = self.shown
        return attribution_code(s.origin, s.answer.code(), None if s.wrong is None else s.wrong.code(),
                                s.result.position)

    def metadata(self) -> dict:
        s = self.shown
        return {"text": s.origin.text, "bos": s.origin.bos, "chat": s.origin.chat, "metric": s.result.metric,
                "position": s.result.position, "values": "direct contribution to the metric (logits)"}

    def map_data(self):
        a = self.shown.result
        L, H = a.heads.shape
        return (a.heads, [f"L{l}" for l in range(L)], [f"H{h}" for h in range(H)], "layer \\ head",
                {"page": "attribution", **a.to_dict()})

    def offscreen_figure(self):
        if self.shown is None:
            return None
        from ...export.figure_files import settle_layout
        from ...plots.figures import lay_out_offscreen
        from ...plots.layer_head_map import width_for_title

        a = self.shown.result
        L, H = a.heads.shape
        title = f"{self.state.result.model_label if self.state.result else ''} — direct logit attribution, {a.metric}"
        fig = HeadValueMap()
        lay_out_offscreen(fig, int(min(2400, max(560, 220 + 48 * H, width_for_title(title, 220)))),
                          int(min(3000, max(360, 120 + 40 * L))))
        fig.set_values(a.heads, title, "logits (direct contribution)")
        settle_layout()
        return fig
