"""The model bar (a toolbar): which model, on which device and dtype, Load / Cancel, load progress.

It emits ``load_requested(source)`` and ``open_folder_requested``; the window sends loads to the
worker and tells the bar what happened (``loading``, ``progress``, ``loaded``, ``load_failed``). A
folder appears in the Model list only once it has loaded. Hub models say whether they are
downloaded and how big they are; picking one that is not asks before downloading.
"""
from __future__ import annotations

import time
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from analysis.loading import BUNDLED, HUB_MODELS

OPEN_FOLDER = "Open folder…"
#: parameters and download size of each hub model (safetensors weights)
HUB_SIZES = {"gpt2": ("124 M", "550 MB"), "distilgpt2": ("82 M", "350 MB"), "gpt2-medium": ("355 M", "1.5 GB"),
             "gpt2-large": ("774 M", "3.2 GB"), "gpt2-xl": ("1.5 B", "6.4 GB")}
BUNDLED_DESCRIPTION = ("bundled: a 4-layer × 4-head GPT-2-style model trained offline for this app, with its own "
                       "4,096-token vocabulary and a 256-token context (not OpenAI's GPT-2; see Help → Model card)")


def hub_cached(name: str) -> bool:
    from analysis.loading import is_cached

    return is_cached(name)


def ask(parent, title: str, text: str) -> bool:
    """A yes/no question (tests replace ``ModelBar.ask``)."""
    buttons = QtWidgets.QMessageBox.StandardButton
    return QtWidgets.QMessageBox.question(parent, title, text, buttons.Yes | buttons.No, buttons.Yes) == buttons.Yes


