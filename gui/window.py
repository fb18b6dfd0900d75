"""AttnScope's main window. It owns selection state only; all model work happens in the Worker.

Layout: a model bar (toolbar), notes, the text box with Run, the token strip, then the grid of
every head on the left and, on the right, tabs for one head in detail, the head scores and the
from-scratch panel. The status bar names the model, the device, the token count and the time
of the last run.
"""
from __future__ import annotations

import html
import time
from pathlib import Path

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import SCALES
from analysis.errors import AttnScopeError
from analysis.head_scores import SCORE_NAMES
from analysis.loading import BUNDLED, HUB_MODELS

from .figures import COLORMAPS, GridPlot, HeadPlot, grid_source
from .scores_view import ScoresPanel
from .worker import Worker

EXAMPLES_FILE = Path(__file__).resolve().parent.parent / "resources" / "texts" / "examples.txt"
OPEN_FOLDER = "Open folder…"
AUTO_RUN_MS = 600
MAX_RECENT_TEXTS = 10


def example_texts() -> list[str]:
    try:
        lines = EXAMPLES_FILE.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = ["The cat sat on the mat because it was tired."]
    return [line.replace("\\n", "\n") for line in lines if line.strip()]


def is_dark(palette: QtGui.QPalette | None = None) -> bool:
    hints = QtGui.QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is not None and scheme() != QtCore.Qt.ColorScheme.Unknown:
        return scheme() == QtCore.Qt.ColorScheme.Dark
    palette = palette or QtWidgets.QApplication.palette()
    return palette.color(QtGui.QPalette.ColorRole.Window).lightness() < 128


