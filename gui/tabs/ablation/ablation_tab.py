"""The Ablation tab: does a head matter for the next-token prediction on the text on screen?

- *Ablate*: the heads named (the selected head by default; "Add" puts more in) are zero- or
  mean-ablated (``analysis.measures.ablation.ablate``: z_h, the head's softmax weights · V before W_O, set to 0
  or to its mean over the text's positions). Shown side by side, before and after: the text's
  next-token loss (mean −log p over positions 1 … n−1, nats) and the last position's top-5 next tokens.
- *Importance map*: the loss change when each head alone is ablated (``analysis.measures.ablation.importance_map``:
  each head's later layers re-run from the cached residual stream, in batches), on the worker with progress,
  an estimate and Cancel (which keeps the heads finished, shown as a partial map), on the shared layer × head
  map; a click selects the head, a double-click opens it.

Both run on the worker (gui/state/jobs.py). Their results belong to one text, BOS choice and model: a new
text or model stops them at once (the status bar says so), drops the answers in flight and clears what
is shown. Decoders only — an encoder
predicts no next token, and the tab says so. The map and the before/after boxes are in
gui/tabs/ablation/ablation_views.py.
"""
from __future__ import annotations

import time

from PySide6 import QtCore, QtWidgets

from analysis.display import format_duration, format_score, head_name
from analysis.errors import InputError
from analysis.measures.ablation import MODES, parse_head_list

from ...plots.plot_items import apply_theme
from ...state.jobs import Job
from ...state.worker import RequestKind
from .ablation_views import ImportanceView, Predictions

MODE_TIPS = {"zero": "zero: the head's output z_h is set to 0 at every position (it writes nothing)",
             "mean": "mean: z_h is replaced by its mean over the text's positions (only what it does "
                     "differently per position is removed)"}


