"""Save… of the Figure… dialog: the figure and its options file (heads/L0H0.png → heads/L0H0.json), both or none.

The figure is drawn by gui/plots/figure_make.py ``write_figure`` — the routine of ``main.py figure`` — into a private
temporary folder on the GUI thread (figures are Qt widgets); the worker then moves both files into place with
analysis/export/folders.py ``write_file_atomically`` (each appears only when all of it was written). Should the
options file fail after the image was placed, the image is removed again: an error leaves neither. ``finished``
carries the one line to show ("Wrote X and X.json"), ``failed`` the error's sentence."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from PySide6 import QtCore

from analysis.errors import AttnScopeError, InputError
from analysis.export.figure_options import sidecar
from analysis.export.formats import IMAGE_FORMATS

from ..state.jobs import Job

SAVE_TASK = "figure"


def place_files(drawn: Path, path: Path) -> list[Path]:
    """Move the drawn figure and its options file from ``drawn`` (a folder) to ``path`` and beside it (on the
    worker), each atomically; the image is removed again when its options file cannot be written."""
    from analysis.export.folders import write_file_atomically

    image = write_file_atomically(path, lambda tmp: shutil.copyfile(drawn / path.name, tmp))
    try:
        side = write_file_atomically(sidecar(path), lambda tmp: shutil.copyfile(drawn / sidecar(path).name, tmp))
    except BaseException:
        image.unlink(missing_ok=True)
        raise
    return [image, side]


def check_path(path) -> Path:
    """``path`` as a figure's file (.png, .svg or .pdf); InputError in one sentence otherwise."""
    path = Path(str(path).strip()).expanduser() if str(path or "").strip() else None
    if path is None or not path.name:
        raise InputError("Choose where to save the figure.")
    if path.suffix.lower().lstrip(".") not in IMAGE_FORMATS:
        raise InputError(f"A figure's name ends in {', '.join('.' + f for f in IMAGE_FORMATS)}, not '{path.name}'.")
    return path


class FigureSaver(QtCore.QObject):
    """Saves figures for the dialog; one ``finished(line)`` or ``failed(message)`` ends each save."""

    finished = QtCore.Signal(str)
    failed = QtCore.Signal(str)

    def __init__(self, worker, parent=None):
        super().__init__(parent)
        self.worker = worker
        self.busy = False

    def save(self, result, options, path) -> bool:
        """Draw ``options``' figure of ``result`` and write it to ``path``; False (and ``failed``) when nothing
        was started."""
        from ..plots.figure_make import write_figure

        try:
            path = check_path(path)
            options = options.with_(fmt=path.suffix.lower().lstrip("."))
            drawn = Path(tempfile.mkdtemp(prefix="attnscope-figure-"))
        except InputError as exc:
            self.failed.emit(str(exc))
            return False
        except OSError as exc:
            self.failed.emit(f"Cannot draw the figure: no temporary folder ({exc.strerror or exc}).")
            return False
        try:
            write_figure(result, options, drawn / path.name)
        except (AttnScopeError, OSError) as exc:
            shutil.rmtree(drawn, ignore_errors=True)
            self.failed.emit(str(exc) if isinstance(exc, AttnScopeError)
                             else f"Cannot draw the figure: {exc.strerror or exc}.")
            return False
        self.busy = True
        task = Job(self.worker, SAVE_TASK, self, ended_by=(), announced=False, cancellable=False)
        task.finished.connect(lambda written: self._ended(task, drawn, written))
        task.failed.connect(lambda message: self._ended(task, drawn, None, message))
        task.start(lambda _loaded, _progress, _cancel: place_files(drawn, path))
        return True

    def _ended(self, task: Job, drawn: Path, written, message: str | None = None) -> None:
        task.deleteLater()
        shutil.rmtree(drawn, ignore_errors=True)
        self.busy = False
        if message is not None:
            self.failed.emit(message)
        else:
            image, side = written
            self.finished.emit(f"Wrote {image} and {side.name}")