class NoteBar(QtWidgets.QFrame):
    """A one-line note across the window (info or error) with optional action buttons."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.label = QtWidgets.QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.buttons = QtWidgets.QHBoxLayout()
        close = QtWidgets.QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addLayout(self.buttons)
        layout.addWidget(close)
        self.hide()

    def show_note(self, text: str, kind: str = "info", actions: list[tuple[str, object]] = ()) -> None:
        colours = {"info": ("#e7f1ff", "#0b3d91"), "warning": ("#fff4d6", "#6b4e00"), "error": ("#ffe3e3", "#8a1020")}
        bg, fg = colours[kind]
        self.setStyleSheet(f"NoteBar {{ background: {bg}; border: 1px solid {fg}33; border-radius: 4px; }}"
                           f"QLabel {{ color: {fg}; }}")
        self.label.setText(text)
        self.kind = kind
        while self.buttons.count():
            item = self.buttons.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        for label, callback in actions:
            button = QtWidgets.QPushButton(label)
            button.clicked.connect(callback)
            self.buttons.addWidget(button)
        self.show()


class TokenStrip(QtWidgets.QListWidget):
    """Every token with its index; hover shows the id; click highlights that query row."""

    token_clicked = QtCore.Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setFlow(QtWidgets.QListView.Flow.LeftToRight)
        self.setWrapping(False)
        self.setHorizontalScrollMode(QtWidgets.QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSpacing(2)
        self.setFixedHeight(62)
        self.setUniformItemSizes(False)
        self.itemClicked.connect(lambda item: self.token_clicked.emit(self.row(item)))

    def set_tokens(self, tokens, token_ids) -> None:
        self.clear()
        for i, (token, token_id) in enumerate(zip(tokens, token_ids)):
            item = QtWidgets.QListWidgetItem(f"{i}\n{token}")
            item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
            item.setToolTip(f"token {i}: '{html.escape(token)}' — id {int(token_id)}")
            self.addItem(item)


class MainWindow(QtWidgets.QMainWindow):
    """The app. ``settings`` may be given (tests pass a private INI file)."""

    result_shown = QtCore.Signal(int)  # request id of the result now on screen
    model_ready = QtCore.Signal(object)  # ModelInfo
    error_shown = QtCore.Signal(str)
    scratch_shown = QtCore.Signal(int)

    def __init__(self, settings: QtCore.QSettings | None = None, worker: Worker | None = None):
        super().__init__()
        self.setWindowTitle("AttnScope")
        self.settings = settings or QtCore.QSettings()
        self.worker = worker or Worker()
        self.model_info = None
        self.bundle = None  # the AnalysisBundle on screen
        self.layer, self.head = 0, 0
        self.query_row: int | None = None
        self.latest_analyse_id = 0
        self.latest_load_id = 0
        self.closed = False
        self.loading_source: str | None = None
        self.previous_model_choice = BUNDLED
        self._load_started_at = 0.0
        self._download_samples: list[tuple[float, int]] = []
        self._build_ui()
        self._connect_worker()
        self._restore_settings()
        self._apply_theme()

    # ================================================================= building
    def _build_ui(self) -> None:
        self._build_model_bar()
        central = QtWidgets.QWidget()
        outer = QtWidgets.QVBoxLayout(central)
        outer.setContentsMargins(6, 4, 6, 2)
        outer.setSpacing(4)
        self.note = NoteBar()
        self.error = NoteBar()
        outer.addWidget(self.note)
        outer.addWidget(self.error)

        # text + run
        self.text_edit = QtWidgets.QPlainTextEdit()
        self.text_edit.setPlaceholderText("Type a sentence and press Ctrl+Enter (it also runs when you stop typing)")
        self.text_edit.setFixedHeight(64)
        self.text_edit.textChanged.connect(self._text_changed)
        self.run_button = QtWidgets.QPushButton("Run")
        self.run_button.setToolTip("Run the text (Ctrl+Enter)")
        self.run_button.clicked.connect(self.run_text)
        self.bos_box = QtWidgets.QCheckBox("BOS")
        self.bos_box.setToolTip("Prepend <|endoftext|> as the first token")
        self.bos_box.toggled.connect(lambda _: self.run_text())
        self.auto_box = QtWidgets.QCheckBox("Auto")
        self.auto_box.setChecked(True)
        self.auto_box.setToolTip("Run again shortly after typing stops")
        self.examples_button = QtWidgets.QToolButton()
        self.examples_button.setText("Examples")
        self.examples_button.setPopupMode(QtWidgets.QToolButton.ToolButtonPopupMode.InstantPopup)
        self.examples_menu = QtWidgets.QMenu(self)
        for text in example_texts():
            action = self.examples_menu.addAction(text.replace("\n", " ⏎ ")[:80])
            action.triggered.connect(lambda _=False, t=text: self.set_text(t, run=True))
        self.examples_menu.addSeparator()
        self.recent_menu = self.examples_menu.addMenu("Recent texts")
        self.examples_button.setMenu(self.examples_menu)
        buttons = QtWidgets.QVBoxLayout()
        buttons.addWidget(self.run_button)
        row = QtWidgets.QHBoxLayout()
        row.addWidget(self.bos_box)
        row.addWidget(self.auto_box)
        buttons.addLayout(row)
        buttons.addWidget(self.examples_button)
        text_row = QtWidgets.QHBoxLayout()
        text_row.addWidget(self.text_edit, 1)
        text_row.addLayout(buttons)
        outer.addLayout(text_row)
        self.text_warning = QtWidgets.QLabel()
        self.text_warning.setStyleSheet("color: #b35c00;")
        self.text_warning.setWordWrap(True)
        self.text_warning.hide()
        outer.addWidget(self.text_warning)
        self.predictions_label = QtWidgets.QLabel()
        self.predictions_label.setTextFormat(QtCore.Qt.TextFormat.RichText)
        outer.addWidget(self.predictions_label)

        self.token_strip = TokenStrip()
        self.token_strip.token_clicked.connect(self.highlight_query)
        outer.addWidget(self.token_strip)

        # grid (left)
        self.grid = GridPlot()
        self.grid.head_clicked.connect(self.select_head)
        self.overlay_choice = QtWidgets.QComboBox()
        self.overlay_choice.addItem("no badges", None)
        for name in SCORE_NAMES:
            self.overlay_choice.addItem(name.replace("_", " "), name)
        self.overlay_choice.setToolTip("Write a head score on every cell (bold yellow: ≥ 0.4)")
        self.overlay_choice.currentIndexChanged.connect(lambda _: self._update_badges())
        grid_panel = QtWidgets.QWidget()
        grid_layout = QtWidgets.QVBoxLayout(grid_panel)
        grid_layout.setContentsMargins(0, 0, 0, 0)
        grid_bar = QtWidgets.QHBoxLayout()
        grid_bar.addWidget(QtWidgets.QLabel("<b>All heads</b>"))
        grid_bar.addStretch(1)
        grid_bar.addWidget(QtWidgets.QLabel("Badges:"))
        grid_bar.addWidget(self.overlay_choice)
        grid_layout.addLayout(grid_bar)
        grid_layout.addWidget(self.grid, 1)

        # detail (right, tab 1)
        self.detail = HeadPlot()
        self.detail.query_clicked.connect(self.highlight_query)
        self.colormap_choice = QtWidgets.QComboBox()
        self.colormap_choice.addItems(COLORMAPS)
        self.scale_choice = QtWidgets.QComboBox()
        self.scale_choice.addItems(SCALES)
        self.hide_first_box = QtWidgets.QCheckBox("Hide first token, renormalise")
        self.hide_first_box.setToolTip("Drop key 0 (often an attention sink) and renormalise each row over the rest")
        for widget in (self.colormap_choice, self.scale_choice):
            widget.currentTextChanged.connect(lambda _: self._redraw())
        self.hide_first_box.toggled.connect(lambda _: self._show_detail())
        self.head_label = QtWidgets.QLabel()
        detail_panel = QtWidgets.QWidget()
        detail_layout = QtWidgets.QVBoxLayout(detail_panel)
        detail_layout.setContentsMargins(0, 0, 0, 0)
        detail_bar = QtWidgets.QHBoxLayout()
        detail_bar.addWidget(self.head_label)
        detail_bar.addStretch(1)
        detail_bar.addWidget(QtWidgets.QLabel("Colours"))
        detail_bar.addWidget(self.colormap_choice)
        detail_bar.addWidget(QtWidgets.QLabel("Scale"))
        detail_bar.addWidget(self.scale_choice)
        detail_bar.addWidget(self.hide_first_box)
        detail_layout.addLayout(detail_bar)
        detail_layout.addWidget(self.detail, 1)
        self.hover_label = QtWidgets.QLabel(" ")
        detail_layout.addWidget(self.hover_label)
        self.detail.cell_hovered.connect(self._hovered)

        self.scores_panel = ScoresPanel()
        self.scores_panel.head_selected.connect(self.select_head)
        from .scratch import ScratchPanel

        self.scratch = ScratchPanel()
        self.scratch.head_clicked.connect(self.select_head)
        self.scratch.dtype_choice.currentTextChanged.connect(lambda _: self._request_scratch())
        self.scratch_timer = QtCore.QTimer(self)
        self.scratch_timer.setSingleShot(True)
        self.scratch_timer.setInterval(150)
        self.scratch_timer.timeout.connect(self._request_scratch_now)
        self.latest_scratch_id = 0
        self.scratch_key = None
        self.parity_cache = None  # (result request id, dtype, ParityReport)
        self.tabs = QtWidgets.QTabWidget()
        self.tabs.addTab(detail_panel, "Head")
        self.tabs.addTab(self.scores_panel, "Head scores")
        self.tabs.addTab(self.scratch, "From scratch")
        self.tabs.currentChanged.connect(lambda _: self._request_scratch())

        self.splitter = QtWidgets.QSplitter()
        self.splitter.addWidget(grid_panel)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setSizes([560, 840])
        outer.addWidget(self.splitter, 1)
        self.setCentralWidget(central)

        self.status_model = QtWidgets.QLabel("no model")
        self.status_tokens = QtWidgets.QLabel("")
        self.status_run = QtWidgets.QLabel("")
        for widget in (self.status_model, self.status_tokens, self.status_run):
            self.statusBar().addPermanentWidget(widget)
        self._build_menus()
        self.resize(1400, 900)

    def _build_model_bar(self) -> None:
        bar = self.addToolBar("Model")
        bar.setObjectName("model-bar")
        bar.setMovable(False)
        self.model_choice = QtWidgets.QComboBox()
        self.model_choice.addItem("bundled", BUNDLED)
        for name in HUB_MODELS:
            self.model_choice.addItem(name, name)
        self.model_choice.addItem(OPEN_FOLDER, OPEN_FOLDER)
        self.model_choice.setMinimumContentsLength(16)
        self.model_choice.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_choice.activated.connect(self._model_chosen)
        self.device_choice = QtWidgets.QComboBox()
        self.device_choice.addItems(["auto", "cpu"])
        self.device_choice.currentTextChanged.connect(self._device_changed)
        self.dtype_choice = QtWidgets.QComboBox()
        self.dtype_choice.addItems(["float32", "float16", "bfloat16"])
        self.dtype_choice.setEnabled(False)
        self.dtype_choice.setToolTip("Half precision is offered on a GPU only")
        self.load_button = QtWidgets.QPushButton("Load")
        self.load_button.clicked.connect(lambda: self.load_model(self.current_model_source()))
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_load)
        self.cancel_button.hide()
        self.progress = QtWidgets.QProgressBar()
        self.progress.setMaximumWidth(220)
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.progress_label = QtWidgets.QLabel("")
        for label, widget in (("Model", self.model_choice), ("Device", self.device_choice),
                              ("dtype", self.dtype_choice)):
            bar.addWidget(QtWidgets.QLabel(f" {label} "))
            bar.addWidget(widget)
        bar.addWidget(self.load_button)
        bar.addWidget(self.cancel_button)
        bar.addWidget(self.progress)
        bar.addWidget(self.progress_label)

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "Open model folder…", QtGui.QKeySequence.StandardKey.Open, self.open_folder)
        file_menu.addSeparator()
        self._action(file_menu, "Export…", "Ctrl+E", self.export_dialog)
        self._action(file_menu, "Copy figure", "Ctrl+Shift+C", self.copy_figure)
        file_menu.addSeparator()
        self._action(file_menu, "Quit", QtGui.QKeySequence.StandardKey.Quit, self.close)
        run_menu = self.menuBar().addMenu("&Run")
        self._action(run_menu, "Run text", "Ctrl+Return", self.run_text)
        self._action(run_menu, "Run text (keypad)", "Ctrl+Enter", self.run_text).setVisible(False)
        self._action(run_menu, "Run again", "F5", self.run_text)
        view_menu = self.menuBar().addMenu("&View")
        self._action(view_menu, "Next head", "Alt+Right", lambda: self.move_selection(0, 1))
        self._action(view_menu, "Previous head", "Alt+Left", lambda: self.move_selection(0, -1))
        self._action(view_menu, "Next layer", "Alt+Down", lambda: self.move_selection(1, 0))
        self._action(view_menu, "Previous layer", "Alt+Up", lambda: self.move_selection(-1, 0))
        view_menu.addSeparator()
        self._action(view_menu, "Head detail", "Ctrl+1", lambda: self.tabs.setCurrentIndex(0))
        self._action(view_menu, "Head scores", "Ctrl+2", lambda: self.tabs.setCurrentIndex(1))
        self._action(view_menu, "From scratch", "Ctrl+3", lambda: self.tabs.setCurrentIndex(2))
        # plain arrow keys move the selection while the grid or the detail has focus
        for widget in (self.grid, self.detail, self.scores_panel.map):
            for key, step in (("Left", (0, -1)), ("Right", (0, 1)), ("Up", (-1, 0)), ("Down", (1, 0))):
                shortcut = QtGui.QShortcut(QtGui.QKeySequence(key), widget)
                shortcut.setContext(QtCore.Qt.ShortcutContext.WidgetWithChildrenShortcut)
                shortcut.activated.connect(lambda s=step: self.move_selection(*s))
            widget.setFocusPolicy(QtCore.Qt.FocusPolicy.StrongFocus)

    def _action(self, menu, text, shortcut, slot) -> QtGui.QAction:
        action = menu.addAction(text)
        if shortcut:
            action.setShortcut(QtGui.QKeySequence(shortcut))
        action.triggered.connect(lambda _=False: slot())
        return action

    def _connect_worker(self) -> None:
        w = self.worker
        w.devices_found.connect(self._devices_found)
        w.load_started.connect(self._load_started)
        w.load_progress.connect(self._load_progress)
        w.model_loaded.connect(self._model_loaded)
        w.analysis_started.connect(self._analysis_started)
        w.analysis_ready.connect(self._analysis_ready)
        w.failed.connect(self._failed)
        w.task_done.connect(self._task_done)
        self.auto_timer = QtCore.QTimer(self)
        self.auto_timer.setSingleShot(True)
        self.auto_timer.setInterval(AUTO_RUN_MS)
        self.auto_timer.timeout.connect(self.run_text)

    # ================================================================= settings and theme
    def _restore_settings(self) -> None:
        s = self.settings
        geometry = s.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        state = s.value("window/state")
        if state is not None:
            self.restoreState(state)
        splitter = s.value("window/splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)
        self.colormap_choice.setCurrentText(str(s.value("view/colormap", "viridis")))
        self.scale_choice.setCurrentText(str(s.value("view/scale", "linear")))
        self.pending_device = str(s.value("model/device", "auto"))
        self._refresh_recent_menu()

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.setValue("window/splitter", self.splitter.saveState())
        s.setValue("view/colormap", self.colormap_choice.currentText())
        s.setValue("view/scale", self.scale_choice.currentText())
        s.setValue("model/device", self.device_choice.currentText())
        if self.model_info is not None:
            s.setValue("model/last", self.loaded_source)
        s.sync()

    def recent_texts(self) -> list[str]:
        value = self.settings.value("texts/recent", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def _remember_text(self, text: str) -> None:
        recent = [t for t in self.recent_texts() if t != text]
        recent.insert(0, text)
        self.settings.setValue("texts/recent", recent[:MAX_RECENT_TEXTS])
        self._refresh_recent_menu()

    def _refresh_recent_menu(self) -> None:
        self.recent_menu.clear()
        for text in self.recent_texts():
            action = self.recent_menu.addAction(text.replace("\n", " ⏎ ")[:80])
            action.triggered.connect(lambda _=False, t=text: self.set_text(t, run=True))
        self.recent_menu.setEnabled(bool(self.recent_texts()))

    def _apply_theme(self) -> None:
        import pyqtgraph as pg

        dark = is_dark()
        background = self.palette().color(QtGui.QPalette.ColorRole.Base) if dark else QtGui.QColor("white")
        foreground = QtGui.QColor("#dddddd") if dark else QtGui.QColor("black")
        for fig in (self.grid, self.detail, self.scores_panel.map):
            fig.setBackground(background)
            for axis_name in ("left", "bottom"):
                axis = fig.plot.getAxis(axis_name)
                axis.setPen(pg.mkPen(foreground))
                axis.setTextPen(pg.mkPen(foreground))
            fig.colorbar.axis.setPen(pg.mkPen(foreground))
            fig.colorbar.axis.setTextPen(pg.mkPen(foreground))
            fig.plot.titleLabel.opts["color"] = foreground.name()

    def changeEvent(self, event):  # noqa: N802
        if event.type() in (QtCore.QEvent.Type.PaletteChange, QtCore.QEvent.Type.ApplicationPaletteChange):
            self._apply_theme()
        super().changeEvent(event)

    # ================================================================= model
    def current_model_source(self) -> str:
        data = self.model_choice.currentData()
        return self.model_choice.currentText() if data in (None, OPEN_FOLDER) else str(data)

    def _set_model_choice(self, source: str) -> None:
        index = self.model_choice.findData(source)
        if index < 0:
            self.model_choice.insertItem(self.model_choice.count() - 1, Path(source).name or source, source)
            index = self.model_choice.findData(source)
            self.model_choice.setItemData(index, source, QtCore.Qt.ItemDataRole.ToolTipRole)
        self.model_choice.setCurrentIndex(index)

    def _model_chosen(self, index: int) -> None:
        if self.model_choice.itemData(index) == OPEN_FOLDER:
            self._set_model_choice(self.loaded_source if self.model_info else self.previous_model_choice)
            self.open_folder()
            return
        self.load_model(str(self.model_choice.itemData(index)))

    def open_folder(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Open a GPT-2 model folder (save_pretrained)")
        if folder:
            self.load_model(folder)

    def load_model(self, source: str, allow_pickle: bool = False) -> int:
        device = self.device_choice.currentText()
        dtype = self.dtype_choice.currentText() if self.dtype_choice.isEnabled() else "float32"
        self.error.hide()
        self.loading_source = source
        self._set_model_choice(source)
        self.latest_load_id = self.worker.load(source, device, dtype, allow_pickle)
        return self.latest_load_id

    def cancel_load(self) -> None:
        self.worker.cancel_load()
        self.progress_label.setText("cancelling…")

    def _devices_found(self, devices: list) -> None:
        current = getattr(self, "pending_device", None) or self.device_choice.currentText()
        self.device_choice.blockSignals(True)
        self.device_choice.clear()
        self.device_choice.addItems([str(d) for d in devices])
        self.device_choice.setCurrentText(current if current in devices else "auto")
        self.device_choice.blockSignals(False)
        self._device_changed(self.device_choice.currentText())

    def _device_changed(self, device: str) -> None:
        gpu = device.startswith(("cuda", "mps")) or (device == "auto" and self.device_choice.count() > 2)
        self.dtype_choice.setEnabled(gpu)
        if not gpu:
            self.dtype_choice.setCurrentText("float32")

    def _load_started(self, request_id: int, source: str) -> None:
        self._load_started_at = time.monotonic()
        self._download_samples = []
        self.progress.setRange(0, 0)  # busy
        self.progress.show()
        self.cancel_button.show()
        self.load_button.setEnabled(False)
        self.progress_label.setText(f"loading {Path(source).name or source}…")

    def _load_progress(self, message: str, done, total) -> None:
        done, total = int(done), int(total)
        if total <= 0:
            self.progress.setRange(0, 0)
            self.progress_label.setText(message)
            return
        now = time.monotonic()
        self._download_samples = [s for s in self._download_samples if now - s[0] < 3] + [(now, done)]
        first = self._download_samples[0]
        speed = (done - first[1]) / max(1e-6, now - first[0]) if len(self._download_samples) > 1 else 0
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(1000 * done / total))
        self.progress.setFormat(f"{done / 1e6:.0f} / {total / 1e6:.0f} MB")
        self.progress_label.setText(f"{message} — {speed / 1e6:.1f} MB/s" if speed else message)

    def _load_finished_ui(self) -> None:
        self.progress.hide()
        self.cancel_button.hide()
        self.load_button.setEnabled(True)
        self.progress_label.setText("")

    def _model_loaded(self, request_id: int, info) -> None:
        if self.closed or request_id != self.latest_load_id:
            return
        self._load_finished_ui()
        self.model_info = info
        self.loaded_source = self.loading_source or info.label
        self.previous_model_choice = self.loaded_source
        self.settings.setValue("model/last", self.loaded_source)
        self.bos_box.blockSignals(True)
        self.bos_box.setChecked(info.prepend_bos_default)
        self.bos_box.blockSignals(False)
        self.layer = min(self.layer, info.n_layer - 1)
        self.head = min(self.head, info.n_head - 1)
        self.status_model.setText(f"{info.label} · {info.n_layer}×{info.n_head} heads · {info.device} · {info.dtype}")
        self.setWindowTitle(f"AttnScope — {info.label}")
        self.model_ready.emit(info)
        if self.text_edit.toPlainText().strip():
            self.run_text()

    # ================================================================= running
    def set_text(self, text: str, run: bool = False) -> None:
        self.text_edit.blockSignals(True)
        self.text_edit.setPlainText(text)
        self.text_edit.blockSignals(False)
        if run:
            self.run_text()

    def _text_changed(self) -> None:
        if self.auto_box.isChecked():
            self.auto_timer.start()

    def run_text(self) -> int | None:
        self.auto_timer.stop()
        text = self.text_edit.toPlainText()
        if not text.strip():
            self.text_warning.setText("Type a sentence to see its attention.")
            self.text_warning.show()
            return None
        if self.model_info is None:
            return None  # runs when the model arrives
        self.latest_analyse_id = self.worker.analyse(text, self.bos_box.isChecked())
        self.status_run.setText("running…")
        return self.latest_analyse_id

    def _analysis_started(self, request_id: int) -> None:
        if request_id == self.latest_analyse_id:
            self.status_run.setText("running…")

    def _analysis_ready(self, bundle) -> None:
        """Show a result in a few short steps, each its own turn of the event loop, so that typing and
        painting go on in between (no step holds the GUI thread for long, even at 1024 tokens)."""
        if self.closed or bundle.request_id != self.latest_analyse_id:
            return  # closed, or stale: a newer request was made since
        self.bundle = bundle
        result = bundle.result
        self.text_warning.setText(" ".join(result.warnings))
        self.text_warning.setVisible(bool(result.warnings))
        self.query_row = None
        self.scratch_key = None
        preds = " ".join(f"<code>{html.escape(p.token)}</code>&nbsp;{p.probability:.1%}" for p in result.predictions)
        self.predictions_label.setText(f"Next token: {preds}")
        self.layer = min(self.layer, result.n_layer - 1)
        self.head = min(self.head, result.n_head - 1)
        self.status_tokens.setText(f"{result.n_tokens} tokens" + (" (truncated)" if result.truncated else ""))
        self.status_run.setText(f"last run {time.strftime('%H:%M:%S')} in {bundle.seconds * 1000:.0f} ms")
        self.grid.set_attentions(grid_source(result), self.colormap_choice.currentText(),
                                 self.scale_choice.currentText(), key=bundle.request_id)
        self.grid.select(self.layer, self.head)
        steps = [self._show_detail,
                 lambda: self.token_strip.set_tokens(result.tokens, result.token_ids),
                 lambda: self.scores_panel.set_scores(bundle.scores, self.colormap_choice.currentText()),
                 lambda: (self.scores_panel.select(self.layer, self.head), self._update_badges()),
                 lambda: (self._remember_text(result.text), self._request_scratch()),
                 lambda: self.result_shown.emit(bundle.request_id)]
        QtCore.QTimer.singleShot(5, self, lambda: self._run_steps(bundle.request_id, steps))

    def _run_steps(self, request_id: int, steps: list) -> None:
        if not steps or self.closed or self.bundle is None or self.bundle.request_id != request_id:
            return  # done, closed, or a newer result took over
        steps[0]()
        # a real (5 ms) timer, not a posted event: the event loop paints and runs other timers in between
        QtCore.QTimer.singleShot(5, self, lambda: self._run_steps(request_id, steps[1:]))

    def _failed(self, request_id: int, kind: str, message: str) -> None:
        if kind == "load":
            if request_id != self.latest_load_id:
                return
            self._load_finished_ui()
            actions = []
            if "--allow-pickle" in message and self.loading_source:
                source = self.loading_source
                actions.append(("Load anyway (I trust it)", lambda: self.load_model(source, allow_pickle=True)))
            if self.model_info is not None:
                message += f" Still using {self.model_info.label}."
                self._set_model_choice(self.loaded_source)
            elif self.loading_source != BUNDLED:
                actions.append(("Open the bundled model", lambda: self.load_model(BUNDLED)))
            self.show_error(f"Could not load the model: {message}", actions)
        elif kind == "analyse":
            if request_id != self.latest_analyse_id:
                return
            self.status_run.setText("")
            self.show_error(message)
        else:
            self.show_error(message)

    def show_error(self, message: str, actions=()) -> None:
        self.error.show_note(html.escape(message), "error", list(actions))
        self.error_shown.emit(message)

    def _task_done(self, request_id: int, name: str, value) -> None:
        if self.closed:
            return
        if name == "scratch":
            if request_id != self.latest_scratch_id:
                return  # a newer selection was asked for
            self.parity_cache = (value.result.request_id, value.report.manual_dtype, value.report)
            self.scratch.show_data(value)
            self.scratch_shown.emit(request_id)
            return
        if name == "export-data":
            self.statusBar().showMessage(f"Exported {', '.join(Path(p).name for p in value)}", 8000)

    # ================================================================= selection and drawing
    def select_head(self, layer: int, head: int) -> None:
        if self.bundle is None:
            return
        r = self.bundle.result
        self.layer = int(np.clip(layer, 0, r.n_layer - 1))
        self.head = int(np.clip(head, 0, r.n_head - 1))
        self.grid.select(self.layer, self.head)
        self.scores_panel.select(self.layer, self.head)
        self._show_detail()
        self._request_scratch()

    def move_selection(self, d_layer: int, d_head: int) -> None:
        self.select_head(self.layer + d_layer, self.head + d_head)

    def highlight_query(self, row: int) -> None:
        self.query_row = None if row == self.query_row else row
        self.detail.highlight_row(self.query_row)
        if self.query_row is not None:
            self.token_strip.setCurrentRow(self.query_row)
            self.scratch.steps.focus_query(self.query_row)

    # ================================================================= from scratch (computed on the worker)
    def _request_scratch(self) -> None:
        if self.bundle is not None and self.tabs.currentWidget() is self.scratch:
            self.scratch_timer.start()

    def _request_scratch_now(self) -> None:
        if self.bundle is None:
            return
        from analysis.parity import scratch_data

        result, layer, head = self.bundle.result, self.layer, self.head
        dtype = self.scratch.dtype_choice.currentText()
        key = (self.bundle.request_id, layer, head, dtype)
        if key == self.scratch_key:
            return
        self.scratch_key = key
        cached = (self.parity_cache[2] if self.parity_cache and self.parity_cache[:2] == (self.bundle.request_id, dtype)
                  else None)
        self.scratch.status.setText("computing…")
        self.latest_scratch_id = self.worker.submit(
            "scratch", lambda loaded: scratch_data(loaded, result, layer, head, dtype, cached))

    def _redraw(self) -> None:
        if self.bundle is None:
            return
        r = self.bundle.result
        self.grid.set_attentions(grid_source(r), self.colormap_choice.currentText(), self.scale_choice.currentText(),
                                 key=self.bundle.request_id)
        self._update_badges()
        self.scores_panel.set_colormap(self.colormap_choice.currentText())
        self.select_head(self.layer, self.head)

    def _update_badges(self) -> None:
        name = self.overlay_choice.currentData()
        self.grid.set_badges(None if (name is None or self.bundle is None) else self.bundle.scores[name])

    def _show_detail(self) -> None:
        if self.bundle is None:
            return
        r = self.bundle.result
        self.detail.set_head(r.attentions[self.layer, self.head], r.tokens, f"layer {self.layer}, head {self.head}",
                             cmap=self.colormap_choice.currentText(), scale=self.scale_choice.currentText(),
                             hide_first=self.hide_first_box.isChecked())
        self.detail.highlight_row(self.query_row)
        s = self.bundle.scores
        parts = [f"{k.replace('_', ' ')} {s[k][self.layer, self.head]:.2f}" for k in
                 ("previous_token", "sink", "induction_probe") if np.isfinite(s[k][self.layer, self.head])]
        self.head_label.setText(f"<b>Layer {self.layer}, head {self.head}</b> — " + ", ".join(parts))

    def _hovered(self, cell) -> None:
        if cell is None or self.bundle is None:
            self.hover_label.setText(" ")
            return
        self.hover_label.setText(self.detail.toolTip())

    # ================================================================= export
    def current_figure(self):
        return self.detail if self.tabs.currentIndex() == 0 else self.grid

    def copy_figure(self) -> None:
        image = self.current_figure().grab().toImage()
        QtWidgets.QApplication.clipboard().setImage(image)
        self.statusBar().showMessage("Figure copied to the clipboard", 4000)

    def export_dialog(self) -> None:
        if self.bundle is None:
            self.show_error("Nothing to export yet: run a text first.")
            return
        from .export_dialog import ExportDialog

        dialog = ExportDialog(self, self.settings)
        if dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted:
            self.export(dialog.what(), dialog.path(), dialog.image_format(), dialog.png_width())

    def export(self, what: str, path: str | Path, fmt: str = "png", png_width: int | None = None) -> list[Path]:
        """Export ``what`` to ``path``; errors are shown, not raised.

        ``head`` / ``grid``: one file, its kind from the extension (png, svg, pdf, or npz, csv, json);
        ``heads``: a folder with grid.<fmt> and heads/L{l}H{h}.<fmt>; ``data``: a folder with
        attention.npz, scores.csv and result.json (the CLI's writers).
        """
        from analysis import export as writers

        from .figures import (dispose_figure, offscreen_grid_figure, offscreen_head_figure, save_figure,
                              write_result_images)

        r, path = self.bundle.result, Path(path)
        cmap, scale = self.colormap_choice.currentText(), self.scale_choice.currentText()
        QtWidgets.QApplication.setOverrideCursor(QtCore.Qt.CursorShape.WaitCursor)
        try:
            if what in ("head", "grid"):
                suffix = path.suffix.lower().lstrip(".")
                if suffix in ("npz", "csv", "json"):
                    writers.check_writable_dir(path.parent)
                    head_writers = {  # one head's (query, key) map
                        "npz": lambda: writers.write_attention_npz(r, path, self.layer, self.head),
                        "csv": lambda: writers.write_head_csv(r, path, self.layer, self.head),
                        "json": lambda: writers.write_result_json(r, path, layer=self.layer, head=self.head)}
                    grid_writers = {  # every head; as a table, the grid is its scores
                        "npz": lambda: writers.write_attention_npz(r, path),
                        "csv": lambda: writers.write_scores_csv(self.bundle.scores, path),
                        "json": lambda: writers.write_result_json(r, path, self.bundle.scores)}
                    written = [(head_writers if what == "head" else grid_writers)[suffix]()]
                else:
                    writers.check_writable_dir(path.parent)
                    fig = (offscreen_head_figure(r, self.layer, self.head, cmap, scale, self.hide_first_box.isChecked())
                           if what == "head" else offscreen_grid_figure(r, cmap, scale))
                    try:
                        written = [save_figure(fig, path, png_width)]
                    finally:
                        dispose_figure(fig)
            elif what == "heads":
                folder = writers.check_writable_dir(path)
                written = write_result_images(r, folder, fmt, cmap, scale)
            elif what == "data":
                folder = writers.check_writable_dir(path)
                scores = self.bundle.scores
                written = [writers.write_attention_npz(r, folder / "attention.npz"),
                           writers.write_scores_csv(scores, folder / "scores.csv"),
                           writers.write_result_json(r, folder / "result.json", scores)]
            else:
                raise ValueError(what)
        except (AttnScopeError, OSError) as exc:
            self.show_error(str(exc))
            return []
        finally:
            QtWidgets.QApplication.restoreOverrideCursor()
        self.statusBar().showMessage(f"Exported {len(written)} file(s) to {path}", 8000)
        return written

    # ================================================================= closing
    def closeEvent(self, event):  # noqa: N802
        self.closed = True
        self.save_settings()
        self.auto_timer.stop()
        self.worker.stop(timeout=3.0)
        super().closeEvent(event)
