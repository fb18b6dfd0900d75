"""The Export… dialog: what to export, the format, the PNG width, and where.

The destination is a folder plus a name that says what the file holds (``L0H1.png``, ``grid.svg``,
``attnscope-heads/``); changing what or the format changes only the name, never the folder."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtWidgets

from analysis.display import head_name
from analysis.export.formats import DATA_FORMATS, IMAGE_FORMATS

FRONT = "front"  # the figure of the tab in front, as Copy figure copies it
CHOICES = [
    ("head", "Current head (one file)"),
    ("grid", "All heads as one grid (one file)"),
    ("heads", "Every head, one image each, and the grid (a folder)"),
    ("data", "Data: attention.npz, scores.csv, parity.json (a folder)"),
    ("everything", "Everything, like `main.py export`: data, grid and every head (a folder)"),
]
FOLDER_KINDS = ("heads", "data", "everything")
DEFAULT_PNG_WIDTH = 1600  # pixels; Copy figure copies at the width last chosen here
# the formats each kind offers, from the format table (a data format says whether the grid offers it)
FORMATS = {"head": IMAGE_FORMATS + tuple(DATA_FORMATS),
           "grid": IMAGE_FORMATS + tuple(name for name, fmt in DATA_FORMATS.items() if fmt.for_grid),
           "heads": IMAGE_FORMATS, "data": (), "everything": IMAGE_FORMATS, FRONT: IMAGE_FORMATS}


def default_name(what: str, fmt: str, layer: int = 0, head: int = 0, front: str = "") -> str:
    """The file or folder name that says what an export holds (``front``: the title of the tab in front)."""
    if what == FRONT:
        slug = "-".join("".join(c if c.isalnum() else " " for c in front.lower()).split()) or "figure"
        return f"{slug}.{fmt}"
    if what == "head":
        return f"{head_name(layer, head)}.{fmt}"
    if what == "grid":
        return f"grid.{fmt}"
    return {"heads": "attnscope-heads", "data": "attnscope-data", "everything": "attnscope-export"}[what]


class ExportDialog(QtWidgets.QDialog):
    """``front``: the title of the tab in front when it has a figure (offered as "The figure in front"),
    else "". The last export type chosen is remembered (``export/what``)."""

    def __init__(self, parent, settings: QtCore.QSettings, layer: int = 0, head: int = 0, front: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Export")
        self.settings = settings
        self.layer, self.head, self.front = layer, head, front
        self.what_choice = QtWidgets.QComboBox()
        for key, label in CHOICES:
            self.what_choice.addItem(label, key)
        if front:
            self.what_choice.insertItem(0, f"The figure in front ({front}), as Copy figure copies it", FRONT)
        self.format_choice = QtWidgets.QComboBox()
        self.width_spin = QtWidgets.QSpinBox()
        self.width_spin.setRange(200, 12000)
        self.width_spin.setSingleStep(200)
        self.width_spin.setSuffix(" px")
        self.width_spin.setToolTip("Width of every PNG written (each head, the grid)")
        self.width_spin.setValue(int(settings.value("export/png_width", DEFAULT_PNG_WIDTH)))
        folder = Path(str(settings.value("export/folder", str(Path.home()))))
        self.path_edit = QtWidgets.QLineEdit(str(folder / default_name("head", "png", layer, head)))
        self.path_edit.setMinimumWidth(380)
        browse = QtWidgets.QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        path_row = QtWidgets.QHBoxLayout()
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(browse)
        form = QtWidgets.QFormLayout()
        form.addRow("Export", self.what_choice)
        form.addRow("Format", self.format_choice)
        form.addRow("PNG width", self.width_spin)
        form.addRow("To", path_row)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Ok
                                             | QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(buttons)
        last = self.what_choice.findData(str(settings.value("export/what", "head")))
        self.what_choice.setCurrentIndex(max(0, last))
        self.what_choice.currentIndexChanged.connect(self._what_changed)
        self.format_choice.currentTextChanged.connect(self._format_changed)
        self._what_changed()

    def what(self) -> str:
        return self.what_choice.currentData()

    def image_format(self) -> str:
        return self.format_choice.currentText() or "png"

    def png_width(self) -> int:
        return self.width_spin.value()

    def path(self) -> str:
        return self.path_edit.text().strip()

    def folder(self) -> Path:
        """The folder the export goes into (the path without its name)."""
        return Path(self.path() or Path.home() / "x").expanduser().parent

    def _what_changed(self) -> None:
        formats = FORMATS[self.what()]
        self.format_choice.blockSignals(True)
        self.format_choice.clear()
        self.format_choice.addItems(formats)
        self.format_choice.blockSignals(False)
        self.format_choice.setEnabled(bool(formats))
        self._format_changed(self.format_choice.currentText())

    def _format_changed(self, fmt: str) -> None:
        self.width_spin.setEnabled(fmt == "png")
        self.path_edit.setText(str(self.folder() / default_name(self.what(), fmt or "png", self.layer, self.head,
                                                                    self.front)))

    def _browse(self) -> None:
        if self.what() in FOLDER_KINDS:
            path = QtWidgets.QFileDialog.getExistingDirectory(self, "Export into a new folder in", str(self.folder()))
            if path:
                self.path_edit.setText(str(Path(path) / Path(self.path()).name))
        else:
            fmt = self.image_format()
            path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export to", self.path(), f"*.{fmt}")
            if path:
                self.path_edit.setText(path)

    def accept(self) -> None:
        self.settings.setValue("export/png_width", self.png_width())
        self.settings.setValue("export/folder", str(self.folder()))
        self.settings.setValue("export/what", self.what())
        super().accept()
