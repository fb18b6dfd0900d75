"""The window's status bar: the model, the tokens of the run on screen and what they take, the last run."""
from __future__ import annotations

import os
import time
from pathlib import Path

from PySide6 import QtWidgets

from analysis import display

from ..input.model_bar import BUNDLED_DESCRIPTION


def attention_line(n_tokens: int, plan) -> str:
    """"38 tokens · attention 0.22 MB" or "2,048 tokens · attention on demand 1.41 GiB": the tokens and what their
    attention takes as the run holds it (``plan``, a run.memory.RunPlan: every map kept, or the queries and keys
    with the maps computed on demand; None: the tokens alone)."""
    return f"{n_tokens:,} tokens" + ("" if plan is None else f" · {plan.describe()}")


def attention_tip(result, plan) -> str:
    """The tooltip of the tokens label: what the figure counts, and the token limit."""
    limit = f"a run analyses at most {result.max_tokens:,} tokens (Run → Token limit…)"
    if plan is None:
        return f"The attention of this run; {limit}"
    maps = display.format_bytes(plan.maps_bytes)
    if plan.keeps_maps:
        return (f"The attention of this run, every map kept: {result.n_layer} layers × {result.n_head} heads × "
                f"{result.n_tokens}² tokens × 4 bytes = {maps}; {limit}")
    return (f"The attention of this run, computed on demand: the queries and keys of every layer and a block of maps "
            f"at a time, {display.format_bytes(plan.need_bytes)} (every map kept would take {maps}); {limit}")


BAR_PX = 120


def model_line(info) -> str:
    """"tiny · 4×4 heads · cpu · float32": the loaded model (a ModelInfo); a GGUF's says what its float32 weights
    were dequantized from: "smollm2 · 30×9 heads · cpu · Q4_1 → float32"."""
    dtype = f"{info.quantization} → {info.dtype}" if info.quantization else info.dtype
    shown = Path(info.file).name if info.file and info.label == info.file else info.label  # a GGUF by path: its name
    return f"{shown} · {info.n_layer}×{info.n_head} heads · {info.device} · {dtype}"


class StatusLine:
    """Three permanent labels on ``window``'s status bar (model, tokens, run) and its passing messages."""

    def __init__(self, window: QtWidgets.QMainWindow):
        # The window, not its QStatusBar: a kept wrapper of the bar was seen to go stale under PySide 6.11
        # ("Internal C++ object already deleted") while the bar lived on; statusBar() at each use is safe.
        self.window = window
        self.model, self.tokens, self.run = QtWidgets.QLabel("no model"), QtWidgets.QLabel(), QtWidgets.QLabel()
        self.bar = QtWidgets.QProgressBar()  # a run's blocks done, in the phase it is in (forward, then streaming)
        self.bar.setMaximumWidth(BAR_PX)
        self.bar.setMaximumHeight(14)
        self.bar.setTextVisible(False)
        self.bar.hide()
        for widget in (self.model, self.tokens, self.run, self.bar):
            window.statusBar().addPermanentWidget(widget)
        self._phase: tuple[str, float, int] | None = None  # the phase shown, when and at which layer it was first seen
        self.shown_line = ""  # the tokens of the result on screen (attention_line), "" before the first

    def previous(self, what: str | None) -> None:
        """While something newer is on its way the tokens label says the result on screen is ``what`` ("the previous
        text"), so that the bar reads as one line: what is shown, then what is running; None: the result is the newest."""
        if not self.shown_line:
            return
        self.tokens.setText(self.shown_line if what is None else f"shown: {self.shown_line}, {what} ·")

    # ---- the model
    def loading(self, source: str) -> None:
        self.model.setText(f"loading {Path(source).name or source}…")
        self.previous("the previous model's")

    def model_loaded(self, info) -> None:
        self.model.setText(model_line(info))
        where = BUNDLED_DESCRIPTION if info.kind == "bundled" else info.file or info.folder
        self.model.setToolTip(f"{where}\nWeights: {info.weights}" if info.quantization else where)

    def still_using(self, info) -> None:
        """A load failed: back to the model still loaded (``info``), or to none."""
        self.model.setText(model_line(info) if info is not None else "no model")
        self.previous(None)

    # ---- the run
    def running(self, n_tokens: int | None = None, plan=None) -> None:
        """A run started; once its size is known (``n_tokens``, its run.memory.RunPlan), what it will take."""
        self.previous("the previous text")
        self.run.setText("running…" if n_tokens is None else f"running {attention_line(n_tokens, plan)}…")

    def streaming(self, n_tokens: int, plan, done: int, total: int) -> None:
        """An on-demand run's pass over its layers (Worker.analysis_progress): "streaming layer 12 of 30"."""
        self.progress(n_tokens, plan, "streaming", done, total)

    def progress(self, n_tokens: int, plan, phase: str, done: int, total: int) -> None:
        """A run's ``phase`` ("forward": the model's forward, Worker.forward_progress; "streaming": the pass of an
        on-demand run) is at ``done`` of ``total`` layers: the bar, and "forward: layer 12 of 30, about 9 s left".
        The estimate is the phase's seconds per layer so far (``analysis.display.seconds_left``), from its second layer
        on (the first includes the phase's start)."""
        now = time.monotonic()
        if self._phase is None or self._phase[0] != phase or done <= 1:
            self._phase = (phase, now, done)
        left = display.seconds_left(now - self._phase[1], done - self._phase[2], total - done)
        self.bar.setRange(0, total)
        self.bar.setValue(done)
        self.bar.setToolTip(f"{phase}: {done} of {total} layers")
        self.bar.show()
        estimate = "" if left is None else f", about {display.format_duration(left)} left"
        self.run.setText(f"running {attention_line(n_tokens, plan)}: {phase} layer {done} of {total}{estimate}…")

    def waiting(self, job) -> None:
        """A run waits for ``job`` (a gui.state.jobs.Job the new text does not end) to finish: say so, and how far it is."""
        done = f" ({100 * job.done // job.total} % done)" if job.total else ""
        self.run.setText(f"waiting for {job.label}{done} to finish before running the text…")

    def run_failed(self) -> None:
        self.previous(None)
        self.run.setText("")
        self._end_progress()

    def _end_progress(self) -> None:
        self.bar.hide()
        self._phase = None

    def shown(self, bundle) -> None:
        """The result of ``bundle`` (an AnalysisBundle) is on screen: its tokens, their memory, its time."""
        r = bundle.result
        self.shown_line = attention_line(r.n_tokens, bundle.plan) + (" (truncated)" if r.truncated else "")
        self.tokens.setText(self.shown_line)
        self.tokens.setToolTip(attention_tip(r, bundle.plan))
        self.run.setText(f"last run {time.strftime('%H:%M:%S')} in {bundle.seconds * 1000:.0f} ms")
        self._end_progress()

    # ---- passing messages
    def stopped(self, labels: list, because: str) -> None:
        """Tasks in flight were ended by a newer request (Worker.tasks_stopped): ``because`` says which."""
        what = " and ".join(dict.fromkeys(labels))  # once each: a job restarted twice is still one job
        self.window.statusBar().showMessage(f"Stopped {what}: {because}.", 10000)

    def exported(self, paths: list) -> None:
        folder = os.path.commonpath([Path(p).parent for p in paths])
        self.window.statusBar().showMessage(f"Exported {len(paths)} file(s) to {folder}", 8000)

    def export_warning(self, message: str) -> None:
        """What an export that succeeded left behind (it stays until the next message)."""
        self.window.statusBar().showMessage(message)

    def copied(self) -> None:
        self.window.statusBar().showMessage("Figure copied to the clipboard", 4000)
