"""The Head scores table: one row per head (layer-major), one column per score, sortable.

:class:`Column` is what a source of scores hands the table (gui/tabs/scores/score_sources.py builds them);
:class:`ScoreTableModel` shows them; :class:`ScoreTable` is the view: sorting (the first click on a
score puts the top heads first), the selected row, Enter / double-click to open a head, and column
widths that fit without measuring every cell.

A head is named as everywhere in the app, "L1H0" (``analysis.display.head_name``: layer 1, head 0, both from 0),
and a score reads as everywhere, "0.998" (``analysis.display.format_score``: 3 decimals, "–" where undefined), in
its cell and in the cell's tooltip alike. Over many texts a cell is the mean; its std is in the tooltip
("L1H0 · previous token: mean 0.412, std 0.051 over 284 texts"), so every column fits a 1366 px window.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import format_score, head_name

SORT_ROLE = QtCore.Qt.ItemDataRole.UserRole + 1
SINK_MARK = "•"  # narrow: "• 0.311" fits a score column


@dataclass(frozen=True)
class Column:
    """One score column of the table: (layer, head) values, and, over many texts, their std."""

    name: str
    short: str  # the column header, where room is short
    label: str  # the one human name of the score (tooltips, the map)
    description: str
    values: np.ndarray  # (L, H); NaN: undefined here
    std: np.ndarray | None = None  # (L, H) over many texts (then values are the means), else None
    pending: bool = False  # being computed: shown as "…"
    note: str = ""  # added to every cell's tooltip (e.g. "over 284 texts")


def column_key(columns) -> str:
    """The key under the table: each score column's header and what it stands for, in the table's order — the
    longer name where the header is short for it ("dup. = duplicate token"), else the description's first clause
    ("entropy = how spread the attention is"). Each header's tooltip has the whole definition."""
    def meaning(c: Column) -> str:
        if c.short.strip().lower() != c.label.strip().lower():
            return c.label
        return c.description.split(" (")[0].strip()

    pairs = [f"{c.short} = {meaning(c)}" for c in columns if meaning(c)]
    return ("Columns: " + " · ".join(pairs) + " (hover a header for its definition)") if pairs else ""