class AblationTab(QtWidgets.QWidget):
    """Ablate heads of the text on screen; the importance map of every head. See the module docstring."""

    title = "Ablation"
    head_activated = QtCore.Signal(int, int)
    ablation_shown = QtCore.Signal(object)  # AblationResult now on screen
    importance_shown = QtCore.Signal(object)  # ImportanceMap now on screen

    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.ablation = None  # AblationResult shown, of self._key
        self.importance = None  # ImportanceMap shown, of self._key
        self._key = None  # (text, bos, chat, model generation) the results belong to
        self._model_generation = 0
        self._followed = ""  # the head text the heads box took from the selection (it follows while unchanged)
        # a new text or model ends them at once (their answers would be for the text or model no longer shown)
        ended_by = (RequestKind.LOAD, RequestKind.ANALYSE)
        self.ablate_job = Job(worker, "ablate", self, label="the ablation", ended_by=ended_by)
        self.ablate_job.finished.connect(self._ablated)
        self.ablate_job.failed.connect(self._failed)
        self.importance_job = Job(worker, "importance", self, label="the importance map", ended_by=ended_by)
        self.importance_job.progressed.connect(self._importance_progress)
        self.importance_job.finished.connect(self._importance_ready)
        self.importance_job.failed.connect(self._importance_failed)
        self.importance_job.cancelled.connect(self._importance_cancelled)
        self.importance_job.partial.connect(self._importance_partial)
        self._importance_started = 0.0  # time.monotonic() of the run in flight, for its estimate
        worker.model_loaded.connect(self._model_loaded)
        self._build()
        state.on_bundle(lambda _bundle: self._bundle_changed(), "ablation tab")
        state.selection_changed.connect(self._selection_changed)
        state.dark_changed.connect(lambda dark: apply_theme(self.map, dark))
        apply_theme(self.map, state.dark)
        self._bundle_changed()
        self._selection_changed(state.layer, state.head)

    # ----------------------------------------------------------------- building
    def _build(self) -> None:
        self.note = QtWidgets.QLabel()
        self.note.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.note.setWordWrap(True)
        self.heads_edit = QtWidgets.QLineEdit()
        self.heads_edit.setPlaceholderText("heads, e.g. L1H0, L1H3 (or 1.0, 1.3)")
        self.heads_edit.setToolTip("The heads to ablate together, separated by commas: L1H0 is layer 1, head 0 (1.0 "
                                   "works too). It follows the selected head until you type in it or press Add.")
        self.heads_edit.returnPressed.connect(self.ablate)
        self.heads_edit.textChanged.connect(lambda _text: self._update_add_button())
        self.add_button = QtWidgets.QPushButton("Add selected")
        self.add_button.setToolTip("Keep the heads named and add the selected head; select another and Add again")
        self.add_button.clicked.connect(self.add_selected)
        self.reset_button = QtWidgets.QToolButton()
        self.reset_button.setText("✕")
        self.reset_button.setAutoRaise(True)
        self.reset_button.setToolTip("Back to the selected head alone")
        self.reset_button.clicked.connect(self.follow_selection)
        self.mode_choice = QtWidgets.QComboBox()
        for mode in MODES:
            self.mode_choice.addItem(mode, mode)
            self.mode_choice.setItemData(self.mode_choice.count() - 1, MODE_TIPS[mode],
                                         QtCore.Qt.ItemDataRole.ToolTipRole)
        self.mode_choice.setToolTip("\n".join(MODE_TIPS.values()))
        self.ablate_button = QtWidgets.QPushButton("Ablate")
        self.ablate_button.setToolTip("Run the text on screen with these heads ablated, and without")
        self.ablate_button.clicked.connect(self.ablate)
        row = QtWidgets.QHBoxLayout()
        row.addWidget(QtWidgets.QLabel("Heads"))
        row.addWidget(self.heads_edit, 1)
        row.addWidget(self.add_button)
        row.addWidget(self.reset_button)
        row.addWidget(QtWidgets.QLabel("mode"))
        row.addWidget(self.mode_choice)
        row.addWidget(self.ablate_button)

        self.baseline_box = Predictions("Baseline")
        self.ablated_box = Predictions("Ablated")
        sides = QtWidgets.QHBoxLayout()
        for box in (self.baseline_box, self.ablated_box):  # half each, whatever they hold: no jump after Ablate
            box.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
            sides.addWidget(box, 1)
        self.message = QtWidgets.QLabel()
        self.message.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.message.setWordWrap(True)
        self.message.hide()

        self.importance_button = QtWidgets.QPushButton("Importance map")
        self.importance_button.setToolTip("Ablate each head alone and map the loss change (each head's layers re-run "
                                          "from the cached residual stream, a layer's heads in one batch)")
        self.importance_button.clicked.connect(self.start_importance)
        self.importance_cancel = QtWidgets.QPushButton("Cancel")
        self.importance_cancel.clicked.connect(self.importance_job.cancel)
        self.importance_cancel.setEnabled(False)
        self.progress = QtWidgets.QProgressBar()
        self.progress.setFormat("%v of %m heads")
        policy = self.progress.sizePolicy()
        policy.setRetainSizeWhenHidden(True)  # its place is kept while hidden: Cancel never moves under the pointer
        self.progress.setSizePolicy(policy)
        self.progress.hide()
        self.importance_label = QtWidgets.QLabel()
        self.importance_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.importance_label.setWordWrap(True)
        map_row = QtWidgets.QHBoxLayout()
        map_row.addWidget(self.importance_button)
        map_row.addWidget(self.importance_cancel)
        map_row.addWidget(self.progress, 1)
        self.map = ImportanceView()
        self.map.hide()  # until there is a map
        self.map.head_clicked.connect(self._select)
        self.map.head_activated.connect(self.head_activated)

        left = QtWidgets.QWidget()
        left_layout = QtWidgets.QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addLayout(row)
        left_layout.addLayout(sides)
        left_layout.addWidget(self.message)
        left_layout.addStretch(1)
        right = QtWidgets.QWidget()
        right_layout = QtWidgets.QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addLayout(map_row)
        right_layout.addWidget(self.importance_label)
        right_layout.addWidget(self.map, 1)
        right_layout.addStretch(0)
        splitter = QtWidgets.QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setChildrenCollapsible(False)
        splitter.setSizes([560, 480])
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 2)
        layout.setSpacing(4)
        layout.addWidget(self.note)
        layout.addWidget(splitter, 1)

    # ----------------------------------------------------------------- what the results belong to
    def _current_key(self):
        r = self.state.result
        return None if r is None else (r.text, bool(r.bos), r.chat, self._model_generation)

    def _usable(self) -> str:
        """"" when the tab can run on the result on screen, else why not (one sentence)."""
        r = self.state.result
        if r is None:
            return "Run a text first: ablation measures the next-token loss on the text on screen."
        if not r.causal:
            return (f"Ablation measures the next-token loss, so it needs a decoder; {r.model_label} is an encoder. "
                    "Load a decoder (GPT-2, Llama, …).")
        if r.n_tokens < 2:
            return "The text needs at least 2 tokens to measure a next-token loss; type a longer one."
        return ""

    def _bundle_changed(self, unablated: bool = True) -> None:
        """A new result (or model): forget what belongs to the old one; with ``unablated``, show the result's own
        top-5 as the baseline (not after a load: the result on screen is the previous model's)."""
        key = self._current_key()
        if key != self._key:
            self._forget()
            self._key = key
        why = self._usable()
        self.note.setText(why or "Next-token loss: mean −log p(token t | tokens before it) over positions 1 … n−1, "
                                 "in nats; top-5: the next tokens after the last position.")
        for widget in (self.heads_edit, self.add_button, self.reset_button, self.mode_choice, self.ablate_button,
                       self.importance_button):
            widget.setEnabled(not why)
        if why:
            self.importance_cancel.setEnabled(False)
        self._update_add_button()
        if unablated:
            self._show_unablated()

    def _model_loaded(self, *_args) -> None:
        self._model_generation += 1  # the results on screen are the previous model's
        self._bundle_changed(unablated=False)

    def _forget(self) -> None:
        """Drop the answers in flight and clear what is shown: they belong to another text or model."""
        self.ablate_job.drop()
        self.importance_job.drop()
        self.ablation = self.importance = None
        self.baseline_box.clear()
        self.ablated_box.clear()
        self.ablated_box.setTitle("Ablated")
        self.message.hide()
        self.map.forget()
        self.map.hide()
        self.progress.hide()
        self.importance_cancel.setEnabled(False)
        self.importance_label.setText("")

    def _show_unablated(self) -> None:
        """Before the first ablation of a text: the baseline box shows the text's own top-5 next tokens (the run's
        predictions, the baseline an ablation compares with; its loss is measured by Ablate), the ablated box says
        what Ablate does. Nothing (both "—") when the tab cannot run."""
        r = self.state.result
        if self._usable() or r is None or self.ablation is not None:
            return
        from analysis.measures.ablation import TOP_K, Outcome

        self.baseline_box.show_outcome(Outcome(float("nan"), tuple((p.token, p.probability)
                                                                   for p in r.predictions[:TOP_K])))
        self.baseline_box.loss.setText("loss: measured by Ablate")
        self.ablated_box.loss.setText("Press Ablate: the loss and top-5 with the heads named ablated")

    # ----------------------------------------------------------------- the heads box
    def _selection_changed(self, layer: int, head: int) -> None:
        self.map.select(layer, head)
        now = self.heads_edit.text().strip()
        if now in ("", self._followed):
            self._followed = head_name(layer, head)
            self.heads_edit.setText(self._followed)
        self._update_add_button()

    def _named(self) -> list[tuple[int, int]]:
        """The heads the heads box names so far (items that name none yet are left out)."""
        return [named for part in self.heads_edit.text().split(",") if part.strip() for named in _heads_in(part)]

    def _update_add_button(self) -> None:
        """The button says what it does: "Keep L1H2" while the box follows the selection (pins it: the next head
        selected is added, not put in its place), "Add L0H3" for a head not named yet, and greyed out (saying so)
        when the box already holds the selected head for good."""
        head = (self.state.layer, self.state.head)
        name = head_name(*head)
        following = self.heads_edit.text().strip() in ("", self._followed)
        named = head in self._named()
        if following:
            text, tip = f"Keep {name}", f"Keep {name} in the list; then select another head and Add it"
        elif named:
            text, tip = f"Add {name}", f"{name} is in the list already: select another head to add it"
        else:
            text, tip = f"Add {name}", "Keep the heads named and add the selected head; select another and Add again"
        self.add_button.setText(text)
        self.add_button.setToolTip(tip)
        self.add_button.setEnabled(not (named and not following) and not self._usable())

    def add_selected(self) -> None:
        """Keep the heads named (as typed, "1.0" or "L1H0") and add the selected one, unless it is named already."""
        head = (self.state.layer, self.state.head)
        parts = [p.strip() for p in self.heads_edit.text().split(",") if p.strip()]
        if head not in self._named():
            parts.append(head_name(*head))
        self._followed = ""  # pinned: the next selection is added with the button, not put in its place
        self.heads_edit.setText(", ".join(parts))
        self._update_add_button()

    def follow_selection(self) -> None:
        """Back to ablating the selected head alone (the box follows the selection again)."""
        self._followed = head_name(self.state.layer, self.state.head)
        self.heads_edit.setText(self._followed)
        self._update_add_button()

    def _select(self, layer: int, head: int) -> None:
        if self.state.result is not None:
            self.state.select(layer, head)

    # ----------------------------------------------------------------- ablate
    def ablate(self) -> int | None:
        """Ablate the heads named, on the worker; returns the request id (None when nothing was sent)."""
        from analysis.measures.ablation import ablate, parse_heads

        r = self.state.result
        if self._usable():
            return None
        try:
            heads = parse_heads(self.heads_edit.text(), r.n_layer, r.n_head)
        except InputError as exc:
            self._show_message(str(exc), error=True)
            return None
        text, bos, mode, cap, chat = r.text, bool(r.bos), self.mode_choice.currentData(), r.max_tokens, r.chat
        self.message.hide()
        self.ablate_button.setEnabled(False)
        self.ablated_box.setTitle("Ablated: running…")
        return self.ablate_job.start(
            lambda loaded, _progress, _cancel: ablate(loaded, text, heads, mode, bos, max_tokens=cap, chat=chat))

    def _ablated(self, result) -> None:
        self.ablate_button.setEnabled(not self._usable())
        self.ablation = result
        heads = ", ".join(head_name(l, h) for l, h in result.heads)
        self.baseline_box.show_outcome(result.baseline)
        self.ablated_box.setTitle(f"Ablated ({result.mode}): {heads}")
        self.ablated_box.show_outcome(result.ablated, f"  ({format_score(result.loss_change, signed=True)} vs baseline)")
        if result.warnings:  # the same prefix the run analysed, said where these numbers are
            self._show_message(" ".join(result.warnings))
        self.ablation_shown.emit(result)

    def _failed(self, message: str) -> None:
        self.ablate_button.setEnabled(not self._usable())
        self.ablated_box.setTitle("Ablated")
        self._show_message(message, error=True)

    def _show_message(self, text: str, error: bool = False) -> None:
        self.message.setStyleSheet("color: #8a1020;" if error else "")
        self.message.setText(text)
        self.message.show()

    # ----------------------------------------------------------------- importance map
    def start_importance(self) -> int | None:
        """Ablate each head alone, on the worker, with progress; returns the request id (None: nothing sent)."""
        from analysis.measures.ablation import importance_map

        r = self.state.result
        if self._usable():
            return None
        text, bos, mode, cap, chat = r.text, bool(r.bos), self.mode_choice.currentData(), r.max_tokens, r.chat
        self.progress.setRange(0, r.n_layer * r.n_head)
        self.progress.setValue(0)
        self.progress.setFormat("%v of %m heads")
        self._importance_started = time.monotonic()
        self.progress.show()
        self.importance_button.setEnabled(False)
        self.importance_cancel.setEnabled(True)
        self.importance_label.setText(f"Ablating each of the {r.n_layer * r.n_head} heads alone ({mode})…")
        return self.importance_job.start(
            lambda loaded, progress, cancel: importance_map(loaded, text, mode, bos, progress, cancel, max_tokens=cap,
                                                            chat=chat))

    def _importance_progress(self, done: int, total: int) -> None:
        """``done`` of ``total`` counts the baseline run and then each head finished."""
        r = self.state.result
        heads, finished = max(0, total - 1), max(0, done - 1)
        self.progress.setRange(0, heads)
        self.progress.setValue(finished)
        if r is None or not finished or finished >= heads:
            return
        left = importance_seconds_left(time.monotonic() - self._importance_started, finished // r.n_head,
                                       r.n_layer, r.n_head)
        self.progress.setFormat(f"%v of %m heads · about {format_duration(left)} left")

    def _importance_stopped(self, text: str, error: bool = False) -> None:
        self.progress.hide()
        self.importance_button.setEnabled(not self._usable())
        self.importance_cancel.setEnabled(False)
        self.importance_label.setStyleSheet("color: #8a1020;" if error else "")
        self.importance_label.setText(text)

    def _importance_ready(self, importance) -> None:
        self.importance = importance
        self._importance_stopped(" ".join((importance_summary(importance), *importance.warnings)))
        r = self.state.result
        if self.ablation is None and r is not None:  # the baseline is the text as analysed: show it too
            from analysis.measures.ablation import TOP_K, Outcome

            self.baseline_box.show_outcome(Outcome(importance.baseline_loss, tuple(
                (p.token, p.probability) for p in r.predictions[:TOP_K])))
        self.map.set_importance(importance)
        self.map.select(self.state.layer, self.state.head)
        self.map.show()
        self.importance_shown.emit(importance)

    def _importance_failed(self, message: str) -> None:
        self._importance_stopped(message, error=True)

    def _importance_partial(self, importance) -> None:
        """Cancel kept the heads finished: show them (the others blank) as a partial map."""
        self._importance_ready(importance)

    def _importance_cancelled(self) -> None:
        imp = self.importance
        if imp is not None and imp.partial:
            self._importance_stopped(f"Importance map cancelled: the map shows the {imp.n_done} of "
                                     f"{imp.loss_change.size} heads finished (the others are blank). "
                                     + importance_summary(imp))
            return
        self._importance_stopped("Importance map cancelled." + (" The map shown is the last finished one."
                                                                if self.importance is not None else ""))

    # ----------------------------------------------------------------- export
    def offscreen_figure(self):
        """A clean figure of the importance map, or None when there is none."""
        if self.importance is None:
            return None
        from ...export.figure_files import settle_layout
        from ...plots.figures import lay_out_offscreen
        from ...plots.layer_head_map import width_for_title

        fig = ImportanceView()
        L, H = self.importance.loss_change.shape
        r = self.state.result
        model = r.model_label if r is not None else ""
        title = f"{model} — loss change, each head {self.importance.mode}-ablated alone"
        lay_out_offscreen(fig, int(min(2400, max(560, 220 + 48 * H, width_for_title(title, 220)))),
                          int(min(3000, max(360, 120 + 40 * L))))
        fig.set_importance(self.importance)
        fig.set_title(title)
        settle_layout()  # the title's height moves the plot down once
        return fig


