"""The one view-state object every view subscribes to (napari's ``Dims`` pattern).

The state holds what is on screen and how it is drawn: the analysis bundle being shown, the
selected layer/head and query row, the drawing options (colormap, scale, hide-first-token,
the Rollout tab's own *Hide first token, renormalise*, badge score, dark mode, which attention to draw: the weights or the value-weighted view, the sink
threshold ε, how the Head tab draws a head: a matrix or lines, and the more heads of the layer its Lines view
draws), the lenses of the bundle on screen as they arrive from the worker (value norms,
rollout; see gui/state/lens_data.py), and what the views say while there is nothing to draw (the
placeholder: "loading the model…"), and the *Chat format* switch of the runs (whether a text runs as one user turn of
the model's chat template, and why the loaded model cannot, when it has no template). Views take it in their
constructor, connect to the signals they care about and write user edits back through the setters; no view reads
another widget.

Setters validate their argument (``ValueError`` for a name that does not exist) and emit only
when the value really changes, so a view that writes back what it was just told causes no echo.
The drawing options and the chat switch are saved to and restored from ``QSettings`` (keys under ``view/``).

A lens answer is kept only when it belongs to the bundle on screen (its request id); a new bundle
clears them, so a late answer computed for an older result is dropped, never drawn.

A new bundle reaches the views that paint it (each registered with :meth:`ViewState.on_bundle`) either all at once
(``set_bundle``: tests, exports) or one view per turn of the event loop (``set_bundle(bundle, sliced=True)``, what the
window does), so that no turn paints more than one view and the window answers (a timer of 10 ms ticks at most
16 ms late; ``main.py bench``'s gui_stall_ms). ``bundle_changed`` is emitted at once either way (the state and its
cheap listeners); ``bundle_shown(request_id)`` once every view has the bundle. A newer bundle ends a delivery in
flight: its remaining slices are never run, so a stale slice cannot draw over a newer result.
"""
from __future__ import annotations

import time

from PySide6 import QtCore

from analysis.display import SCALES, head_name
from analysis.measures.head_scores import SCORE_NAMES
from analysis.measures.lenses import SINK_EPSILON

#: The colour maps every heatmap may use (pyqtgraph's names, saved in settings), and how the menus name them.
COLORMAPS = ("viridis", "inferno", "magma", "plasma", "cividis", "CET-L1", "CET-L4")  # ids, saved in settings
COLORMAP_LABELS = {"viridis": "viridis (blue → yellow)", "inferno": "inferno (black → yellow)",
                   "magma": "magma (black → pale pink)", "plasma": "plasma (blue → yellow)",
                   "cividis": "cividis (colour-blind safe)", "CET-L1": "grey (CET-L1)", "CET-L4": "red → yellow (CET-L4)"}
DEFAULT_COLORMAP = "viridis"
DEFAULT_SCALE = "linear"
#: What the grid and the head map draw: the attention weights A, or value-weighted attention
#: N = A·‖f_h(x_j)‖ shown row-normalised (Kobayashi et al. 2020; analysis/measures/lenses.py).
ATTENTION_VIEWS = ("weights", "value-weighted")
ATTENTION_VIEW_LABELS = {"weights": "attention weights A", "value-weighted": "value-weighted A·‖f(x)‖"}
#: How the Head tab draws the selected head: its matrix, or lines between two columns of tokens (bertviz's head
#: view, gui/plots/lines_plot.py; short texts only).
HEAD_DRAWINGS = ("matrix", "lines")
HEAD_DRAWING_LABELS = {"matrix": "Matrix", "lines": "Lines"}
#: Lenses computed on the worker for the bundle on screen (gui/state/lens_data.py); "thumbnails_hidden_first" is the
#: grid's thumbnails pooled past the first key, for a result whose maps are computed on demand.
LENS_KINDS = ("value_norms", "rollout", "thumbnails_hidden_first")


#: Milliseconds between two slices of a sliced bundle delivery (ViewState.set_bundle).
SLICE_GAP_MS = 1

#: TransformerLens' own defaults for ``detect_head`` (as (name, value) pairs: the state keeps them frozen)
TL_DEFAULTS = (("error_measure", "mul"), ("exclude_bos", False), ("exclude_current_token", False))


