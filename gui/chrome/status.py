"""The window's status bar: the model, the tokens of the run on screen and what they take, the last run."""
from __future__ import annotations

import os
import time
from pathlib import Path

from PySide6 import QtWidgets

from analysis import display
from analysis.run.memory import attention_memory_bytes

from ..input.model_bar import BUNDLED_DESCRIPTION


def attention_line(n_tokens: int, n_layer: int, n_head: int) -> str:
    """"38 tokens · attention 0.22 MB": the tokens and what their attention takes (every layer's and head's
    float32 (n, n) map, inference.attention_memory_bytes)."""
    return f"{n_tokens:,} tokens · attention {display.format_bytes(attention_memory_bytes(n_layer, n_head, n_tokens))}"


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
        for widget in (self.model, self.tokens, self.run):
            window.statusBar().addPermanentWidget(widget)

    # ---- the model
    def loading(self, source: str) -> None:
        self.model.setText(f"loading {Path(source).name or source}…")

    def model_loaded(self, info) -> None:
        self.model.setText(model_line(info))
        where = BUNDLED_DESCRIPTION if info.kind == "bundled" else info.file or info.folder
        self.model.setToolTip(f"{where}\nWeights: {info.weights}" if info.quantization else where)

    def still_using(self, info) -> None:
        """A load failed: back to the model still loaded (``info``), or to none."""
        self.model.setText(model_line(info) if info is not None else "no model")

    # ---- the run
    def running(self, n_tokens: int | None = None, info=None) -> None:
        """A run started; once its size is known (``n_tokens`` of ``info``'s model), what it will take."""
        sized = n_tokens is not None and info is not None
        self.run.setText(f"running {attention_line(n_tokens, info.n_layer, info.n_head)}…" if sized else "running…")

    def waiting(self, job) -> None:
        """A run waits for ``job`` (a gui.state.jobs.Job the new text does not end) to finish: say so, and how far it is."""
        done = f" ({100 * job.done // job.total} % done)" if job.total else ""
        self.run.setText(f"waiting for {job.label}{done} to finish before running the text…")

    def run_failed(self) -> None:
        self.run.setText("")

    def shown(self, bundle) -> None:
        """The result of ``bundle`` (an AnalysisBundle) is on screen: its tokens, their memory, its time."""
        r = bundle.result
        self.tokens.setText(attention_line(r.n_tokens, r.n_layer, r.n_head) + (" (truncated)" if r.truncated else ""))
        self.tokens.setToolTip(f"The attention of this run: {r.n_layer} layers × {r.n_head} heads × "
                               f"{r.n_tokens}² tokens × 4 bytes; a run analyses at most "
                               f"{r.max_tokens:,} tokens (Run → Token limit…)")
        self.run.setText(f"last run {time.strftime('%H:%M:%S')} in {bundle.seconds * 1000:.0f} ms")

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
