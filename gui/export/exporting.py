"""Exporting from the window: the dialog, then the one export path shared with the command line.

Figures are Qt widgets, so they are drawn on the GUI thread — one figure per turn of the event loop,
into a private temporary folder, so the window never freezes. The writing itself (data files, and
moving the drawn figures into place) runs on the worker with analysis/export/folders.py's staged writers:
a file or folder appears at its destination only when all of it was written, an earlier export is
replaced as a whole, and a failure (a full disk, a folder that cannot be written) leaves nothing
behind and is shown as one sentence.

What is visible exports: a figure follows the view on screen (the colormap, scale, hidden first key,
the grid's badges, and the value-weighted view when it is on and its norms are there), drawn by ``main.py figure``'s
routines (gui/plots/figure_make.py ``write_figure``) from the :class:`~analysis.export.figure_options.FigureOptions`
of that view (:func:`figure_options`), written beside each image (heads/L0H0.png → heads/L0H0.json, a head or grid
file's too): ``main.py figure --from heads/L0H0.json --out x.png`` draws the same PNG again, byte for byte. The
figure in front (``what="front"``) is the tab's own offscreen figure, written as it is, with no options file: most
tabs' figures are not ``main.py figure``'s. A data export is the
command line's byte for byte, from the one definition of what an export holds
(analysis/export/contents.py ``export_contents``, on the worker): attention.npz with ``value_norms`` and
``rollout``, parity of every family through ``loaded.attention_weights``, summary.json's sink rate at the
Scores panel's ε (``ViewState.sink_epsilon``), scores_tl.csv with the TL-style options the Scores
panel shows (``ViewState.tl_options``; ``main.py export --tl-…`` with the same options writes the same
bytes), and the rollout as the Rollout tab draws it (``ViewState.rollout_skip_first``: its *Hide first token,
renormalise*, as ``main.py export --rollout-skip-first``; summary.json's ``rollout_skip_first`` says which). A file of one head or of every head is written by its format's entry in analysis/export/formats.py.

At any length (analysis/export/layout.py): a data or "everything" export holds every head's arrays that fit the
export budget (the command line's default, layout.DEFAULT_MAX_EXPORT_MB); when the maps do not fit, it holds the
current head as ``main.py export --heads L.H`` would (its whole map, value norms and its layer's rollout), and
"everything" draws the grid (the run's pooled thumbnails) and that head's image (:func:`export_layout`).
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from analysis.errors import AttnScopeError
from analysis.export.contents import figure_files
from analysis.export.formats import DATA_FORMATS, IMAGE_FORMATS

from ..state.jobs import Job
from ..state.lens_data import VALUE_NORMS
from ..state.view_state import ViewState
from .export_dialog import DEFAULT_PNG_WIDTH, FOLDER_KINDS, FRONT, ExportDialog

EXPORT_TASK = "export"


@dataclass(frozen=True)
class ViewSnapshot:
    """How the views draw, frozen when an export is asked for (the state may change while figures are
    drawn one per event-loop turn): what :func:`figure_options` and :func:`write_job` ask of a ViewState."""

    bundle: object  # AnalysisBundle
    attention_view: str
    colormap: str
    scale: str
    hide_first: bool
    badge_score: str | None
    sink_epsilon: float
    values: object = None  # lens_data.ValueView of the bundle, when the state has it
    tl_options: dict | None = None  # ViewState.tl_options: how scores_tl.csv is computed
    rollout_skip_first: bool = False  # ViewState.rollout_skip_first: the rollout a data export writes

    @classmethod
    def of(cls, state: ViewState) -> "ViewSnapshot":
        return cls(state.bundle, state.attention_view, state.colormap, state.scale, state.hide_first,
                   state.badge_score, state.sink_epsilon, state.lens(VALUE_NORMS), state.tl_options,
                   state.rollout_skip_first)

    @property
    def result(self):
        return self.bundle.result

    @property
    def scores(self):
        return self.bundle.scores

    @property
    def value_weighted(self) -> bool:
        """The value-weighted view is on and drawn (its norms are there): figures draw it too."""
        return self.attention_view == "value-weighted" and self.values is not None


@dataclass(frozen=True)
class ExportJob:
    """One export: what, where, and the view at the moment it was asked for."""

    what: str  # head, grid, heads, data, everything, front
    path: Path
    fmt: str
    png_width: int | None
    view: ViewSnapshot
    layer: int
    head: int
    front_figure: object = None  # what == "front": the tab's offscreen figure, drawn when asked for

    @property
    def bundle(self):
        return self.view.bundle

    def figures(self) -> list[tuple[str, int | None, int | None]]:
        """(file name relative to the export, layer, head) of every figure to draw; layer None = the grid."""
        r = self.bundle.result
        if self.what == "head":
            return [(self.path.name, self.layer, self.head)] if self.fmt in IMAGE_FORMATS else []
        if self.what == "grid":
            return [(self.path.name, None, None)] if self.fmt in IMAGE_FORMATS else []
        if self.what in ("data", FRONT):  # the figure in front is drawn already
            return []
        if self.what == "everything":  # the command line's layout: the heads drawn are the export's
            return figure_files(r.n_layer, r.n_head, self.fmt, "heads/", export_layout(self).image_heads())
        return figure_files(r.n_layer, r.n_head, self.fmt, "")


def export_layout(job: ExportJob):
    """The layout of a data or "everything" export (analysis/export/layout.py): every array that fits the default
    budget; when the maps do not, the current head's arrays as ``--heads`` writes them."""
    from analysis.export.layout import layout_of

    r = job.bundle.result
    plain = layout_of(r)
    return plain if plain.fits("attentions") else layout_of(r, heads=[(job.layer, job.head)])


