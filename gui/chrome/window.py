"""AttnScope's main window: assembly only. It builds the model bar, the text input, the grid and the
tabs, lays them out (gui/chrome/window_layout.py), adds the menus (gui/chrome/menus.py) and the status bar
(gui/chrome/status.py), sets the Tab order (gui/chrome/focus_order.py), starts the search for GGUF files once it
shows (gui/chrome/model_files.py), and wires the worker to the one view state
(gui/state/view_state.py); every view draws from the state and writes user edits back to it.

A text's way to the screen: TextInput.run_requested → MainWindow._analyse (with the view state's chat_used) →
Worker.analyse (worker thread: analysis.run.inference.run_text + every head score) → Worker.analysis_ready →
MainWindow._analysis_ready (drops an answer to an older request) → ViewState.set_bundle(sliced) → each view's
subscriber paints (token strip, grid, head map, score table, from-scratch), one per turn of the event loop →
ViewState.bundle_shown → MainWindow.result_shown. Exports: File → Export… → gui/export/exporting.py.

Layout: the model bar (a toolbar); then a vertical splitter: above it the input area (the notes, the
text box, the predictions and the token strip), below it the grid beside the tabs.
Tab visits model bar → text → run row → token strip → grid → tabs → the tab's contents → the notes'
buttons (top to bottom, each left to right) → back.
"""
from __future__ import annotations

from pathlib import Path

import shiboken6
from PySide6 import QtCore, QtWidgets

from analysis.errors import HubUnreachableError, PickleWeightsError
from analysis.model.catalogue import BUNDLED

from ..export.exporting import Exporter
from ..export.figure_dialog import open_figure_dialog
from ..input.model_bar import ModelBar, hub_cached
from ..input.notes import NoteBar, is_dark
from ..input.text_input import TextInput
from ..input.token_limit import TokenLimit
from ..plots.grid_panel import GridPanel
from ..state.jobs import running_jobs
from .stale_marks import StaleMarks
from ..state.view_state import ViewState
from ..state.worker import Failure, RequestKind, Worker
from ..tabs.ablation.ablation_tab import AblationTab
from ..tabs.circuits.circuits_tab import CircuitsTab
from ..tabs.head.head_tab import HeadTab
from ..tabs.rollout.rollout_tab import RolloutTab
from ..tabs.scores.scores_tab import ScoresTab
from ..tabs.scratch.scratch_tab import ScratchTab
from .focus_order import set_tab_order, wrap_focus
from .menus import build_menus
from .model_files import OPEN_FOLDER_TITLE, ModelFiles
from .status import StatusLine
from .window_layout import MainArea

#: The tabs on the right, in order (the protocol is in gui/tabs/protocol.py): a new tab is one line here.
TABS = (HeadTab, ScoresTab, ScratchTab, RolloutTab, AblationTab, CircuitsTab)
LOADING_NOTE = "loading the model…"
RUN_NOTE = "The previous text's result — running the new text"  # over the views while a newer text runs


def analysed_as_now(result, applies: int) -> bool:
    """Whether ``result`` (an AttentionResult) is what a run under a limit of ``applies`` tokens would give:
    all its ``n_tokens`` fit in ``applies``, and, when the text was cut, it was cut at that same limit
    (``result.max_tokens``: the limit it ran under, the model's context or the cap, whichever was smaller)."""
    return result.n_tokens <= applies and (not result.truncated or result.max_tokens == applies)


def freeze_collected_objects() -> None:
    """Collect once, then leave every object alive now out of later collections (``gc.freeze``): the app's
    collector runs on the GUI thread (gui/qt.py), and with torch and a model loaded a full collection walks
    hundreds of thousands of objects — a stall of 0.1–0.3 s while a run is in flight, against the 16 ms a turn of
    the event loop may take. What a run creates is still collected. Called after each model load (the objects of the
    model before are unfrozen first, so that their cycles are collected)."""
    import gc

    gc.unfreeze()
    gc.collect()
    gc.freeze()


