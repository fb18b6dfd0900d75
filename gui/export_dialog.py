"""The Export… dialog: what to export, the format, the PNG size, and where."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtWidgets

CHOICES = [
    ("head", "Current head (one file)"),
    ("grid", "All heads as one grid (one file)"),
    ("heads", "Every head, one file each (a folder)"),
    ("data", "Data: attention.npz, scores.csv, result.json (a folder)"),
]
FILE_FORMATS = {"head": ("png", "svg", "pdf", "npz", "csv", "json"), "grid": ("png", "svg", "pdf", "npz", "csv", "json"),
                "heads": ("png", "svg", "pdf"), "data": ()}


class ExportDialog(QtWidgets.QDialog):
    def __init__(self, parent, settings: QtCore.QSettings):
        super().__init__(parent)
        self.setWindowTitle("Export")
        self.settings = settings
        self.what_choice = QtWidgets.QComboBox()
        for key, label in CHOICES:
            self.what_choice.addItem(label, key)
        self.format_choice = QtWidgets.QComboBox()
        self.width_spin = QtWidgets.QSpinBox()
        self.width_spin.setRange(200, 12000)
        self.width_spin.setSingleStep(200)
        self.width_spin.setSuffix(" px")
        self.width_spin.setValue(int(settings.value("export/png_width", 1600)))
        self.path_edit = QtWidgets.QLineEdit(str(settings.value("export/folder", str(Path.home()))))
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

    def _what_changed(self) -> None:
        formats = FILE_FORMATS[self.what()]
        self.format_choice.clear()
        self.format_choice.addItems(formats)
        self.format_choice.setEnabled(bool(formats))
        self._format_changed(self.format_choice.currentText())

    def _format_changed(self, fmt: str) -> None:
        self.width_spin.setEnabled(fmt == "png")
        path = Path(self.path() or Path.home())
        folder = path.parent if path.suffix else path
        if self.what() in ("head", "grid") and fmt:
            self.path_edit.setText(str(folder / f"attnscope-{self.what()}.{fmt}"))
        else:
            self.path_edit.setText(str(folder / "attnscope-export"))

    def _browse(self) -> None:
        if self.what() in ("head", "grid"):
            fmt = self.image_format()
            path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export to", self.path(), f"*.{fmt}")
        else:
            path = QtWidgets.QFileDialog.getExistingDirectory(self, "Export into folder", self.path())
        if path:
            self.path_edit.setText(path)

    def accept(self) -> None:
        self.settings.setValue("export/png_width", self.png_width())
        path = Path(self.path())
        self.settings.setValue("export/folder", str(path.parent if path.suffix else path))
        super().accept()