def exists(path: Path) -> bool:
    """Something at ``path`` that an export would replace (an empty folder is not)."""
    return path.exists() and not (path.is_dir() and not any(path.iterdir()))


def ask_overwrite(parent, path: Path) -> bool:
    buttons = QtWidgets.QMessageBox.StandardButton
    kind = "folder" if path.is_dir() else "file"
    answer = QtWidgets.QMessageBox.question(parent, "Replace?", f"The {kind} {path} exists. Replace it?",
                                            buttons.Yes | buttons.No, buttons.No)
    return answer == buttons.Yes


class Exporter(QtCore.QObject):
    """Runs exports for the window; ``finished(paths)`` or ``failed(message)`` ends each one, ``warned(message)``
    after ``finished`` for what the writers said (an earlier export that could not be deleted wholly)."""

    finished = QtCore.Signal(list)
    warned = QtCore.Signal(str)
    failed = QtCore.Signal(str)
    copied = QtCore.Signal()

    def __init__(self, state: ViewState, worker, settings: QtCore.QSettings, parent: QtWidgets.QWidget):
        super().__init__(parent)
        self.state, self.worker, self.settings, self.window = state, worker, settings, parent
        self.ask_overwrite = ask_overwrite  # tests replace it
        # the tab in front (its ``title`` and ``offscreen_figure()``, gui/tabs/protocol.py); the window's tabs by default
        self.front_tab = lambda: (self.window.tabs.currentWidget() if hasattr(self.window, "tabs") else None)
        self.closed = False

    # ----------------------------------------------------------------- asking
    def open_dialog(self) -> None:
        if self.state.bundle is None:
            self.failed.emit("Nothing to export yet: run a text first.")
            return
        from ..plots.figures import dispose_figure

        tab = self.front_tab()
        front = tab.offscreen_figure() if hasattr(tab, "offscreen_figure") else None  # as it is now
        dialog = ExportDialog(self.window, self.settings, self.state.layer, self.state.head,
                              front=str(getattr(tab, "title", "")) if front is not None else "")
        try:
            while dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted:
                path = Path(dialog.path()).expanduser() if dialog.path() else None
                if path is not None and exists(path) and not self.ask_overwrite(self.window, path):
                    continue  # "No" to Replace?: back to the dialog to choose another name
                figure = front if dialog.what() == FRONT else None
                if self.start(dialog.what(), dialog.path(), dialog.image_format(), dialog.png_width(),
                              confirmed=True, front_figure=figure):
                    front = None if figure is not None else front  # the export disposes it
                return
        finally:
            if front is not None:
                dispose_figure(front)

    def start(self, what: str, path, fmt: str | None = None, png_width: int | None = None, *,
              confirmed: bool = False, front_figure=None) -> bool:
        """Export ``what`` to ``path`` (a file for head/grid/front, its format from the extension; else a
        folder). ``front_figure``: the figure to write for ``what="front"`` (the export disposes it);
        ``confirmed``: the user already agreed to replace ``path``. Returns False when nothing was started
        (no result, a bad path, or the user kept an existing file)."""
        s = self.state
        if s.bundle is None:
            self.failed.emit("Nothing to export yet: run a text first.")
            return False
        path = Path(str(path).strip()).expanduser() if str(path).strip() else None
        if path is None or path.name == "":
            self.failed.emit("Choose where to export to.")
            return False
        if what == FRONT and front_figure is None:
            self.failed.emit("The tab in front has no figure to export yet.")
            return False
        if what not in FOLDER_KINDS:
            fmt = path.suffix.lower().lstrip(".")
            allowed = IMAGE_FORMATS if what == FRONT else IMAGE_FORMATS + tuple(DATA_FORMATS)
            if fmt not in allowed:
                self.failed.emit(f"Cannot export to '{path.name}': the name must end in one of "
                                 f"{', '.join('.' + f for f in allowed)}.")
                return False
        fmt = fmt or "png"
        if not confirmed and exists(path) and not self.ask_overwrite(self.window, path):
            return False
        job = ExportJob(what, path, fmt, png_width, ViewSnapshot.of(s), s.layer, s.head, front_figure)
        try:
            folder = Path(tempfile.mkdtemp(prefix="attnscope-figures-"))
        except OSError as exc:
            self.failed.emit(f"Cannot draw the figures: no temporary folder ({exc.strerror or exc}).")
            return False
        QtWidgets.QApplication.setOverrideCursor(QtCore.Qt.CursorShape.BusyCursor)
        if what == FRONT:
            self._draw_front(job, folder)
        else:
            self._draw(job, folder, job.figures())
        return True

    def png_width(self) -> int:
        """The width of an exported PNG: the Export dialog's last choice, else its default."""
        try:
            width = int(self.settings.value("export/png_width", DEFAULT_PNG_WIDTH))
        except (TypeError, ValueError):
            return DEFAULT_PNG_WIDTH
        return width if 200 <= width <= 12000 else DEFAULT_PNG_WIDTH

    def copy_figure(self, view, fallback) -> None:
        """Put ``view.offscreen_figure()`` (else ``fallback``'s) on the clipboard: the figure Export writes,
        at the export's PNG width — not a grab of the screen."""
        from ..plots.figures import dispose_figure

        fig = view.offscreen_figure() if hasattr(view, "offscreen_figure") else None
        fig = fig or fallback.offscreen_figure()
        if fig is None:
            self.failed.emit("Nothing to copy yet: run a text first.")
            return
        try:
            QtWidgets.QApplication.clipboard().setImage(figure_image(fig, self.png_width()))
        finally:
            dispose_figure(fig)
        self.copied.emit()

    # ----------------------------------------------------------------- drawing (GUI thread, one figure a turn)
    def _draw(self, job: ExportJob, folder: Path, todo: list, cache=None) -> None:
        """Draw the first of ``todo`` (the job's :meth:`ExportJob.figures` still to draw) into ``folder`` with its
        options file beside it (gui/plots/figure_make.write_figure, ``main.py figure``'s routine, from
        :func:`figure_options`), then the rest on the next turns of the event loop; when none is left, write them all
        (:meth:`_submit`). ``cache``: the figure_make.FigureCache the heads are drawn into one after another (one
        HeadPlot for every head, not a new one each: the same bytes, SmolLM2's 270 heads in about 60% of the time)."""
        from ..plots.figure_make import FigureCache, write_figure

        cache = cache if cache is not None else FigureCache()
        if self.closed:
            cache.close()
            shutil.rmtree(folder, ignore_errors=True)
            return
        if not todo:
            cache.close()
            self._submit(job, folder)
            return
        (name, layer, head), rest = todo[0], todo[1:]
        view = job.view
        target = folder / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_figure(view.result, figure_options(job, layer, head), target,
                         view.values.key_norms if view.value_weighted else None, cache)
        except Exception as exc:  # noqa: BLE001 (one sentence, the drawing folder removed, the cursor restored)
            cache.close()
            shutil.rmtree(folder, ignore_errors=True)
            QtWidgets.QApplication.restoreOverrideCursor()
            if isinstance(exc, AttnScopeError):
                message = str(exc)
            elif isinstance(exc, OSError):
                message = f"Cannot draw the figures: {exc.strerror or exc}."
            elif isinstance(exc, MemoryError):
                message = "Cannot draw the figures: not enough memory; export fewer heads or a shorter text."
            else:
                message = f"Cannot draw the figures: {type(exc).__name__}: {exc}."
            self.failed.emit(message)
            return
        QtCore.QTimer.singleShot(0, self, lambda: self._draw(job, folder, rest, cache))

    def _draw_front(self, job: ExportJob, folder: Path) -> None:
        """Save the tab's figure into ``folder``, then write it through the same staged writer."""
        from ..plots.figures import dispose_figure
        from .figure_files import save_figure

        try:
            save_figure(job.front_figure, folder / job.path.name, job.png_width)
        except (AttnScopeError, OSError) as exc:
            shutil.rmtree(folder, ignore_errors=True)
            QtWidgets.QApplication.restoreOverrideCursor()
            self.failed.emit(str(exc) if isinstance(exc, AttnScopeError)
                             else f"Cannot draw the figure: {exc.strerror or exc}.")
            return
        finally:
            dispose_figure(job.front_figure)
        self._submit(job, folder)

    # ----------------------------------------------------------------- writing (worker thread)
    def _submit(self, job: ExportJob, folder: Path) -> None:
        """One short Job per export (a new export never drops one in flight), that the status bar does not name,
        no newer request ends and nothing cancels: an export finishes, complete or absent."""
        task = Job(self.worker, EXPORT_TASK, self, ended_by=(), announced=False, cancellable=False)
        task.finished.connect(lambda written: self._ended(task, folder, written))
        task.failed.connect(lambda message: self._ended(task, folder, None, message))
        task.start(lambda loaded, _progress, _cancel: write_job(loaded, job, folder))

    def _ended(self, task: Job, folder: Path, written, message: str | None = None) -> None:
        """The export's answer: the files ``written``, or the ``message`` of its failure."""
        task.deleteLater()
        shutil.rmtree(folder, ignore_errors=True)
        QtWidgets.QApplication.restoreOverrideCursor()
        if self.closed:
            return
        if message is not None:
            self.failed.emit(message)
        else:
            self.finished.emit(list(written))
            for warning in getattr(written, "warnings", ()):
                self.warned.emit(warning)


