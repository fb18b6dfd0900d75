"""The Head scores tab: a sortable table of every score for every head beside a layer × head map of
one score. It follows the view state (result, selection, colormap, dark) and writes the selection back."""
from __future__ import annotations

import html
import math

import numpy as np
from PySide6 import QtCore, QtWidgets

from analysis.head_scores import NOT_APPLICABLE, NOT_APPLICABLE_WHY, SCORE_DESCRIPTIONS, SCORE_LABELS, SCORE_NAMES

from .layer_head_map import LayerHeadMap, top_heads
from .plot_items import apply_theme

SORT_ROLE = QtCore.Qt.ItemDataRole.UserRole + 1
# SCORE_LABELS (analysis.head_scores) is the one name of each score everywhere in the GUI (table
# tooltips, map, badges); SCORE_SHORT only heads the table's columns, where room is short
SCORE_SHORT = {"previous_token": "prev.", "sink": "sink", "self": "self", "duplicate_token": "dup.",
               "induction": "induct.", "induction_probe": "probe", "entropy": "entropy", "next_token": "next"}


def score_label(name: str) -> str:
    return SCORE_LABELS.get(name, name.replace("_", " "))


def applies(scores, name: str) -> bool:
    """False where a score does not apply to this model (shown as n/a, never as a number)."""
    check = getattr(scores, "applies", None)
    return True if check is None else bool(check(name))