class MainWindow(QtWidgets.QMainWindow):
    """The app. ``settings`` may be given (tests and --screenshot pass a private INI file)."""

    result_shown = QtCore.Signal(int)  # request id of the result now on screen
    model_ready = QtCore.Signal(object)  # ModelInfo
    error_shown = QtCore.Signal(str)

    def __init__(self, settings: QtCore.QSettings | None = None, worker: Worker | None = None):
        super().__init__()
        self.setWindowTitle("AttnScope")
        self.settings = settings or QtCore.QSettings()
        self.worker = worker or Worker()
        self.state = ViewState(self.settings, self)
        self.model_info = None
        self.loading_source: str | None = None
        self.latest_analyse_id = self.latest_load_id = 0
        self.closed = self._shown = False
        self._waiting_for = None  # the Job the newest analysis waits behind (the status bar follows its progress)
        self._sized = None  # (tokens, RunPlan) of the newest analysis once the worker tokenised it

        self.model_bar = ModelBar(self.settings)
        self.addToolBar(self.model_bar)
        self.model_files = ModelFiles(self)  # the GGUF files on this computer: scanned once the window shows
        self.note, self.error = NoteBar(one_line=True), NoteBar()
        self.cap_note = NoteBar(one_line=True)  # the result shown was analysed under another token limit
        self.text_input = TextInput(self.state, self.settings)
        self.grid_panel = GridPanel(self.state)
        self.tabs = QtWidgets.QTabWidget()
        self.tabs.setDocumentMode(True)
        for tab_class in TABS:
            tab = tab_class(self.state, self.worker)
            self.tabs.addTab(tab, tab.title)
            if hasattr(tab, "head_activated"):
                tab.head_activated.connect(self.open_head)
        self.head_tab = self.tab(HeadTab)
        self.grid_panel.plot.head_activated.connect(self.open_head)
        # while a newer text runs or a new model loads, what these show is the previous result: said over each
        self.stale_marks = StaleMarks(self.state, [self.text_input.token_strip, self.grid_panel, self.tabs],
                                      dimmed=[self.grid_panel.plot, self.tab(ScoresTab).map, self.tab(AblationTab).map],
                                      greyed=[self.text_input.predictions])
        self.area = MainArea([self.note, self.error, self.cap_note, self.text_input], self.grid_panel, self.tabs,
                             self.settings)
        self.input_area, self.splitter, self.vsplitter = self.area.input_area, self.area.splitter, self.area.vsplitter
        self.setCentralWidget(self.area)
        self.status = StatusLine(self)
        self.status_model, self.status_tokens, self.status_run = self.status.model, self.status.tokens, self.status.run
        self.exporter = Exporter(self.state, self.worker, self.settings, self)
        self.exporter.finished.connect(self.status.exported)
        self.exporter.warned.connect(self.status.export_warning)
        self.exporter.failed.connect(self.show_error)
        self.exporter.copied.connect(self.status.copied)
        actions = build_menus(self)
        self.head_tab.figure_asked.connect(lambda: open_figure_dialog(self))
        self.download_action, self.max_tokens_action = actions.download, actions.token_limit
        self.token_limit = TokenLimit(self.settings, self.max_tokens_action, self)
        self.model_ready.connect(self.token_limit.set_context)
        self.token_limit.changed.connect(self._token_limit_changed)
        self._connect()
        self.area.restore(self, self.settings)
        bar = self.model_bar
        set_tab_order([bar.model_choice, bar.device_choice, bar.dtype_choice, bar.load_button, bar.cancel_button]
                      + self.text_input.focus_order() + [self.grid_panel.plot, self.grid_panel.badge_choice], self.tabs)
        self.state.set_dark(is_dark())
        self.text_input.setFocus()

    def _connect(self) -> None:
        w, bar = self.worker, self.model_bar
        w.devices_found.connect(bar.set_devices)
        w.load_started.connect(self._load_started)
        w.analysis_sized.connect(self._analysis_sized)
        w.analysis_progress.connect(self._analysis_progress)
        w.forward_progress.connect(self._forward_progress)
        w.load_progress.connect(bar.show_progress)
        w.chat_format_checked.connect(self._chat_format_checked)
        w.model_loaded.connect(self._model_loaded)
        w.analysis_started.connect(self._analysis_started)
        w.analysis_ready.connect(self._analysis_ready)
        w.failed.connect(self._failed)
        w.tasks_stopped.connect(self._tasks_stopped)
        self.state.bundle_shown.connect(self._bundle_shown)
        bar.load_requested.connect(self.load_model)
        bar.open_folder_requested.connect(self.open_folder)
        bar.cancel_requested.connect(w.cancel_load)
        self.text_input.run_requested.connect(lambda text, bos, _explicit: self._analyse(text, bos))
        self.text_input.head_requested.connect(self.open_head)

    def tab(self, tab_class: type) -> QtWidgets.QWidget:
        """The tab of class ``tab_class``."""
        return next(self.tabs.widget(i) for i in range(self.tabs.count()) if type(self.tabs.widget(i)) is tab_class)

    @property
    def input_extra(self) -> int:
        """Pixels the user gave the input area beyond its compact height (window_layout.MainArea)."""
        return self.area.input_extra

    def save_settings(self) -> None:
        s = self.settings
        self.area.save(self, s)
        s.setValue("model/device", self.model_bar.device())
        if self.model_info is not None:
            s.setValue("model/last", self.model_bar.loaded_source)
        self.state.save_settings()
        self.text_input.save_last()
        s.sync()

    # ================================================================= Qt events
    def showEvent(self, event):  # noqa: N802
        super().showEvent(event)
        if not self._shown:  # the first time: the GGUF scan starts after the window is on screen, on its own thread
            self._shown = True
            QtCore.QTimer.singleShot(0, self, self.model_files.scan)

    def resizeEvent(self, event):  # noqa: N802
        super().resizeEvent(event)
        self.area.fit_input_area()

    def focusNextPrevChild(self, next_: bool) -> bool:  # noqa: N802
        """Tab past the last widget wraps to the first in the focus chain: the model bar (focus_order.wrap_focus)."""
        return wrap_focus(self, next_) or super().focusNextPrevChild(next_)

    def changeEvent(self, event):  # noqa: N802
        if event.type() in (QtCore.QEvent.Type.PaletteChange, QtCore.QEvent.Type.ApplicationPaletteChange):
            self.state.set_dark(is_dark())
        super().changeEvent(event)

    # ================================================================= model
    def open_folder(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, OPEN_FOLDER_TITLE)
        if folder:
            self.load_model(folder)

    def load_model(self, source: str, allow_pickle: bool = False) -> int:
        self.error.hide()
        self.loading_source = source
        self.status.loading(source)
        if self.state.bundle is None:
            self.state.set_placeholder(LOADING_NOTE)
        else:
            shown = self.model_info.label if self.model_info is not None else "the previous model"
            self.state.set_running(True, f"{shown}'s result — loading {Path(source).name or source}…")
        self.latest_load_id = self.worker.load(source, self.model_bar.device(), self.model_bar.dtype(), allow_pickle)
        return self.latest_load_id

    def _load_started(self, request_id: int, source: str) -> None:
        self.model_bar.loading(source)
        if request_id == self.latest_load_id:
            self.status.loading(source)

    def _chat_format_checked(self, request_id: int, problem) -> None:
        """Whether the model now loading has a chat format (sent just before its model_loaded, which runs the text)."""
        if not self.closed and request_id == self.latest_load_id:
            self.state.set_chat_problem(problem)

    def _model_loaded(self, request_id: int, info) -> None:
        if self.closed or request_id != self.latest_load_id:
            return
        self.error.hide()
        if self.note.about is not None and self.note.about != (self.loading_source or info.label):
            self.note.hide()  # it described another model (the bundled one's note after a switch to minilm)
        self.model_info = info
        freeze_collected_objects()
        if self.state.bundle is None:
            self.state.set_placeholder("Type a text to see its attention" if not self.text_input.text().strip()
                                       else "running the text…")
        self.model_bar.loaded(self.loading_source or info.label)
        self.download_action.setVisible(not hub_cached("gpt2"))
        self.text_input.set_bos(info.prepend_bos_default)
        self.status.model_loaded(info)
        self.setWindowTitle(f"AttnScope — {info.label}")
        self.model_ready.emit(info)
        if self.text_input.text().strip():
            self.text_input.run(explicit=False)
        else:  # an analysis the load interrupted: no newer one follows
            self.state.set_running(False)

    # ================================================================= running
    def set_text(self, text: str, run: bool = False) -> None:
        self.text_input.set_text(text, run=run)

    def run_text(self) -> int | None:
        """Run the text in the box (an explicit run); returns the request id, or None when nothing was sent."""
        before = self.latest_analyse_id
        self.text_input.run(explicit=True)  # → run_requested → _analyse, at once
        return self.latest_analyse_id if self.latest_analyse_id != before else None

    def max_tokens(self) -> int:
        """The token cap of a run (Run → Token limit…; gui/input/token_limit.py)."""
        return self.token_limit.value()

    def set_max_tokens(self, value: int) -> None:
        self.token_limit.set(value)

    def ask_max_tokens(self) -> None:
        self.token_limit.ask(self)

    def _token_limit_changed(self) -> None:
        """A new cap and a result on screen it would change: run the text again as Auto would (Auto on),
        else say on screen that the result was analysed under the old cap."""
        bundle = self.state.bundle
        changes = bundle is not None and not analysed_as_now(bundle.result, self.token_limit.applies())
        if changes and self.text_input.auto_box.isChecked() and self.text_input.run(explicit=False):
            return  # the new result will say
        self._show_cap_note()

    def _show_cap_note(self) -> None:
        """The cap note, shown while the result on screen was analysed under another limit than today's."""
        bundle, applies = self.state.bundle, self.token_limit.applies()
        if bundle is None or analysed_as_now(bundle.result, applies):
            self.cap_note.hide()
            return
        r = bundle.result
        self.cap_note.show_note(
            f"This result was analysed under the old token limit of {r.max_tokens:,} tokens; the limit is now "
            f"{applies:,}. Run the text again (F5) to apply it.", "info",
            [("Run again", lambda: self.text_input.run(explicit=True))])

    def _analyse(self, text: str, bos: bool) -> None:
        if self.model_info is None:
            return  # runs when the model arrives
        self.latest_analyse_id = self.worker.analyse(text, bos, self.max_tokens(), chat=self.state.chat_used)
        self._sized = None
        waiting = running_jobs(self.worker)  # long jobs a new text does not end: it runs after them
        self._wait_for(waiting[0] if waiting else None)
        if not waiting:
            self.status.running()
        if self.state.bundle is None:  # nothing shown yet: the empty views say what is coming, not "type a text"
            self.state.set_placeholder("running the text…")
        # from the request on, not from the worker's start: what is on screen is the previous text's while it queues
        self.state.set_running(True, f"The previous text's result — the new text waits for {waiting[0].label}…"
                               if waiting else f"{RUN_NOTE}…")

    def _wait_for(self, job) -> None:
        """While the newest run waits for ``job`` (None: for nothing), the status bar says so and follows its progress."""
        if self._waiting_for is not None and shiboken6.isValid(self._waiting_for):  # a closed dialog's job is gone
            self._waiting_for.progressed.disconnect(self._show_waiting)
        self._waiting_for = job
        if job is not None:
            job.progressed.connect(self._show_waiting)
            self._show_waiting()

    def _show_waiting(self, *_progress) -> None:
        if self._waiting_for is not None and not self.closed:
            self.status.waiting(self._waiting_for)

    def _tasks_stopped(self, labels: list, kind) -> None:
        if self.closed:
            return
        self.status.stopped(labels, "a new model is loading" if kind is RequestKind.LOAD else "a new text is running")
        if self._waiting_for is not None and (not shiboken6.isValid(self._waiting_for) or self._waiting_for.stopping):
            self._wait_for(None)  # the job a text waited for is stopped: it no longer waits for it
            self.status.running()

    def _analysis_sized(self, request_id: int, n_tokens: int, plan) -> None:
        if request_id == self.latest_analyse_id and self.model_info is not None:
            self._sized = (n_tokens, plan)
            self.status.running(n_tokens, plan)
            if self.state.bundle is None:
                self.state.set_placeholder(f"running the text ({n_tokens:,} tokens)…")
            if self.state.running:
                self.state.set_running(True, f"{RUN_NOTE} ({n_tokens:,} tokens)…")

    def _forward_progress(self, request_id: int, done: int, total: int) -> None:
        if request_id == self.latest_analyse_id and self._sized is not None and not self.closed:
            self.status.progress(*self._sized, "forward", done, total)

    def _analysis_progress(self, request_id: int, done: int, total: int) -> None:
        if request_id == self.latest_analyse_id and self._sized is not None and not self.closed:
            self.status.streaming(*self._sized, done, total)

    def _analysis_started(self, request_id: int) -> None:
        if request_id == self.latest_analyse_id:  # superseded requests are skipped by the worker anyway
            self._wait_for(None)
            self.status.running()
            self.state.set_running(True, f"{RUN_NOTE}…")

    def _analysis_ready(self, bundle) -> None:
        if self.closed or bundle.request_id != self.latest_analyse_id:
            return  # closed, or stale: a newer request was made since
        self.state.set_running(False)
        self.error.hide()
        self.state.set_placeholder(None)
        self.status.shown(bundle)
        self.state.set_bundle(bundle, sliced=True)  # one view per turn of the event loop: the window never stalls
        self._show_cap_note()

    def _bundle_shown(self, request_id: int) -> None:
        """Every view has the bundle of ``request_id`` (ViewState.bundle_shown): the result is on screen."""
        if request_id and not self.closed and request_id == self.latest_analyse_id:
            self.result_shown.emit(request_id)

    def _failed(self, failure: Failure) -> None:
        if self.closed:
            return
        if failure.kind is RequestKind.LOAD and failure.request_id == self.latest_load_id:
            self.model_bar.load_failed()
            self.state.set_running(False)  # the result on screen is the newest again
            actions, message, source = [], failure.message, self.loading_source
            if isinstance(failure.error, PickleWeightsError) and source:
                actions.append(("Load anyway (I trust it)", lambda: self.load_model(source, allow_pickle=True)))
            if isinstance(failure.error, HubUnreachableError) and source:
                actions.append(("Retry", lambda: self.load_model(source)))
            self.status.still_using(self.model_info)
            if self.model_info is not None:
                message += f" Still using {self.model_info.label}."
            else:
                if self.state.bundle is None:
                    self.state.set_placeholder("no model loaded")
                if source != BUNDLED:
                    actions.append(("Open the bundled model", lambda: self.load_model(BUNDLED)))
            self.show_error(f"Could not load the model: {message}", actions)
        elif failure.kind is RequestKind.ANALYSE and failure.request_id == self.latest_analyse_id:
            self._wait_for(None)
            self.state.set_running(False)
            self.status.run_failed()
            if self.state.bundle is None:
                self.state.set_placeholder("the text could not be analysed (see the message above)")
            self.show_error(failure.message)

    def show_error(self, message: str, actions=()) -> None:
        self.error.show_note(message, "error", list(actions))
        self.error_shown.emit(message)

    # ================================================================= selection and copy
    @property
    def bundle(self):
        return self.state.bundle

    def select_head(self, layer: int, head: int) -> None:
        self.state.select(layer, head)

    def open_head(self, layer: int, head: int) -> None:
        """Select a head and show it in the Head tab (a tab's ``head_activated``)."""
        self.state.select(layer, head)
        self.tabs.setCurrentWidget(self.head_tab)

    def copy_figure(self) -> None:
        """Copy the clean export figure of the view in front: the grid when it has the focus, else the tab."""
        tab = self.tabs.currentWidget()
        self.exporter.copy_figure(self.grid_panel if self.grid_panel.plot.hasFocus() else tab, self.grid_panel)

    # ================================================================= closing
    def closeEvent(self, event):  # noqa: N802
        self.closed = self.exporter.closed = True
        self.model_files.stop()
        self.save_settings()
        self.text_input.auto_timer.stop()
        # the run in flight is interrupted at its next module call; the close itself never waits for it (the
        # app waits for the thread before Qt and Python go away: gui/app.close_down)
        self.worker.stop(timeout=0.1)
        super().closeEvent(event)