def figure_image(fig, width: int) -> QtGui.QImage:
    """``fig`` drawn ``width`` pixels wide, as a PNG export draws it (pyqtgraph's ImageExporter for a plot
    scene; any other widget rendered scaled)."""
    import pyqtgraph as pg
    import pyqtgraph.exporters  # noqa: F401  (registers the exporters)

    from .figure_files import settle_layout

    settle_layout()
    if hasattr(fig, "scene") and callable(fig.scene):
        exporter = pg.exporters.ImageExporter(fig.scene())
        exporter.parameters()["width"] = int(width)
        exporter.parameters()["antialias"] = True
        image = exporter.export(toBytes=True)
        if isinstance(image, QtGui.QImage) and not image.isNull():
            return image
    scale = width / max(1, fig.width())
    image = QtGui.QImage(int(width), max(1, round(fig.height() * scale)), QtGui.QImage.Format.Format_ARGB32)
    image.fill(QtCore.Qt.GlobalColor.white)
    painter = QtGui.QPainter(image)
    painter.scale(scale, scale)
    fig.render(painter)
    painter.end()
    return image


def figure_options(job: ExportJob, layer: int | None, head: int | None):
    """The :class:`analysis.export.figure_options.FigureOptions` of one figure of ``job`` as its view showed it (the
    model, the text and its BOS, the colormap, scale and hidden first key, the PNG width asked for, the value-weighted
    view when it is on and its norms are there; the grid's badge score): head ``layer``.``head``, or the grid (layer
    None). Written beside the figure, so that ``main.py figure --from`` draws it again byte for byte. A chat-formatted
    run is not among the options: its figure is drawn from its text alone."""
    from analysis.export.figure_options import FigureOptions

    view, r = job.view, job.view.result
    return FigureOptions(model=r.model_label, text=r.text, bos=bool(r.bos),
                         heads=() if layer is None else ((layer, head),), width_px=job.png_width, cmap=view.colormap,
                         scale=view.scale, fmt=job.fmt, hide_first=bool(view.hide_first),
                         badges=view.badge_score if layer is None else None,
                         weighting="value" if view.value_weighted else "attention")