class ModelBar(QtWidgets.QToolBar):
    load_requested = QtCore.Signal(str)  # a source: bundled, a hub id, a folder
    open_folder_requested = QtCore.Signal()
    cancel_requested = QtCore.Signal()

    def __init__(self, settings: QtCore.QSettings, parent=None):
        super().__init__("Model", parent)
        self.setObjectName("model-bar")
        self.setMovable(False)
        self.ask = ask
        self.loaded_source: str | None = None
        self._download_samples: list[tuple[float, int]] = []
        self.model_choice = QtWidgets.QComboBox()
        self.model_choice.addItem("bundled (demo model)", BUNDLED)
        self.model_choice.setItemData(0, BUNDLED_DESCRIPTION, QtCore.Qt.ItemDataRole.ToolTipRole)
        for name in HUB_MODELS:
            self.model_choice.addItem(name, name)
        self.model_choice.addItem(OPEN_FOLDER, OPEN_FOLDER)
        self.model_choice.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_choice.setMinimumContentsLength(18)
        self.model_choice.setToolTip("The model to look inside")
        self.model_choice.activated.connect(self._model_chosen)
        self.refresh_cached()
        self.device_choice = QtWidgets.QComboBox()
        self.device_choice.addItems(["auto", "cpu"])
        self.device_choice.setToolTip("Where the model runs; a change applies when you press Load")
        self.pending_device = str(settings.value("model/device", "auto"))
        self.device_choice.currentTextChanged.connect(self._device_changed)
        self.dtype_choice = QtWidgets.QComboBox()
        self.dtype_choice.addItems(["float32", "float16", "bfloat16"])
        self.dtype_choice.setEnabled(False)
        self.dtype_choice.setToolTip("Half precision is offered on a GPU only")
        self.load_button = QtWidgets.QPushButton("Load")
        self.load_button.setToolTip("Load the chosen model on the chosen device")
        self.load_button.clicked.connect(lambda: self.load_requested.emit(self.current_source()))
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.clicked.connect(self._cancel)
        self.cancel_button.hide()
        self.progress = QtWidgets.QProgressBar()
        self.progress.setMaximumWidth(200)
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.progress_label = QtWidgets.QLabel("")
        self.progress_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        for label, widget in (("Model", self.model_choice), ("Device", self.device_choice), ("dtype", self.dtype_choice)):
            self.addWidget(QtWidgets.QLabel(f" {label} "))
            self.addWidget(widget)
        self.addWidget(self.load_button)
        self.addWidget(self.cancel_button)
        self.addWidget(self.progress)
        self.addWidget(self.progress_label)

    # ----------------------------------------------------------------- the model list
    def refresh_cached(self) -> None:
        """Label every hub model with its size and whether it is downloaded (looks at the cache only)."""
        for name in HUB_MODELS:
            index = self.model_choice.findData(name)
            params, download = HUB_SIZES.get(name, ("?", "?"))
            cached = hub_cached(name)
            self.model_choice.setItemText(index, f"{name} · {params} params · {'downloaded' if cached else 'not downloaded'}")
            self.model_choice.setItemData(
                index, f"{name}: {params} parameters; " + ("in the local cache" if cached else
                                                           f"not downloaded yet ({download} to download)"),
                QtCore.Qt.ItemDataRole.ToolTipRole)

    def current_source(self) -> str:
        data = self.model_choice.currentData()
        return self.loaded_source or BUNDLED if data in (None, OPEN_FOLDER) else str(data)

    def show_source(self, source: str) -> None:
        """Select ``source`` in the list, adding a folder that has loaded (never one that has not)."""
        index = self.model_choice.findData(source)
        if index < 0:
            self.model_choice.insertItem(self.model_choice.count() - 1, Path(source).name or source, source)
            index = self.model_choice.findData(source)
            self.model_choice.setItemData(index, source, QtCore.Qt.ItemDataRole.ToolTipRole)
        self.model_choice.setCurrentIndex(index)

    def _model_chosen(self, index: int) -> None:
        source = self.model_choice.itemData(index)
        if source == OPEN_FOLDER:
            self._show_loaded()
            self.open_folder_requested.emit()
            return
        source = str(source)
        if source in HUB_MODELS and not hub_cached(source):
            download = HUB_SIZES.get(source, ("?", "?"))[1]
            if not self.ask(self, "Download a model",
                            f"{source} is not downloaded yet. Download it now ({download})?"):
                self._show_loaded()
                return
        self.load_requested.emit(source)

    def _show_loaded(self) -> None:
        if self.loaded_source is not None:
            self.show_source(self.loaded_source)

    # ----------------------------------------------------------------- devices
    def device(self) -> str:
        return self.device_choice.currentText()

    def dtype(self) -> str:
        return self.dtype_choice.currentText() if self.dtype_choice.isEnabled() else "float32"

    def set_devices(self, devices: list) -> None:
        current = self.pending_device or self.device_choice.currentText()
        self.device_choice.blockSignals(True)
        self.device_choice.clear()
        self.device_choice.addItems([str(d) for d in devices])
        self.device_choice.setCurrentText(current if current in devices else "auto")
        self.device_choice.blockSignals(False)
        self._update_dtype()

    def set_device(self, device: str) -> None:
        """Choose ``device`` (a launch option): listed even before the devices are probed."""
        self.pending_device = device
        if self.device_choice.findText(device) < 0:
            self.device_choice.addItem(device)
        self.device_choice.blockSignals(True)
        self.device_choice.setCurrentText(device)
        self.device_choice.blockSignals(False)
        self._update_dtype()

    def _update_dtype(self) -> None:
        device = self.device()
        gpu = device.startswith(("cuda", "mps")) or (device == "auto" and self.device_choice.count() > 2)
        self.dtype_choice.setEnabled(gpu)
        if not gpu:
            self.dtype_choice.setCurrentText("float32")

    def _device_changed(self, device: str) -> None:
        self.pending_device = device
        self._update_dtype()
        if self.loaded_source is not None:
            self.progress_label.setText(f"press Load to move the model to {device}")

    # ----------------------------------------------------------------- loading
    def loading(self, source: str) -> None:
        self._download_samples = []
        self.progress.setRange(0, 0)  # busy
        self.progress.show()
        self.cancel_button.show()
        self.load_button.setEnabled(False)
        self.progress_label.setText(f"loading {Path(source).name or source}…")

    def show_progress(self, message: str, done, total) -> None:
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

    def _cancel(self) -> None:
        self.cancel_requested.emit()
        self.progress_label.setText("cancelling…")

    def _done(self) -> None:
        self.progress.hide()
        self.cancel_button.hide()
        self.load_button.setEnabled(True)
        self.progress_label.setText("")

    def loaded(self, source: str) -> None:
        self._done()
        self.loaded_source = source
        self.show_source(source)
        self.refresh_cached()

    def load_failed(self) -> None:
        self._done()
        self._show_loaded()
