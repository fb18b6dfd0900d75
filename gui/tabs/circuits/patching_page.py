"""The Patching page (Compare): activation patching between a clean and a corrupted prompt
(``analysis.measures.patching.patch``).

The user types (or picks from the examples, IOI among them) a clean and a corrupted prompt of the same token count
— a pair of different counts is refused in one sentence saying where they first differ (``patching.pair_ids``) —
picks the metric (``logit_diff``: logit(answer) − logit(wrong); ``logprob``: log p(answer); ``loss``: −loss of the
clean text, ``patching.make_metric``), what to patch (each head's output z_h, the residual stream per position, the
attention / MLP output per layer) and the direction (denoising: clean activations into the corrupted run; noising:
the reverse). The map is the normalised effect (patched − corrupted) / (clean − corrupted): a layer × head map for
heads, layer × position for the residual stream, layer × [attention, MLP] for layers.

It runs on the worker with progress, an estimate and Cancel, which keeps the layers finished as a partial map. The
result belongs to the model and to the two prompts as they were when it ran: a new model clears it; editing a prompt
marks it as made from the earlier prompts until the next run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from PySide6 import QtCore, QtWidgets

from analysis.display import format_duration, head_name

from ...plots.plot_items import DIM_OPACITY
from ...state.jobs import Job
from ...state.worker import RequestKind
from .answers import shown_text, typed_text
from .maps import HeadValueMap, LayerColumnMap, effect_levels
from .page import Page, wrapped_label
from .pair_examples import PAIRS
from .pair_texts import PairTexts, bind, mark_edited, prompts_to_run
from .snippets import Origin, origin_of, patching_code

WHAT = {"heads": "heads (z_h)", "head_positions": "head × position", "resid": "residual × position",
        "layers": "attention / MLP"}
METRICS = {"logit_diff": "logit difference", "logprob": "log p(answer)", "loss": "−loss of the clean text"}


def shown_values(res) -> tuple[np.ndarray, str, str]:
    """(values, colour bar label, word) of the map a PatchingResult is shown as. Denoising: the effect
    (patched − corrupted) / (clean − corrupted), 1 = this activation alone restores the clean answer. Noising: the
    loss 1 − effect = (clean − patched) / (clean − corrupted), 1 = corrupting it alone loses the whole answer, 0 =
    nothing changes, so that in both directions white is "does nothing" and the heads that matter are the
    strongest colours (walk 6: noising's effect map was ~1.0 red everywhere, the heads that matter slightly
    lighter, and its largest values were the heads whose corruption helps). The result keeps ``effect`` as the
    command line writes it."""
    if res.denoising:
        return res.effect, "effect (patched − corrupted) / (clean − corrupted)", "effect"
    return 1.0 - res.effect, "loss (clean − patched) / (clean − corrupted)", "loss"


def strongest_position(values: np.ndarray) -> np.ndarray:
    """(L, H) of a head × position map (L, H, n): each head's value at its position of largest |value|, sign kept
    (NaN where nothing was measured) — what the layer × head map shows, the strip under it giving every position."""
    size = np.where(np.isfinite(values), np.abs(values), -1.0)
    best = np.argmax(size, axis=-1)  # (L, H)
    return np.take_along_axis(values, best[..., None], axis=-1)[..., 0]


def top_cells(values: np.ndarray, k: int) -> list[tuple[tuple[int, ...], float]]:
    """The k cells of largest size |value|, largest first, each with its sign: (index, value); NaN (not measured)
    never. A head whose patch moves the metric the other way (−0.25) matters as much as one that moves it +0.25
    (walk 7: the list left out L24H4 −0.250 and showed L19H2 0.162)."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    size = np.where(np.isnan(flat), -np.inf, np.abs(flat))
    order = [i for i in np.argsort(-size, kind="stable")[:k] if np.isfinite(size[i])]
    return [(tuple(int(j) for j in np.unravel_index(i, np.shape(values))), float(flat[i])) for i in order]


@dataclass(frozen=True)
class PatchingShown:
    result: object  # analysis.measures.patching.PatchingResult
    clean: str
    corrupted: str
    answer: str | None  # as typed (" Mary")
    wrong: str | None
    tokens: tuple[str, ...]  # the clean prompt's tokens, displayed
    origin: Origin
    model_key: int


