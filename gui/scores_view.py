"""The Head scores tab: a sortable table of every score for every head beside a layer × head map of
one score. It follows the view state (result, selection, colormap, dark) and writes the selection back.

What the table shows, one of three sources:

- *this text, AttnScope's scores* (``analysis.head_scores``, the state's bundle);
- *this text, TransformerLens-style scores*: ``analysis.tl_scores.detect`` of the result on screen for
  TL's three patterns, with its ``mul``/``abs`` measure and ``exclude_bos``/``exclude_current_token``
  switches (computed on the worker: O(L·H·n²));
- *over N texts*: the mean ± std of a scan (``analysis.scan.ScanResult``), started from "Scores over
  many texts…" (gui/scan_dialog.py), with a way back to the text on screen.

Above them, the sink rate (Gu et al. 2024, ``analysis.lenses.sink_rate``): the share of heads whose
first-token score exceeds ε (a control, default 0.3); the sink heads are marked on the map and in the
table's sink column.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.head_scores import NOT_APPLICABLE, NOT_APPLICABLE_WHY, SCORE_DESCRIPTIONS, SCORE_LABELS, SCORE_NAMES
from analysis.lenses import SINK_EPSILON, sink_rate

from .jobs import Job
from .layer_head_map import LayerHeadMap, top_heads
from .plot_items import apply_theme

SORT_ROLE = QtCore.Qt.ItemDataRole.UserRole + 1
# SCORE_LABELS (analysis.head_scores) is the one name of each score everywhere in the GUI (table
# tooltips, map, badges); SCORE_SHORT only heads the table's columns, where room is short
SCORE_SHORT = {"previous_token": "prev.", "sink": "sink", "self": "self", "duplicate_token": "dup.",
               "induction": "induct.", "induction_probe": "probe", "entropy": "entropy", "next_token": "next"}
# TransformerLens-style scores (analysis.tl_scores): TL's own pattern names, labelled as TL's everywhere
TL_NAMES = ("previous_token_head", "duplicate_token_head", "induction_head")
TL_LABELS = {"previous_token_head": "previous token (TL-style)", "duplicate_token_head": "duplicate token (TL-style)",
             "induction_head": "induction (TL-style)"}
TL_SHORT = {"previous_token_head": "TL prev.", "duplicate_token_head": "TL dup.", "induction_head": "TL induct."}
TL_PATTERNS = {"previous_token_head": "P[i, j] = 1 where j = i − 1",
               "duplicate_token_head": "P[i, j] = 1 where j < i and tok[j] = tok[i]",
               "induction_head": "P[i, j] = 1 where j ≥ 1, j − 1 < i and tok[j − 1] = tok[i]"}
TL_MEASURES = {"mul": "mul: Σ(A′ ⊙ P) / ΣA′ — the share of the (remaining) attention where P expects it; 0 … 1",
               "abs": "abs: 1 − round(Σ|A − P|′ / n, 3) — 1 is a perfect match; −1 … 1"}
SOURCE_OURS, SOURCE_TL = "attnscope", "tl"
SINK_MARK = "●"


def score_label(name: str) -> str:
    return TL_LABELS.get(name) or SCORE_LABELS.get(name, name.replace("_", " "))


def applies(scores, name: str) -> bool:
    """False where a score does not apply to this model (shown as n/a, never as a number)."""
    check = getattr(scores, "applies", None)
    return True if check is None else bool(check(name))


@dataclass(frozen=True)
class Column:
    """One score column of the table: (layer, head) values, and, over many texts, their std."""

    name: str
    short: str
    label: str
    description: str
    values: np.ndarray  # (L, H); NaN: undefined here
    std: np.ndarray | None = None  # (L, H) over many texts, else None
    applicable: bool = True
    why: str = ""  # why it does not apply (tooltip)
    pending: bool = False  # being computed: shown as "…"
    note: str = ""  # added to every cell's tooltip (e.g. "over 284 texts")


class ScoreTableModel(QtCore.QAbstractTableModel):
    """Rows are heads (layer-major); columns: layer, head, then one per :class:`Column` (short
    headers, full name in the tooltip). Over many texts a cell reads "mean ± std"."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.columns: tuple[Column, ...] = ()
        self.shape = (0, 0)
        self.marked: np.ndarray | None = None  # (L, H) bool: sink heads, drawn bold in the sink column
        self.mark_note = ""

    @property
    def names(self) -> tuple[str, ...]:
        return ("layer", "head", *(c.name for c in self.columns))

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
        return 0 if parent.isValid() else 2 + len(self.columns)

    def head_at(self, row: int) -> tuple[int, int]:
        return divmod(row, self.shape[1])

    def _is_marked(self, column: Column, layer: int, head: int) -> bool:
        return column.name == "sink" and self.marked is not None and bool(self.marked[layer, head])

    def data(self, index, role=QtCore.Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        layer, head = self.head_at(index.row())
        Role = QtCore.Qt.ItemDataRole
        if index.column() < 2:
            value = (layer, head)[index.column()]
            if role in (Role.DisplayRole, SORT_ROLE):
                return str(value) if role == Role.DisplayRole else value
            if role == Role.TextAlignmentRole:
                return int(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
            return None
        column = self.columns[index.column() - 2]
        value = float(column.values[layer, head])
        if role == Role.DisplayRole:
            if not column.applicable:
                return NOT_APPLICABLE
            if column.pending:
                return "…"
            if math.isnan(value):
                return "—"
            mark = f"{SINK_MARK} " if self._is_marked(column, layer, head) else ""
            if column.std is None:
                return f"{mark}{value:.3f}"
            return f"{mark}{value:.3f} ± {float(column.std[layer, head]):.3f}"
        if role == Role.ToolTipRole:
            if not column.applicable:
                return column.why
            if column.pending or math.isnan(value):
                return None
            text = f"{column.label}: {value:.4f}" if column.std is None else (
                f"{column.label}: mean {value:.4f}, std {float(column.std[layer, head]):.4f}")
            text += f" {column.note}" if column.note else ""
            if self._is_marked(column, layer, head):
                text += f"\n{SINK_MARK} {self.mark_note}"
            return text
        if role == Role.FontRole and self._is_marked(column, layer, head):
            font = QtGui.QFont()
            font.setBold(True)
            return font
        if role == SORT_ROLE:
            return -math.inf if math.isnan(value) or not column.applicable else value
        if role == Role.TextAlignmentRole:
            return int(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(self, section, orientation, role=QtCore.Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != QtCore.Qt.Orientation.Horizontal or not 0 <= section < self.columnCount():
            return None
        name = self.names[section]
        column = self.columns[section - 2] if section >= 2 else None
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            return column.short if column else name
        if role == QtCore.Qt.ItemDataRole.ToolTipRole:
            if column is None:
                return name
            return f"{column.label}: {column.description}" + (f" — {column.note}" if column.note else "")
        if role == QtCore.Qt.ItemDataRole.InitialSortOrderRole:  # the first click on a score puts the top heads first
            return QtCore.Qt.SortOrder.AscendingOrder if column is None else QtCore.Qt.SortOrder.DescendingOrder
        return None


class ScoreMap(LayerHeadMap):
    """One score for every head: layers down, heads across; hover shows the value and its rank.
    Sink heads can be marked (:meth:`set_marks`) with a small ● in the cell's corner."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.values: np.ndarray | None = None
        self.std: np.ndarray | None = None
        self.name = self.label = self.note = ""
        self.marks = pg.ScatterPlotItem(symbol="o", size=9, pen=pg.mkPen("#000000", width=1.2),
                                        brush=pg.mkBrush("#ffffff"))
        self.marks.setZValue(6)
        self.plot.addItem(self.marks, ignoreBounds=True)
        self.marked: np.ndarray | None = None
        self.mark_note = ""

    def set_score(self, name: str, values: np.ndarray, cmap: str = "viridis", applicable: bool = True, *,
                  label: str | None = None, levels: tuple[float, float] | None = None,
                  std: np.ndarray | None = None, note: str = "") -> None:
        """Show ``values`` (L, H); ``std`` (over many texts) goes into the hover, ``note`` after the title."""
        self.values, self.name = np.asarray(values, dtype=np.float64), name
        self.std = None if std is None else np.asarray(std, dtype=np.float64)
        self.label, self.note = label or score_label(name), note
        if not applicable:
            self.values = np.full(self.values.shape, np.nan)
        finite = self.values[np.isfinite(self.values)]
        top = float(finite.max()) if finite.size else 1.0
        if levels is None:
            levels = (0.0, 1.0 if name == "entropy" else max(1.0, top))
        missing = "" if finite.size else (" — not defined for this text" if applicable else f" — {NOT_APPLICABLE}")
        title = self.label + (f", {note}" if note else "") + missing
        self.set_image(self.values.astype(np.float32), self.values.shape, levels, cmap, title, self.label)
        self.set_badges(self.values, self.label)
        self._draw_marks()

    def set_marks(self, marked: np.ndarray | None, note: str = "") -> None:
        """Mark the heads where ``marked`` (L, H) is True (the sink heads); None clears the marks."""
        self.marked, self.mark_note = (None if marked is None else np.asarray(marked, dtype=bool)), note
        self._draw_marks()

    def _draw_marks(self) -> None:
        if self.marked is None or self.marked.shape != tuple(self.shape):
            self.marks.setData([], [])
            return
        layers, heads = np.nonzero(self.marked)
        self.marks.setData(heads + 0.86, layers + 0.16)  # the cell's top-right corner (badges sit top-left)

    def hover_text(self, layer: int, head: int) -> str:
        if self.values is None:
            return ""
        v = self.values[layer, head]
        if not np.isfinite(v):
            return f"layer {layer}, head {head}: {self.label} not defined here"
        rank = int((self.values > v).sum()) + 1  # heads with a strictly higher score, plus one
        value = f"{v:.3f}" if self.std is None else f"{v:.3f} ± {self.std[layer, head]:.3f}"
        text = (f"layer {layer}, head {head}: {self.label} = {value}{' ' + self.note if self.note else ''} "
                f"(rank {rank} of {int(np.isfinite(self.values).sum())})")
        if self.marked is not None and self.marked.shape == self.values.shape and self.marked[layer, head]:
            text += f"\n{SINK_MARK} {self.mark_note}"
        return text + "\ndouble-click or Enter: open"


class ScoresPanel(QtWidgets.QWidget):
    """Table + map side by side, on a :class:`~gui.view_state.ViewState`. A click selects a head;
    Enter or a double-click on a row or a map cell also emits ``head_activated``."""

    title = "Head scores"
    head_activated = QtCore.Signal(int, int)
    scores_shown = QtCore.Signal()  # the table and map were redrawn (a new source, TL scores arrived …)

    def __init__(self, state, worker=None, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.scan = None  # analysis.scan.ScanResult of the last scan, for the model loaded
        self.scan_source = ""  # where its texts came from, in words
        self.showing_scan = False
        self.tl_scores: dict[str, np.ndarray] | None = None  # the TL-style scores of ``_tl_key``
        self._tl_key = None
        self._tl_job = Job(worker, "tl_scores", self) if worker is not None else None
        if self._tl_job is not None:
            self._tl_job.finished.connect(self._tl_ready)
            self._tl_job.failed.connect(self._tl_failed)
            worker.model_loaded.connect(self._model_loaded)  # a bound slot: disconnected when the panel goes
        self._build()
        state.bundle_changed.connect(lambda _bundle: self._bundle_changed())
        state.selection_changed.connect(self._selection_changed)
        state.colormap_changed.connect(lambda _name: self._show_map())
        state.dark_changed.connect(lambda dark: apply_theme(self.map, dark))
        apply_theme(self.map, state.dark)
        self._bundle_changed()

    # ----------------------------------------------------------------- building
    def _build(self) -> None:
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
        self.table.setAlternatingRowColors(True)
        metrics = self.table.horizontalHeader().fontMetrics()
        self.table.verticalHeader().setDefaultSectionSize(metrics.height() + 6)
        self.table.verticalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Fixed)
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self.table.doubleClicked.connect(lambda index: self._activate_row(index.row()))
        self.table.installEventFilter(self)
        self._fitted_for = None

        self.source_choice = QtWidgets.QComboBox()
        self.source_choice.addItem("AttnScope's scores", SOURCE_OURS)
        self.source_choice.addItem("TransformerLens-style scores", SOURCE_TL)
        self.source_choice.setItemData(1, "TransformerLens's head_detector scores (previous-token, duplicate-token, "
                                          "induction), computed from the attention on screen, so numbers can be "
                                          "compared with TL's", QtCore.Qt.ItemDataRole.ToolTipRole)
        self.source_choice.setToolTip("Which scores the table and the map show")
        self.source_choice.currentIndexChanged.connect(lambda _: self._refresh())
        self.measure_choice = QtWidgets.QComboBox()
        for measure, text in TL_MEASURES.items():
            self.measure_choice.addItem(measure, measure)
            self.measure_choice.setItemData(self.measure_choice.count() - 1, text, QtCore.Qt.ItemDataRole.ToolTipRole)
        self.measure_choice.setToolTip("TransformerLens's error_measure:\n" + "\n".join(TL_MEASURES.values()))
        self.exclude_bos_box = QtWidgets.QCheckBox("exclude BOS")
        self.exclude_bos_box.setToolTip("TL's exclude_bos: leave the first key (column 0) out of the comparison")
        self.exclude_current_box = QtWidgets.QCheckBox("exclude current token")
        self.exclude_current_box.setToolTip("TL's exclude_current_token: leave the diagonal (i attends to i) out")
        for widget in (self.measure_choice,):
            widget.currentIndexChanged.connect(lambda _: self._refresh())
        for box in (self.exclude_bos_box, self.exclude_current_box):
            box.toggled.connect(lambda _: self._refresh())
        self.scan_button = QtWidgets.QPushButton("Over many texts…")
        self.scan_button.setToolTip("Every score's mean ± std over many texts "
                                    "(a file, a folder, or the bundled sample)")
        self.scan_button.clicked.connect(self.open_scan_dialog)
        top = QtWidgets.QHBoxLayout()
        top.addWidget(QtWidgets.QLabel("Show"))
        top.addWidget(self.source_choice)
        self.tl_controls = QtWidgets.QWidget()
        tl_row = QtWidgets.QHBoxLayout(self.tl_controls)
        tl_row.setContentsMargins(0, 0, 0, 0)
        tl_row.addWidget(QtWidgets.QLabel("measure"))
        tl_row.addWidget(self.measure_choice)
        tl_row.addWidget(self.exclude_bos_box)
        tl_row.addWidget(self.exclude_current_box)
        top.addWidget(self.tl_controls)
        top.addStretch(1)
        top.addWidget(self.scan_button)

        self.scan_bar = QtWidgets.QFrame()
        self.scan_bar.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.scan_bar.setObjectName("scanBar")
        self.scan_bar.setStyleSheet("#scanBar { background: #e7f1ff; border: 1px solid #0b3d9133; border-radius: 4px; }"
                                    " #scanBar QLabel { color: #0b3d91; }")
        self.scan_label = QtWidgets.QLabel()
        self.scan_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.scan_label.setWordWrap(True)
        self.scan_toggle = QtWidgets.QPushButton()
        self.scan_toggle.clicked.connect(lambda: self.show_scan_view(not self.showing_scan))
        scan_row = QtWidgets.QHBoxLayout(self.scan_bar)
        scan_row.setContentsMargins(8, 3, 4, 3)
        scan_row.addWidget(self.scan_label, 1)
        scan_row.addWidget(self.scan_toggle)
        self.scan_bar.hide()

        self.sink_label = QtWidgets.QLabel()
        self.sink_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.epsilon_spin = QtWidgets.QDoubleSpinBox()
        self.epsilon_spin.setRange(0.0, 0.99)
        self.epsilon_spin.setSingleStep(0.05)
        self.epsilon_spin.setDecimals(2)
        self.epsilon_spin.setValue(SINK_EPSILON)
        self.epsilon_spin.setPrefix("ε = ")
        self.epsilon_spin.setToolTip("A head is a sink head when its first-token score (mean over i ≥ 1 of A[i, 0]) "
                                     "is above ε (Gu et al. 2024, 'When Attention Sink Emerges'; default 0.3)")
        self.epsilon_spin.valueChanged.connect(lambda _: self._show_sinks())
        sink_row = QtWidgets.QHBoxLayout()
        sink_row.addWidget(self.sink_label, 1)
        sink_row.addWidget(self.epsilon_spin)

        self.score_choice = QtWidgets.QComboBox()
        self.score_choice.currentIndexChanged.connect(lambda _: self._show_map())
        self.map = ScoreMap()
        self.map.head_clicked.connect(self._select)
        self.map.head_activated.connect(self.head_activated)
        self.note = QtWidgets.QLabel()
        self.note.setWordWrap(True)
        self.note.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.note.setStyleSheet("color: palette(placeholder-text);")
        self.note.hide()
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
        splitter.setChildrenCollapsible(False)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(3)
        layout.addLayout(top)
        layout.addWidget(self.scan_bar)
        layout.addLayout(sink_row)
        layout.addWidget(self.note)
        layout.addWidget(splitter, 1)

    def _fit_columns(self) -> None:
        """Layer/head as narrow as their header, the scores share the rest (no per-cell measuring:
        ResizeToContents re-measures every row on every change). Over many texts ("0.000 ± 0.000") the
        table may scroll sideways; otherwise it fits its width."""
        key = (self.model.names, self.showing_scan)
        if key == self._fitted_for:
            return
        self._fitted_for = key
        header = self.table.horizontalHeader()
        metrics = header.fontMetrics()
        header.setMinimumSectionSize(metrics.horizontalAdvance("0.000") + 10)
        self.table.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAsNeeded if self.showing_scan
                                                else QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        bold = QtGui.QFont(header.font())
        bold.setBold(True)
        wide = QtGui.QFontMetrics(bold).horizontalAdvance(f"{SINK_MARK} 0.000 ± 0.000") + 16  # a marked mean ± std
        least = 0  # the narrowest the table can be with every column readable
        for column, name in enumerate(self.model.names):
            if name in ("layer", "head"):
                header.setSectionResizeMode(column, QtWidgets.QHeaderView.ResizeMode.Fixed)
                header.resizeSection(column, metrics.horizontalAdvance(name) + 22)
                least += header.sectionSize(column)
            elif self.showing_scan:
                header.setSectionResizeMode(column, QtWidgets.QHeaderView.ResizeMode.Fixed)
                header.resizeSection(column, wide)
            else:
                header.setSectionResizeMode(column, QtWidgets.QHeaderView.ResizeMode.Stretch)
                short = self.model.headerData(column, QtCore.Qt.Orientation.Horizontal)
                least += max(header.minimumSectionSize(), metrics.horizontalAdvance(short) + 22)
        if self.showing_scan:
            least += 2 * wide  # and it scrolls sideways to the rest
        self.table.setMinimumWidth(least + 2 * self.table.frameWidth()
                                   + self.table.verticalScrollBar().sizeHint().width())

    # ----------------------------------------------------------------- what is shown
    @property
    def scores(self):
        """The scores of the text on screen (AttnScope's), whatever the table shows."""
        return self.state.scores

    def source(self) -> str:
        """"scan" (over many texts), "tl" (this text, TransformerLens-style) or "attnscope" (this text)."""
        return "scan" if self.showing_scan else self.source_choice.currentData()

    def current_score(self) -> str:
        return self.score_choice.currentData()

    def tl_options(self) -> dict:
        """The keyword arguments of ``tl_scores.detect`` the TL-style columns use."""
        return {"error_measure": self.measure_choice.currentData(), "exclude_bos": self.exclude_bos_box.isChecked(),
                "exclude_current_token": self.exclude_current_box.isChecked()}

    def _columns(self) -> tuple[list[Column], tuple[int, int]] | None:
        source = self.source()
        if source == "scan":
            scan = self.scan
            mean, std = scan.mean_scores(), scan.std_scores()
            columns = []
            for k, name in enumerate(scan.score_names):
                note = f"over {scan.n_texts} texts" + (f" (defined on {int(scan.defined[k])} of them)"
                                                       if 0 < scan.defined[k] < scan.n_texts else "")
                columns.append(Column(name, SCORE_SHORT.get(name, name), score_label(name),
                                      SCORE_DESCRIPTIONS.get(name, ""), mean[name], std[name], mean.applies(name),
                                      NOT_APPLICABLE_WHY.get(name, ""), note=note))
            return columns, mean.shape
        scores = self.scores
        if scores is None:
            return None
        if source == SOURCE_TL:
            pending = self.tl_scores is None
            measure = self.tl_options()["error_measure"]
            shape = scores.shape
            return [Column(name, TL_SHORT[name], TL_LABELS[name],
                           f"TransformerLens's {name} detector: {TL_PATTERNS[name]}; {TL_MEASURES[measure]}",
                           np.full(shape, np.nan) if pending else self.tl_scores[name], pending=pending)
                    for name in TL_NAMES], shape
        return [Column(name, SCORE_SHORT.get(name, name), score_label(name), SCORE_DESCRIPTIONS.get(name, ""),
                       scores[name], None, applies(scores, name), NOT_APPLICABLE_WHY.get(name, ""))
                for name in SCORE_NAMES], scores.shape

    def _refresh(self) -> None:
        """Redraw table, map choice, map and sink row for the source now chosen."""
        result = self.state.result
        causal = bool(getattr(result, "causal", True)) if result is not None else True
        tl_item = self.source_choice.model().item(1)
        tl_item.setEnabled(causal)
        tl_item.setToolTip("" if causal else "TransformerLens's detectors are for decoders; this model is an encoder")
        if not causal and self.source_choice.currentData() == SOURCE_TL:
            self.source_choice.setCurrentIndex(0)  # → _refresh again
            return
        self.source_choice.setEnabled(not self.showing_scan)
        self.tl_controls.setVisible(self.source() == SOURCE_TL)
        note = ""
        if self.source() == SOURCE_TL:
            note = self._ask_tl_scores()
        self.note.setText(note)
        self.note.setVisible(bool(note))
        table = self._columns()
        if table is None:
            self.model.set_columns([], (0, 0))
        else:
            self.model.set_columns(*table)
        self._fit_columns()
        self._fill_score_choice(table[0] if table else [])
        self._show_sinks()
        self._show_scan_bar()
        self._selection_changed(self.state.layer, self.state.head)
        self.scores_shown.emit()

    def _fill_score_choice(self, columns: list[Column]) -> None:
        names = [c.name for c in columns]
        current = self.current_score()
        if [self.score_choice.itemData(i) for i in range(self.score_choice.count())] != names:
            self.score_choice.blockSignals(True)
            self.score_choice.clear()
            for column in columns:
                self.score_choice.addItem(column.label, column.name)
                self.score_choice.setItemData(self.score_choice.count() - 1, column.description,
                                              QtCore.Qt.ItemDataRole.ToolTipRole)
            index = self.score_choice.findData(current)
            self.score_choice.setCurrentIndex(max(0, index))
            self.score_choice.blockSignals(False)
        self._show_map()

    def _show_map(self) -> None:
        name = self.current_score()
        column = next((c for c in self.model.columns if c.name == name), None)
        if column is None:
            return
        levels = None
        if name in TL_NAMES:
            levels = (-1.0, 1.0) if self.tl_options()["error_measure"] == "abs" else (0.0, 1.0)
        note = f"mean over {self.scan.n_texts} texts" if self.source() == "scan" else (
            "computing…" if column.pending else "")
        self.map.set_score(name, column.values, self.state.colormap, column.applicable, label=column.label,
                           levels=levels, std=column.std, note=note)

    # ----------------------------------------------------------------- sink rate
    def sinks(self):
        """``lenses.SinkRate`` of what is shown at the ε chosen: of the text on screen, or over many texts
        (the heads whose *mean* first-token score exceeds ε); None without either."""
        epsilon = self.epsilon_spin.value()
        if self.source() == "scan":
            return self.scan.sink_rate(epsilon)
        if self.state.result is None:
            return None
        return sink_rate(self.state.result.attentions, epsilon)

    def _show_sinks(self) -> None:
        sinks = self.sinks()
        if sinks is None:
            self.sink_label.setText("Sink heads: run a text to count them.")
            self.model.set_marked(None)
            self.map.set_marks(None)
            return
        L, H = sinks.mask.shape
        count = int(sinks.mask.sum())
        where = f"mean first-token score over {self.scan.n_texts} texts" if self.source() == "scan" else \
            "first-token score"
        if np.isnan(sinks.scores).all():
            self.sink_label.setText("Sink heads: not defined for a 1-token text (no query sees an earlier token).")
        else:
            self.sink_label.setText(f"Sink heads ({SINK_MARK}): {count} of {L * H} — sink rate {sinks.rate:.1%}, "
                                    f"the heads whose {where} is above ε")
        mark_note = f"sink head: {where} above ε = {sinks.epsilon:g}"
        self.model.set_marked(sinks.mask, mark_note)
        self.map.set_marks(sinks.mask, mark_note)

    # ----------------------------------------------------------------- TransformerLens-style scores
    def _ask_tl_scores(self) -> str:
        """Make sure the TL-style scores of the result on screen, with the options chosen, are there or
        on their way; returns a note for the user ("" when none is needed)."""
        from analysis import tl_scores

        result = self.state.result
        if result is None:
            return ""
        if result.n_tokens < 2:
            self.tl_scores, self._tl_key = {name: np.full(self.scores.shape, np.nan) for name in TL_NAMES}, None
            return "TransformerLens-style scores need at least 2 tokens."
        options = self.tl_options()
        key = (self.state.bundle.request_id, id(result), tuple(sorted(options.items())))
        if key == self._tl_key:
            return self._tl_note(result)
        self._tl_key, self.tl_scores = key, None
        attentions, ids = result.attentions, np.asarray(result.token_ids)

        def work(_loaded, _progress, _cancel):
            return key, {name: tl_scores.detect(attentions, ids, name, **options) for name in TL_NAMES}

        if self._tl_job is None:  # no worker (a figure, a test): the numpy runs here
            self.tl_scores = work(None, None, None)[1]
        else:
            self._tl_job.start(work)
        return self._tl_note(result)

    def _tl_note(self, result) -> str:
        bos = ("BOS was prepended (key 0), as in TL's default run" if result.bos else
               "no BOS was prepended, unlike TL's default run: switch BOS on to compare")
        return f"TransformerLens-style: TL's head_detector scores of this text's attention, not AttnScope's own; {bos}."

    def _tl_ready(self, value) -> None:
        key, scores = value
        if key != self._tl_key:
            return  # the options or the text changed since
        self.tl_scores = scores
        if self.source() == SOURCE_TL:
            self._refresh()

    def _tl_failed(self, message: str) -> None:
        self.note.setText(f"TransformerLens-style scores failed: {message}")
        self.note.show()

    # ----------------------------------------------------------------- over many texts
    def open_scan_dialog(self):
        """"Scores over many texts…": the dialog that runs a scan on the worker; returns it (shown, non-blocking)."""
        from .scan_dialog import ScanDialog

        if self.worker is None:
            return None
        result = self.state.result
        dialog = ScanDialog(self.worker, None if result is None else bool(result.bos), self.window())
        dialog.scan_ready.connect(self.show_scan)
        dialog.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose, True)
        dialog.open()
        self._scan_dialog = dialog
        return dialog

    def show_scan(self, scan, source: str = "") -> None:
        """Show ``scan`` (an ``analysis.scan.ScanResult``): the table and map turn to mean ± std."""
        self.scan = scan
        self.scan_source = source or getattr(scan, "source", "")
        self.show_scan_view(True)

    def show_scan_view(self, on: bool) -> None:
        """Switch between the scan's mean ± std (``on``) and the text on screen."""
        self.showing_scan = bool(on) and self.scan is not None
        self._refresh()

    def _model_loaded(self, *_args) -> None:
        self.clear_scan()

    def clear_scan(self) -> None:
        """Forget the scan (a new model was loaded: its scores are another model's)."""
        self.scan, self.showing_scan = None, False
        self._refresh()

    def _show_scan_bar(self) -> None:
        scan = self.scan
        if scan is None:
            self.scan_bar.hide()
            return
        what = (f"{self.scan_source + ', ' if self.scan_source else ''}{scan.tokens:,} tokens, "
                f"{scan.seconds:.1f} s, {scan.model_label}")
        if self.showing_scan:
            self.scan_label.setText(f"Showing the mean ± std over {scan.n_texts} texts ({what}) — not the text above.")
            self.scan_toggle.setText("Back to this text")
        else:
            self.scan_label.setText(f"Showing the text above. A scan over {scan.n_texts} texts is ready ({what}).")
            self.scan_toggle.setText(f"Show the {scan.n_texts} texts")
        self.scan_bar.show()

    # ----------------------------------------------------------------- from the state
    def _bundle_changed(self) -> None:
        self._refresh()

    def _selection_changed(self, layer: int, head: int) -> None:
        self.map.select(layer, head)
        L, H = self.model.shape
        if not (0 <= layer < L and 0 <= head < H):
            return
        proxy_index = self.proxy.mapFromSource(self.model.index(layer * H + head, 0))
        if self.table.currentIndex().row() != proxy_index.row():
            self.table.selectionModel().setCurrentIndex(
                proxy_index, QtCore.QItemSelectionModel.SelectionFlag.ClearAndSelect
                | QtCore.QItemSelectionModel.SelectionFlag.Rows)
        self.table.scrollTo(proxy_index)

    # ----------------------------------------------------------------- to the state
    def _select(self, layer: int, head: int) -> None:
        if self.model.rowCount():
            self.state.select(layer, head)

    def _row_changed(self, current, _previous) -> None:
        if current.isValid():
            self._select(*self.model.head_at(self.proxy.mapToSource(current).row()))

    def _activate_row(self, proxy_row: int) -> None:
        if not self.model.rowCount() or proxy_row < 0:
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
        if self.map.values is None or not self.model.rowCount():
            return None
        from .figures import _lay_out_offscreen, settle_layout

        fig = ScoreMap()
        L, H = self.model.shape
        _lay_out_offscreen(fig, int(min(2400, max(520, 200 + 48 * H))), int(min(3000, 120 + 40 * L)))
        m = self.map
        column = next(c for c in self.model.columns if c.name == m.name)
        fig.set_score(m.name, column.values, self.state.colormap, column.applicable, label=m.label,
                      levels=tuple(m.colorbar.levels()), std=m.std, note=m.note)
        fig.set_marks(m.marked, m.mark_note)
        if m.marked is not None and m.marked.any():  # the figure explains its marks itself
            fig.plot.setLabel("bottom", html.escape(f"head      {SINK_MARK} {m.mark_note}", quote=False))
        model = self.scan.model_label if self.source() == "scan" else getattr(self.state.result, "model_label", "")
        title = f"{model} — {m.label}" + (f", {m.note}" if m.note else "")
        fig.plot.setTitle(html.escape(title, quote=False), size="11pt")
        settle_layout()  # the title's height moves the plot down once
        return fig


__all__ = ["SCORE_LABELS", "SCORE_SHORT", "TL_LABELS", "TL_NAMES", "Column", "ScoreMap", "ScoresPanel",
           "ScoreTableModel", "score_label", "top_heads"]