class ScoreTableModel(QtCore.QAbstractTableModel):
    """Rows are heads (layer-major); columns: the head ("L1H0", sorted layer-major), then one per :class:`Column`
    (short headers, full name in the tooltip). A cell reads ``format_score`` of its value (over many texts, of the
    mean) and its tooltip the same string, with the std over many texts."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.columns: tuple[Column, ...] = ()
        self.shape = (0, 0)
        self.marked: np.ndarray | None = None  # (L, H) bool: sink heads, drawn bold in the sink column
        self.mark_note = ""

    @property
    def names(self) -> tuple[str, ...]:
        return ("head", *(c.name for c in self.columns))

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def set_columns(self, columns, shape: tuple[int, int]) -> None:
        self.beginResetModel()
        self.columns, self.shape = tuple(columns), tuple(shape)
        self.endResetModel()

    def set_marked(self, marked: np.ndarray | None, note: str = "") -> None:
        self.marked, self.mark_note = marked, note
        if self.rowCount():
            self.dataChanged.emit(self.index(0, 0), self.index(self.rowCount() - 1, self.columnCount() - 1))

    def rowCount(self, parent=QtCore.QModelIndex()):  # noqa: N802
        return 0 if parent.isValid() else self.shape[0] * self.shape[1]

    def columnCount(self, parent=QtCore.QModelIndex()):  # noqa: N802
        return 0 if parent.isValid() else 1 + len(self.columns)

    def head_at(self, row: int) -> tuple[int, int]:
        return divmod(row, self.shape[1])

    def _is_marked(self, column: Column, layer: int, head: int) -> bool:
        return column.name == "sink" and self.marked is not None and bool(self.marked[layer, head])

    def data(self, index, role=QtCore.Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        layer, head = self.head_at(index.row())
        Role = QtCore.Qt.ItemDataRole
        if role == Role.TextAlignmentRole:
            return int(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        if index.column() == 0:
            if role == Role.DisplayRole:
                return head_name(layer, head)
            if role == Role.ToolTipRole:
                return f"Layer {layer}, head {head}"
            return index.row() if role == SORT_ROLE else None  # rows are layer-major
        column = self.columns[index.column() - 1]
        value = float(column.values[layer, head])
        marked = self._is_marked(column, layer, head)
        if role == Role.DisplayRole:
            if column.pending:
                return "…"
            mark = f"{SINK_MARK} " if marked and not math.isnan(value) else ""
            return mark + format_score(value)
        if role == Role.ToolTipRole:
            if column.pending or math.isnan(value):
                return None
            text = f"{head_name(layer, head)} · {column.label}: {format_score(value)}" if column.std is None else (
                f"{head_name(layer, head)} · {column.label}: mean {format_score(value)}, "
                f"std {format_score(column.std[layer, head])}")
            text += f" {column.note}" if column.note else ""
            return text + (f"\n{SINK_MARK} {self.mark_note}" if marked else "")
        if role == Role.FontRole and marked:
            font = QtGui.QFont()
            font.setBold(True)
            return font
        if role == SORT_ROLE:
            return -math.inf if math.isnan(value) else value
        return None

    def headerData(self, section, orientation, role=QtCore.Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != QtCore.Qt.Orientation.Horizontal or not 0 <= section < self.columnCount():
            return None
        name = self.names[section]
        column = self.columns[section - 1] if section >= 1 else None
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            return column.short if column else name
        if role == QtCore.Qt.ItemDataRole.ToolTipRole:
            if column is None:
                return "The head: L1H0 is layer 1, head 0 (both counted from 0); sorted layer by layer"
            mean = f" — the mean {column.note}, each cell's std in its tooltip" if column.std is not None else (
                f" — {column.note}" if column.note else "")
            return f"{column.label}: {column.description}{mean}"
        if role == QtCore.Qt.ItemDataRole.InitialSortOrderRole:  # the first click on a score puts the top heads first
            return QtCore.Qt.SortOrder.AscendingOrder if column is None else QtCore.Qt.SortOrder.DescendingOrder
        return None


class ScoreTable(QtWidgets.QTableView):
    """The sortable view of a :class:`ScoreTableModel` (``self.score_model``, behind ``self.proxy``).

    ``head_selected(layer, head)``: the user moved to a row; ``head_activated(layer, head)``: Enter or
    a double-click on a row. :meth:`select_head` follows a selection made elsewhere without echoing it."""

    head_selected = QtCore.Signal(int, int)
    head_activated = QtCore.Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.score_model = ScoreTableModel(self)
        self.proxy = QtCore.QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.score_model)
        self.proxy.setSortRole(SORT_ROLE)
        self.setModel(self.proxy)
        self.setSortingEnabled(True)
        self.sortByColumn(0, QtCore.Qt.SortOrder.AscendingOrder)
        self.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.setTabKeyNavigation(False)  # Tab leaves the table instead of walking cells
        self.verticalHeader().setVisible(False)
        self.setAlternatingRowColors(True)
        self.verticalHeader().setDefaultSectionSize(self.horizontalHeader().fontMetrics().height() + 6)
        self.verticalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Fixed)
        self.selectionModel().currentRowChanged.connect(self._row_changed)
        self.doubleClicked.connect(lambda index: self._activate_row(index.row()))
        self._fitted_for = None
        self._following = False  # moving to a head selected elsewhere: not the user's move

    def set_columns(self, columns, shape: tuple[int, int]) -> None:
        """Show ``columns``, scrolled to the top of the sort (a ranking is read from its top; the selected head,
        wherever it is, stays selected); the table stays sorted by the same score (by its name, wherever its
        column now is), or by head when that score is gone."""
        header = self.horizontalHeader()
        names = self.score_model.names
        section = header.sortIndicatorSection()
        key = names[section] if 0 <= section < len(names) else "head"
        order = header.sortIndicatorOrder()
        self.score_model.set_columns(columns, shape)
        names = self.score_model.names
        if key in names:
            self.sortByColumn(names.index(key), order)
        else:
            self.sortByColumn(0, QtCore.Qt.SortOrder.AscendingOrder)
        self.scrollToTop()

    def head_at_row(self, proxy_row: int) -> tuple[int, int]:
        """The (layer, head) of a row as sorted on screen."""
        return self.score_model.head_at(self.proxy.mapToSource(self.proxy.index(proxy_row, 0)).row())

    def select_head(self, layer: int, head: int, scroll: bool = True) -> None:
        """Make (layer, head)'s row current and, with ``scroll``, scroll to it (no ``head_selected``: it came from
        outside)."""
        L, H = self.score_model.shape
        if not (0 <= layer < L and 0 <= head < H):
            return
        proxy_index = self.proxy.mapFromSource(self.score_model.index(layer * H + head, 0))
        if self.currentIndex().row() != proxy_index.row():
            self._following = True
            self.setAutoScroll(scroll)  # a new current row scrolls to itself unless told not to
            try:
                self.selectionModel().setCurrentIndex(
                    proxy_index, QtCore.QItemSelectionModel.SelectionFlag.ClearAndSelect
                    | QtCore.QItemSelectionModel.SelectionFlag.Rows)
            finally:
                self._following = False
                self.setAutoScroll(True)
        if scroll:
            self.scrollTo(proxy_index)

    def _row_changed(self, current, _previous) -> None:
        if current.isValid() and self.score_model.rowCount() and not self._following:
            self.head_selected.emit(*self.head_at_row(current.row()))

    def _activate_row(self, proxy_row: int) -> None:
        if not self.score_model.rowCount() or proxy_row < 0:
            return
        layer, head = self.head_at_row(proxy_row)
        self.head_selected.emit(layer, head)
        self.head_activated.emit(layer, head)

    def keyPressEvent(self, event):  # noqa: N802
        if event.key() in (QtCore.Qt.Key.Key_Return, QtCore.Qt.Key.Key_Enter):
            self._activate_row(self.currentIndex().row())
            return
        super().keyPressEvent(event)

    def fit_columns(self) -> None:
        """The head column as narrow as its longest name, the sink column wide enough for its bold marked cells,
        the other scores share the rest; the table never scrolls sideways (no per-cell measuring:
        ResizeToContents re-measures every row on every change). Its minimum width is the narrowest with every
        column readable, so the splitter never hides one."""
        model = self.score_model
        key = (model.names, model.shape)
        if key == self._fitted_for:
            return
        self._fitted_for = key
        header = self.horizontalHeader()
        metrics = header.fontMetrics()
        header.setMinimumSectionSize(metrics.horizontalAdvance("0.000") + 10)
        self.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        bold = QtGui.QFont(header.font())
        bold.setBold(True)
        L, H = model.shape
        longest = head_name(max(L - 1, 0), max(H - 1, 0))
        least = 0  # the narrowest the table can be with every column readable
        for column, name in enumerate(model.names):
            short = model.headerData(column, QtCore.Qt.Orientation.Horizontal)
            if name == "head":
                header.setSectionResizeMode(column, QtWidgets.QHeaderView.ResizeMode.Fixed)
                header.resizeSection(column, max(metrics.horizontalAdvance(longest) + 14,
                                                 metrics.horizontalAdvance(short) + 22))
                least += header.sectionSize(column)
            elif name == "sink":  # its marked cells read "• 0.311" in bold: never elided to "• …"
                header.setSectionResizeMode(column, QtWidgets.QHeaderView.ResizeMode.Fixed)
                header.resizeSection(column, max(QtGui.QFontMetrics(bold).horizontalAdvance(f"{SINK_MARK} 0.000") + 16,
                                                 metrics.horizontalAdvance(short) + 22))
                least += header.sectionSize(column)
            else:
                header.setSectionResizeMode(column, QtWidgets.QHeaderView.ResizeMode.Stretch)
                least += max(header.minimumSectionSize(), metrics.horizontalAdvance(short) + 22)
        self.setMinimumWidth(least + 2 * self.frameWidth() + self.verticalScrollBar().sizeHint().width())
