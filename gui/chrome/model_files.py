"""The GGUF files on this computer, for the Model list: the background scan (started once the window shows, never
before: start-up does not wait for the disk), *Open GGUF file…*, *Add model folder…* and *File → Model
folders…*, where the added folders are listed and removed. The added folders are a setting
(``model/gguf_folders``, a list of paths); every change scans again. A GGUF file is loaded by its absolute path,
as a folder is (``window.load_model``).
"""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtWidgets

from analysis.families import FOLDER_MODELS
from analysis.model.gguf_file import ARCHITECTURES as GGUF_ARCHITECTURES

from ..state.gguf_scanner import GgufScanner

FOLDERS_KEY = "model/gguf_folders"
#: The choosers' titles name every model they open: a folder of any family's (analysis.families), a GGUF file of
#: any architecture AttnScope reads (analysis.model.gguf_file).
OPEN_FOLDER_TITLE = f"Open a model folder ({FOLDER_MODELS}: config.json and safetensors)"
OPEN_GGUF_TITLE = f"Open a GGUF model file ({', '.join(GGUF_ARCHITECTURES)} architectures)"


def choose_gguf_file(parent, start: str = "") -> str | None:
    """The GGUF file the user picks, starting in ``start`` (the last folder used), or None (tests replace it).
    "All files" too: Ollama keeps its models as blobs without the suffix."""
    path, _ = QtWidgets.QFileDialog.getOpenFileName(parent, OPEN_GGUF_TITLE, start,
                                                    "GGUF models (*.gguf *.GGUF);;All files (*)")
    return path or None


def choose_folder(parent, start: str = "") -> str | None:
    """The folder the user picks to be searched for GGUF files, starting in ``start``, or None (tests replace it)."""
    return QtWidgets.QFileDialog.getExistingDirectory(parent, "Add a folder of GGUF models", start) or None


START_KEY = "model/gguf_dialog_folder"  # where the last GGUF or folder was picked: the next dialog starts there


def _start(settings: QtCore.QSettings) -> str:
    start = str(settings.value(START_KEY, "") or "")
    return start if start and Path(start).is_dir() else str(Path.home())


def saved_folders(settings: QtCore.QSettings) -> list[str]:
    value = settings.value(FOLDERS_KEY, [])
    if isinstance(value, str):  # an INI file gives a one-element list back as its element
        value = [value]
    return [str(v) for v in (value or []) if str(v).strip()]


class ModelFiles(QtCore.QObject):
    """Owns the scan and the added folders; fills ``window.model_bar``'s GGUF group."""

    def __init__(self, window, scanner: GgufScanner | None = None):
        super().__init__(window)
        self.window, self.settings, self.bar = window, window.settings, window.model_bar
        self.scanner = scanner or GgufScanner(self)
        self.scanner.finished.connect(self.bar.set_gguf_files)
        self.bar.open_gguf_requested.connect(self.open_gguf_file)
        self.bar.add_folder_requested.connect(self.add_folder)
        self.dialog: ModelFoldersDialog | None = None

    def folders(self) -> list[str]:
        return saved_folders(self.settings)

    def scan(self) -> None:
        """Look again, in the background (a scan in flight is replaced)."""
        self.bar.gguf_scanning()
        self.scanner.start(self.folders())

    def stop(self) -> None:
        self.scanner.stop()

    def open_gguf_file(self) -> None:
        path = choose_gguf_file(self.window, _start(self.settings))
        if path:
            self.settings.setValue(START_KEY, str(Path(path).parent))
            self.window.load_model(path)

    def add_folder(self, folder: str | None = None) -> None:
        """Add ``folder`` (None: ask for one) to the folders searched, remember it, and scan again."""
        if not folder:
            folder = choose_folder(self.window, _start(self.settings))
            if folder:
                self.settings.setValue(START_KEY, str(Path(folder).parent))
        if not folder:
            return
        folders = self.folders()
        if folder not in folders:
            self.settings.setValue(FOLDERS_KEY, folders + [folder])
        self.scan()
        if self.dialog is not None:
            self.dialog.refresh()

    def remove_folders(self, folders) -> None:
        """Forget ``folders`` (paths) and scan again."""
        gone = set(folders)
        self.settings.setValue(FOLDERS_KEY, [f for f in self.folders() if f not in gone])
        self.scan()

    def manage_folders(self) -> ModelFoldersDialog:
        """File → Model folders…: the folders added, with Add folder… and Remove (shown, not modal)."""
        if self.dialog is None:
            self.dialog = ModelFoldersDialog(self, self.window)
        self.dialog.refresh()
        self.dialog.show()
        self.dialog.raise_()
        return self.dialog


class ModelFoldersDialog(QtWidgets.QDialog):
    """The folders whose GGUF files the Model list shows besides the usual places; changes apply at once."""

    def __init__(self, files: ModelFiles, parent=None):
        super().__init__(parent)
        self.files = files
        self.setWindowTitle("Model folders")
        self.list = QtWidgets.QListWidget()
        self.list.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.ExtendedSelection)
        intro = QtWidgets.QLabel("The Model list shows the GGUF files in the Hugging Face cache, llama.cpp's cache, "
                                 "LM Studio's and Ollama's model folders, and in these folders (and the folders "
                                 "inside them):")
        intro.setWordWrap(True)
        self.add_button = QtWidgets.QPushButton("Add folder…")
        self.remove_button = QtWidgets.QPushButton("Remove")
        close = QtWidgets.QPushButton("Close")
        for button in (self.add_button, self.remove_button, close):
            button.setAutoDefault(False)
        close.setDefault(True)
        self.add_button.clicked.connect(lambda: files.add_folder())
        self.remove_button.clicked.connect(self._remove)
        close.clicked.connect(self.accept)
        self.list.itemSelectionChanged.connect(self._update)
        buttons = QtWidgets.QHBoxLayout()
        for button in (self.add_button, self.remove_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.list)
        layout.addLayout(buttons)
        self.resize(560, 300)

    def refresh(self) -> None:
        self.list.clear()
        self.list.addItems(self.files.folders())
        self._update()

    def _update(self) -> None:
        self.remove_button.setEnabled(bool(self.list.selectedItems()))

    def _remove(self) -> None:
        self.files.remove_folders([item.text() for item in self.list.selectedItems()])
        self.refresh()
