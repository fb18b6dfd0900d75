"""The Logit lens page (``analysis.measures.logit_lens.logit_lens``): what the model would predict if it stopped
after block l, at every position of the text on screen — the top token and its probability as a layer × position
table (gui/tabs/circuits/lens_table.py), or the rank of the final prediction per layer; the surprisal of each actual
next token as the table's last row; and the first layer whose lens already reads the final prediction at the last
position. Computed when the page is looked at (one forward, on the worker)."""
from __future__ import annotations

from dataclasses import dataclass

from PySide6 import QtCore, QtWidgets

from ...state.jobs import Job
from ...state.worker import RequestKind
from .lens_table import READINGS, LensModel
from .page import Page, wrapped_label
from .snippets import Origin, lens_code, origin_of


@dataclass(frozen=True)
class LensShown:
    lens: object  # analysis.measures.logit_lens.LogitLens
    tokens: tuple[str, ...]  # the text's tokens, displayed
    top: tuple[tuple[str, ...], ...]  # (L, n) the lens's top tokens, displayed
    origin: Origin
    key: object

    def first_on_top(self) -> int | None:
        """The first layer whose lens reads the final prediction at the last position (the last layer always does)."""
        return self.lens.first_layer_on_top(int(self.lens.top[-1, -1]), -1)


def summary(shown: LensShown) -> str:
    lens = shown.lens
    L = lens.top.shape[0]
    final = shown.top[-1][-1]
    first = shown.first_on_top()
    sampled = sorted(set(range(0, L, max(1, L // 6))) | {L - 1})  # a handful: every layer is in the Rank cells
    ranks = ", ".join(f"L{l} {int(lens.final_rank[l, -1])}" for l in sampled)
    where = ("only the last layer" if first == L - 1 else f"first on top at layer {first} of 0–{L - 1}")
    return (f"The final prediction after the last token, {final} (p = {lens.prob[-1, -1]:.3f}), is {where}. "
            f"Its rank there (0 = top): {ranks} (every layer: Cells → rank).")


class LensPage(Page):
    title = "Logit lens"
    shown_changed = QtCore.Signal(object)

    def __init__(self, state, worker, tie, parent=None):
        super().__init__(state, worker, tie, parent)
        self.job = Job(worker, "lens", self, label="the logit lens", ended_by=(RequestKind.LOAD, RequestKind.ANALYSE),
                       announced=False)
        self.job.finished.connect(self._ready)
        self.job.failed.connect(lambda message: self.show_message(message, error=True))
        self.reading = QtWidgets.QComboBox()
        for key, text in READINGS.items():
            self.reading.addItem(text, key)
        self.reading.setToolTip("What each cell shows: the lens's top token and its probability, or the rank of the "
                                "final prediction (the last row's token at that position) in that layer's lens")
        self.model = LensModel(self)
        self.reading.currentIndexChanged.connect(lambda _i: self.model.set_reading(self.reading.currentData()))
        self.table = QtWidgets.QTableView()
        self.table.setModel(self.model)
        self.table.setWordWrap(False)
        self.table.horizontalHeader().setDefaultSectionSize(96)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.note = wrapped_label()
        self.summary = wrapped_label()
        self.summary.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.lay_out(self.buttons_after("Cells", self.reading), self.note, self.summary, self.message, main=self.table)
        tie.changed.connect(self._key_changed)
        self._key_changed()

    def _key_changed(self) -> None:
        self.job.drop()
        self.shown = None
        self.model.set_shown(None)
        self.summary.setText("")
        self.show_message("")
        self._update_buttons()
        why = self.tie.why_not()
        self.note.setText(why or "Row l: the residual stream after block l decoded through the final norm and the "
                                 "unembedding (the last row is the model's own prediction); the bottom row: −ln p of "
                                 "each actual next token.")
        self.shown_changed.emit(None)
        if not why and self.isVisible():
            self.run()

    def showEvent(self, ev):  # noqa: N802 - computed when looked at
        super().showEvent(ev)
        if self.shown is None and not self.job.running and not self.tie.why_not() and not self.has_message():
            self.run()

    def run(self) -> int | None:
        from analysis.measures.ablation import text_tokens
        from analysis.measures.logit_lens import logit_lens

        if self.tie.why_not():
            return None
        r, key = self.state.result, self.tie.key
        text, bos, cap, chat = r.text, bool(r.bos), int(r.max_tokens), bool(r.chat)

        def work(loaded, _progress, _cancel):
            ids = list(text_tokens(loaded, text, bos, cap, chat).ids)
            lens = logit_lens(loaded, ids)

            def shown(row):
                return tuple(loaded.family.display_tokens(loaded.tokenizer,
                                                          loaded.tokenizer.convert_ids_to_tokens([int(i) for i in row])))
            return LensShown(lens, shown(ids), tuple(shown(row) for row in lens.top),
                             origin_of(loaded, text, bos, chat, cap), key)

        self.summary.setText("Reading every layer…")
        return self.job.start(work)

    def _ready(self, shown: LensShown) -> None:
        if shown.key != self.tie.key:
            return
        self.shown = shown
        self.model.set_shown(shown)
        self.summary.setText(summary(shown))
        corner = self.model.index(self.model.rowCount() - 1, self.model.columnCount() - 1)
        QtCore.QTimer.singleShot(0, self.table, lambda: self.table.scrollTo(corner))  # once laid out: the last
        # layers, the surprisal row and the last position are what is read first
        self._update_buttons()
        self.shown_changed.emit(shown)

    def code(self) -> str:
        return lens_code(self.shown.origin)

    def metadata(self) -> dict:
        o = self.shown.origin
        return {"text": o.text, "bos": o.bos, "chat": o.chat,
                "values": "rank of the final prediction" if self.model.reading == "rank" else "the lens's top-token p"}

    def map_data(self):
        s = self.shown
        L = s.lens.top.shape[0]
        rows = [f"L{l}" for l in range(L)]
        columns = [f"{i} {t}" for i, t in enumerate(s.tokens)]
        data = {"page": "logit_lens", "tokens": list(s.tokens), "top": [list(r) for r in s.top],
                "top_ids": s.lens.top.tolist(), "prob": s.lens.prob.tolist(), "final_rank": s.lens.final_rank.tolist(),
                "surprisal": s.lens.surprisal.tolist()}
        values = s.lens.final_rank if self.model.reading == "rank" else s.lens.prob
        return values, rows, columns, "layer \\ position", data