class PatchingPage(Page):
    title = "Patching"
    shown_changed = QtCore.Signal(object)

    def __init__(self, state, worker, tie, pair: PairTexts | None = None, parent=None):
        super().__init__(state, worker, tie, parent)
        self.pair = pair if pair is not None else PairTexts(parent=self)
        self.job = Job(worker, "patching", self, label="the patching", ended_by=(RequestKind.LOAD,))
        self.job.progressed.connect(self._progress)
        self.job.finished.connect(self._ready)
        self.job.partial.connect(self._ready)
        self.job.failed.connect(lambda message: self._stopped(message, error=True))
        self.job.cancelled.connect(self._cancelled)
        self._started = 0.0
        self._build()
        self.pair.example_used.connect(self._answers_of)
        self.use_pair(PAIRS[0])
        tie.changed.connect(self._model_changed)
        state.selection_changed.connect(self.head_map.select)
        state.selection_changed.connect(lambda *_: self._draw_strip())
        self._model_key = tie.model_key
        self._update_enabled()

    # ----------------------------------------------------------------- building
    def _build(self) -> None:
        self.examples = QtWidgets.QComboBox()
        self.examples.addItem("Examples…")
        for pair in PAIRS:
            self.examples.addItem(pair.label)
        self.examples.setToolTip("Fill both prompts and the answers from an example pair")
        self.examples.activated.connect(lambda i: i > 0 and self.use_pair(PAIRS[i - 1]))
        self.clean_edit, self.corrupted_edit = QtWidgets.QLineEdit(), QtWidgets.QLineEdit()
        self.clean_edit.setPlaceholderText("the clean prompt (the model gets the answer right)")
        self.corrupted_edit.setPlaceholderText("the corrupted prompt (the same token count, one part changed)")
        bind(self.pair, self.clean_edit, self.corrupted_edit)
        for edit in (self.clean_edit, self.corrupted_edit):
            edit.textChanged.connect(lambda _t: self._mark_stale())
            edit.textChanged.connect(lambda _t: self.inputs_edited())
            edit.returnPressed.connect(self.run)
        self.metric = QtWidgets.QComboBox()
        for key, text in METRICS.items():
            self.metric.addItem(text, key)
        self.metric.setToolTip("logit difference: logit(answer) − logit(wrong) after the last token; log p(answer): "
                               "its log-probability there; −loss: minus the clean text's mean next-token loss")
        self.metric.currentIndexChanged.connect(lambda _i: self._update_enabled())
        self.answer_edit, self.wrong_edit = QtWidgets.QLineEdit(), QtWidgets.QLineEdit()
        for edit, what in ((self.answer_edit, "answer"), (self.wrong_edit, "wrong token")):
            edit.setPlaceholderText(f"{what}, ␣ for a space")
            edit.setToolTip(f"The {what}: one token; ␣ stands for a space (␣Mary is ' Mary')")
            edit.setMinimumWidth(96)  # '␣Mary' whole at 1366 px (it was cut to 'Mary')
            edit.setMaximumWidth(160)
            edit.textChanged.connect(lambda _t: self.inputs_edited())
        self.what = QtWidgets.QComboBox()
        for key, text in WHAT.items():
            self.what.addItem(text, key)
        self.what.setToolTip("heads: each head's output z_h at every position (a layer × head map); residual × "
                             "position: the residual stream entering each block at one position; head × position: each head's output "
                             "at one position at a time (the map: each head's strongest position; the strip under it: "
                             "the selected head's every position); attention / MLP: "
                             "each layer's attention output and MLP output")
        self.noising = QtWidgets.QComboBox()
        self.noising.addItem("denoising", False)
        self.noising.addItem("noising", True)
        self.noising.setToolTip("Denoising: the corrupted prompt runs with one activation from the clean run (1 = "
                                "it alone restores the answer). Noising: the clean prompt runs with one activation from "
                                "the corrupted run (0 = removing it destroys the answer)")
        self.add_run_controls("Patch")  # a 170 px bar: "54 of 270 · about 8 s left" whole (it was cut at 1366 px)

        form = QtWidgets.QGridLayout()
        form.addWidget(QtWidgets.QLabel("Clean"), 0, 0)
        form.addWidget(self.clean_edit, 0, 1)
        form.addWidget(self.examples, 0, 2)
        form.addWidget(QtWidgets.QLabel("Corrupted"), 1, 0)
        form.addWidget(self.corrupted_edit, 1, 1, 1, 2)
        form.setColumnStretch(1, 1)
        metric_row = self.buttons_after("Metric", self.metric, "answer", self.answer_edit, "wrong", self.wrong_edit)
        run_row = QtWidgets.QHBoxLayout()
        run_row.addWidget(QtWidgets.QLabel("Patch"))
        run_row.addWidget(self.what)
        run_row.addWidget(self.noising)
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.cancel_button)
        run_row.addWidget(self.progress, 1)
        run_row.addStretch(0)
        self.summary = wrapped_label()
        self.summary.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stale = wrapped_label()
        self.stale.setStyleSheet("color: #8a5a00;")
        self.stale.hide()
        self.head_map = HeadValueMap()
        self.head_map.head_clicked.connect(self._select)
        self.head_map.head_activated.connect(self.head_activated)
        self.column_map = LayerColumnMap()
        self.maps = QtWidgets.QStackedWidget()
        self.maps.addWidget(self.head_map)
        self.maps.addWidget(self.column_map)
        self.maps.hide()
        self.position_strip = LayerColumnMap()  # head × position: the selected head's value at every position
        self.position_strip.setMinimumHeight(96)  # one row: at 1366 × 768 the map above keeps most of the height
        self.position_strip.setMaximumHeight(124)
        self.position_strip.hide()
        from ...plots.plot_items import apply_theme

        for fig in (self.head_map, self.column_map, self.position_strip):
            apply_theme(fig, self.state.dark)
            self.state.dark_changed.connect(lambda dark, fig=fig: apply_theme(fig, dark))
        layout = self.lay_out(form, metric_row, run_row, self.message, self.summary, self.stale, main=self.maps)
        layout.addWidget(self.position_strip)
        layout.addStretch(0)  # the lines above stay on top while there is no map

    def use_pair(self, pair) -> None:
        """Both prompts (shared with the Compare page) and the answers from the example ``pair``."""
        self.pair.use(pair)

    def _answers_of(self, pair) -> None:
        self.answer_edit.setText(shown_text(pair.answer))
        self.wrong_edit.setText(shown_text(pair.wrong))
        self.metric.setCurrentIndex(self.metric.findData("logit_diff"))
        self.examples.setCurrentIndex(0)

    def _update_enabled(self) -> None:
        why = self.tie.why_not() if self.state.result is not None else "Load a decoder and run a text first."
        decoder = self.state.result is None or self.state.result.causal
        usable = decoder and self.state.result is not None
        metric = self.metric.currentData()
        self.answer_edit.setEnabled(metric != "loss")
        self.wrong_edit.setEnabled(metric == "logit_diff")
        self.run_button.setEnabled(usable and not self.job.running)
        self.run_button.setToolTip("Patch each activation in turn" if usable else why)

    def _select(self, layer: int, head: int) -> None:
        if self.state.result is not None:
            self.state.select(layer, head)

    # ----------------------------------------------------------------- what the result belongs to
    def _model_changed(self) -> None:
        """Only a new model clears the map (a new text on screen does not: the prompts are the page's own)."""
        self._update_enabled()
        if self.tie.model_key == self._model_key:
            return
        self._model_key = self.tie.model_key
        self.job.drop()
        self.shown = None
        self.head_map.forget()
        self.column_map.forget()
        self.position_strip.forget()
        self.position_strip.hide()
        self.maps.hide()
        self.summary.setText("")
        self.stale.hide()
        self.progress.hide()
        self.cancel_button.setEnabled(False)
        self._dim(False)
        self.show_message("")
        self._update_buttons()
        self._update_enabled()
        self.shown_changed.emit(None)

    def _mark_stale(self) -> None:
        mark_edited(self, "The prompts were edited since this map was made: it is the earlier prompts' map; Patch "
                          "again for these.")

    # ----------------------------------------------------------------- run
    def run(self) -> int | None:
        from analysis.errors import InputError
        from analysis.measures.ablation import text_tokens
        from analysis.measures.patching import make_metric, pair_ids, patch
        from analysis.run.inference import bos_used

        prompts = prompts_to_run(self)
        if prompts is None:
            return None
        clean, corrupted = prompts
        metric = self.metric.currentData()
        answer = typed_text(self.answer_edit.text()) if metric != "loss" and self.answer_edit.text() else None
        wrong = typed_text(self.wrong_edit.text()) if metric == "logit_diff" and self.wrong_edit.text() else None
        what, noising = self.what.currentData(), bool(self.noising.currentData())
        model_key = self.tie.model_key

        def work(loaded, progress, cancel):
            m = make_metric(loaded, metric, answer, wrong)
            bos = bos_used(loaded, None)
            try:
                clean_ids = list(text_tokens(loaded, clean, bos).ids)
                corrupted_ids = list(text_tokens(loaded, corrupted, bos).ids)
            except InputError as exc:
                raise InputError(f"{exc} (both prompts need at least 2 tokens)") from None
            pair_ids(loaded, clean_ids, corrupted_ids)
            tokens = tuple(loaded.family.display_tokens(loaded.tokenizer,
                                                        loaded.tokenizer.convert_ids_to_tokens(clean_ids)))
            origin = origin_of(loaded, clean, bos, False, None)
            shown = lambda result: PatchingShown(result, clean, corrupted, answer, wrong, tokens,  # noqa: E731
                                                 origin, model_key)
            from analysis.errors import AnalysisCancelled

            try:
                return shown(patch(loaded, clean_ids, corrupted_ids, m, what, denoising=not noising,
                                   progress=progress, cancel=cancel))
            except AnalysisCancelled as exc:
                if exc.partial is not None:
                    exc.partial = shown(exc.partial)
                raise

        self.show_message("")
        self.summary.setText(f"Patching {WHAT[what]}, {self.noising.currentText()} "
                             f"({'clean into the corrupted run' if not noising else 'corrupted into the clean run'})…")
        self._dim(True)  # the map on screen is the previous run's until this one answers
        self.progress.setRange(0, 0)
        self.progress.setFormat("tokenizing and caching both runs")
        self.progress.show()
        self.cancel_button.setEnabled(True)
        self._started = time.monotonic()
        request = self.job.start(work)
        self._update_enabled()
        return request

    def _progress(self, done: int, total: int) -> None:
        r = self.state.result
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        L = r.n_layer if r is not None else 1
        left = seconds_left(time.monotonic() - self._started, done * L // max(1, total), L)
        self.progress.setFormat("%v of %m" + (f" · about {format_duration(left)} left"
                                                      if left == left and done < total else ""))

    def _dim(self, on: bool) -> None:
        """The maps' images drawn at DIM_OPACITY while a newer patching run is in flight (walk 6: the previous map
        stayed on screen undimmed under the progress bar), as RunDimmer dims a view while a new text runs."""
        for view in (self.head_map, self.column_map, self.position_strip):
            view.image.setOpacity(DIM_OPACITY if on else 1.0)

    def _stopped(self, message: str = "", error: bool = False) -> None:
        self._dim(False)
        self.progress.hide()
        self.cancel_button.setEnabled(False)
        self._update_enabled()
        if message:
            self.show_message(message, error)
            self.summary.setText(self._summary_text(self.shown) if self.shown is not None else "")

    def _cancelled(self) -> None:
        s = self.shown
        self._stopped()
        if s is not None and s.result.partial:
            self.summary.setText(self._summary_text(s))
        else:
            self.show_message("Patching cancelled." + (" The map shown is the last finished one." if s else ""))

    def _ready(self, shown: PatchingShown) -> None:
        if shown.model_key != self.tie.model_key:
            return
        self._stopped()
        self.shown = shown
        res = shown.result
        direction = "denoising" if res.denoising else "noising"
        values, bar, word = shown_values(res)
        title = f"patching {word}, {res.what}, {direction}"

        def head_text(layer, head, v):
            return (f"{head_name(layer, head)}: {word} {v:.3f} ({res.metric_label} patched "
                    f"{res.patched[layer, head]:.3f}; clean {res.clean:.3f}, corrupted {res.corrupted:.3f})")

        def column_text(layer, column, v):
            where = shown.tokens[column] if res.what == "resid" else ("attention", "MLP")[column]
            if res.what == "resid":
                where = f"position {column} {where}, the residual stream entering block {layer}"
            else:
                where = f"L{layer} {where} output"
            return (f"{where}: {word} {v:.3f} ({res.metric_label} patched {res.patched[layer, column]:.3f}; "
                    f"clean {res.clean:.3f}, corrupted {res.corrupted:.3f})")

        if res.what == "head_positions":
            def strongest_text(layer, head, v):
                row = values[layer, head]
                p = int(np.argmax(np.where(np.isfinite(row), np.abs(row), -1.0)))
                return (f"{head_name(layer, head)}: {word} {v:.3f} at its strongest position, {p} {shown.tokens[p]} "
                        "(the strip under the map: every position)")

            # the bar says the word alone: the map shares the height with the strip (the long formula was cut at 768 px)
            self.head_map.set_values(strongest_position(values), f"{title} (each head's strongest position)", word,
                                     strongest_text, levels=effect_levels(values))
            self.head_map.select(self.state.layer, self.state.head)
            self.maps.setCurrentWidget(self.head_map)
        elif res.what == "heads":
            self.head_map.set_values(values, title, bar, head_text, levels=effect_levels(values))
            self.head_map.select(self.state.layer, self.state.head)
            self.maps.setCurrentWidget(self.head_map)
        else:
            columns = ([f"{i} {t}" for i, t in enumerate(shown.tokens)] if res.what == "resid"
                       else ["attention", "MLP"])
            self.column_map.set_values(values, columns, title, bar,
                                       "position" if res.what == "resid" else "sub-layer output", column_text,
                                       levels=effect_levels(values))
            self.maps.setCurrentWidget(self.column_map)
        self.maps.show()
        self._draw_strip()
        self.summary.setText(self._summary_text(shown))
        self._mark_stale()
        self._update_buttons()
        self.shown_changed.emit(shown)

    def _draw_strip(self) -> None:
        """Head × position: the selected head's value at every position, a strip under the map (hidden for the
        other kinds of patching)."""
        s = self.shown
        if s is None or s.result.what != "head_positions":
            self.position_strip.hide()
            return
        res = s.result
        values, bar, word = shown_values(res)
        L, H, n = values.shape
        layer, head = min(self.state.layer, L - 1), min(self.state.head, H - 1)
        name = head_name(layer, head)

        def text(_row, p, v):
            return (f"{name} at position {p} {s.tokens[p]}: {word} {v:.3f} ({res.metric_label} patched "
                    f"{res.patched[layer, head, p]:.3f}; clean {res.clean:.3f}, corrupted {res.corrupted:.3f})")

        self.position_strip.set_values(values[layer, head][None, :], [f"{i} {t}" for i, t in enumerate(s.tokens)],
                                       f"{name}: {word} of patching its output at one position",
                                       word, "position", text, levels=effect_levels(values), rows=(name,))
        self.position_strip.show()

    @staticmethod
    def _summary_text(shown: PatchingShown) -> str:
        res = shown.result

        def name(index):
            if res.what == "heads":
                return head_name(*index)
            if res.what == "head_positions":
                return f"{head_name(*index[:2])} @ {index[2]} {shown.tokens[index[2]]}"
            if res.what == "resid":
                return f"L{index[0]} @ {index[1]} {shown.tokens[index[1]]}"
            return f"L{index[0]} {('attention', 'MLP')[index[1]]}"

        values, _, word = shown_values(res)
        top = ", ".join(f"{name(i)} {v:.3f}" for i, v in top_cells(values, 5))
        # a cancelled run's map says so in every summary of it (walk: the prefix was lost when a later run failed)
        partial = (f"Patching cancelled: the map shows the {layers_done(res)} of {res.effect.shape[0]} layers "
                   "finished (the others are blank). " if res.partial else "")
        meaning = ("1: the patched run scores the clean value, 0: the corrupted value" if res.denoising else
                   "1: corrupting it alone loses the whole answer, 0: the clean run is unchanged")
        return (f"{partial}{res.metric_label}: clean {res.clean:.3f}, corrupted {res.corrupted:.3f}. Largest "
                f"{word}: {top} ({meaning}).")

    # ----------------------------------------------------------------- copy, save, figure
    def code(self) -> str:
        s = self.shown
        return patching_code(s.origin, s.clean, s.corrupted, s.result.metric, s.answer, s.wrong, s.result.what,
                             s.result.denoising, layers_done(s.result) if s.result.partial else None)

    def metadata(self) -> dict:
        s = self.shown
        res = s.result
        _, bar, _ = shown_values(res)
        return {"clean": s.clean, "corrupted": s.corrupted, "metric": res.metric_label, "what": res.what,
                "denoising": res.denoising, "metric_clean": res.clean, "metric_corrupted": res.corrupted,
                "values": bar}

    def map_data(self):
        s = self.shown
        res = s.result
        L = res.effect.shape[0]
        positions = [f"{i} {t}" for i, t in enumerate(s.tokens)]
        columns = {"heads": [f"H{h}" for h in range(res.effect.shape[1])], "resid": positions,
                   "head_positions": positions, "layers": ["attention", "mlp"]}[res.what]
        data = {"page": "patching", "clean_text": s.clean, "corrupted_text": s.corrupted, "tokens": list(s.tokens),
                **res.to_dict()}
        values, _, word = shown_values(res)  # the map as shown (noising: the loss); the JSON keeps effect as well
        if res.what == "head_positions":  # a row per head, a column per position
            H = values.shape[1]
            return (values.reshape(L * H, -1), [head_name(l, h) for l in range(L) for h in range(H)], columns,
                    f"head \\ position ({word})", data)
        return values, [f"L{l}" for l in range(L)], columns, f"layer \\ {res.what} ({word})", data

    def offscreen_figure(self):
        if self.shown is None:
            return None
        from ...export.figure_files import settle_layout
        from ...plots.figures import lay_out_offscreen

        res = self.shown.result
        model = self.state.result.model_label if self.state.result is not None else ""
        title = f"{model} — patching effect, {res.what}, {'denoising' if res.denoising else 'noising'}"
        L, C = res.effect.shape[:2]
        if res.what in ("heads", "head_positions"):
            fig = HeadValueMap()
            lay_out_offscreen(fig, int(min(2400, max(620, 220 + 48 * C))), int(min(3000, max(360, 120 + 40 * L))))
            values, _, word = shown_values(res)
            if res.what == "head_positions":
                values, title = strongest_position(values), f"{title} (each head's strongest position)"
            fig.set_values(values, title, word, levels=effect_levels(values))
        else:
            fig = LayerColumnMap()
            lay_out_offscreen(fig, int(min(2400, max(620, 220 + 60 * C))), int(min(3000, max(360, 120 + 30 * L))))
            columns = ([f"{i} {t}" for i, t in enumerate(self.shown.tokens)] if res.what == "resid"
                       else ["attention", "MLP"])
            values, _, word = shown_values(res)
            fig.set_values(values, columns, title, word, "position" if res.what == "resid" else "sub-layer",
                           levels=effect_levels(values))
        settle_layout()
        return fig



def layers_done(res) -> int:
    """The layers a (cancelled) patching result finished: every patch of a layer is done together."""
    L = res.effect.shape[0]
    return L if res.done is None else int(res.done.reshape(L, -1)[:, 0].sum())


def seconds_left(elapsed: float, layers_done: int, n_layer: int) -> float:
    """Seconds the patching still needs after ``elapsed`` for its first ``layers_done`` layers: a patch in layer l
    re-runs blocks l … L−1 and one decoding (counted as one block more), so layer l weighs L − l + 1 (NaN before the
    first layer is done)."""
    weight = [n_layer - layer + 1 for layer in range(n_layer)]
    done = sum(weight[:layers_done])
    return elapsed * (sum(weight) - done) / done if done else float("nan")
