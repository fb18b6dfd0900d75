"""Exporting from the window: the dialog, then the one export path shared with the command line.

Figures are Qt widgets, so they are drawn on the GUI thread — one figure per turn of the event loop,
into a private temporary folder, so the window never freezes. The writing itself (data files, and
moving the drawn figures into place) runs on the worker with analysis/export.py's staged writers:
a file or folder appears at its destination only when all of it was written, an earlier export is
replaced as a whole, and a failure (a full disk, a folder that cannot be written) leaves nothing
behind and is shown as one sentence.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from analysis.errors import AttnScopeError, ExportError
from analysis.export import DATA_FORMATS, IMAGE_FORMATS

from .export_dialog import FOLDER_KINDS, ExportDialog
from .view_state import ViewState
from .worker import Failure

EXPORT_TASK = "export"


@dataclass(frozen=True)
class ExportJob:
    """One export: what, where, and the drawing options at the moment it was asked for."""

    what: str  # head, grid, heads, data, everything
    path: Path
    fmt: str
    png_width: int | None
    bundle: object  # AnalysisBundle
    layer: int
    head: int
    cmap: str
    scale: str
    hide_first: bool
    badge_score: str | None

    def figures(self) -> list[tuple[str, int | None, int | None]]:
        """(file name relative to the export, layer, head) of every figure to draw; layer None = the grid."""
        r = self.bundle.result
        if self.what == "head":
            return [(self.path.name, self.layer, self.head)] if self.fmt in IMAGE_FORMATS else []
        if self.what == "grid":
            return [(self.path.name, None, None)] if self.fmt in IMAGE_FORMATS else []
        if self.what == "data":
            return []
        sub = "heads/" if self.what == "everything" else ""  # `everything` has the command line's layout
        return [(f"grid.{self.fmt}", None, None)] + [(f"{sub}L{l}H{h}.{self.fmt}", l, h)
                                                     for l in range(r.n_layer) for h in range(r.n_head)]


def ask_overwrite(parent, path: Path) -> bool:
    buttons = QtWidgets.QMessageBox.StandardButton
    kind = "folder" if path.is_dir() else "file"
    answer = QtWidgets.QMessageBox.question(parent, "Replace?", f"The {kind} {path} exists. Replace it?",
                                            buttons.Yes | buttons.No, buttons.No)
    return answer == buttons.Yes


class Exporter(QtCore.QObject):
    """Runs exports for the window; ``finished(paths)`` or ``failed(message)`` ends each one."""

    finished = QtCore.Signal(list)
    failed = QtCore.Signal(str)
    copied = QtCore.Signal()

    def __init__(self, state: ViewState, worker, settings: QtCore.QSettings, parent: QtWidgets.QWidget):
        super().__init__(parent)
        self.state, self.worker, self.settings, self.window = state, worker, settings, parent
        self.ask_overwrite = ask_overwrite  # tests replace it
        self._pending: dict[int, Path] = {}  # worker request id -> temporary folder of drawn figures
        self.closed = False
        worker.task_done.connect(self._task_done)
        worker.failed.connect(self._failed)

    # ----------------------------------------------------------------- asking
    def open_dialog(self) -> None:
        if self.state.bundle is None:
            self.failed.emit("Nothing to export yet: run a text first.")
            return
        dialog = ExportDialog(self.window, self.settings, self.state.layer, self.state.head)
        if dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted:
            self.start(dialog.what(), dialog.path(), dialog.image_format(), dialog.png_width())

    def start(self, what: str, path, fmt: str | None = None, png_width: int | None = None) -> bool:
        """Export ``what`` to ``path`` (a file for head/grid, its format from the extension; else a folder).
        Returns False when nothing was started (no result, a bad path, or the user kept an existing file)."""
        s = self.state
        if s.bundle is None:
            self.failed.emit("Nothing to export yet: run a text first.")
            return False
        path = Path(str(path).strip()).expanduser() if str(path).strip() else None
        if path is None or path.name == "":
            self.failed.emit("Choose where to export to.")
            return False
        if what not in FOLDER_KINDS:
            fmt = path.suffix.lower().lstrip(".")
            if fmt not in IMAGE_FORMATS + DATA_FORMATS:
                self.failed.emit(f"Cannot export to '{path.name}': the name must end in one of "
                                 f"{', '.join('.' + f for f in IMAGE_FORMATS + DATA_FORMATS)}.")
                return False
        fmt = fmt or "png"
        if path.exists() and not (path.is_dir() and not any(path.iterdir())) and not self.ask_overwrite(self.window, path):
            return False
        job = ExportJob(what, path, fmt, png_width, s.bundle, s.layer, s.head, s.colormap, s.scale, s.hide_first,
                        s.badge_score)
        try:
            folder = Path(tempfile.mkdtemp(prefix="attnscope-figures-"))
        except OSError as exc:
            self.failed.emit(f"Cannot draw the figures: no temporary folder ({exc.strerror or exc}).")
            return False
        QtWidgets.QApplication.setOverrideCursor(QtCore.Qt.CursorShape.BusyCursor)
        self._draw(job, folder, job.figures(), None)
        return True

    def copy_figure(self, view, fallback) -> None:
        """Put ``view.offscreen_figure()`` (else ``fallback``'s) on the clipboard: the figure Export writes,
        at its own fixed size — not a grab of the screen."""
        from .figures import dispose_figure

        fig = view.offscreen_figure() if hasattr(view, "offscreen_figure") else None
        fig = fig or fallback.offscreen_figure()
        if fig is None:
            self.failed.emit("Nothing to copy yet: run a text first.")
            return
        try:
            QtWidgets.QApplication.clipboard().setImage(fig.grab().toImage())
        finally:
            dispose_figure(fig)
        self.copied.emit()

    # ----------------------------------------------------------------- drawing (GUI thread, one figure a turn)
    def _draw(self, job: ExportJob, folder: Path, todo: list, head_figure) -> None:
        from .figures import dispose_figure, offscreen_grid_figure, offscreen_head_figure, save_figure

        if self.closed:
            if head_figure is not None:
                dispose_figure(head_figure)
            shutil.rmtree(folder, ignore_errors=True)
            return
        if not todo:
            if head_figure is not None:
                dispose_figure(head_figure)
            self._submit(job, folder)
            return
        (name, layer, head), rest = todo[0], todo[1:]
        r = job.bundle.result
        target = folder / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if layer is None:
                badges = job.bundle.scores[job.badge_score] if job.badge_score else None
                fig = offscreen_grid_figure(r, job.cmap, job.scale, badges=badges, hide_first=job.hide_first,
                                            badge_label=(job.badge_score or "").replace("_", " "))
                try:
                    save_figure(fig, target, job.png_width)
                finally:
                    dispose_figure(fig)
            else:
                title = f"{r.model_label} — layer {layer}, head {head}"
                if head_figure is None:
                    head_figure = offscreen_head_figure(r, layer, head, job.cmap, job.scale, job.hide_first)
                else:
                    head_figure.set_head(r.attentions[layer, head], r.tokens, title, cmap=job.cmap, scale=job.scale,
                                         hide_first=job.hide_first)
                save_figure(head_figure, target, job.png_width)
        except (AttnScopeError, OSError) as exc:
            if head_figure is not None:
                dispose_figure(head_figure)
            shutil.rmtree(folder, ignore_errors=True)
            QtWidgets.QApplication.restoreOverrideCursor()
            message = str(exc) if isinstance(exc, AttnScopeError) else f"Cannot draw the figures: {exc.strerror or exc}."
            self.failed.emit(message)
            return
        QtCore.QTimer.singleShot(0, self, lambda: self._draw(job, folder, rest, head_figure))

    # ----------------------------------------------------------------- writing (worker thread)
    def _submit(self, job: ExportJob, folder: Path) -> None:
        request_id = self.worker.submit(EXPORT_TASK, lambda loaded: write_export(loaded, job, folder))
        self._pending[request_id] = folder

    def _task_done(self, request_id: int, name: str, value) -> None:
        folder = self._pending.pop(request_id, None) if name == EXPORT_TASK else None
        if folder is None:
            return
        shutil.rmtree(folder, ignore_errors=True)
        QtWidgets.QApplication.restoreOverrideCursor()
        if not self.closed:
            self.finished.emit(list(value))

    def _failed(self, failure: Failure) -> None:
        folder = self._pending.pop(failure.request_id, None)
        if folder is None:
            return
        shutil.rmtree(folder, ignore_errors=True)
        QtWidgets.QApplication.restoreOverrideCursor()
        if not self.closed:
            self.failed.emit(failure.message)


def write_export(loaded, job: ExportJob, drawn: Path) -> list[Path]:
    """Write ``job`` (on the worker): data from the job's result, figures copied from ``drawn``.

    Folders go through ``write_folder_atomically`` / ``export_bundle`` and files through
    ``write_file_atomically``: nothing appears at the destination unless all of it was written."""
    from analysis import export as writers

    r, scores = job.bundle.result, job.bundle.scores

    def copy_drawn(staging: Path) -> None:
        for src in sorted(p for p in drawn.rglob("*") if p.is_file()):
            dest = Path(staging) / src.relative_to(drawn)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)

    if job.what in ("data", "everything"):
        if loaded.source.label != r.model_label or loaded.n_layer != r.n_layer:
            raise ExportError("The model changed since this result was computed: run the text again, then export.")
        from analysis.parity import parity_report

        parity = parity_report(r, [loaded.attention_parameters(l) for l in range(r.n_layer)], "float32")
        return writers.export_bundle(job.path, r, scores, parity,
                                     image_writer=copy_drawn if job.what == "everything" else None)
    if job.what == "heads":
        return writers.write_folder_atomically(job.path, copy_drawn)
    if job.fmt in IMAGE_FORMATS:
        drawn_file = drawn / job.path.name
        return [writers.write_file_atomically(job.path, lambda tmp: shutil.copyfile(drawn_file, tmp))]
    layer, head = job.layer, job.head
    if job.what == "head":  # one head's (query, key) map
        write = {"npz": lambda tmp: writers.write_attention_npz(r, Path(tmp), layer, head),
                 "csv": lambda tmp: writers.write_head_csv(r, Path(tmp), layer, head),
                 "json": lambda tmp: writers.write_result_json(r, Path(tmp), layer=layer, head=head)}[job.fmt]
    else:  # every head; as a table, the grid is its scores
        write = {"npz": lambda tmp: writers.write_attention_npz(r, Path(tmp)),
                 "csv": lambda tmp: writers.write_scores_csv(scores, Path(tmp)),
                 "json": lambda tmp: writers.write_result_json(r, Path(tmp), scores)}[job.fmt]
    return [writers.write_file_atomically(job.path, write)]
