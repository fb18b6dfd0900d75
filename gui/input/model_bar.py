"""The model bar (a toolbar): which model, on which device and dtype, Load / Cancel, load progress.

It emits ``load_requested(source)`` and ``open_folder_requested``; the window sends loads to the
worker and tells the bar what happened (``loading``, ``progress``, ``loaded``, ``load_failed``). A
folder appears in the Model list only once it has loaded. The list is grouped by family (GPT-2,
Llama-style, GPT-NeoX, BERT-style: a header row each, not selectable); hub models say how big they
are (from ``analysis.model.catalogue.HUB_MODEL_TABLE``; nothing when unknown) and whether they are downloaded;
picking one that is not asks before downloading. ``smollm2`` (SmolLM2-135M-Instruct, first among the
Llama-style decoders) and ``minilm`` (all-MiniLM-L6-v2), each from an optional package, say when they are not
installed, and how to install them.

Below the families, *GGUF files on this computer*: what the background scan found (gui/state/gguf_scanner.py,
set with :meth:`ModelBar.set_gguf_files`), one entry each, ``name · 1.21 GiB · Q4_K_M · Ollama``; a file
AttnScope cannot open is greyed (a disabled item), ends in "· cannot be opened", and has the reason as its
tooltip; picking one loads it by its absolute path, as a folder is loaded. A GGUF opened with *Open GGUF file…*
that the scan did not find joins the group once it has loaded. The group ends with *Open GGUF file…* and *Add model folder…*
(``open_gguf_requested``, ``add_folder_requested``: the window opens the choosers).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from analysis.families import FOLDER_MODELS, family_named
from analysis.model.catalogue import (BUNDLED, HUB_MODEL_TABLE, HUB_MODELS, MINILM, MINILM_MISSING, SMOLLM2,
                                     SMOLLM2_MISSING, SMOLLM2_TITLE, looks_like_gguf)
from analysis.model.gguf_scan import short_bytes

OPEN_FOLDER = "Open folder…"
OPEN_GGUF = "Open GGUF file…"
ADD_FOLDER = "Add model folder…"
ACTIONS = (OPEN_FOLDER, OPEN_GGUF, ADD_FOLDER)  # entries that open a chooser, not a model
GGUF_GROUP = "GGUF files on this computer"
GGUF_LOOKING = "looking for GGUF files…"
GGUF_NONE = "no GGUF files found"
CANNOT_OPEN = "cannot be opened"  # the end of a greyed entry (its tooltip says why)
GGUF_ROLE = QtCore.Qt.ItemDataRole.UserRole + 1  # True on the group's entries (rebuilt after every scan)
GGUF_HEADER_ROLE = QtCore.Qt.ItemDataRole.UserRole + 2  # True on the group's header
#: parameters and download size of each hub model (safetensors weights), from the loading table
HUB_SIZES = {m.name: (m.parameters, m.download) for m in HUB_MODEL_TABLE}
#: the family the packaged MiniLM is listed under
MINILM_FAMILY = family_named("bert").title  # minilm is listed with the BERT-style encoders
SMOLLM2_FAMILY = family_named("llama").title  # smollm2 first among the Llama-style decoders
BUNDLED_DESCRIPTION = ("bundled: a 4-layer × 4-head GPT-2-style model trained offline for this app, with its own "
                       "4,096-token vocabulary and a 256-token context (not OpenAI's GPT-2; see Help → Model card)")


def gguf_source(found) -> str:
    """What picking a found GGUF loads: an Ollama model by its name (``llama3.2:1b``: the window, the status bar
    and summary.json then say that, not the blob's digest), any other file by its absolute path."""
    return found.name if found.where == "Ollama" and found.ok else found.path


@dataclass(frozen=True)
class Packaged:
    """A model an optional package ships, as the list shows it: its entry, its tooltip when installed, and when not
    what installs it (``missing``: the catalogue's sentence, also the dialog's)."""

    name: str
    text: str
    about: str
    install: str
    missing: str


PACKAGED = {
    SMOLLM2: Packaged("SmolLM2-135M-Instruct", f"smollm2 · {SMOLLM2_TITLE} · 135 M params",
                      "SmolLM2-135M-Instruct (a Llama-style decoder, 30 layers × 9 heads, 8k context) from an optional "
                      "package, as a Q4_1 GGUF: its weights dequantized to float32", "make smollm2", SMOLLM2_MISSING),
    MINILM: Packaged("all-MiniLM-L6-v2", "minilm · all-MiniLM-L6-v2 · 22.7 M params",
                     "all-MiniLM-L6-v2 (a BERT, 6 layers × 12 heads) from an optional package", "make minilm",
                     MINILM_MISSING),
}


def package_installed(source: str) -> bool:
    """Whether the package of ``source`` (a key of PACKAGED) is installed (looked up at each call: tests replace
    the two functions below)."""
    return smollm2_installed() if source == SMOLLM2 else minilm_installed()


def smollm2_installed() -> bool:
    from analysis.model.catalogue import smollm2_file

    return smollm2_file() is not None


def minilm_installed() -> bool:
    from analysis.model.catalogue import minilm_folder

    return minilm_folder() is not None


def hub_label(name: str, cached: bool) -> str:
    """A hub model's line in the list: the name, its parameters when known, and whether it is downloaded."""
    params = HUB_SIZES.get(name, ("", ""))[0]
    return " · ".join(part for part in (name, f"{params} params" if params else "",
                                        "downloaded" if cached else "not downloaded") if part)


def hub_cached(name: str) -> bool:
    from analysis.model.hub import is_cached

    return is_cached(name)


#: where a found GGUF lies, in words, for its tooltip
FOUND_IN = {"HF cache": "in the Hugging Face cache", "llama.cpp": "in llama.cpp's cache",
            "LM Studio": "in LM Studio's models", "Ollama": "in Ollama's models", "folder": "in a folder you added"}


def gguf_tooltip(found) -> str:
    """A found GGUF's tooltip: why it cannot be opened, or what it is (its own name, architecture,
    quantization, size); then where it was found."""
    facts = ", ".join(part for part in (found.architecture, found.quantization, short_bytes(found.size)) if part)
    about = found.problem or (f"{found.title} ({facts})" if found.title else facts)
    return f"{about}\nFound {FOUND_IN.get(found.where, 'here')}: {found.path}"


def ask(parent, title: str, text: str, info: bool = False) -> bool:
    """A yes/no question, or with ``info`` a message with OK (tests replace ``ModelBar.ask``)."""
    buttons = QtWidgets.QMessageBox.StandardButton
    if info:
        QtWidgets.QMessageBox.information(parent, title, text)
        return True
    return QtWidgets.QMessageBox.question(parent, title, text, buttons.Yes | buttons.No, buttons.Yes) == buttons.Yes


class ElidedComboBox(QtWidgets.QComboBox):
    """A combo box whose closed face shows the current item elided with "…" when it is wider than the box (a
    plain QComboBox clips it: "minilm · all-MiniLM-L6-v2 · 2" read as a wrong size); the list shows it whole."""

    def shown_text(self) -> str:
        """The current item's text as the closed box draws it."""
        option = QtWidgets.QStyleOptionComboBox()
        self.initStyleOption(option)
        room = self.style().subControlRect(QtWidgets.QStyle.ComplexControl.CC_ComboBox, option,
                                           QtWidgets.QStyle.SubControl.SC_ComboBoxEditField, self).width()
        return self.fontMetrics().elidedText(self.currentText(), QtCore.Qt.TextElideMode.ElideRight, max(0, room - 4))

    def paintEvent(self, _event):  # noqa: N802
        painter = QtWidgets.QStylePainter(self)
        option = QtWidgets.QStyleOptionComboBox()
        self.initStyleOption(option)
        option.currentText = self.shown_text()
        painter.drawComplexControl(QtWidgets.QStyle.ComplexControl.CC_ComboBox, option)
        painter.drawControl(QtWidgets.QStyle.ControlElement.CE_ComboBoxLabel, option)


class ModelBar(QtWidgets.QToolBar):
    load_requested = QtCore.Signal(str)  # a source: bundled, a hub id, a folder, a GGUF file's absolute path
    open_folder_requested = QtCore.Signal()
    open_gguf_requested = QtCore.Signal()
    add_folder_requested = QtCore.Signal()
    cancel_requested = QtCore.Signal()

    def __init__(self, settings: QtCore.QSettings, parent=None):
        super().__init__("Model", parent)
        self.setObjectName("model-bar")
        self.setMovable(False)
        self.ask = ask
        self.loaded_source: str | None = None
        self._download_samples: list[tuple[float, int]] = []
        self.model_choice = ElidedComboBox()
        self.model_choice.addItem("bundled (demo model)", BUNDLED)
        self.model_choice.setItemData(0, BUNDLED_DESCRIPTION, QtCore.Qt.ItemDataRole.ToolTipRole)
        families = list(dict.fromkeys(m.group for m in HUB_MODEL_TABLE))
        for family in families:
            self.model_choice.insertSeparator(self.model_choice.count())
            self._add_header(family)
            if family == SMOLLM2_FAMILY:
                self.model_choice.addItem(SMOLLM2_TITLE, SMOLLM2)
            for model in HUB_MODEL_TABLE:
                if model.group == family:
                    self.model_choice.addItem(model.name, model.name)
            if family == MINILM_FAMILY:
                self.model_choice.addItem(MINILM, MINILM)
        self.model_choice.insertSeparator(self.model_choice.count())
        self._add_header(GGUF_GROUP)
        self.model_choice.setItemData(self.model_choice.count() - 1, True, GGUF_HEADER_ROLE)
        self.model_choice.addItem(OPEN_GGUF, OPEN_GGUF)
        self.model_choice.setItemData(self.model_choice.count() - 1, "Open a .gguf model file (llama.cpp's format)",
                                      QtCore.Qt.ItemDataRole.ToolTipRole)
        self.model_choice.addItem(ADD_FOLDER, ADD_FOLDER)
        self.model_choice.setItemData(self.model_choice.count() - 1, "A folder whose GGUF files are listed here too "
                                      "(File → Model folders… removes one)", QtCore.Qt.ItemDataRole.ToolTipRole)
        self._gguf_found: dict[str, object] = {}  # source (gguf_source) → FoundGguf, of the latest scan
        self._gguf_opened: list[str] = []  # GGUF files loaded that no scan found
        self._gguf_scanned = False
        self._gguf_places: tuple = ()  # the places the latest scan looked in
        self.model_choice.insertSeparator(self.model_choice.count())
        self.model_choice.addItem(OPEN_FOLDER, OPEN_FOLDER)
        self.model_choice.setItemData(self.model_choice.count() - 1, f"Open a model folder: {FOLDER_MODELS} "
                                      "(config.json and safetensors, as save_pretrained writes them)",
                                      QtCore.Qt.ItemDataRole.ToolTipRole)
        self.model_choice.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_choice.setMinimumContentsLength(18)
        self.model_choice.setToolTip("The model to look inside")
        self.model_choice.activated.connect(self._model_chosen)
        self.refresh_cached()
        self._fill_gguf_group()
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
        self.progress = QtWidgets.QProgressBar()
        self.progress.setMaximumWidth(200)
        self.progress.setTextVisible(True)
        self.progress_label = QtWidgets.QLabel("")
        self.progress_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        for label, widget in (("Model", self.model_choice), ("Device", self.device_choice), ("dtype", self.dtype_choice)):
            self.addWidget(QtWidgets.QLabel(f" {label} "))
            self.addWidget(widget)
        self.addWidget(self.load_button)
        # a toolbar shows a widget through its action: the widget's own show() after it was hidden does nothing
        self.cancel_action = self.addWidget(self.cancel_button)
        self.progress_action = self.addWidget(self.progress)
        self.cancel_action.setVisible(False)
        self.progress_action.setVisible(False)
        self.addWidget(self.progress_label)

    # ----------------------------------------------------------------- the model list
    def _add_header(self, title: str) -> None:
        """A family's title in the list: bold, neither selectable nor enabled."""
        self.model_choice.addItem(title, None)
        item = self.model_choice.model().item(self.model_choice.count() - 1)
        item.setFlags(QtCore.Qt.ItemFlag.NoItemFlags)
        font = QtGui.QFont(item.font())
        font.setBold(True)
        item.setFont(font)

    def refresh_cached(self) -> None:
        """Label every hub model with its size and whether it is downloaded (looks at the cache only), and
        say whether the packaged MiniLM is installed."""
        for name in HUB_MODELS:
            index = self.model_choice.findData(name)
            params, download = HUB_SIZES.get(name, ("", ""))
            cached = hub_cached(name)
            self.model_choice.setItemText(index, hub_label(name, cached))
            size = f"{params} parameters; " if params else ""
            self.model_choice.setItemData(
                index, f"{name}: {size}" + ("in the local cache" if cached else
                                            f"not downloaded yet ({download} to download)" if download
                                            else "not downloaded yet"),
                QtCore.Qt.ItemDataRole.ToolTipRole)
        for source, packaged in PACKAGED.items():
            index = self.model_choice.findData(source)
            installed = package_installed(source)
            self.model_choice.setItemText(index, f"{packaged.text} · " + (
                "installed" if installed else f"not installed ({packaged.install})"))
            self.model_choice.setItemData(index, packaged.about if installed else packaged.missing,
                                          QtCore.Qt.ItemDataRole.ToolTipRole)

    # ----------------------------------------------------------------- GGUF files on this computer
    def gguf_scanning(self) -> None:
        """A scan has started: the group says so until its answer comes (the entries found before stay)."""
        self._fill_gguf_group(looking=True)

    def set_gguf_files(self, result) -> None:
        """Show what a scan found (an ``analysis.model.gguf_scan.ScanResult``): one entry per file, in its order."""
        self._gguf_found = {gguf_source(f): f for f in result.files}
        self._gguf_places = tuple(result.looked_in)
        self._gguf_scanned = True
        self._fill_gguf_group()

    def gguf_entries(self) -> list[tuple[str, str, bool, str]]:
        """The group's entries as shown: (text, path or None, enabled, tooltip) — for tests and screenshots."""
        c = self.model_choice
        return [(c.itemText(i), c.itemData(i), bool(c.model().item(i).flags() & QtCore.Qt.ItemFlag.ItemIsEnabled),
                 c.itemData(i, QtCore.Qt.ItemDataRole.ToolTipRole) or "")
                for i in range(c.count()) if c.itemData(i, GGUF_ROLE)]

    def _fill_gguf_group(self, looking: bool = False) -> None:
        """Rebuild the entries between the group's header and Open GGUF file…, keeping the current choice."""
        c = self.model_choice
        current = c.currentData()
        for i in reversed(range(c.count())):
            if c.itemData(i, GGUF_ROLE):
                c.removeItem(i)
        at = c.findData(OPEN_GGUF)
        rows = [(f.label if f.ok else f"{f.label} · {CANNOT_OPEN}", source, f.ok, gguf_tooltip(f))
                for source, f in self._gguf_found.items()]
        rows += [(f"{Path(p).name} · opened", p, True, p) for p in self._gguf_opened if p not in self._gguf_found]
        if not rows:
            places = "; ".join(f"{p.where}: {p.path}" for p in self._gguf_places)
            rows = [(GGUF_LOOKING if looking or not self._gguf_scanned else GGUF_NONE, None, False,
                     "AttnScope looks in the Hugging Face cache, llama.cpp's cache, LM Studio's and Ollama's model "
                     "folders and the folders you add" + (f" (looked in: {places})" if places else ""))]
        for offset, (text, path, enabled, tip) in enumerate(rows):
            c.insertItem(at + offset, text, path)
            c.setItemData(at + offset, True, GGUF_ROLE)
            c.setItemData(at + offset, tip, QtCore.Qt.ItemDataRole.ToolTipRole)
            if not enabled:
                item = c.model().item(at + offset)
                item.setFlags(item.flags() & ~(QtCore.Qt.ItemFlag.ItemIsEnabled | QtCore.Qt.ItemFlag.ItemIsSelectable))
        header = c.findData(True, GGUF_HEADER_ROLE)
        c.setItemText(header, f"{GGUF_GROUP} (looking…)" if looking and self._gguf_scanned else GGUF_GROUP)
        index = c.findData(current) if current is not None else -1
        if index >= 0 and c.currentIndex() != index:
            c.setCurrentIndex(index)
        elif index < 0 and self.loaded_source is not None and c.findData(self.loaded_source) >= 0:
            c.setCurrentIndex(c.findData(self.loaded_source))

    def _is_gguf(self, source: str) -> bool:
        return source in self._gguf_found or looks_like_gguf(Path(source))

    # ----------------------------------------------------------------- choosing
    def current_source(self) -> str:
        data = self.model_choice.currentData()
        return self.loaded_source or BUNDLED if data is None or data in ACTIONS else str(data)

    def sources(self) -> list[str]:
        """Every model the list offers, in order (headers, notes, greyed files and the entries that open a chooser
        left out)."""
        c, enabled = self.model_choice, QtCore.Qt.ItemFlag.ItemIsEnabled
        items = (c.itemData(i) for i in range(c.count()) if c.model().item(i).flags() & enabled)
        return [str(d) for d in items if d is not None and d not in ACTIONS]

    def show_source(self, source: str) -> None:
        """Select ``source`` in the list, adding a folder or GGUF file that has loaded (never one that has not)."""
        index = self.model_choice.findData(source)
        if index < 0 and self._is_gguf(source):
            self._gguf_opened.append(source)
            self._fill_gguf_group()
            index = self.model_choice.findData(source)
        if index < 0:
            self.model_choice.insertItem(self.model_choice.count() - 1, Path(source).name or source, source)
            index = self.model_choice.findData(source)
            self.model_choice.setItemData(index, source, QtCore.Qt.ItemDataRole.ToolTipRole)
        self.model_choice.setCurrentIndex(index)

    def _model_chosen(self, index: int) -> None:
        source = self.model_choice.itemData(index)
        enabled = bool(self.model_choice.model().item(index).flags() & QtCore.Qt.ItemFlag.ItemIsEnabled)
        if source is None or not enabled:  # a family's header, a note, a GGUF file AttnScope cannot open
            self._show_loaded()
            return
        if source in ACTIONS:
            self._show_loaded()
            {OPEN_FOLDER: self.open_folder_requested, OPEN_GGUF: self.open_gguf_requested,
             ADD_FOLDER: self.add_folder_requested}[source].emit()
            return
        source = str(source)
        if source in PACKAGED and not package_installed(source):
            self._show_loaded()
            self.ask(self, f"{PACKAGED[source].name} is not installed", PACKAGED[source].missing, info=True)
            return
        if source in HUB_MODELS and not hub_cached(source):
            download = HUB_SIZES.get(source, ("", ""))[1]
            if not self.ask(self, "Download a model", f"{source} is not downloaded yet. Download it now"
                            + (f" ({download})?" if download else "?")):
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
        if self.model_choice.findData(source) >= 0:  # the list says what is loading (back to the loaded one if it fails)
            self.model_choice.setCurrentIndex(self.model_choice.findData(source))
        self.progress.setRange(0, 0)  # busy
        self.progress_action.setVisible(True)
        self.cancel_action.setVisible(True)
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
        self.progress_action.setVisible(False)
        self.cancel_action.setVisible(False)
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
