"""The From-scratch tab: the arithmetic of the real model's attention, step by step, beside the
model's own numbers; the attention calculator; the √d_k lab; what attention costs.

All numbers come from ``analysis`` (manual_attention, parity, lab); the pages only lay them out.
The panel follows the view state and asks the worker, only while it is visible, for the selected head: its layer
recomputed keeping that head's steps alone (``scratch_data``, a ``jobs.Job``; a late answer to an older request is
dropped); and, in the background, for the parity of every head, one layer at a time (``parity.check_layer``, its
own Job): the table and the error map fill in as the layers come, "Checking every head: 12 of 30 layers", and a new
head asked for meanwhile runs between two layers, not after all of them.
"""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from analysis.display import head_name

from ...plots.matrix_view import MatrixView
from ...plots.plot_items import apply_theme
from ...state.jobs import Job
from ...widgets import StaleMark
from .calculator_page import CalculatorPage
from .scratch_lab import CostPage, ScalingPage
from .scratch_parity import ErrorMap, ParityPage
from .scratch_steps import StepsPage

STATUS_MAX_PX = 300  # the status beside the tabs never widens the panel past this
REQUEST_DELAY_MS = 150  # a burst of selection changes (arrow keys held) sends one request


class ScratchTab(QtWidgets.QTabWidget):
    """Tabs: Steps, Model vs manual, Calculator, Why √d_k, Cost."""

    title = "From scratch"
    head_activated = QtCore.Signal(int, int)
    data_shown = QtCore.Signal(int)  # request id of the ScratchData now on screen
    parity_shown = QtCore.Signal(int)  # every head's parity shown, this many layers checked

    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.dtype_choice = QtWidgets.QComboBox()
        self.dtype_choice.addItems(["float32", "float64"])
        self.dtype_choice.setToolTip("Precision of the numpy recomputation")
        self.status = QtWidgets.QLabel("no text run yet")
        self.status.setToolTip("Run a text to see the arithmetic of the selected head.")
        self.status.setMaximumWidth(STATUS_MAX_PX)  # a long error is cut here (whole in the tooltip)
        corner = QtWidgets.QWidget()
        corner_layout = QtWidgets.QHBoxLayout(corner)
        corner_layout.setContentsMargins(0, 0, 4, 0)
        corner_layout.addWidget(self.status)
        corner_layout.addWidget(QtWidgets.QLabel("numpy in"))
        corner_layout.addWidget(self.dtype_choice)
        self.setCornerWidget(corner)
        self.steps = StepsPage()
        self.parity = ParityPage()
        self.calculator = CalculatorPage()
        self.scaling = ScalingPage()
        self.cost = CostPage()
        steps_scroll = QtWidgets.QScrollArea()
        steps_scroll.setWidgetResizable(True)
        steps_scroll.setWidget(self.steps)
        self.steps_scroll = steps_scroll
        self.addTab(steps_scroll, "Steps")
        self.addTab(self.parity, "Model vs manual")
        calculator_scroll = QtWidgets.QScrollArea()  # on a short window the page scrolls, never pushing the window
        calculator_scroll.setWidgetResizable(True)
        calculator_scroll.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        calculator_scroll.setWidget(self.calculator)
        self.calculator_scroll = calculator_scroll
        self.addTab(calculator_scroll, "Calculator")
        self.addTab(self.scaling, "Why √dₖ")
        self.addTab(self.cost, "Cost")

        self.stale = StaleMark(self)  # over the pages while they show another head's or text's numbers than asked for
        self._shown_key = None  # (result request id, layer, head, dtype) of the numbers on the pages
        self.job = Job(worker, "scratch", self, ended_by=(), announced=False)  # a newer request drops the older
        self.parity_job = Job(worker, "parity", self, ended_by=(), announced=False)  # one layer of every head's parity
        self._parity_key = None  # (result request id, dtype) of the layers below
        self._parity_layers: list = []  # analysis.measures.parity.LayerParity per layer, None until checked
        self._parity_sample = None  # the query rows every layer is checked on
        self.latest_request_id = 0
        self._key = None  # (result request id, layer, head, dtype) last asked for
        self._timer = QtCore.QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REQUEST_DELAY_MS)
        self._timer.timeout.connect(self._request_now)

        self.parity.error_map.head_clicked.connect(self._select)
        self.parity.error_map.head_activated.connect(self.head_activated)
        self.steps.query_chosen.connect(self._query_chosen)
        self.dtype_choice.currentTextChanged.connect(lambda _: self._request())
        state.bundle_changed.connect(lambda _bundle: self._request())
        state.selection_changed.connect(lambda _l, _h: self._request())
        state.query_row_changed.connect(self._query_row_changed)
        state.colormap_changed.connect(self._colormap_changed)
        state.dark_changed.connect(self._dark_changed)
        self.job.finished.connect(self._finished)
        self.job.failed.connect(self._failed)
        self.parity_job.finished.connect(self._parity_layer_done)
        self.parity_job.failed.connect(self._parity_failed)
        self._dark_changed(state.dark)

    def figures(self) -> list:
        """Every figure in the panel (for the colormap and the theme)."""
        return [*self.steps.views.values(), *self.parity.figures(), self.scaling.plot]

    # ----------------------------------------------------------------- asking the worker
    def showEvent(self, event):  # noqa: N802
        super().showEvent(event)
        self._request()  # and the parity of every head goes on (hidden, it pauses between layers)

    def _wanted_key(self):
        """(result request id, layer, head, dtype) of the numbers the pages should show now; None without a result."""
        bundle = self.state.bundle
        if bundle is None:
            return None
        return bundle.request_id, self.state.layer, self.state.head, self.dtype_choice.currentText()

    def _request(self) -> None:
        self._mark_stale()  # at once, visible or not: the pages are never shown unmarked before the request goes
        if self.state.bundle is not None and self.isVisible():
            self._timer.start()

    def _request_now(self) -> None:
        bundle = self.state.bundle
        if bundle is None or not self.isVisible():
            return
        from .scratch_data import scratch_data

        result, layer, head = bundle.result, self.state.layer, self.state.head
        dtype = self.dtype_choice.currentText()
        key = (bundle.request_id, layer, head, dtype)
        if key == self._key:
            self._check_parity()
            return
        self._key = key
        self.status.setText("computing…")
        self._mark_stale()
        self.latest_request_id = self.job.start(
            lambda loaded, _progress, _cancel: scratch_data(loaded, result, layer, head, dtype, with_report=False))
        self._check_parity()

    def _finished(self, value) -> None:
        """The latest request's answer (the job drops answers to an older selection)."""
        self.show_data(value)
        self._shown_key = (value.result.request_id, value.recomputation.layer, value.head, value.manual_dtype)
        self._mark_stale()
        self.data_shown.emit(self.latest_request_id)

    # ----------------------------------------------------------------- every head's parity, layer by layer
    def _check_parity(self) -> None:
        """Go on with the parity of every head of the result on screen, in the precision chosen: a new result or
        precision starts again from layer 0 (the page's table and map blank); otherwise the next layer not yet
        checked is asked for, while the tab is visible."""
        from analysis.measures.parity import sample_rows

        bundle = self.state.bundle
        if bundle is None:
            return
        key = (bundle.request_id, self.dtype_choice.currentText())
        if key != self._parity_key:
            self.parity_job.drop()
            self._parity_key = key
            self._parity_layers = [None] * bundle.result.n_layer
            self._parity_sample = sample_rows(bundle.result.n_tokens)
            self._show_parity()
        if self.parity_job.running or not self.isVisible():
            return
        todo = [layer for layer, part in enumerate(self._parity_layers) if part is None]
        if not todo:
            return
        from analysis.measures.parity import check_layer

        result, layer, dtype, sample = bundle.result, todo[0], key[1], self._parity_sample
        self.parity_job.start(lambda loaded, _progress, _cancel: check_layer(
            result, loaded.attention_weights(layer), dtype, sample))

    def _parity_layer_done(self, part) -> None:
        if self._parity_key is None or self.state.bundle is None \
                or (self.state.bundle.request_id, self.dtype_choice.currentText()) != self._parity_key:
            return
        self._parity_layers[part.layer] = part
        self._show_parity()
        self._check_parity()

    def _parity_failed(self, message: str) -> None:
        self.parity.all_verdict.setText(f"Could not check every head: {message}")

    def parity_report(self):
        """The report of the layers checked so far (None before a result)."""
        from analysis.measures.parity import report_of

        bundle = self.state.bundle
        if bundle is None or self._parity_key is None:
            return None
        return report_of(bundle.result, self._parity_layers, self._parity_key[1], self._parity_sample)

    def _show_parity(self) -> None:
        report = self.parity_report()
        if report is not None:
            self.parity.set_report(report, self.state.colormap)
            self.parity_shown.emit(int(report.layers_checked.sum()))

    def _mark_stale(self) -> None:
        """The pages marked while what they show is not what is asked for: "Layer 2, head 1 of the previous text —
        computing layer 3, head 0…" (the Cost page's sizes, the steps, the parity table alike)."""
        shown, wanted = self._shown_key, self._wanted_key()
        if shown is None or wanted is None or shown == wanted:
            self.stale.clear()
            return
        which = "the previous text" if shown[0] != wanted[0] else "this text"
        dtype = f" in {shown[3]}" if shown[3] != wanted[3] else ""
        self.stale.mark(f"{head_name(*shown[1:3])} of {which}{dtype} — computing {head_name(*wanted[1:3])}"
                        f"{f' in {wanted[3]}' if dtype else ''}…")

    def _failed(self, message: str) -> None:
        self._key = None  # ask again on the next change
        text = f"could not compute: {message}"
        self.status.setText(self.status.fontMetrics().elidedText(text, QtCore.Qt.TextElideMode.ElideRight,
                                                                 STATUS_MAX_PX))
        self.status.setToolTip(text)

    def show_data(self, data) -> None:
        """``data``: a :class:`~gui.tabs.scratch.scratch_data.ScratchData` from the worker."""
        cmap = self.state.colormap
        for view in self.steps.views.values():
            view.cmap = cmap
        self.steps.set_data(data.result, data.recomputation, data.head, data.weights)
        output = None if data.output_diff is None else (data.output_diff, data.output_scale)
        self.parity.set_data(data.result, data.recomputation, data.report, data.head, data.head_bound, cmap,
                             data.model_head, output, data.manual_dtype)
        r, rec = data.result, data.recomputation
        n_kv = int(rec.kv_head_of.max()) + 1
        self.cost.set_data(r.n_tokens, rec.x.shape[1], r.n_head, r.n_layer, data.params_counted,
                           n_kv_head=n_kv, d_head=rec.q.shape[-1], causal=r.causal)
        self.status.setText(head_name(rec.layer, data.head))
        self.status.setToolTip(self.status.text())
        if self.state.query_row is not None and self.state.query_row < r.n_tokens:
            self.steps.focus_query(self.state.query_row)

    # ----------------------------------------------------------------- following the state
    def _select(self, layer: int, head: int) -> None:
        if self.state.result is not None:
            self.state.select(layer, head)

    def _query_chosen(self, row: int) -> None:
        if self.state.result is not None and 0 <= row < self.state.result.n_tokens:
            self.state.set_query_row(row)

    def _query_row_changed(self, row) -> None:
        if row is not None and self.steps.rec is not None and row < self.steps.result.n_tokens:
            self.steps.focus_query(row)

    def _colormap_changed(self, cmap: str) -> None:
        for fig in self.figures():
            if isinstance(fig, MatrixView):
                fig.set_colormap(cmap)
        if self.parity.report is not None:
            self.parity.error_map.set_report(self.parity.report, cmap)

    def _dark_changed(self, dark: bool) -> None:
        for fig in self.figures():
            apply_theme(fig, dark)

    # ----------------------------------------------------------------- export
    def offscreen_figure(self):
        """A fresh, clean figure of what is in front (the softmax weights on Steps, the error map on
        Model vs manual, the histograms on Why √d_k), or None where the page has no figure."""
        import pyqtgraph as pg

        from ...plots.figures import lay_out_offscreen

        page = self.currentWidget()
        if page is self.steps_scroll and self.steps.rec is not None:
            source = self.steps.views["weights"]
            fig = MatrixView(source.title)
            fig.setMaximumHeight(16777215)
            lay_out_offscreen(fig, 520, 540)
            fig.set_matrix(source.values, source.subtitle, self.state.colormap)
        elif page is self.parity and self.parity.report is not None:
            fig = ErrorMap()
            L, H = self.parity.report.weights_max_abs_diff.shape
            lay_out_offscreen(fig, int(min(2400, 200 + 48 * H)), int(min(3000, 120 + 40 * L)))
            fig.set_report(self.parity.report, self.state.colormap)
        elif page is self.scaling and self.scaling.experiment is not None:
            fig = pg.PlotWidget(background="w")
            fig.addLegend()
            lay_out_offscreen(fig, 700, 480)
            self.scaling.draw(fig)
        else:
            return None
        return fig
