"""Scores over many texts…: choose the texts (the bundled sample, a file with one text per line, or a
folder of .txt files), then run ``analysis.measures.scan.scan_texts`` on the worker with progress and Cancel.

The texts are read on the worker too (``analysis.measures.scan_inputs.read_texts``: a large file never freezes the
window), so a bad path comes back as the worker's one-sentence failure, shown in the dialog. The
finished scan is handed on with ``scan_ready(scan, source)``; the Head scores tab shows it.

The scan's progress comes through this dialog's job, so the dialog outlives the scan: closing it while
the worker still runs one (or one the dialog dropped) hides it, stops the scan, and closes it for good
once the worker has let the scan go; a stopped scan reports no progress.
"""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtWidgets

from analysis.errors import InputError
from analysis.measures.scan import DEFAULT_BATCH
from analysis.measures.scan_inputs import SAMPLE_TEXTS, read_texts

from ...state.jobs import Job

DEFAULT_MAX_TEXTS = 1000


def _sample_count() -> int:
    try:
        return len(read_texts(SAMPLE_TEXTS))  # as the scan will read it
    except InputError:
        return 0


class ScanDialog(QtWidgets.QDialog):
    """Where the texts come from, how many, then a progress bar and Cancel. ``bos`` is the BOS choice
    of the text on screen (None: the model's default) and ``chat`` its chat format (each text then runs as one user
    turn of the model's chat template), so the scan's scores compare with the table's."""

    scan_ready = QtCore.Signal(object, str)  # ScanResult, where its texts came from (in words)

    def __init__(self, worker, bos: bool | None = None, parent=None, max_tokens: int | None = None,
                 chat: bool = False):
        super().__init__(parent)
        self.setWindowTitle("Scores over many texts")
        self.bos, self.max_tokens = bos, max_tokens  # max_tokens: the token cap (None: the default)
        self.chat = bool(chat)
        self._in_flight = 0  # the latest scan's request until the worker has let it go (dropped or not)
        self._close_when_done = False
        worker.task_done.connect(self._worker_done)
        worker.failed.connect(self._worker_failed)
        self.job = Job(worker, "scan", self)
        self.job.progressed.connect(self._progressed)
        self.job.finished.connect(self._finished)
        self.job.failed.connect(lambda message: self._stopped(message, error=True))
        self.job.cancelled.connect(self._cancelled)
        self._user_cancelled = False  # the latest scan was stopped by Cancel (else by a new model's load)
        worker.model_loaded.connect(self._model_changed)
        self._source_text = ""

        count = _sample_count()
        self.sample_radio = QtWidgets.QRadioButton(f"The bundled sample: {count} varied sentences")
        self.sample_radio.setToolTip(str(SAMPLE_TEXTS))
        self.file_radio = QtWidgets.QRadioButton("A text file (one text per line) or a folder of .txt files:")
        self.sample_radio.setChecked(True)
        self.path_edit = QtWidgets.QLineEdit()
        self.path_edit.setPlaceholderText("a .txt file, or a folder")
        self.path_edit.textEdited.connect(lambda _: self.file_radio.setChecked(True))
        self.file_button = file_button = QtWidgets.QPushButton("File…")
        file_button.clicked.connect(self._choose_file)
        self.folder_button = folder_button = QtWidgets.QPushButton("Folder…")
        folder_button.clicked.connect(self._choose_folder)
        for button in (file_button, folder_button):  # Enter is Scan's (the default), even when one has the focus
            button.setAutoDefault(False)
        path_row = QtWidgets.QHBoxLayout()
        path_row.setContentsMargins(20, 0, 0, 0)
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(file_button)
        path_row.addWidget(folder_button)

        self.max_spin = QtWidgets.QSpinBox()
        self.max_spin.setRange(1, 1_000_000)
        self.max_spin.setValue(DEFAULT_MAX_TEXTS)
        self.max_spin.setToolTip("Scan at most this many texts (the first ones)")
        self.batch_spin = QtWidgets.QSpinBox()
        self.batch_spin.setRange(1, 256)
        self.batch_spin.setValue(DEFAULT_BATCH)
        self.batch_spin.setToolTip("Texts run together in one forward pass (padded, with an attention mask: "
                                   "the scores equal one-at-a-time runs)")
        form = QtWidgets.QFormLayout()
        form.addRow("At most", self.max_spin)
        form.addRow("Batch", self.batch_spin)
        bos_text = {None: "the model's default", True: "prepended, as for the text on screen",
                    False: "not prepended, as for the text on screen"}[bos]
        if self.chat:
            bos_text = "each text as one user turn of the model's chat template, as for the text on screen"
        self.bos_label = QtWidgets.QLabel(bos_text)
        form.addRow("Chat format" if self.chat else "BOS", self.bos_label)

        self.progress = QtWidgets.QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("%v of %m texts")
        self.progress.hide()
        self.message = QtWidgets.QLabel()
        self.message.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.message.setWordWrap(True)
        self.message.hide()

        self.buttons = QtWidgets.QDialogButtonBox()
        self.run_button = self.buttons.addButton("Scan", QtWidgets.QDialogButtonBox.ButtonRole.AcceptRole)
        self.run_button.setDefault(True)
        self.cancel_button = self.buttons.addButton(QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        self.run_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.reject)

        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(QtWidgets.QLabel("Every head score's mean ± std over many texts, for the model loaded."))
        layout.addWidget(self.sample_radio)
        layout.addWidget(self.file_radio)
        layout.addLayout(path_row)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.message)
        layout.addWidget(self.buttons)
        self.resize(520, self.sizeHint().height())

    # ----------------------------------------------------------------- choosing
    def _choose_file(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Texts, one per line", "",
                                                        "Text files (*.txt);;All files (*)")
        if path:
            self.set_path(path)

    def _choose_folder(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "A folder of .txt files (one text each)")
        if folder:
            self.set_path(folder)

    def set_path(self, path: str) -> None:
        self.path_edit.setText(str(path))
        self.file_radio.setChecked(True)

    def texts_path(self) -> Path | None:
        """The file or folder to scan: the sample, the path typed, or None when the path is empty."""
        if self.sample_radio.isChecked():
            return SAMPLE_TEXTS
        text = self.path_edit.text().strip()
        return Path(text).expanduser() if text else None

    # ----------------------------------------------------------------- running
    def start(self) -> int | None:
        """Start the scan on the worker; returns its request id (None when there is nothing to scan)."""
        from analysis.measures.scan import scan_texts

        path = self.texts_path()
        if path is None:
            self._stopped("Choose a text file or a folder of .txt files first.", error=True)
            return None
        self._source_text = "the bundled sample" if path == SAMPLE_TEXTS else path.name
        max_texts, batch, bos, cap, chat = (self.max_spin.value(), self.batch_spin.value(), self.bos, self.max_tokens,
                                            self.chat)

        def work(loaded, progress, cancel):
            def report(done: int, total: int) -> None:
                if not cancel.is_set():  # a stopped scan says nothing: its dialog may be closing
                    progress(done, total)

            return scan_texts(loaded, read_texts(path), batch_size=batch, max_texts=max_texts, progress=report,
                              cancel=cancel, bos=bos, max_tokens=cap, chat=chat)

        self.message.hide()
        self.progress.setRange(0, 0)  # busy until the first batch says how many texts there are
        self.progress.show()
        self._set_running(True)
        self._user_cancelled = False
        self._in_flight = self.job.start(work)
        return self._in_flight

    def _set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        for widget in (self.sample_radio, self.file_radio, self.path_edit, self.file_button, self.folder_button,
                       self.max_spin, self.batch_spin):
            widget.setEnabled(not running)
        self.cancel_button.setText("Cancel" if running else "Close")

    def _progressed(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)

    def _finished(self, scan) -> None:
        self._set_running(False)
        self.scan_ready.emit(scan, self._source_text)
        self.accept()

    def _stopped(self, message: str, error: bool = False) -> None:
        self._set_running(False)
        self.progress.hide()
        self.message.setStyleSheet("color: #8a1020;" if error else "")
        self.message.setText(message)
        self.message.show()

    def _cancelled(self) -> None:
        if self._user_cancelled:
            self._stopped("Cancelled: the scan stopped; nothing changed.")
        else:  # the worker stopped it the moment another model was asked for: its scores would be the old model's
            self._stopped("The scan stopped: another model was asked for. Scan again once it has loaded.", error=True)

    def _model_changed(self, *_args) -> None:
        if self.job.running:
            self.job.drop()
            self._stopped("The model changed: scan again for the new one.", error=True)

    def reject(self) -> None:  # noqa: D401 (Qt's name)
        """Cancel or Esc: while a scan runs, stop it (the dialog stays to say so); else close (once the
        worker has let a dropped scan go)."""
        if self.job.running:
            self.cancel_button.setText("Stopping…")
            self._user_cancelled = True
            self.job.cancel()
            return
        if not self._close_later():
            super().reject()

    def closeEvent(self, event):  # noqa: N802
        self.job.drop()  # closing the window: nobody wants the answer
        if self._close_later():
            event.ignore()
            return
        super().closeEvent(event)

    def _close_later(self) -> bool:
        """While the worker still runs this dialog's scan, hide instead of closing (a closed dialog is
        deleted, and the scan's job with it) and close when the worker lets it go. Whether it did."""
        if not self._in_flight:
            return False
        self._close_when_done = True
        self.hide()
        return True

    def _worker_done(self, request_id: int, _name: str, _value) -> None:
        self._let_go(request_id)

    def _worker_failed(self, failure) -> None:
        self._let_go(failure.request_id)

    def _let_go(self, request_id: int) -> None:
        """The worker ended request ``request_id`` (done, failed or cancelled)."""
        if request_id and request_id == self._in_flight:
            self._in_flight = 0
            if self._close_when_done:
                QtWidgets.QDialog.reject(self)  # closes for good (and is deleted, when WA_DeleteOnClose)
