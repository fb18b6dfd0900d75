"""The head-score table (sortable, one row per head) and a layer × head map of one score."""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from analysis.head_scores import SCORE_DESCRIPTIONS, SCORE_NAMES

from .figures import HoverImage, colormap

SORT_ROLE = QtCore.Qt.ItemDataRole.UserRole + 1


class ScoreTableModel(QtCore.QAbstractTableModel):
    """Rows are heads; columns: layer, head, then every score."""

    COLUMNS = ("layer", "head", *SCORE_NAMES)

    def __init__(self, parent=None):
        super().__init__(parent)
        self._rows: list[dict] = []

    def set_scores(self, scores) -> None:
        self.beginResetModel()
        self._rows = scores.rows() if scores is not None else []
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
            return "—" if math.isnan(value) else f"{value:.3f}"
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
            return name.replace("_", " ")
        if role == QtCore.Qt.ItemDataRole.ToolTipRole:
            return SCORE_DESCRIPTIONS.get(name, name)
        return None

    def head_at(self, row: int) -> tuple[int, int]:
        r = self._rows[row]
        return r["layer"], r["head"]


class ScoreMap(pg.GraphicsLayoutWidget):
    """One score for every head as a small heatmap: layers down, heads across; click selects."""

    head_clicked = QtCore.Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setBackground("w")
        self.plot = self.addPlot()
        self.plot.invertY(True)
        self.plot.setAspectLocked(True, ratio=1)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(False, False)
        self.image = HoverImage(on_hover=self._hovered, on_click=lambda cell: self.head_clicked.emit(*cell))
        self.plot.addItem(self.image)
        self.marker = QtWidgets.QGraphicsRectItem()
        self.marker.setPen(pg.mkPen("#ff2d55", width=3, cosmetic=True))
        self.plot.addItem(self.marker)
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=colormap("viridis"), interactive=False, width=12)
        self.colorbar.setImageItem(self.image, insert_in=self.plot)
        self.values: np.ndarray | None = None
        self.name = ""

    def set_score(self, name: str, values: np.ndarray, cmap: str = "viridis") -> None:
        self.values, self.name = values, name
        L, H = values.shape
        finite = values[np.isfinite(values)]
        top = max(1e-9, float(finite.max())) if finite.size else 1.0
        levels = (0.0, max(1.0, top) if name != "entropy" else 1.0)
        self.image.setImage(values.astype(np.float32), levels=levels, autoLevels=False)
        self.colorbar.setColorMap(colormap(cmap))
        self.colorbar.setLevels(levels)
        self.plot.setTitle(f"{name.replace('_', ' ')}" + ("" if finite.size else " — not defined for this text"))
        self.plot.getAxis("left").setTicks([[(l + 0.5, f"L{l}") for l in range(L)], []])
        self.plot.getAxis("bottom").setTicks([[(h + 0.5, f"H{h}") for h in range(H)], []])
        self.plot.setRange(xRange=(0, H), yRange=(0, L), padding=0.02)

    def select(self, layer: int, head: int) -> None:
        self.marker.setRect(QtCore.QRectF(head, layer, 1, 1))

    def _hovered(self, cell) -> None:
        if cell is None or self.values is None:
            self.setToolTip("")
            return
        v = self.values[cell]
        self.setToolTip(f"layer {cell[0]}, head {cell[1]}: {self.name} = {'—' if np.isnan(v) else f'{v:.3f}'}")


class ScoresPanel(QtWidgets.QWidget):
    """Table + map side by side. Emits ``head_selected`` when a row or a map cell is clicked."""

    head_selected = QtCore.Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
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
        self.table.verticalHeader().setVisible(False)
        # column widths from the header text and the number format, not by measuring every cell
        # (ResizeToContents re-measures all rows on every change: tens of ms on the GUI thread)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Interactive)
        metrics = header.fontMetrics()
        for column, name in enumerate(ScoreTableModel.COLUMNS):
            label = name.replace("_", " ")
            header.resizeSection(column, max(metrics.horizontalAdvance(label), metrics.horizontalAdvance("0.000")) + 28)
        self.table.verticalHeader().setDefaultSectionSize(metrics.height() + 6)
        self.table.verticalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Fixed)
        self.table.setAlternatingRowColors(True)
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self.score_choice = QtWidgets.QComboBox()
        self.score_choice.addItems(SCORE_NAMES)
        self.score_choice.currentTextChanged.connect(self._show_map)
        self.map = ScoreMap()
        self.map.head_clicked.connect(self.head_selected)
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
        splitter.setSizes([620, 380])
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        self.scores = None
        self.cmap = "viridis"
        self._syncing = False

    def set_scores(self, scores, cmap: str = "viridis") -> None:
        self.scores, self.cmap = scores, cmap
        self.model.set_scores(scores)
        self._show_map(self.score_choice.currentText())

    def set_colormap(self, cmap: str) -> None:
        self.cmap = cmap
        self._show_map(self.score_choice.currentText())

    def _show_map(self, name: str) -> None:
        if self.scores is not None and name:
            self.map.set_score(name, self.scores[name], self.cmap)

    def _row_changed(self, current, _previous) -> None:
        if self._syncing or not current.isValid():
            return
        source = self.proxy.mapToSource(current)
        self.head_selected.emit(*self.model.head_at(source.row()))

    def select(self, layer: int, head: int) -> None:
        self.map.select(layer, head)
        if self.scores is None:
            return
        n_head = self.scores.shape[1]
        source = self.model.index(layer * n_head + head, 0)
        proxy_index = self.proxy.mapFromSource(source)
        self._syncing = True
        try:
            self.table.selectionModel().setCurrentIndex(
                proxy_index, QtCore.QItemSelectionModel.SelectionFlag.ClearAndSelect
                | QtCore.QItemSelectionModel.SelectionFlag.Rows)
            self.table.scrollTo(proxy_index)
        finally:
            self._syncing = False