class ScoreTableModel(QtCore.QAbstractTableModel):
    """Rows are heads; columns: layer, head, then every score (short headers, full name in the tooltip)."""

    COLUMNS = ("layer", "head", *SCORE_NAMES)

    def __init__(self, parent=None):
        super().__init__(parent)
        self._rows: list[dict] = []
        self._applies: dict[str, bool] = {}

    def set_scores(self, scores) -> None:
        self.beginResetModel()
        self._rows = scores.rows() if scores is not None else []
        self._applies = {name: applies(scores, name) for name in SCORE_NAMES} if scores is not None else {}
        self.endResetModel()

    def rowCount(self, parent=QtCore.QModelIndex()):  # noqa: N802
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QtCore.QModelIndex()):  # noqa: N802
        return 0 if parent.isValid() else len(self.COLUMNS)

    def data(self, index, role=QtCore.Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row, name = self._rows[index.row()], self.COLUMNS[index.column()]
        value = row[name]
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            if name in ("layer", "head"):
                return str(value)
            if not self._applies.get(name, True):
                return NOT_APPLICABLE
            return "—" if math.isnan(value) else f"{value:.3f}"
        if role == QtCore.Qt.ItemDataRole.ToolTipRole and not self._applies.get(name, True):
            return NOT_APPLICABLE_WHY.get(name, "")
        if role == SORT_ROLE:
            return -math.inf if isinstance(value, float) and math.isnan(value) else value
        if role == QtCore.Qt.ItemDataRole.TextAlignmentRole:
            return int(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(self, section, orientation, role=QtCore.Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != QtCore.Qt.Orientation.Horizontal:
            return None
        name = self.COLUMNS[section]
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            return SCORE_SHORT.get(name, name)
        if role == QtCore.Qt.ItemDataRole.ToolTipRole:
            return f"{score_label(name)}: {SCORE_DESCRIPTIONS.get(name, '')}" if name in SCORE_NAMES else name
        if role == QtCore.Qt.ItemDataRole.InitialSortOrderRole:  # the first click on a score puts the top heads first
            return QtCore.Qt.SortOrder.AscendingOrder if name in ("layer", "head") else QtCore.Qt.SortOrder.DescendingOrder
        return None

    def head_at(self, row: int) -> tuple[int, int]:
        r = self._rows[row]
        return r["layer"], r["head"]


class ScoreMap(LayerHeadMap):
    """One score for every head: layers down, heads across; hover shows the value and its rank."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.values: np.ndarray | None = None
        self.name = ""

    def set_score(self, name: str, values: np.ndarray, cmap: str = "viridis", applicable: bool = True) -> None:
        self.values, self.name = np.asarray(values, dtype=np.float64), name
        if not applicable:
            self.values = np.full(self.values.shape, np.nan)
        finite = self.values[np.isfinite(self.values)]
        top = float(finite.max()) if finite.size else 1.0
        levels = (0.0, 1.0 if name == "entropy" else max(1.0, top))
        label = score_label(name)
        note = "" if finite.size else (" — not defined for this text" if applicable else f" — {NOT_APPLICABLE}")
        self.set_image(self.values.astype(np.float32), self.values.shape, levels, cmap, label + note, label)
        self.set_badges(self.values, label)

    def hover_text(self, layer: int, head: int) -> str:
        if self.values is None:
            return ""
        v = self.values[layer, head]
        if not np.isfinite(v):
            return f"layer {layer}, head {head}: {score_label(self.name)} not defined here"
        rank = int((self.values > v).sum()) + 1  # heads with a strictly higher score, plus one
        return (f"layer {layer}, head {head}: {score_label(self.name)} = {v:.3f} "
                f"(rank {rank} of {int(np.isfinite(self.values).sum())})\ndouble-click or Enter: open")


class ScoresPanel(QtWidgets.QWidget):
    """Table + map side by side, on a :class:`~gui.view_state.ViewState`. A click selects a head;
    Enter or a double-click on a row or a map cell also emits ``head_activated``."""

    title = "Head scores"
    head_activated = QtCore.Signal(int, int)

    def __init__(self, state, worker=None, parent=None):
        super().__init__(parent)
        self.state = state
        self.model = ScoreTableModel(self)
        self.proxy = QtCore.QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.table = QtWidgets.QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(0, QtCore.Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table instead of walking cells
        self.table.verticalHeader().setVisible(False)
        self.table.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # the table fits its width: layer/head as narrow as their header, the scores share the rest
        # (no per-cell measuring: ResizeToContents re-measures every row on every change)
        header = self.table.horizontalHeader()
        metrics = header.fontMetrics()
        header.setMinimumSectionSize(metrics.horizontalAdvance("0.000") + 10)
        least = 0  # the narrowest the table can be with every column readable
        for column, name in enumerate(ScoreTableModel.COLUMNS):
            if name in ("layer", "head"):
                header.setSectionResizeMode(column, QtWidgets.QHeaderView.ResizeMode.Fixed)
                header.resizeSection(column, metrics.horizontalAdvance(name) + 22)
                least += header.sectionSize(column)
            else:
                header.setSectionResizeMode(column, QtWidgets.QHeaderView.ResizeMode.Stretch)
                least += max(header.minimumSectionSize(), metrics.horizontalAdvance(SCORE_SHORT.get(name, name)) + 22)
        self.table.setMinimumWidth(least + 2 * self.table.frameWidth()
                                   + self.table.verticalScrollBar().sizeHint().width())
        self.table.verticalHeader().setDefaultSectionSize(metrics.height() + 6)
        self.table.verticalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Fixed)
        self.table.setAlternatingRowColors(True)
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self.table.doubleClicked.connect(lambda index: self._activate_row(index.row()))
        self.table.installEventFilter(self)
        self.score_choice = QtWidgets.QComboBox()
        for name in SCORE_NAMES:
            self.score_choice.addItem(score_label(name), name)
            self.score_choice.setItemData(self.score_choice.count() - 1, SCORE_DESCRIPTIONS.get(name, ""),
                                          QtCore.Qt.ItemDataRole.ToolTipRole)
        self.score_choice.currentIndexChanged.connect(lambda _: self._show_map())
        self.map = ScoreMap()
        self.map.head_clicked.connect(self._select)
        self.map.head_activated.connect(self.head_activated)
        right = QtWidgets.QWidget()
        right_layout = QtWidgets.QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        row = QtWidgets.QHBoxLayout()
        row.addWidget(QtWidgets.QLabel("Map of"))
        row.addWidget(self.score_choice, 1)
        right_layout.addLayout(row)
        right_layout.addWidget(self.map, 1)
        splitter = QtWidgets.QSplitter()
        splitter.addWidget(self.table)
        splitter.addWidget(right)
        splitter.setSizes([560, 380])
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        state.bundle_changed.connect(lambda _bundle: self._bundle_changed())
        state.selection_changed.connect(self._selection_changed)
        state.colormap_changed.connect(lambda _name: self._show_map())
        state.dark_changed.connect(lambda dark: apply_theme(self.map, dark))
        apply_theme(self.map, state.dark)
        self._bundle_changed()

    @property
    def scores(self):
        return self.state.scores

    def current_score(self) -> str:
        return self.score_choice.currentData()

    # ----------------------------------------------------------------- from the state
    def _bundle_changed(self) -> None:
        self.model.set_scores(self.scores)
        self._show_map()
        self._selection_changed(self.state.layer, self.state.head)

    def _show_map(self) -> None:
        if self.scores is not None:
            name = self.current_score()
            self.map.set_score(name, self.scores[name], self.state.colormap, applies(self.scores, name))

    def _selection_changed(self, layer: int, head: int) -> None:
        self.map.select(layer, head)
        if self.scores is None:
            return
        n_head = self.scores.shape[1]
        proxy_index = self.proxy.mapFromSource(self.model.index(layer * n_head + head, 0))
        if self.table.currentIndex().row() != proxy_index.row():
            self.table.selectionModel().setCurrentIndex(
                proxy_index, QtCore.QItemSelectionModel.SelectionFlag.ClearAndSelect
                | QtCore.QItemSelectionModel.SelectionFlag.Rows)
        self.table.scrollTo(proxy_index)

    # ----------------------------------------------------------------- to the state
    def _select(self, layer: int, head: int) -> None:
        if self.scores is not None:
            self.state.select(layer, head)

    def _row_changed(self, current, _previous) -> None:
        if current.isValid():
            self._select(*self.model.head_at(self.proxy.mapToSource(current).row()))

    def _activate_row(self, proxy_row: int) -> None:
        if self.scores is None or proxy_row < 0:
            return
        layer, head = self.model.head_at(self.proxy.mapToSource(self.proxy.index(proxy_row, 0)).row())
        self._select(layer, head)
        self.head_activated.emit(layer, head)

    def eventFilter(self, obj, event):  # noqa: N802
        if (obj is self.table and event.type() == QtCore.QEvent.Type.KeyPress
                and event.key() in (QtCore.Qt.Key.Key_Return, QtCore.Qt.Key.Key_Enter)):
            self._activate_row(self.table.currentIndex().row())
            return True
        return super().eventFilter(obj, event)

    # ----------------------------------------------------------------- export
    def offscreen_figure(self):
        """A fresh, clean figure of the score map on screen (for Export and Copy), or None."""
        if self.scores is None:
            return None
        from .figures import _lay_out_offscreen

        fig = ScoreMap()
        L, H = self.scores.shape
        _lay_out_offscreen(fig, int(min(2400, 200 + 48 * H)), int(min(3000, 120 + 40 * L)))
        name = self.current_score()
        fig.set_score(name, self.scores[name], self.state.colormap, applies(self.scores, name))
        r = self.state.result
        if r is not None:
            fig.plot.setTitle(html.escape(f"{r.model_label} — {score_label(name)}", quote=False), size="11pt")
        return fig


__all__ = ["SCORE_LABELS", "SCORE_SHORT", "ScoreMap", "ScoresPanel", "ScoreTableModel", "score_label", "top_heads"]
