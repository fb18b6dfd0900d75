"""The Figure… dialog (File › Figure…): a figure for a paper or a slide, every option of ``main.py figure`` in plain
words (gui/export/figure_form.py), a live preview drawn as the saved file is (figure_preview.py), Save… (PNG, SVG
or PDF, and its options JSON beside it; figure_saving.py) and Load options… (a figure's JSON back into the fields).

It starts from what is on screen (:func:`figure_form.starting_options`) and always draws the current result: options
loaded from another text or model keep this one's. One line under the preview says what happened: the refusal of
an option ("The token range 5:5 is empty; …"), or "Wrote X and X.json"."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtWidgets

from analysis.errors import InputError
from analysis.export.figure_options import FigureOptions
from analysis.export.formats import IMAGE_FORMATS

from .figure_form import FigureForm, starting_options
from .figure_preview import FigurePreview
from .figure_saving import FigureSaver

FORM_WIDTH = 430  # logical pixels of the options column (its scroll area)


class FigureDialog(QtWidgets.QDialog):
    """``state``: the ViewState (its result and selection); ``source``: the model as ``main.py figure --model``
    names it; ``settings``: remembers the folder last saved into (``figure/folder``)."""

    def __init__(self, parent, state, worker, settings: QtCore.QSettings, source: str):
        super().__init__(parent)
        self.setWindowTitle("Figure")
        self.settings = settings
        self.shown_result = state.result
        r = self.shown_result
        self.form = FigureForm(r.n_layer, r.n_head, r.n_tokens)
        self.preview = FigurePreview(r)
        self.saver = FigureSaver(worker, self)
        self._refusal = ""  # the preview's refusal on show, if any
        self.message = QtWidgets.QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        scroll = QtWidgets.QScrollArea()
        scroll.setWidget(self.form)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(FORM_WIDTH)
        self.load_button = QtWidgets.QPushButton("Load options…")
        self.load_button.setToolTip("Read a figure's options (the JSON written beside it) into the fields")
        self.save_button = QtWidgets.QPushButton("Save…")
        self.save_button.setDefault(True)
        self.save_button.setToolTip("Write the figure (PNG, SVG or PDF) and its options JSON beside it")
        close = QtWidgets.QPushButton("Close")
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.load_button)
        buttons.addStretch(1)
        buttons.addWidget(self.save_button)
        buttons.addWidget(close)
        right = QtWidgets.QVBoxLayout()
        right.addWidget(self.preview, 1)
        right.addWidget(self.message)
        top = QtWidgets.QHBoxLayout()
        top.addWidget(scroll)
        top.addLayout(right, 1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(top, 1)
        layout.addLayout(buttons)
        self.form.changed.connect(self._changed)
        self.preview.refused.connect(self._refused)
        self.preview.drawn.connect(self._drawn)
        self.saver.finished.connect(self._saved)
        self.saver.failed.connect(self._save_failed)
        self.load_button.clicked.connect(self.load_options)
        self.save_button.clicked.connect(self.ask_save)
        close.clicked.connect(self.reject)
        self.form.set_options(starting_options(state, source))
        screen = (parent.screen() if parent is not None else self.screen()).availableGeometry()
        self.resize(min(1100, screen.width() - 40), min(960, screen.height() - 60))

    def options(self) -> FigureOptions:
        return self.form.options()

    def show_message(self, text: str) -> None:
        self.message.setText(text)
        self._refusal = ""

    def _refused(self, text: str) -> None:
        self.show_message(text)
        self._refusal = text

    def _drawn(self, _ms: float) -> None:
        """A drawing after a refusal: the options read again, so the refusal goes (a "Wrote …" line stays)."""
        if self._refusal and self.message.text() == self._refusal:
            self.show_message("")

    def _changed(self) -> None:
        self.preview.request(self.form.options)

    # ----------------------------------------------------------------- saving
    def default_path(self, fmt: str = "png") -> Path:
        """The folder saved into last, and a name that says what the figure shows (L0H1.png, grid.png)."""
        folder = Path(str(self.settings.value("figure/folder", str(Path.home()))))
        try:
            heads = self.options().heads
        except InputError:
            heads = ()
        name = "grid" if not heads else "-".join(f"L{l}H{h}" for l, h in heads[:4])
        return folder / f"{name}.{fmt}"

    def ask_save(self) -> None:
        try:
            self.options()
        except InputError as exc:
            self.show_message(str(exc))
            return
        filters = ";;".join(f"{f.upper()} (*.{f})" for f in IMAGE_FORMATS)
        path, chosen = QtWidgets.QFileDialog.getSaveFileName(self, "Save the figure", str(self.default_path()),
                                                             filters)
        if not path:
            return  # cancelled: nothing written
        if not Path(path).suffix and chosen:
            path += "." + chosen.split("(*.")[-1].rstrip(")")
        self.save(path)

    def save(self, path) -> bool:
        """Save the figure the fields say to ``path`` (its format by the extension), with its JSON beside it."""
        try:
            options = self.options()
        except InputError as exc:
            self.show_message(str(exc))
            return False
        self.show_message("Saving…")
        self.save_button.setEnabled(False)
        started = self.saver.save(self.shown_result, options, path)
        if started:
            self.settings.setValue("figure/folder", str(Path(path).expanduser().parent))
        return started

    def _saved(self, line: str) -> None:
        self.save_button.setEnabled(True)
        self.show_message(line)

    def _save_failed(self, message: str) -> None:
        self.save_button.setEnabled(True)
        self.show_message(message)

    # ----------------------------------------------------------------- loading
    def load_options(self) -> None:
        folder = str(self.settings.value("figure/folder", str(Path.home())))
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Load a figure's options", folder, "JSON (*.json)")
        if path:
            self.load(path)

    def load(self, path) -> bool:
        """Read the figure options at ``path`` into the fields (this result's model, text and BOS kept)."""
        try:
            loaded = FigureOptions.read(Path(path))
        except InputError as exc:
            self.show_message(str(exc))
            return False
        base = self.form._base
        other = loaded.text != base.text
        self.form.set_options(loaded.with_(model=base.model, text=base.text, bos=base.bos))
        notes = ["it was of another text, drawn here of this one"] if other else []
        self.show_message(f"Read {Path(path).name}" + ("; " + "; ".join(notes) if notes else "") + ".")
        return True


def open_figure_dialog(window) -> None:
    """File › Figure…: the dialog over ``window`` (a MainWindow), of its current result."""
    if window.state.bundle is None:
        window.show_error("Nothing to draw yet: run a text first.")
        return
    source = window.model_bar.loaded_source or window.state.result.model_label
    dialog = FigureDialog(window, window.state, window.worker, window.settings, str(source))
    window.figure_dialog = dialog  # tests reach it while it is open
    try:
        dialog.exec()
    finally:
        window.figure_dialog = None
        dialog.deleteLater()
