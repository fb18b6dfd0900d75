"""The one view-state object every view subscribes to (napari's ``Dims`` pattern).

The state holds what is on screen and how it is drawn: the analysis bundle being shown, the
selected layer/head and query row, and the drawing options (colormap, scale, hide-first-token,
badge score, dark mode). Views take it in their constructor, connect to the signals they care
about and write user edits back through the setters; no view reads another widget.

Setters validate their argument (``ValueError`` for a name that does not exist) and emit only
when the value really changes, so a view that writes back what it was just told causes no echo.
The drawing options are saved to and restored from ``QSettings`` (keys under ``view/``).
"""
from __future__ import annotations

from PySide6 import QtCore

from analysis.display import SCALES
from analysis.head_scores import SCORE_NAMES

from .figures import COLORMAPS

DEFAULT_COLORMAP = "viridis"
DEFAULT_SCALE = "linear"


class ViewState(QtCore.QObject):
    bundle_changed = QtCore.Signal(object)  # the AnalysisBundle now shown (or None)
    selection_changed = QtCore.Signal(int, int)  # layer, head
    query_row_changed = QtCore.Signal(object)  # int | None
    colormap_changed = QtCore.Signal(str)
    scale_changed = QtCore.Signal(str)
    hide_first_changed = QtCore.Signal(bool)
    badge_score_changed = QtCore.Signal(object)  # a name in SCORE_NAMES, or None
    dark_changed = QtCore.Signal(bool)

    def __init__(self, settings: QtCore.QSettings | None = None, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self._settings = settings
        self._bundle = None
        self._layer = 0
        self._head = 0
        self._query_row: int | None = None
        self._colormap = DEFAULT_COLORMAP
        self._scale = DEFAULT_SCALE
        self._hide_first = False
        self._badge_score: str | None = None
        self._dark = False
        if settings is not None:
            self.load_settings()

    # ----------------------------------------------------------------- read
    @property
    def bundle(self):
        return self._bundle

    @property
    def result(self):
        """The ``AttentionResult`` on screen, or None."""
        return None if self._bundle is None else self._bundle.result

    @property
    def scores(self):
        return None if self._bundle is None else self._bundle.scores

    @property
    def layer(self) -> int:
        return self._layer

    @property
    def head(self) -> int:
        return self._head

    @property
    def query_row(self) -> int | None:
        return self._query_row

    @property
    def colormap(self) -> str:
        return self._colormap

    @property
    def scale(self) -> str:
        return self._scale

    @property
    def hide_first(self) -> bool:
        return self._hide_first

    @property
    def badge_score(self) -> str | None:
        return self._badge_score

    @property
    def dark(self) -> bool:
        return self._dark

    # ----------------------------------------------------------------- write
    def set_bundle(self, bundle) -> None:
        """Show a new analysis bundle: the selection is kept where it still exists, the query row is cleared."""
        self._bundle = bundle
        if bundle is not None:
            r = bundle.result
            layer, head = min(self._layer, r.n_layer - 1), min(self._head, r.n_head - 1)
            if (layer, head) != (self._layer, self._head):
                self._layer, self._head = layer, head
                self.selection_changed.emit(layer, head)
        self.set_query_row(None)
        self.bundle_changed.emit(bundle)

    def select(self, layer: int, head: int) -> None:
        """Select a head; ``ValueError`` if it is not in the result on screen."""
        layer, head = int(layer), int(head)
        r = self.result
        if r is not None and not (0 <= layer < r.n_layer and 0 <= head < r.n_head):
            raise ValueError(f"no head {layer}.{head} in a {r.n_layer}×{r.n_head} model")
        if (layer, head) == (self._layer, self._head):
            return
        self._layer, self._head = layer, head
        self.selection_changed.emit(layer, head)

    def move_selection(self, d_layer: int, d_head: int) -> None:
        """Step the selection, stopping at the edges (arrow keys)."""
        r = self.result
        if r is None:
            return
        self.select(min(max(self._layer + d_layer, 0), r.n_layer - 1), min(max(self._head + d_head, 0), r.n_head - 1))

    def set_query_row(self, row: int | None) -> None:
        if row is not None:
            row = int(row)
            r = self.result
            if r is None or not 0 <= row < r.n_tokens:
                raise ValueError(f"no query row {row}")
        if row == self._query_row:
            return
        self._query_row = row
        self.query_row_changed.emit(row)

    def toggle_query_row(self, row: int) -> None:
        """Highlight ``row``, or clear the highlight if it is the row already highlighted."""
        self.set_query_row(None if row == self._query_row else row)

    def set_colormap(self, name: str) -> None:
        if name not in COLORMAPS:
            raise ValueError(f"unknown colormap {name!r}")
        if name != self._colormap:
            self._colormap = name
            self.colormap_changed.emit(name)

    def set_scale(self, name: str) -> None:
        if name not in SCALES:
            raise ValueError(f"unknown scale {name!r}")
        if name != self._scale:
            self._scale = name
            self.scale_changed.emit(name)

    def set_hide_first(self, hide: bool) -> None:
        hide = bool(hide)
        if hide != self._hide_first:
            self._hide_first = hide
            self.hide_first_changed.emit(hide)

    def set_badge_score(self, name: str | None) -> None:
        if name is not None and name not in SCORE_NAMES:
            raise ValueError(f"unknown score {name!r}")
        if name != self._badge_score:
            self._badge_score = name
            self.badge_score_changed.emit(name)

    def set_dark(self, dark: bool) -> None:
        dark = bool(dark)
        if dark != self._dark:
            self._dark = dark
            self.dark_changed.emit(dark)

    # ----------------------------------------------------------------- settings
    def load_settings(self) -> None:
        """Restore the drawing options; a stored value that is no longer valid is ignored."""
        s = self._settings
        if s is None:
            return
        for key, setter in (("view/colormap", self.set_colormap), ("view/scale", self.set_scale),
                            ("view/badge_score", self.set_badge_score)):
            value = s.value(key)
            if value not in (None, ""):
                try:
                    setter(str(value))
                except ValueError:
                    pass
        self.set_hide_first(str(s.value("view/hide_first", "false")).lower() == "true")

    def save_settings(self) -> None:
        s = self._settings
        if s is None:
            return
        s.setValue("view/colormap", self._colormap)
        s.setValue("view/scale", self._scale)
        s.setValue("view/badge_score", self._badge_score or "")
        s.setValue("view/hide_first", "true" if self._hide_first else "false")
