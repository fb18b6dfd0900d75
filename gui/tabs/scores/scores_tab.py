"""The Head scores tab: a sortable table of every score for every head beside a layer × head map of
one score. It follows the view state (result, selection, colormap, dark, sink ε) and writes the
selection and ε back. The pieces, one job each:

- gui/tabs/scores/score_table.py: the table (its model and view);
- gui/tabs/scores/score_sources.py: the columns of each source — this text, AttnScope's scores; this text,
  TransformerLens-style scores (gui/tabs/scores/tl_source.py: TL's options, computed on the worker); over N texts,
  the mean ± std of a scan started from "Scores over many texts…" (gui/tabs/scores/scan_dialog.py, gui/tabs/scores/scan_bar.py);
- gui/tabs/scores/score_map.py: the map and its export figure; gui/tabs/scores/sink_row.py: the sink rate and ε.

A score that does not apply to the model on screen ("next token" on a decoder, induction on an
encoder) has no column and is not offered for the map; a note says which are left out and why.
"""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from analysis.measures.lenses import sink_rate_of_result, sink_rate_of_scores

from ...plots.plot_items import apply_theme
from .scan_bar import ScanBar
from .score_map import ScoreMap, offscreen_score_figure
from .score_sources import (SOURCE_OURS, SOURCE_SCAN, SOURCE_TL, TL_NAMES, hidden, hidden_note, own_columns,
                            scan_columns, tl_columns)
from .score_table import Column, ScoreTable, column_key
from .sink_row import SinkRow
from .tl_source import TLSource


def _note_label() -> QtWidgets.QLabel:
    label = QtWidgets.QLabel()
    label.setWordWrap(True)
    label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
    label.setStyleSheet("color: palette(placeholder-text);")
    label.hide()
    return label


