"""The Compare page: the clean and the corrupted prompt (the pair the Patching page patches, shared with it through
``PairTexts``) each run on its own (``analysis.measures.compare.run_pair``, on the worker), shown side by side or as
their difference.

- *head*: the selected head's attention map on each prompt, side by side on one colour scale (0 … the larger of
  the two maps' largest weights), or the difference D = A_clean − A_corrupted on a diverging scale centred on 0
  (blue: the corrupted prompt attends there more; red: the clean one does), its colour bar spanning ±max |D|;
- *score map*: a head score (head_scores: previous-token, induction, …) as a layer × head map on each prompt, side by
  side on common levels, or their difference S_clean − S_corrupted, diverging and centred on 0.

Key labels where the prompts' tokens differ read "clean/corrupted" (␣John/␣Mary). Selecting a head (here, on the
grid, anywhere) redraws the head view; a click on a score map selects that head. The runs belong to the model and
to the prompts as they were: a new model clears them; editing a prompt says the view is of the earlier prompts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6 import QtCore, QtWidgets

from analysis.display import format_score, head_name
from analysis.measures.head_scores import SCORE_LABELS, SCORE_NAMES

from ...plots.figures import HeadPlot
from ...plots.hover_text import where
from ...state.jobs import Job
from ...state.worker import RequestKind
from .maps import DIVERGING, HeadValueMap, symmetric_levels
from .page import Page, wrapped_label
from .pair_examples import PAIRS
from .pair_texts import PairTexts, bind, mark_edited, prompts_to_run
from .snippets import Origin, compare_code, origin_of

SHOW = {"head": "the selected head", "scores": "a score map"}
VIEWS = {"side": "side by side", "difference": "difference (clean − corrupted)"}
#: the scores compared: induction_probe reads the seeded probe, not the prompt, so both prompts give the same
SCORES = tuple(name for name in SCORE_NAMES if name != "induction_probe")
HINT = ("Compare runs both prompts, each on its own, and shows the selected head (or a score map) on each, side by "
        "side or as the difference clean − corrupted.")


@dataclass(frozen=True)
class CompareShown:
    runs: object  # analysis.measures.compare.PairRuns
    clean: str
    corrupted: str
    bos: bool
    tokens: tuple[str, ...]  # key labels: the clean token, "clean/corrupted" where the two differ
    origin: Origin
    model_key: int


def pair_tokens(clean: tuple[str, ...], corrupted: tuple[str, ...]) -> tuple[str, ...]:
    """Each position's token, "clean/corrupted" where the prompts differ there."""
    return tuple(a if a == b else f"{a}/{b}" for a, b in zip(clean, corrupted))


def common_top(*maps: np.ndarray) -> float:
    """The largest finite value of ``maps`` (1 when none is > 0): the top of a side-by-side colour scale."""
    tops = [float(np.nanmax(m)) for m in maps if np.isfinite(m).any()]
    top = max(tops, default=1.0)
    return top if top > 0 else 1.0


class DifferencePlot(HeadPlot):
    """A head's D = A_clean − A_corrupted on a diverging colour map centred on 0, the colour bar spanning ±max |D|;
    the hover says both weights and the difference."""

    def __init__(self, parent=None):
        super().__init__(parent, describe=self._describe)
        self.clean_map: np.ndarray | None = None
        self.corrupted_map: np.ndarray | None = None

    def set_difference(self, clean: np.ndarray, corrupted: np.ndarray, tokens, title: str, causal: bool) -> None:
        self.clean_map, self.corrupted_map = np.asarray(clean, np.float32), np.asarray(corrupted, np.float32)
        diff = self.clean_map - self.corrupted_map
        self.set_head(diff, tokens, title, cmap=DIVERGING, scale="linear", causal=causal,
                      quantity="clean − corrupted")
        if causal:  # the masked future keys are 0 − 0: left out of the scale, drawn as background
            diff = np.where(np.tril(np.ones(diff.shape, bool)), diff, np.nan)
        self.colorbar.setLevels(symmetric_levels(diff))

    def _describe(self, q: int, k: int, value: float) -> str:
        if self.clean_map is None or value != value:
            return self.weight_text(q, k, value)
        return (f"{where(self.tokens, q, k)}: clean − corrupted {value:+.3f} (clean {self.clean_map[q, k]:.3f}, "
                f"corrupted {self.corrupted_map[q, k]:.3f})").replace("-", "−")