class ViewState(QtCore.QObject):
    bundle_changed = QtCore.Signal(object)  # the AnalysisBundle now shown (or None)
    bundle_shown = QtCore.Signal(int)  # every view (on_bundle) has the bundle of this request id (0: None)
    selection_changed = QtCore.Signal(int, int)  # layer, head
    query_row_changed = QtCore.Signal(object)  # int | None
    colormap_changed = QtCore.Signal(str)
    scale_changed = QtCore.Signal(str)
    hide_first_changed = QtCore.Signal(bool)
    rollout_skip_first_changed = QtCore.Signal(bool)
    badge_score_changed = QtCore.Signal(object)  # a name in SCORE_NAMES, or None
    dark_changed = QtCore.Signal(bool)
    attention_view_changed = QtCore.Signal(str)  # a name in ATTENTION_VIEWS
    head_drawing_changed = QtCore.Signal(str)  # a name in HEAD_DRAWINGS
    line_heads_changed = QtCore.Signal(object)  # tuple[int, ...]: the Lines view's more heads of the layer
    lens_changed = QtCore.Signal(str)  # a kind in LENS_KINDS: its value (or error) for the bundle on screen arrived
    sink_epsilon_changed = QtCore.Signal(float)
    tl_options_changed = QtCore.Signal(object)  # dict: TL's error_measure, exclude_bos, exclude_current_token
    placeholder_changed = QtCore.Signal(object)  # str | None: what views without a result show instead
    running_changed = QtCore.Signal(bool)  # a newer text is being analysed: the bundle on screen is the previous one
    running_note_changed = QtCore.Signal(str)  # what is running, in words for the views that show the previous result
    chat_changed = QtCore.Signal(bool)  # the Chat format switch, as the user set it
    chat_problem_changed = QtCore.Signal(object)  # str | None: why the loaded model has no chat format (None: it has)

    def __init__(self, settings: QtCore.QSettings | None = None, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self._settings = settings
        self._bundle = None
        self._layer = 0
        self._head = 0
        self._query_row: int | None = None
        self._colormap = DEFAULT_COLORMAP
        self._scale = DEFAULT_SCALE
        self._hide_first = False
        self._rollout_skip_first = False
        self._badge_score: str | None = None
        self._dark = False
        self._attention_view = ATTENTION_VIEWS[0]
        self._head_drawing = HEAD_DRAWINGS[0]
        self._line_heads: tuple[int, ...] = ()
        self._lenses: dict[str, object] = {}
        self._lens_errors: dict[str, str] = {}
        self._sink_epsilon = SINK_EPSILON
        self._tl_options = TL_DEFAULTS
        self._placeholder: str | None = None
        self._running = False
        self._running_note = ""
        self._chat = False
        self._chat_problem: str | None = None
        self._bundle_views: list = []  # (name, handler(bundle)) of the views that paint a new bundle (on_bundle)
        self._delivery = 0  # the bundle delivery in flight: a newer set_bundle makes its slices stale
        #: (view name, milliseconds) of each handler of the latest delivery, in order (``main.py bench`` reports
        #: the slowest: which view a stall comes from)
        self.slice_times: list[tuple[str, float]] = []
        if settings is not None:
            self.load_settings()

    # ----------------------------------------------------------------- read
    @property
    def bundle(self):
        return self._bundle

    @property
    def result(self):
        """The ``AttentionResult`` on screen, or None."""
        return None if self._bundle is None else self._bundle.result

    @property
    def scores(self):
        return None if self._bundle is None else self._bundle.scores

    @property
    def layer(self) -> int:
        return self._layer

    @property
    def head(self) -> int:
        return self._head

    @property
    def query_row(self) -> int | None:
        return self._query_row

    @property
    def colormap(self) -> str:
        return self._colormap

    @property
    def scale(self) -> str:
        return self._scale

    @property
    def hide_first(self) -> bool:
        return self._hide_first

    @property
    def rollout_skip_first(self) -> bool:
        """The Rollout tab's *Hide first token, renormalise*: it draws lenses.rollout_skip_first of R (the first
        input hidden, each row renormalised over the others), and a data export writes that rollout
        (``export --rollout-skip-first``). Its own setting, apart from :attr:`hide_first` (the head map's and the
        grid's): a sink can be hidden in the composed rollout while the heads still show it, and the rollout an
        export writes does not change with the head map's drawing."""
        return self._rollout_skip_first

    @property
    def badge_score(self) -> str | None:
        return self._badge_score

    @property
    def dark(self) -> bool:
        return self._dark

    @property
    def attention_view(self) -> str:
        return self._attention_view

    @property
    def head_drawing(self) -> str:
        """How the Head tab draws the selected head: "matrix" or "lines" (HEAD_DRAWINGS)."""
        return self._head_drawing

    @property
    def line_heads(self) -> tuple[int, ...]:
        """Head indices the Lines view draws besides the selected head, in the selected layer (sorted; the
        selected head may be among them, it is drawn once)."""
        return self._line_heads

    def lines_drawn(self) -> tuple[int, ...]:
        """The heads of the selected layer the Lines view draws: the selected head first, then :attr:`line_heads`."""
        return (self._head,) + tuple(h for h in self._line_heads if h != self._head)

    @property
    def sink_epsilon(self) -> float:
        """ε of the sink rate: a head is a sink head when its first-token score exceeds it (lenses.sink_rate);
        the Scores panel sets it, exports write the summary's sink rate at it."""
        return self._sink_epsilon

    @property
    def tl_options(self) -> dict:
        """TransformerLens' ``detect_head`` options of the TL-style scores (the Head scores tab sets them):
        ``error_measure`` ("mul" or "abs"), ``exclude_bos``, ``exclude_current_token``; a data export's
        scores_tl.csv is computed with them."""
        return dict(self._tl_options)

    @property
    def placeholder(self) -> str | None:
        """One line that views without a result show instead of empty axes ("loading the model…"), or None."""
        return self._placeholder

    @property
    def running(self) -> bool:
        """True while the newest text asked for is being analysed: what views show is the previous text's."""
        return self._running

    @property
    def running_note(self) -> str:
        """While :attr:`running`: one line a view marked stale shows ("The previous text's result: running the new
        text, 1,638 tokens…"); "" otherwise."""
        return self._running_note

    @property
    def chat(self) -> bool:
        """The *Chat format* switch as the user set it (remembered), whether or not the loaded model has a template."""
        return self._chat

    @property
    def chat_problem(self) -> str | None:
        """Why the loaded model cannot run a text in its chat format (one sentence: it has no chat template, or
        the template does not render), or None when it can (or no model was checked yet)."""
        return self._chat_problem

    @property
    def chat_used(self) -> bool:
        """Whether a run now goes in the chat format: the switch is on and the loaded model has a chat format."""
        return self._chat and self._chat_problem is None

    def lens(self, kind: str):
        """The lens ``kind`` of the bundle on screen, or None while it is not (yet) computed."""
        self._check_lens(kind)
        return self._lenses.get(kind)

    def lens_error(self, kind: str) -> str | None:
        """Why the lens ``kind`` of the bundle on screen could not be computed (one sentence), or None."""
        self._check_lens(kind)
        return self._lens_errors.get(kind)

    # ----------------------------------------------------------------- write
    def _change(self, name: str, value, signal) -> None:
        """Store ``value`` as ``self._<name>`` and emit ``signal`` with it, only when it really changes."""
        if value != getattr(self, "_" + name):
            setattr(self, "_" + name, value)
            signal.emit(value)

    def on_bundle(self, handler, name: str = "") -> None:
        """Call ``handler(bundle)`` with every new bundle (or None), after ``bundle_changed``: a view that paints it.
        In a sliced delivery each handler runs in its own turn of the event loop, in the order registered."""
        self._bundle_views.append((name or getattr(handler, "__qualname__", repr(handler)), handler))

    def set_bundle(self, bundle, sliced: bool = False) -> None:
        """Show a new analysis bundle: the selection is kept where it still exists, the query row is cleared.
        The views registered with :meth:`on_bundle` are told at once, or with ``sliced`` one per turn of the event
        loop (the module docstring); ``bundle_shown`` follows the last."""
        self._delivery += 1
        self._bundle = bundle
        self._lenses, self._lens_errors = {}, {}  # they belonged to the previous result
        if bundle is not None:
            r = bundle.result
            layer, head = min(self._layer, r.n_layer - 1), min(self._head, r.n_head - 1)
            if (layer, head) != (self._layer, self._head):
                self._layer, self._head = layer, head
                self.selection_changed.emit(layer, head)
            self._change("line_heads", tuple(h for h in self._line_heads if h < r.n_head), self.line_heads_changed)
        self.set_query_row(None)
        self.bundle_changed.emit(bundle)
        self.slice_times = []
        if not sliced:
            for index in range(len(self._bundle_views)):
                self._deliver(self._delivery, index)
            self.bundle_shown.emit(0 if bundle is None else bundle.request_id)
        else:
            self._next_slice(self._delivery, 0)

    def _next_slice(self, delivery: int, index: int) -> None:
        """Run slice ``index`` of ``delivery`` in the next turn of the event loop (each slice posts the next, so
        that a turn runs one: events posted during a pass wait for the next pass), or say the bundle is shown."""
        if index < len(self._bundle_views):
            # a 1 ms timer, not 0 (a posted call): the paint the last slice asked for and the other timers run before
            # the next slice, in their own turns, instead of in one pass with it
            QtCore.QTimer.singleShot(SLICE_GAP_MS, self, lambda: self._slice(delivery, index))
        else:
            self.bundle_shown.emit(0 if self._bundle is None else self._bundle.request_id)

    def _slice(self, delivery: int, index: int) -> None:
        if delivery != self._delivery:
            return  # a newer bundle arrived: it has its own delivery, from the first view
        self._deliver(delivery, index)
        self._next_slice(delivery, index + 1)

    def _deliver(self, delivery: int, index: int) -> None:
        name, handler = self._bundle_views[index]
        started = time.perf_counter()
        handler(self._bundle)
        if delivery == self._delivery:  # (the handler may have set a newer bundle: its delivery has its own times)
            self.slice_times.append((name, (time.perf_counter() - started) * 1000))

    def select(self, layer: int, head: int) -> None:
        """Select a head; ``ValueError`` if it is not in the result on screen."""
        layer, head = int(layer), int(head)
        r = self.result
        if r is not None and not (0 <= layer < r.n_layer and 0 <= head < r.n_head):
            raise ValueError(f"no head {head_name(layer, head)} in a {r.n_layer}×{r.n_head} model")
        if (layer, head) == (self._layer, self._head):
            return
        self._layer, self._head = layer, head
        self.selection_changed.emit(layer, head)

    def move_selection(self, d_layer: int, d_head: int) -> None:
        """Step the selection, stopping at the edges (arrow keys)."""
        r = self.result
        if r is None:
            return
        self.select(min(max(self._layer + d_layer, 0), r.n_layer - 1), min(max(self._head + d_head, 0), r.n_head - 1))

    def set_query_row(self, row: int | None) -> None:
        if row is not None:
            row = int(row)
            r = self.result
            if r is None or not 0 <= row < r.n_tokens:
                raise ValueError(f"no query row {row}")
        self._change("query_row", row, self.query_row_changed)

    def toggle_query_row(self, row: int) -> None:
        """Highlight ``row``, or clear the highlight if it is the row already highlighted."""
        self.set_query_row(None if row == self._query_row else row)

    def set_colormap(self, name: str) -> None:
        if name not in COLORMAPS:
            raise ValueError(f"unknown colormap {name!r}")
        self._change("colormap", name, self.colormap_changed)

    def set_scale(self, name: str) -> None:
        if name not in SCALES:
            raise ValueError(f"unknown scale {name!r}")
        self._change("scale", name, self.scale_changed)

    def set_hide_first(self, hide: bool) -> None:
        hide = bool(hide)
        self._change("hide_first", hide, self.hide_first_changed)

    def set_rollout_skip_first(self, skip: bool) -> None:
        self._change("rollout_skip_first", bool(skip), self.rollout_skip_first_changed)

    def set_badge_score(self, name: str | None) -> None:
        if name is not None and name not in SCORE_NAMES:
            raise ValueError(f"unknown score {name!r}")
        self._change("badge_score", name, self.badge_score_changed)

    def set_dark(self, dark: bool) -> None:
        dark = bool(dark)
        self._change("dark", dark, self.dark_changed)

    def set_attention_view(self, name: str) -> None:
        if name not in ATTENTION_VIEWS:
            raise ValueError(f"unknown attention view {name!r}")
        self._change("attention_view", name, self.attention_view_changed)

    def set_head_drawing(self, name: str) -> None:
        if name not in HEAD_DRAWINGS:
            raise ValueError(f"unknown head drawing {name!r}")
        self._change("head_drawing", name, self.head_drawing_changed)

    def set_line_heads(self, heads) -> None:
        """The heads (indices in the layer) the Lines view draws besides the selected one; ``ValueError`` for a head
        the result on screen does not have."""
        heads = tuple(sorted({int(h) for h in heads}))
        r = self.result
        bad = [h for h in heads if h < 0 or (r is not None and h >= r.n_head)]
        if bad:
            raise ValueError(f"no head {bad[0]} in a layer of {r.n_head if r is not None else '?'} heads")
        self._change("line_heads", heads, self.line_heads_changed)

    def toggle_line_head(self, head: int) -> None:
        """Draw head ``head`` of the layer in the Lines view too, or no longer."""
        heads = set(self._line_heads)
        heads.symmetric_difference_update({int(head)})
        self.set_line_heads(heads)

    def set_sink_epsilon(self, epsilon: float) -> None:
        epsilon = float(epsilon)
        if not 0.0 <= epsilon < 1.0:
            raise ValueError(f"the sink threshold ε must be in [0, 1) (got {epsilon})")
        self._change("sink_epsilon", epsilon, self.sink_epsilon_changed)

    def set_tl_options(self, error_measure: str = "mul", exclude_bos: bool = False,
                       exclude_current_token: bool = False) -> None:
        if error_measure not in ("mul", "abs"):
            raise ValueError(f"unknown error measure {error_measure!r}")
        options = (("error_measure", error_measure), ("exclude_bos", bool(exclude_bos)),
                   ("exclude_current_token", bool(exclude_current_token)))
        if options != self._tl_options:
            self._tl_options = options
            self.tl_options_changed.emit(dict(options))

    def set_placeholder(self, text: str | None) -> None:
        text = str(text) if text else None
        self._change("placeholder", text, self.placeholder_changed)

    def set_running(self, running: bool, note: str = "") -> None:
        """A newer text is being analysed, or a new model loaded, while the bundle on screen is the previous one
        (``note``: what is running, in words; kept only while running)."""
        self._change("running_note", str(note) if running else "", self.running_note_changed)
        self._change("running", bool(running), self.running_changed)

    def set_chat(self, chat: bool) -> None:
        self._change("chat", bool(chat), self.chat_changed)

    def set_chat_problem(self, problem: str | None) -> None:
        """What the worker found of the model just loaded (``Worker.chat_format_checked``)."""
        self._change("chat_problem", str(problem) if problem else None, self.chat_problem_changed)

    def set_lens(self, request_id: int, kind: str, value) -> bool:
        """Keep ``value`` as the lens ``kind`` of the result with ``request_id``; False (dropped) when that
        result is no longer on screen."""
        self._check_lens(kind)
        if self._bundle is None or request_id != self._bundle.request_id:
            return False
        self._lenses[kind] = value
        self._lens_errors.pop(kind, None)
        self.lens_changed.emit(kind)
        return True

    def set_lens_error(self, request_id: int, kind: str, message: str) -> bool:
        """Record why the lens ``kind`` of the result with ``request_id`` failed; False when it is stale."""
        self._check_lens(kind)
        if self._bundle is None or request_id != self._bundle.request_id:
            return False
        self._lens_errors[kind] = str(message)
        self.lens_changed.emit(kind)
        return True

    @staticmethod
    def _check_lens(kind: str) -> None:
        if kind not in LENS_KINDS:
            raise ValueError(f"unknown lens {kind!r}")

    # ----------------------------------------------------------------- settings
    def load_settings(self) -> None:
        """Restore the drawing options; a stored value that is no longer valid is ignored."""
        s = self._settings
        if s is None:
            return
        for key, setter in (("view/colormap", self.set_colormap), ("view/scale", self.set_scale),
                            ("view/badge_score", self.set_badge_score),
                            ("view/attention_view", self.set_attention_view),
                            ("view/head_drawing", self.set_head_drawing)):
            value = s.value(key)
            if value not in (None, ""):
                try:
                    setter(str(value))
                except ValueError:
                    pass
        self.set_hide_first(str(s.value("view/hide_first", "false")).lower() == "true")
        self.set_rollout_skip_first(str(s.value("view/rollout_skip_first", "false")).lower() == "true")
        self.set_chat(str(s.value("view/chat", "false")).lower() == "true")
        try:
            self.set_sink_epsilon(float(s.value("view/sink_epsilon", SINK_EPSILON)))
        except (TypeError, ValueError):
            pass

    def save_settings(self) -> None:
        s = self._settings
        if s is None:
            return
        s.setValue("view/colormap", self._colormap)
        s.setValue("view/scale", self._scale)
        s.setValue("view/badge_score", self._badge_score or "")
        s.setValue("view/hide_first", "true" if self._hide_first else "false")
        s.setValue("view/rollout_skip_first", "true" if self._rollout_skip_first else "false")
        s.setValue("view/chat", "true" if self._chat else "false")
        s.setValue("view/attention_view", self._attention_view)
        s.setValue("view/head_drawing", self._head_drawing)
        s.setValue("view/sink_epsilon", self._sink_epsilon)