def _heads_in(part: str) -> list[tuple[int, int]]:
    """The head one item of the heads box names ("1.0" or "L1H0"), or none when it names none (yet)."""
    try:
        return parse_head_list(part)
    except InputError:
        return []


def importance_seconds_left(elapsed: float, layers_done: int, n_layer: int, n_head: int) -> float:
    """Seconds the importance map still needs, from ``elapsed`` for its first ``layers_done`` layers: a head of layer
    l re-runs L − l blocks and one decoding (counted as one block more), so layer l weighs L − l + 1."""
    weight = [n_layer - layer + 1 for layer in range(n_layer)]
    done = sum(weight[:layers_done])
    return elapsed * (sum(weight) - done) / done if done else float("nan")


def importance_summary(importance) -> str:
    """The sentence over the importance map: the baseline loss and the heads (up to 5) whose ablation
    alone raises the loss, largest first — only heads with a positive change ("L1H0 +0.770": the loss change in
    nats, ``format_score`` signed)."""
    raising = [(l, h, v) for l, h, v in importance.top(5) if v > 0]
    heads = (", ".join(f"{head_name(l, h)} {format_score(v, signed=True)}" for l, h, v in raising) if raising
             else f"none raises the loss (every head's {importance.mode} ablation alone leaves it or lowers it)")
    return (f"Baseline loss {importance.baseline_loss:.3f} nats. Heads whose ablation alone ({importance.mode}) "
            f"raises the loss most: {heads}.")
