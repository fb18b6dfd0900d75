"""AttnScope's main window: assembly only. It builds the menus, the model bar, the text input, the grid
and the tabs, and wires the worker to the one view state (gui/view_state.py); every view draws from
the state and writes user edits back to it.

A text's way to the screen: TextInput.run_requested → MainWindow.run_text → Worker.analyse (worker
thread: run_text + every head score) → Worker.analysis_ready → MainWindow._analysis_ready (drops an
answer to an older request) → ViewState.set_bundle → each view's subscriber paints (token strip,
grid, head map, score table, from-scratch). Exports: File → Export… → gui/exporting.py.

Layout: the model bar (a toolbar); then a vertical splitter: above it the input area (the notes, the
text box, the predictions and the token strip: compact, so the plots get the height on a laptop),
below it the grid beside the tabs. The input area keeps its compact height as notes come and go;
room the user gives it by dragging the splitter is kept, and remembered (``window/input_extra``).
Tab visits model bar → text → run row → token strip → grid → tabs → the tab's contents → notes → back.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from analysis.errors import HubUnreachableError, PickleWeightsError
from analysis.inference import DEFAULT_MAX_TOKENS, attention_memory_bytes
from analysis.loading import BUNDLED

from .ablation_tab import AblationPanel
from .exporting import Exporter
from .grid_panel import GridPanel
from .head_panel import HeadPanel
from .model_bar import BUNDLED_DESCRIPTION, ModelBar, hub_cached
from .notes import NoteBar, is_dark
from .rollout_tab import RolloutTab
from .scores_view import ScoresPanel
from .scratch import ScratchPanel
from .text_input import TextInput
from .view_state import ViewState
from .worker import Failure, RequestKind, Worker

#: The tabs on the right, in order (the protocol is in gui/tabs.py): a new tab is one line here.
TABS = (HeadPanel, ScoresPanel, ScratchPanel, RolloutTab, AblationPanel)
MIN_SIZE = (1000, 680)
FRAME_ROOM = (8, 40)  # pixels a title bar and borders may take around the window
LOADING_NOTE = "loading the model…"
MAX_TOKENS_LIMIT = 1_000_000  # the most the Token limit dialog accepts (the model's context caps it anyway)


def format_bytes(n: int) -> str:
    """``n`` bytes for people: 604 MB, 1.2 GB, 96 kB."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def attention_line(n_tokens: int, n_layer: int, n_head: int) -> str:
    """"38 tokens · attention 0.22 MB": the tokens and what their attention takes (every layer's and head's
    float32 (n, n) map, inference.attention_memory_bytes)."""
    return f"{n_tokens:,} tokens · attention {format_bytes(attention_memory_bytes(n_layer, n_head, n_tokens))}"


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
        self.closed = False

        self.model_bar = ModelBar(self.settings)
        self.addToolBar(self.model_bar)
        self.note, self.error = NoteBar(one_line=True), NoteBar()
        self.text_input = TextInput(self.state, self.settings)
        self.grid_panel = GridPanel(self.state)
        self.tabs = QtWidgets.QTabWidget()
        self.tabs.setDocumentMode(True)
        for tab_class in TABS:
            tab = tab_class(self.state, self.worker)
            self.tabs.addTab(tab, tab.title)
            if hasattr(tab, "head_activated"):
                tab.head_activated.connect(self.open_head)
        self.head_panel = self.tab(HeadPanel)
        self.grid_panel.plot.head_activated.connect(self.open_head)
        self.splitter = QtWidgets.QSplitter()
        self.splitter.addWidget(self.grid_panel)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setChildrenCollapsible(False)
        self.input_area = QtWidgets.QWidget()
        top = QtWidgets.QVBoxLayout(self.input_area)
        top.setContentsMargins(0, 0, 0, 0)
        top.setSpacing(3)
        for widget in (self.note, self.error, self.text_input):
            top.addWidget(widget)
        try:  # pixels the user gave the input area beyond its compact height (a bad stored value: none)
            self.input_extra = max(0, int(self.settings.value("window/input_extra", 0) or 0))
        except (TypeError, ValueError):
            self.input_extra = 0
        self.vsplitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        self.vsplitter.addWidget(self.input_area)
        self.vsplitter.addWidget(self.splitter)
        self.vsplitter.setStretchFactor(0, 0)
        self.vsplitter.setStretchFactor(1, 1)
        self.vsplitter.setChildrenCollapsible(False)
        self.vsplitter.handle(1).setToolTip("Drag to give the text box more room, or the plots")
        self.vsplitter.splitterMoved.connect(self._input_area_moved)
        self.input_area.installEventFilter(self)
        central = QtWidgets.QWidget()
        outer = QtWidgets.QVBoxLayout(central)
        outer.setContentsMargins(6, 4, 6, 2)
        outer.setSpacing(0)
        outer.addWidget(self.vsplitter, 1)
        self.setCentralWidget(central)
        self.status_model, self.status_tokens, self.status_run = QtWidgets.QLabel("no model"), QtWidgets.QLabel(), QtWidgets.QLabel()
        for widget in (self.status_model, self.status_tokens, self.status_run):
            self.statusBar().addPermanentWidget(widget)
        self.exporter = Exporter(self.state, self.worker, self.settings, self)
        self.exporter.finished.connect(lambda paths: self.statusBar().showMessage(
            f"Exported {len(paths)} file(s) to {os.path.commonpath([Path(p).parent for p in paths])}", 8000))
        self.exporter.failed.connect(self.show_error)
        self.exporter.copied.connect(lambda: self.statusBar().showMessage("Figure copied to the clipboard", 4000))
        self._build_menus()
        self._connect()
        self._restore_settings()
        self._set_tab_order()
        self.state.set_dark(is_dark())
        self.text_input.setFocus()

    # ================================================================= building
    def _build_menus(self) -> None:
        from . import help as help_dialogs
        from .downloads import download_gpt2

        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self._action(file_menu, "Open model folder…", QtGui.QKeySequence.StandardKey.Open, self.open_folder)
        self.download_action = self._action(file_menu, "Download GPT-2 (550 MB)…", None, lambda: download_gpt2(self))
        file_menu.addSeparator()
        self._action(file_menu, "Export…", "Ctrl+E", self.exporter.open_dialog)
        self._action(file_menu, "Copy figure", "Ctrl+Shift+C", self.copy_figure)
        file_menu.addSeparator()
        self._action(file_menu, "Quit", QtGui.QKeySequence.StandardKey.Quit, self.close)
        run_menu = bar.addMenu("&Run")
        self._action(run_menu, "Run text", "Ctrl+Return", self.text_input.run)
        self._action(run_menu, "Run text (keypad)", "Ctrl+Enter", self.text_input.run).setVisible(False)
        self._action(run_menu, "Run again", "F5", self.text_input.run)
        self._action(run_menu, "Go to the text box", "Ctrl+L", self.text_input.setFocus)
        self.max_tokens_action = self._action(run_menu, "Token limit…", None, self.ask_max_tokens)
        self._show_max_tokens()
        self._action(run_menu, "Scores over many texts…", None,
                     lambda: self.tabs.setCurrentWidget(self.tab(ScoresPanel)) or self.tab(ScoresPanel).open_scan_dialog())
        view_menu = bar.addMenu("&View")
        for text, keys, step in (("Next head", "Alt+Right", (0, 1)), ("Previous head", "Alt+Left", (0, -1)),
                                 ("Next layer", "Alt+Down", (1, 0)), ("Previous layer", "Alt+Up", (-1, 0))):
            self._action(view_menu, text, keys, lambda s=step: self.state.move_selection(*s))
        view_menu.addSeparator()
        for index in range(self.tabs.count()):
            self._action(view_menu, self.tabs.tabText(index), f"Ctrl+{index + 1}",
                         lambda w=self.tabs.widget(index): self.tabs.setCurrentWidget(w))
        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "Keyboard shortcuts", "F1", lambda: help_dialogs.keyboard_dialog(self).exec())
        self._action(help_menu, "About AttnScope and the bundled model", None,
                     lambda: help_dialogs.model_card_dialog(self).exec())
        help_dialogs.with_shortcut_tooltips(bar)

    def _action(self, menu, text, shortcut, slot) -> QtGui.QAction:
        action = menu.addAction(text)
        if shortcut:
            action.setShortcut(QtGui.QKeySequence(shortcut))
        action.triggered.connect(lambda _=False: slot())
        return action

    def _connect(self) -> None:
        w, bar = self.worker, self.model_bar
        w.devices_found.connect(bar.set_devices)
        w.load_started.connect(self._load_started)
        w.analysis_sized.connect(self._analysis_sized)
        w.load_progress.connect(bar.show_progress)
        w.model_loaded.connect(self._model_loaded)
        w.analysis_started.connect(lambda rid: rid == self.latest_analyse_id and self.status_run.setText("running…"))
        w.analysis_ready.connect(self._analysis_ready)
        w.failed.connect(self._failed)
        bar.load_requested.connect(self.load_model)
        bar.open_folder_requested.connect(self.open_folder)
        bar.cancel_requested.connect(w.cancel_load)
        self.text_input.run_requested.connect(lambda text, bos, _explicit: self._analyse(text, bos))
        self.text_input.head_requested.connect(self.open_head)

    def tab(self, tab_class: type) -> QtWidgets.QWidget:
        """The tab of class ``tab_class``."""
        return next(self.tabs.widget(i) for i in range(self.tabs.count()) if type(self.tabs.widget(i)) is tab_class)

    # ================================================================= settings and geometry
    def _restore_settings(self) -> None:
        s = self.settings
        self.setMinimumSize(*MIN_SIZE)
        available = (self.screen() or QtGui.QGuiApplication.primaryScreen()).availableGeometry()
        room = available.adjusted(0, 0, -FRAME_ROOM[0], -FRAME_ROOM[1])  # the window manager's frame needs room too
        if s.value("window/geometry") is None or not self.restoreGeometry(s.value("window/geometry")):
            self.resize(min(1400, room.width()), min(900, room.height()))
            self.splitter.setSizes([2 * self.width() // 5, 3 * self.width() // 5])
        if self.width() > room.width() or self.height() > room.height():
            self.resize(min(self.width(), room.width()), min(self.height(), room.height()))
        if s.value("window/splitter") is not None:
            self.splitter.restoreState(s.value("window/splitter"))
        self._fit_input_area()

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/splitter", self.splitter.saveState())
        s.setValue("window/input_extra", self.input_extra)
        s.setValue("model/device", self.model_bar.device())
        if self.model_info is not None:
            s.setValue("model/last", self.model_bar.loaded_source)
        self.state.save_settings()
        s.sync()

    # ================================================================= the input area and the focus order
    def _fit_input_area(self) -> None:
        """Give the input area its compact height plus the room the user dragged it to; the views the rest."""
        sizes = self.vsplitter.sizes()
        total = sum(sizes)
        if total <= 0:
            return
        want = min(self.input_area.minimumSizeHint().height() + self.input_extra, total - 200)
        if sizes[0] != want:
            self.vsplitter.setSizes([want, total - want])

    def _input_area_moved(self, _pos: int, _index: int) -> None:
        self.input_extra = max(0, self.vsplitter.sizes()[0] - self.input_area.minimumSizeHint().height())

    def eventFilter(self, watched, event):  # noqa: N802
        if watched is self.input_area and event.type() == QtCore.QEvent.Type.LayoutRequest:
            QtCore.QTimer.singleShot(0, self, self._fit_input_area)  # a note came or went: keep the plots' room
        return super().eventFilter(watched, event)

    def resizeEvent(self, event):  # noqa: N802
        super().resizeEvent(event)
        self._fit_input_area()

    def focus_order(self) -> list[QtWidgets.QWidget]:
        """The widgets Tab visits, in order, before the tabs' own contents."""
        bar = self.model_bar
        return ([bar.model_choice, bar.device_choice, bar.dtype_choice, bar.load_button, bar.cancel_button]
                + self.text_input.focus_order() + [self.grid_panel.plot, self.grid_panel.badge_choice,
                                                   self.tabs.tabBar()])

    def _set_tab_order(self) -> None:
        """Tab follows the layout: model bar → text → run row → token strip → grid → tab bar → the tab's
        contents (each tab keeps its own order) → back to the model bar."""
        order = self.focus_order()
        for first, second in zip(order, order[1:]):
            QtWidgets.QWidget.setTabOrder(first, second)
        last = self.tabs.tabBar()
        for index in range(self.tabs.count()):  # every tab's widgets follow the tab bar, in tab order
            page = self.tabs.widget(index)
            chain = [w for w in page.findChildren(QtWidgets.QWidget)
                     if w.focusPolicy() & QtCore.Qt.FocusPolicy.TabFocus and not w.isWindow()
                     and w.window() is page.window()]  # not a combo box's popup
            if page.focusPolicy() & QtCore.Qt.FocusPolicy.TabFocus:
                chain.insert(0, page)
            for widget in self._chain_order(page, chain):
                QtWidgets.QWidget.setTabOrder(last, widget)
                last = widget

    def focusNextPrevChild(self, next_: bool) -> bool:  # noqa: N802
        """Tab past the last widget wraps to the first in the focus chain: the model bar. (Qt 6.11 wraps
        a main window's focus to its first *text* control, which skipped the model bar.)"""
        current = QtWidgets.QApplication.focusWidget()
        if current is None or current.window() is not self:
            return super().focusNextPrevChild(next_)
        node, wrapped = current, False
        for _ in range(100_000):
            node = node.nextInFocusChain() if next_ else node.previousInFocusChain()
            if node is current:
                return super().focusNextPrevChild(next_)
            if node is self:
                wrapped = True
                continue
            if (node.focusPolicy() & QtCore.Qt.FocusPolicy.TabFocus and node.focusProxy() is None
                    and node.isEnabled() and node.isVisibleTo(self) and node.window() is self):
                break
        if not wrapped:
            return super().focusNextPrevChild(next_)
        node.setFocus(QtCore.Qt.FocusReason.TabFocusReason if next_ else QtCore.Qt.FocusReason.BacktabFocusReason)
        return True

    @staticmethod
    def _chain_order(page: QtWidgets.QWidget, widgets: list) -> list:
        """``widgets`` in the order the page's own focus chain has them."""
        wanted, ordered = set(map(id, widgets)), []
        node = page
        for _ in range(100_000):
            node = node.nextInFocusChain()
            if node is page:
                break
            if id(node) in wanted and node not in ordered:
                ordered.append(node)
        return ordered + [w for w in widgets if w not in ordered]

    def changeEvent(self, event):  # noqa: N802
        if event.type() in (QtCore.QEvent.Type.PaletteChange, QtCore.QEvent.Type.ApplicationPaletteChange):
            self.state.set_dark(is_dark())
        super().changeEvent(event)

    # ================================================================= model
    def open_folder(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Open a GPT-2 model folder (save_pretrained)")
        if folder:
            self.load_model(folder)

    def load_model(self, source: str, allow_pickle: bool = False) -> int:
        self.error.hide()
        self.loading_source = source
        self.status_model.setText(f"loading {Path(source).name or source}…")
        if self.state.bundle is None:
            self.state.set_placeholder(LOADING_NOTE)
        self.latest_load_id = self.worker.load(source, self.model_bar.device(), self.model_bar.dtype(), allow_pickle)
        return self.latest_load_id

    def _load_started(self, request_id: int, source: str) -> None:
        self.model_bar.loading(source)
        if request_id == self.latest_load_id:
            self.status_model.setText(f"loading {Path(source).name or source}…")

    def _model_loaded(self, request_id: int, info) -> None:
        if self.closed or request_id != self.latest_load_id:
            return
        self.error.hide()
        self.model_info = info
        if self.state.bundle is None:
            self.state.set_placeholder("Type a text to see its attention" if not self.text_input.text().strip()
                                       else "running the text…")
        self.model_bar.loaded(self.loading_source or info.label)
        self.download_action.setVisible(not hub_cached("gpt2"))
        self.text_input.set_bos(info.prepend_bos_default)
        self.status_model.setText(self._model_line(info))
        self.status_model.setToolTip(BUNDLED_DESCRIPTION if info.kind == "bundled" else info.folder)
        self.setWindowTitle(f"AttnScope — {info.label}")
        self.model_ready.emit(info)
        if self.text_input.text().strip():
            self.text_input.run(explicit=False)

    @staticmethod
    def _model_line(info) -> str:
        return f"{info.label} · {info.n_layer}×{info.n_head} heads · {info.device} · {info.dtype}"

    # ================================================================= running
    def set_text(self, text: str, run: bool = False) -> None:
        self.text_input.set_text(text, run=run)

    def run_text(self) -> int | None:
        """Run the text in the box (an explicit run); returns the request id, or None when nothing was sent."""
        before = self.latest_analyse_id
        self.text_input.run(explicit=True)  # → run_requested → _analyse, at once
        return self.latest_analyse_id if self.latest_analyse_id != before else None

    def max_tokens(self) -> int:
        """The token cap of a run (Run → Token limit…; saved as ``run/max_tokens``)."""
        try:
            value = int(self.settings.value("run/max_tokens", DEFAULT_MAX_TOKENS))
        except (TypeError, ValueError):
            return DEFAULT_MAX_TOKENS
        return value if 1 <= value <= MAX_TOKENS_LIMIT else DEFAULT_MAX_TOKENS

    def set_max_tokens(self, value: int) -> None:
        self.settings.setValue("run/max_tokens", int(value))
        self._show_max_tokens()

    def _show_max_tokens(self) -> None:
        self.max_tokens_action.setText(f"Token limit ({self.max_tokens():,})…")
        self.max_tokens_action.setToolTip("The most tokens a run analyses (the model's context may hold fewer); "
                                          "the attention takes layers × heads × tokens² × 4 bytes")

    def ask_max_tokens(self) -> None:
        value, ok = QtWidgets.QInputDialog.getInt(
            self, "Token limit", "Analyse at most this many tokens of a text (a longer text is cut;\n"
            "the model's own context may hold fewer):", self.max_tokens(), 1, MAX_TOKENS_LIMIT, 64)
        if ok:
            self.set_max_tokens(value)

    def _analyse(self, text: str, bos: bool) -> None:
        if self.model_info is None:
            return  # runs when the model arrives
        self.latest_analyse_id = self.worker.analyse(text, bos, self.max_tokens())
        self.status_run.setText("running…")

    def _analysis_sized(self, request_id: int, n_tokens: int, _bytes) -> None:
        info = self.model_info
        if request_id == self.latest_analyse_id and info is not None:
            self.status_run.setText(f"running {attention_line(n_tokens, info.n_layer, info.n_head)}…")

    def _analysis_ready(self, bundle) -> None:
        if self.closed or bundle.request_id != self.latest_analyse_id:
            return  # closed, or stale: a newer request was made since
        self.error.hide()
        r = bundle.result
        self.state.set_placeholder(None)
        self.status_tokens.setText(attention_line(r.n_tokens, r.n_layer, r.n_head)
                                   + (" (truncated)" if r.truncated else ""))
        self.status_tokens.setToolTip(f"The attention of this run: {r.n_layer} layers × {r.n_head} heads × "
                                      f"{r.n_tokens}² tokens × 4 bytes; a run analyses at most "
                                      f"{r.max_tokens:,} tokens (Run → Token limit…)")
        self.status_run.setText(f"last run {time.strftime('%H:%M:%S')} in {bundle.seconds * 1000:.0f} ms")
        self.state.set_bundle(bundle)
        self.result_shown.emit(bundle.request_id)

    def _failed(self, failure: Failure) -> None:
        if self.closed:
            return
        if failure.kind is RequestKind.LOAD and failure.request_id == self.latest_load_id:
            self.model_bar.load_failed()
            actions, message, source = [], failure.message, self.loading_source
            if isinstance(failure.error, PickleWeightsError) and source:
                actions.append(("Load anyway (I trust it)", lambda: self.load_model(source, allow_pickle=True)))
            if isinstance(failure.error, HubUnreachableError) and source:
                actions.append(("Retry", lambda: self.load_model(source)))
            if self.model_info is not None:
                message += f" Still using {self.model_info.label}."
                self.status_model.setText(self._model_line(self.model_info))
            else:
                self.status_model.setText("no model")
                if self.state.bundle is None:
                    self.state.set_placeholder("no model loaded")
                if source != BUNDLED:
                    actions.append(("Open the bundled model", lambda: self.load_model(BUNDLED)))
            self.show_error(f"Could not load the model: {message}", actions)
        elif failure.kind is RequestKind.ANALYSE and failure.request_id == self.latest_analyse_id:
            self.status_run.setText("")
            if self.state.bundle is None:
                self.state.set_placeholder("the text could not be analysed (see the message above)")
            self.show_error(failure.message)

    def show_error(self, message: str, actions=()) -> None:
        self.error.show_note(message, "error", list(actions))
        self.error_shown.emit(message)

    # ================================================================= selection
    @property
    def bundle(self):
        return self.state.bundle

    def select_head(self, layer: int, head: int) -> None:
        self.state.select(layer, head)

    def open_head(self, layer: int, head: int) -> None:
        """Select a head and show it in the Head tab (a tab's ``head_activated``)."""
        self.state.select(layer, head)
        self.tabs.setCurrentWidget(self.head_panel)

    # ================================================================= copy
    def copy_figure(self) -> None:
        """Copy the clean export figure of the view in front: the grid when it has the focus, else the tab."""
        tab = self.tabs.currentWidget()
        self.exporter.copy_figure(self.grid_panel if self.grid_panel.plot.hasFocus() else tab, self.grid_panel)

    # ================================================================= closing
    def closeEvent(self, event):  # noqa: N802
        self.closed = self.exporter.closed = True
        self.save_settings()
        self.text_input.auto_timer.stop()
        self.worker.stop(timeout=0.1)  # a daemon thread: a forward pass in flight never holds up the exit
        super().closeEvent(event)