class ComparePage(Page):
    title = "Compare"
    shown_changed = QtCore.Signal(object)

    def __init__(self, state, worker, tie, pair: PairTexts | None = None, parent=None):
        super().__init__(state, worker, tie, parent)
        self.pair = pair if pair is not None else PairTexts(PAIRS[0].clean, PAIRS[0].corrupted, self)
        self.job = Job(worker, "compare", self, label="the clean and corrupted runs", ended_by=(RequestKind.LOAD,))
        self.job.progressed.connect(self._progress)
        self.job.finished.connect(self._ready)
        self.job.failed.connect(lambda message: self._stopped(message, error=True))
        self.job.cancelled.connect(lambda: self._stopped("Comparing cancelled." + (
            " The view shown is of the last prompts compared." if self.shown else "")))
        self._build()
        tie.changed.connect(self._model_changed)
        state.selection_changed.connect(lambda *_: self.redraw())
        self._model_key = tie.model_key
        self._update_enabled()

    # ----------------------------------------------------------------- building
    def _build(self) -> None:
        self.examples = QtWidgets.QComboBox()
        self.examples.addItem("Examples…")
        for p in PAIRS:
            self.examples.addItem(p.label)
        self.examples.setToolTip("Fill both prompts from an example pair (the Patching page gets its answers too)")
        self.examples.activated.connect(self._example)
        self.clean_edit, self.corrupted_edit = QtWidgets.QLineEdit(), QtWidgets.QLineEdit()
        self.clean_edit.setPlaceholderText("the clean prompt")
        self.corrupted_edit.setPlaceholderText("the corrupted prompt (the same token count)")
        bind(self.pair, self.clean_edit, self.corrupted_edit)
        for edit in (self.clean_edit, self.corrupted_edit):
            edit.textChanged.connect(lambda _t: self._mark_stale())
            edit.textChanged.connect(lambda _t: self.inputs_edited())
            edit.returnPressed.connect(self.run)
        self.show_what = QtWidgets.QComboBox()
        for key, text in SHOW.items():
            self.show_what.addItem(text, key)
        self.score = QtWidgets.QComboBox()
        for name in SCORES:
            self.score.addItem(SCORE_LABELS[name], name)
        self.score.setToolTip("The head score compared (the Head scores tab defines each)")
        self.view = QtWidgets.QComboBox()
        for key, text in VIEWS.items():
            self.view.addItem(text, key)
        self.view.setToolTip("Side by side on one colour scale, or the difference clean − corrupted on a diverging "
                             "scale centred on 0 (red: more on the clean prompt, blue: more on the corrupted one)")
        for combo in (self.show_what, self.score, self.view):
            combo.currentIndexChanged.connect(lambda _i: self.redraw())
        self.add_run_controls("Compare", "Run both prompts (each on its own) and compare their attention", 120)

        form = QtWidgets.QGridLayout()
        form.addWidget(QtWidgets.QLabel("Clean"), 0, 0)
        form.addWidget(self.clean_edit, 0, 1)
        form.addWidget(self.examples, 0, 2)
        form.addWidget(QtWidgets.QLabel("Corrupted"), 1, 0)
        form.addWidget(self.corrupted_edit, 1, 1, 1, 2)
        form.setColumnStretch(1, 1)
        row = self.buttons_after(self.run_button, self.cancel_button, self.progress, "Show", self.show_what,
                                 self.score, self.view)
        self.summary = wrapped_label(HINT)
        self.summary.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stale = wrapped_label()
        self.stale.setStyleSheet("color: #8a5a00;")
        self.stale.hide()

        self.clean_plot, self.corrupted_plot = HeadPlot(), HeadPlot()
        self.difference_plot = DifferencePlot()
        self.clean_scores, self.corrupted_scores = HeadValueMap(), HeadValueMap()
        self.score_difference = HeadValueMap()
        side = QtWidgets.QSplitter()
        side.addWidget(self.clean_plot)
        side.addWidget(self.corrupted_plot)
        side_scores = QtWidgets.QSplitter()
        side_scores.addWidget(self.clean_scores)
        side_scores.addWidget(self.corrupted_scores)
        self.stack = QtWidgets.QStackedWidget()
        for widget in (side, self.difference_plot, side_scores, self.score_difference):
            self.stack.addWidget(widget)
        self.stack.hide()
        from ...plots.plot_items import apply_theme

        for fig in self.figures():
            apply_theme(fig, self.state.dark)
            self.state.dark_changed.connect(lambda dark, fig=fig: apply_theme(fig, dark))
        for fig in (self.clean_scores, self.corrupted_scores, self.score_difference):
            fig.head_clicked.connect(self._select)
            fig.head_activated.connect(self.head_activated)
        layout = self.lay_out(form, row, self.message, self.summary, self.stale, main=self.stack)
        layout.addStretch(0)

    def figures(self):
        return (self.clean_plot, self.corrupted_plot, self.difference_plot, self.clean_scores, self.corrupted_scores,
                self.score_difference)

    def _example(self, index: int) -> None:
        if index > 0:
            self.pair.use(PAIRS[index - 1])
        self.examples.setCurrentIndex(0)

    def _select(self, layer: int, head: int) -> None:
        if self.state.result is not None:
            self.state.select(layer, head)

    def _update_enabled(self) -> None:
        why = self.tie.why_not() if self.state.result is not None else "Load a decoder and run a text first."
        usable = self.state.result is not None and self.state.result.causal
        self.run_button.setEnabled(usable and not self.job.running)
        self.run_button.setToolTip("Run both prompts and compare their attention" if usable else why)
        self.score.setEnabled(self.show_what.currentData() == "scores")

    # ----------------------------------------------------------------- what the result belongs to
    def _model_changed(self) -> None:
        self._update_enabled()
        if self.tie.model_key == self._model_key:
            return
        self._model_key = self.tie.model_key
        self.job.drop()
        self.shown = None
        self.stack.hide()
        self.summary.setText(HINT)
        self.stale.hide()
        self.progress.hide()
        self.cancel_button.setEnabled(False)
        self.show_message("")
        self._update_buttons()
        self._update_enabled()
        self.shown_changed.emit(None)

    def _mark_stale(self) -> None:
        mark_edited(self, "The prompts were edited since this comparison: it shows the earlier prompts; Compare "
                          "again for these.")

    # ----------------------------------------------------------------- run
    def run(self) -> int | None:
        from analysis.measures.compare import run_pair
        from analysis.run.inference import bos_used

        prompts = prompts_to_run(self)
        if prompts is None:
            return None
        clean, corrupted = prompts
        model_key = self.tie.model_key

        def work(loaded, progress, cancel):
            bos = bos_used(loaded, None)
            runs = run_pair(loaded, clean, corrupted, bos, progress=progress, cancel=cancel)
            return CompareShown(runs, clean, corrupted, bos, pair_tokens(runs.clean.tokens, runs.corrupted.tokens),
                                origin_of(loaded, clean, bos, False, None), model_key)

        self.show_message("")
        self.progress.setRange(0, 0)
        self.progress.setFormat("running both prompts")
        self.progress.show()
        self.cancel_button.setEnabled(True)
        request = self.job.start(work)
        self._update_enabled()
        return request

    def _progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.progress.setFormat(("clean run", "corrupted run", "scores", "scores")[min(done, 3)] + " done")

    def _stopped(self, message: str = "", error: bool = False) -> None:
        self.progress.hide()
        self.cancel_button.setEnabled(False)
        self._update_enabled()
        if message:
            self.show_message(message, error)

    def _ready(self, shown: CompareShown) -> None:
        if shown.model_key != self.tie.model_key:
            return
        self._stopped()
        self.shown = shown
        self.stack.show()
        self._mark_stale()
        self._update_buttons()
        self.redraw()
        self.shown_changed.emit(shown)

    # ----------------------------------------------------------------- drawing
    def showing(self) -> tuple[str, str]:
        """(what, view): ("head" or "scores", "side" or "difference")."""
        return self.show_what.currentData(), self.view.currentData()

    def redraw(self) -> None:
        self._update_enabled()
        s = self.shown
        if s is None:
            return
        what, view = self.showing()
        runs = s.runs
        L, H = runs.clean.n_layer, runs.clean.n_head
        layer, head = min(self.state.layer, L - 1), min(self.state.head, H - 1)
        differ = runs.differing_positions()
        where_differ = ", ".join(f"{i} ({s.tokens[i]})" for i in differ) or "nowhere"
        if what == "head":
            clean, corrupted = runs.clean.head_map(layer, head), runs.corrupted.head_map(layer, head)
            name = head_name(layer, head)
            if view == "side":
                top = common_top(clean, corrupted)
                for fig, m, which, tokens in ((self.clean_plot, clean, "clean", runs.clean.tokens),
                                              (self.corrupted_plot, corrupted, "corrupted", runs.corrupted.tokens)):
                    fig.set_head(m, tokens, f"{name} — {which}", cmap=self.state.colormap, causal=runs.clean.causal)
                    fig.colorbar.setLevels((0.0, top))  # one scale for both: a colour is the same weight in each
                self.stack.setCurrentIndex(0)
                self.summary.setText(f"{name} on each prompt, one colour scale (0 … {top:.3f}). The prompts differ "
                                     f"at position {where_differ}.")
            else:
                self.difference_plot.set_difference(clean, corrupted, s.tokens, f"{name} — clean − corrupted",
                                                    runs.clean.causal)
                diff = runs.head_difference(layer, head)
                q, k = np.unravel_index(int(np.argmax(np.abs(diff))), diff.shape)
                self.stack.setCurrentIndex(1)
                self.summary.setText(
                    f"{name}: clean − corrupted attention; largest |difference| {diff[q, k]:+.3f} at query "
                    f"{s.tokens[q]!r} [{q}] → key {s.tokens[k]!r} [{k}]. The prompts differ at position "
                    f"{where_differ}.".replace("-", "−"))
            return
        score = self.score.currentData()
        label = SCORE_LABELS[score]
        a, b = np.asarray(runs.clean_scores[score], float), np.asarray(runs.corrupted_scores[score], float)
        if view == "side":
            finite = np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]])
            levels = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
            if levels[1] <= levels[0]:
                levels = (levels[0], levels[0] + 1.0)
            for fig, v, which in ((self.clean_scores, a, "clean"), (self.corrupted_scores, b, "corrupted")):
                fig.set_values(v, f"{label} — {which}", label, self._score_text(which), levels=levels,
                               cmap=self.state.colormap)
                fig.select(layer, head)
            self.stack.setCurrentIndex(2)
            self.summary.setText(f"{label} on each prompt, one colour scale ({levels[0]:.3f} … {levels[1]:.3f}).")
        else:
            d = runs.score_difference(score)
            self.score_difference.set_values(d, f"{label} — clean − corrupted", f"Δ {label}", self._difference_text)
            self.score_difference.select(layer, head)
            self.stack.setCurrentIndex(3)
            finite = np.where(np.isfinite(d), np.abs(d), -1.0)
            top = np.unravel_index(np.argsort(-finite, axis=None, kind="stable")[:3], d.shape)
            heads = ", ".join(f"{head_name(int(l), int(h))} {format_score(d[l, h], True)}" for l, h in zip(*top)
                              if np.isfinite(d[l, h]))
            self.summary.setText(f"{label}: clean − corrupted per head (red: higher on the clean prompt). Largest "
                                 f"|difference|: {heads or 'none'}.")

    def _score_text(self, which: str):
        def text(layer, head, value):
            return f"{head_name(layer, head)}: {SCORE_LABELS[self.score.currentData()]} {value:.3f} on the {which} prompt"
        return text

    def _difference_text(self, layer, head, value) -> str:
        runs, score = self.shown.runs, self.score.currentData()
        return (f"{head_name(layer, head)}: clean − corrupted {format_score(value, True)} (clean "
                f"{float(runs.clean_scores[score][layer, head]):.3f}, corrupted "
                f"{float(runs.corrupted_scores[score][layer, head]):.3f})")

    # ----------------------------------------------------------------- copy, save, figure
    def shown_difference(self) -> tuple[np.ndarray, list[str], list[str], str]:
        """The difference the page shows (in either view): (values, row labels, column labels, corner)."""
        s = self.shown
        what, _ = self.showing()
        if what == "head":
            layer, head = self.state.layer, self.state.head
            labels = [f"{i} {t}" for i, t in enumerate(s.tokens)]
            return (s.runs.head_difference(layer, head), labels, labels,
                    f"{head_name(layer, head)} clean − corrupted: query \\ key")
        d = s.runs.score_difference(self.score.currentData())
        return (d, [f"L{l}" for l in range(d.shape[0])], [f"H{h}" for h in range(d.shape[1])],
                f"{self.score.currentData()} clean − corrupted: layer \\ head")

    def code(self) -> str:
        s = self.shown
        what, _ = self.showing()
        return compare_code(s.origin, s.clean, s.corrupted, s.bos, what,
                            (self.state.layer, self.state.head) if what == "head" else self.score.currentData())

    def map_data(self):
        s = self.shown
        values, rows, columns, corner = self.shown_difference()
        what, _ = self.showing()
        if what == "head":
            layer, head = self.state.layer, self.state.head
            extra = {"head": head_name(layer, head), "clean_map": s.runs.clean.head_map(layer, head).tolist(),
                     "corrupted_map": s.runs.corrupted.head_map(layer, head).tolist()}
        else:
            name = self.score.currentData()
            extra = {"score": name, "clean_scores": np.asarray(s.runs.clean_scores[name]).tolist(),
                     "corrupted_scores": np.asarray(s.runs.corrupted_scores[name]).tolist()}
        data = {"page": "compare", "clean_text": s.clean, "corrupted_text": s.corrupted, "tokens": list(s.tokens),
                "difference": "clean − corrupted", **extra}
        return values, rows, columns, corner, data

    def metadata(self) -> dict:
        s = self.shown
        what, _ = self.showing()
        return {"clean": s.clean, "corrupted": s.corrupted, "values": "clean − corrupted",
                "shown": head_name(self.state.layer, self.state.head) if what == "head" else self.score.currentData()}

    def offscreen_figure(self):
        """The difference (of the head, or of the score map), whichever view is on screen."""
        if self.shown is None:
            return None
        from ...export.figure_files import settle_layout
        from ...plots.figures import head_figure_size, lay_out_offscreen

        s = self.shown
        what, _ = self.showing()
        model = self.state.result.model_label if self.state.result is not None else ""
        if what == "head":
            layer, head = self.state.layer, self.state.head
            fig = DifferencePlot()
            lay_out_offscreen(fig, *head_figure_size(s.runs.n_tokens))
            fig.set_difference(s.runs.clean.head_map(layer, head), s.runs.corrupted.head_map(layer, head), s.tokens,
                               f"{model} — {head_name(layer, head)}, clean − corrupted", s.runs.clean.causal)
            settle_layout()
            fig.update_label_density()
            return fig
        d = s.runs.score_difference(self.score.currentData())
        L, H = d.shape
        fig = HeadValueMap()
        lay_out_offscreen(fig, int(min(2400, max(620, 220 + 48 * H))), int(min(3000, max(360, 120 + 40 * L))))
        fig.set_values(d, f"{model} — {SCORE_LABELS[self.score.currentData()]}, clean − corrupted", "clean − corrupted")
        settle_layout()
        return fig
