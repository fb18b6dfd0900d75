"""What every Circuits page shares: the key its results belong to (gui/tabs/circuits/result_tie.py), a line for
messages, and the Copy as code / Save map buttons. A page holds what it shows in ``self.shown`` (a frozen record
of the result and where it came from) and builds its snippet and map file from that alone."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from .page_data import write_map

ERROR_STYLE = "color: #8a1020;"


def wrapped_label(text: str = "") -> QtWidgets.QLabel:
    label = QtWidgets.QLabel(text)
    label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    return label


class Page(QtWidgets.QWidget):
    """A page of the Circuits tab. Subclasses set ``shown`` and implement ``code()``, ``map_data()`` (values, row and
    column labels, corner label, the result's dict), ``metadata()`` and ``offscreen_figure()``."""

    head_activated = QtCore.Signal(int, int)
    title = ""

    def __init__(self, state, worker, tie, parent=None):
        super().__init__(parent)
        self.state, self.worker, self.tie = state, worker, tie
        self.shown = None
        self.message_is_error = False  # the line says what was wrong with the inputs: editing them clears it
        self.message = wrapped_label(" ")  # always there, a line high: a message never pushes the map down
        self.message.setMinimumHeight(self.message.fontMetrics().lineSpacing())
        self.copy_button = QtWidgets.QPushButton("Copy as code")
        self.copy_button.setToolTip("Copy a short Python snippet (AttnScope's analysis API) that computes the numbers "
                                    "shown here")
        self.copy_button.clicked.connect(self.copy_code)
        self.save_button = QtWidgets.QPushButton("Save map…")
        self.save_button.setToolTip("Save the map shown as CSV (a table) or JSON (every number of the result)")
        self.save_button.clicked.connect(self._ask_save)
        self._update_buttons()

    def add_run_controls(self, label: str, tip: str = "", progress_px: int = 170) -> None:
        """``run_button`` (``label``, runs :meth:`run`), ``cancel_button`` (cancels ``self.job``; off until a run) and
        ``progress`` (hidden, keeping its room so the row does not move; ``progress_px`` wide at least) of a page whose
        computation runs on the worker."""
        self.run_button = QtWidgets.QPushButton(label)
        if tip:
            self.run_button.setToolTip(tip)
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.job.cancel)
        self.progress = QtWidgets.QProgressBar()
        self.progress.setMinimumWidth(progress_px)
        policy = self.progress.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.progress.setSizePolicy(policy)
        self.progress.hide()

    def buttons_after(self, *controls: QtWidgets.QWidget) -> QtWidgets.QHBoxLayout:
        """A row of ``controls`` (a str is a label), then room, then Copy as code and Save map at the right."""
        row = QtWidgets.QHBoxLayout()
        for control in controls:
            row.addWidget(QtWidgets.QLabel(control) if isinstance(control, str) else control)
        row.addStretch(1)
        row.addWidget(self.copy_button)
        row.addWidget(self.save_button)
        return row

    def lay_out(self, *parts, main: QtWidgets.QWidget) -> QtWidgets.QVBoxLayout:
        """The page top to bottom: ``parts`` (layouts or widgets, the message line among them where it goes), then
        ``main`` (the map or table), which takes the height left."""
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        for part in parts:
            if isinstance(part, QtWidgets.QLayout):
                layout.addLayout(part)
            else:
                layout.addWidget(part)
        layout.addWidget(main, 1)
        return layout

    def _update_buttons(self) -> None:
        self.copy_button.setEnabled(self.shown is not None)
        self.save_button.setEnabled(self.shown is not None)

    def inputs_edited(self) -> None:
        """An input changed: an error about the inputs as they were no longer applies (walk 6 saw "' Weasley' must
        be a single token" stay after another example had replaced it)."""
        if self.message_is_error:
            self.show_message("")

    def has_message(self) -> bool:
        return bool(self.message.text().strip())

    def show_message(self, text: str, error: bool = False) -> None:
        self.message_is_error = bool(text) and error
        self.message.setStyleSheet(ERROR_STYLE if error else "")
        self.message.setText(text or " ")

    # ----------------------------------------------------------------- copy and save
    def code(self) -> str:
        raise NotImplementedError

    def copy_code(self) -> str:
        """Put :meth:`code` on the clipboard; returns it ("" when nothing is shown)."""
        if self.shown is None:
            return ""
        text = self.code()
        QtGui.QGuiApplication.clipboard().setText(text)
        self.show_message("Copied a Python snippet that computes these numbers (run it from the AttnScope folder).")
        return text

    def map_data(self):
        raise NotImplementedError

    def save_map(self, path) -> Path | None:
        """Write the map shown to ``path`` (.csv or .json); None when nothing is shown."""
        if self.shown is None:
            return None
        values, rows, columns, corner, data = self.map_data()
        r = self.state.result
        meta = {"attnscope": f"Circuits › {self.title}", "model": r.model_label if r is not None else "",
                **self.metadata()}
        try:
            return write_map(Path(path), values, rows, columns, corner, data, meta)
        except OSError as exc:
            self.show_message(f"The map could not be saved to {path}: {exc.strerror or exc}.", error=True)
            return None

    def metadata(self) -> dict:
        """What the map was computed from, for the file's header (the text or prompts, the metric); the model and
        the page are added by :meth:`save_map`."""
        return {}

    def _ask_save(self) -> None:
        name = f"{self.title.lower().replace(' ', '_')}.csv"  # in the home folder, not wherever the app was started
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Save map", str(Path.home() / name),
                                                        "CSV table (*.csv);;JSON (*.json)")
        if path:
            saved = self.save_map(path)
            if saved is not None:
                self.show_message(f"Saved {saved}.")

    def offscreen_figure(self):
        return None