def check_not_other_json(path: Path) -> None:
    """An image's options file may replace an earlier figure's options (the same name), never another JSON file the
    user keeps there (a results.json beside results.png): that is refused in one sentence, before anything is
    written."""
    from analysis.export.figure_options import FigureOptions

    if not path.exists():
        return
    try:
        FigureOptions.read(path)
    except AttnScopeError:
        raise AttnScopeError(f"{path.name} exists beside the image and is not an AttnScope figure's options file, "
                             "which the export would write there; choose another name.") from None


def write_job(loaded, job: ExportJob, drawn: Path) -> list[Path]:
    """Write ``job`` (on the worker): data from the job's result, figures copied from ``drawn``.

    Folders go through ``write_folder_atomically`` / ``contents.write_export`` and files through
    ``write_file_atomically``: nothing appears at the destination unless all of it was written."""
    from analysis.export import contents
    from analysis.export.folders import write_file_atomically, write_folder_atomically
    from analysis.export.paths import check_outputs_apart

    from analysis.export.figure_options import sidecar

    r, scores = job.view.result, job.view.scores
    outputs = [("the export", job.path, "folder" if job.what in FOLDER_KINDS else "file")]
    side = sidecar(job.path) if job.what not in FOLDER_KINDS and sidecar(drawn / job.path.name).is_file() else None
    if side is not None:  # the options file written beside a head or grid image
        outputs.append(("the figure's options file", side, "file"))
        check_not_other_json(side)
    # the export never replaces what the model is read from (a .json export, or an image's options file, named over
    # its config.json)
    check_outputs_apart([(f"the model's folder {loaded.folder}", loaded.folder)], outputs)

    def copy_drawn(staging: Path) -> None:
        for src in sorted(p for p in drawn.rglob("*") if p.is_file()):
            dest = Path(staging) / src.relative_to(drawn)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)

    if job.what in ("data", "everything"):
        export = contents.export_contents(loaded, r, scores, sink_epsilon=job.view.sink_epsilon,
                                          tl_options=job.view.tl_options, layout=export_layout(job),
                                          rollout_skip_first=job.view.rollout_skip_first)
        return contents.write_export(job.path, export, image_writer=copy_drawn if job.what == "everything" else None)
    if job.what == "heads":
        return write_folder_atomically(job.path, copy_drawn)
    if job.fmt in IMAGE_FORMATS:  # the image, and beside it its options file when it has one (all but "front")
        drawn_file = drawn / job.path.name
        written = [write_file_atomically(job.path, lambda tmp: shutil.copyfile(drawn_file, tmp))]
        if side is not None:
            written.append(write_file_atomically(side, lambda tmp: shutil.copyfile(sidecar(drawn_file), tmp)))
        return written
    fmt = DATA_FORMATS[job.fmt]
    if job.what == "head":  # one head's (query, key) map
        return [write_file_atomically(job.path, lambda tmp: fmt.head(r, Path(tmp), job.layer, job.head))]
    return [write_file_atomically(job.path, lambda tmp: fmt.grid(r, scores, Path(tmp)))]  # every head