class ScoresTab(QtWidgets.QWidget):
    """Table + map side by side, on a :class:`~gui.state.view_state.ViewState`. A click selects a head;
    Enter or a double-click on a row or a map cell also emits ``head_activated``."""

    title = "Head scores"
    head_activated = QtCore.Signal(int, int)
    scores_shown = QtCore.Signal()  # the table and map were redrawn (a new source, TL scores arrived …)

    def __init__(self, state, worker=None, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.scan = None  # analysis.measures.scan.ScanResult of the last scan, for the model loaded
        self.scan_source = ""  # where its texts came from, in words
        self.showing_scan = False
        self._scan_dialog = None  # the "Scores over many texts" dialog while it is open
        self._build()
        if worker is not None:
            worker.model_loaded.connect(self._model_loaded)  # a bound slot: disconnected when the panel goes
        self._stale = False  # a bundle arrived while the tab was hidden: it refreshes when shown
        state.on_bundle(lambda _bundle: self._bundle_arrived(), "scores tab")
        state.selection_changed.connect(self._selection_changed)
        state.colormap_changed.connect(lambda _name: self._show_map())
        state.dark_changed.connect(lambda dark: apply_theme(self.map, dark))
        apply_theme(self.map, state.dark)
        self._refresh()

    def _build(self) -> None:
        self.table = ScoreTable()
        self.model, self.proxy = self.table.score_model, self.table.proxy
        self.table.head_selected.connect(self._select)
        self.table.head_activated.connect(self.head_activated)

        self.source_choice = QtWidgets.QComboBox()
        self.source_choice.addItem("AttnScope's scores", SOURCE_OURS)
        self.source_choice.addItem("TransformerLens-style scores", SOURCE_TL)
        self.source_choice.setItemData(1, "TransformerLens's head_detector scores (previous-token, duplicate-token, "
                                          "induction), computed from the attention on screen, so numbers can be "
                                          "compared with TL's", QtCore.Qt.ItemDataRole.ToolTipRole)
        self.source_choice.setToolTip("Which scores the table and the map show")
        self.source_choice.currentIndexChanged.connect(lambda _: self._refresh())
        self.tl_controls = TLSource(self.worker)
        self.measure_choice = self.tl_controls.measure_choice
        self.exclude_bos_box = self.tl_controls.exclude_bos_box
        self.exclude_current_box = self.tl_controls.exclude_current_box
        self.tl_controls.changed.connect(lambda: self.state.set_tl_options(**self.tl_controls.options()))
        self.tl_controls.changed.connect(self._refresh)
        self.tl_controls.ready.connect(self._tl_ready)
        self.tl_controls.failed.connect(self._tl_failed)
        self.scan_button = QtWidgets.QPushButton("Over many texts…")
        self.scan_button.setToolTip("Every score's mean ± std over many texts "
                                    "(a file, a folder, or the bundled sample)")
        self.scan_button.clicked.connect(self.open_scan_dialog)
        top = QtWidgets.QHBoxLayout()
        top.addWidget(QtWidgets.QLabel("Show"))
        top.addWidget(self.source_choice)
        top.addWidget(self.tl_controls)
        top.addStretch(1)
        top.addWidget(self.scan_button)

        self.scan_bar = ScanBar()
        self.scan_label, self.scan_toggle = self.scan_bar.label, self.scan_bar.toggle
        self.scan_bar.toggled.connect(lambda: self.show_scan_view(not self.showing_scan))
        self.sink_row = SinkRow(self.state)
        self.sink_label, self.epsilon_spin = self.sink_row.label, self.sink_row.spin
        self.sink_row.epsilon_changed.connect(lambda _: self._show_sinks())
        self.note = _note_label()  # about the TL-style scores
        self.hidden_note = _note_label()  # the scores that do not apply to this model
        self.key_label = _note_label()  # what the short column headers stand for

        self.score_choice = QtWidgets.QComboBox()
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
        splitter.setChildrenCollapsible(False)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(3)
        layout.addLayout(top)
        layout.addWidget(self.scan_bar)
        layout.addWidget(self.sink_row)
        layout.addWidget(self.note)
        layout.addWidget(self.hidden_note)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.key_label)

    # ----------------------------------------------------------------- what is shown
    @property
    def scores(self):
        """The scores of the text on screen (AttnScope's), whatever the table shows."""
        return self.state.scores

    @property
    def tl_scores(self):
        """The TL-style scores {name: (L, H)} of the text and options on screen; None while computed."""
        return self.tl_controls.scores

    def source(self) -> str:
        """"scan" (over many texts), "tl" (this text, TransformerLens-style) or "attnscope" (this text)."""
        return SOURCE_SCAN if self.showing_scan else self.source_choice.currentData()

    def current_score(self) -> str:
        return self.score_choice.currentData()

    def tl_options(self) -> dict:
        """The keyword arguments of ``tl_scores.detect`` the TL-style columns use."""
        return self.tl_controls.options()

    def _columns(self) -> tuple[list[Column], tuple[int, int], tuple[str, ...]] | None:
        """The columns of the source chosen, the (layers, heads) and the scores left out as not applicable."""
        source = self.source()
        if source == SOURCE_SCAN:
            mean = self.scan.mean_scores()
            return scan_columns(self.scan), mean.shape, hidden(mean)
        scores = self.scores
        if scores is None:
            return None
        if source == SOURCE_TL:
            return tl_columns(scores.shape, self.tl_scores, self.tl_options()["error_measure"]), scores.shape, ()
        return own_columns(scores), scores.shape, hidden(scores)

    def _bundle_arrived(self) -> None:
        """A new bundle: redrawn now when the tab shows, else when it is shown (a table of every head and its map
        take 20–60 ms at 144 heads, a turn of the event loop the window does not have while a run is on screen)."""
        if self.isVisible():
            self._refresh()
        else:
            self._stale = True

    def showEvent(self, event):  # noqa: N802
        super().showEvent(event)
        if self._stale:
            self._refresh()

    def _refresh(self) -> None:
        """Redraw table, map choice, map, notes and sink row for the source now chosen."""
        self._stale = False
        result = self.state.result
        causal = result.causal if result is not None else True
        tl_item = self.source_choice.model().item(1)
        tl_item.setEnabled(causal)
        tl_item.setToolTip("" if causal else "TransformerLens's detectors are for decoders; this model is an encoder")
        if not causal and self.source_choice.currentData() == SOURCE_TL:
            self.source_choice.setCurrentIndex(0)  # → _refresh again
            return
        self.source_choice.setEnabled(not self.showing_scan)
        self.tl_controls.setVisible(self.source() == SOURCE_TL)
        self._set_note(self.note, self.tl_controls.ask(self.state.bundle) if self.source() == SOURCE_TL else "")
        table = self._columns()
        columns, shape, left_out = table if table is not None else ([], (0, 0), ())
        self._set_note(self.hidden_note, hidden_note(left_out))
        self.table.set_columns(columns, shape)  # scrolled to the top of its sort
        self._set_note(self.key_label, column_key(columns))
        self.table.fit_columns()
        self._fill_score_choice(columns)
        self._show_sinks()
        self.scan_bar.show_scan(self.scan, self.scan_source, self.showing_scan)
        self.map.select(self.state.layer, self.state.head)
        self.table.select_head(self.state.layer, self.state.head, scroll=False)  # selected, left where it is
        self.scores_shown.emit()

    @staticmethod
    def _set_note(label: QtWidgets.QLabel, text: str) -> None:
        label.setText(text)
        label.setToolTip(text)
        label.setVisible(bool(text))

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
            self.score_choice.setCurrentIndex(max(0, self.score_choice.findData(current)))
            self.score_choice.blockSignals(False)
        self._show_map()

    def _show_map(self) -> None:
        column = self.model.column(self.current_score())
        if column is None:
            return
        levels = self.tl_controls.levels() if column.name in TL_NAMES else None
        note = f"mean over {self.scan.n_texts} texts" if self.source() == SOURCE_SCAN else (
            "computing…" if column.pending else "")
        self.map.set_score(column.name, column.values, self.state.colormap, label=column.label, levels=levels,
                           std=column.std, note=note)

    # ----------------------------------------------------------------- sink rate
    def sinks(self):
        """``lenses.SinkRate`` of what is shown at the state's ε: of the text on screen, or over many texts
        (the heads whose *mean* first-token score exceeds ε); None without either."""
        epsilon = self.sink_row.epsilon
        if self.source() == SOURCE_SCAN:
            return self.scan.sink_rate(epsilon)
        if self.state.result is None:
            return None
        scores = self.state.scores
        if scores is not None and "sink" in scores.values:  # the run's own first-token scores: nothing to compute
            return sink_rate_of_scores(scores["sink"], epsilon)
        return sink_rate_of_result(self.state.result, epsilon)

    def _show_sinks(self) -> None:
        sinks = self.sinks()
        where = (f"mean first-token score over {self.scan.n_texts} texts" if self.source() == SOURCE_SCAN
                 else "first-token score")
        mark_note = self.sink_row.show_sinks(sinks, where)
        mask = None if sinks is None else sinks.mask
        self.model.set_marked(mask, mark_note)
        self.map.set_marks(mask, mark_note)

    # ----------------------------------------------------------------- TransformerLens-style scores
    def _tl_ready(self) -> None:
        if self.source() == SOURCE_TL:
            self._refresh()

    def _tl_failed(self, message: str) -> None:
        self._set_note(self.note, f"TransformerLens-style scores failed: {message}")

    # ----------------------------------------------------------------- over many texts
    def open_scan_dialog(self):
        """"Scores over many texts…": the dialog that runs a scan on the worker; returns it (shown, non-blocking)."""
        from .scan_dialog import ScanDialog

        if self.worker is None:
            return None
        import shiboken6

        open_one = self._scan_dialog
        if open_one is not None and shiboken6.isValid(open_one) and open_one.isVisible():
            open_one.raise_()  # one scan dialog at a time: the one open (and its scan) comes to the front
            open_one.activateWindow()
            return open_one
        result = self.state.result
        dialog = ScanDialog(self.worker, None if result is None else bool(result.bos), self.window(),
                            max_tokens=None if result is None else result.max_tokens,
                            chat=result is not None and result.chat)
        dialog.scan_ready.connect(self.show_scan)
        dialog.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose, True)
        # modeless: while a scan runs the window stays usable (a new model stops the scan and the dialog says
        # so; a text run waits for the scan and the status bar says for what)
        dialog.setWindowModality(QtCore.Qt.WindowModality.NonModal)
        dialog.show()
        self._scan_dialog = dialog
        return dialog

    def show_scan(self, scan, source: str = "") -> None:
        """Show ``scan`` (an ``analysis.measures.scan.ScanResult``): the table and map turn to mean ± std."""
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

    # ----------------------------------------------------------------- selection
    def _selection_changed(self, layer: int, head: int) -> None:
        self.map.select(layer, head)
        self.table.select_head(layer, head)

    def _select(self, layer: int, head: int) -> None:
        if self.model.rowCount():
            self.state.select(layer, head)

    # ----------------------------------------------------------------- export
    def offscreen_figure(self):
        """A fresh, clean figure of the score map on screen (for Export and Copy), or None."""
        if self.map.values is None or not self.model.rowCount():
            return None
        model = self.scan.model_label if self.source() == SOURCE_SCAN else getattr(self.state.result, "model_label", "")
        return offscreen_score_figure(self.map, self.state.colormap, model)

