"""From scratch → Model vs manual: the selected head's weights from the model and from numpy side by
side with their difference, the whole layer through W_O, every layer's verdict in a table, and every
head's worst error against its bound as a map — for every model family (the family's own recompute).

Each weight's tolerance is derived from float32 rounding of the numbers checked (``analysis.measures.parity``):
a head passes when every weight is within its own bound, so the views show the largest |diff| beside the
bound of that weight, and the worst |diff| / bound (≤ 1 passes)."""
from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import head_name

from ...plots.layer_head_map import LayerHeadMap
from ...plots.matrix_view import MatrixView

RATIO_FLOOR = 1e-6  # a ratio of exactly 0 (identical weights) is drawn as this on the log scale
RATIO_LEVELS = (-3.0, 0.0)  # the map's colours: from a thousandth of the bound to the bound itself


def pass_badge(passed: bool, text: str) -> str:
    colour = "#137333" if passed else "#b3261e"
    word = "PASS" if passed else "FAIL"
    return f"<span style='color:white;background:{colour};padding:2px 6px;font-weight:bold'>&nbsp;{word}&nbsp;</span> {text}"


def tolerance_words(report) -> str:
    """Where the tolerances come from, for the verdicts."""
    if report.tolerance_kind == "derived":
        return f"each weight's bound derived from float32 rounding for a {report.model_dtype} model"
    return f"a fixed tolerance for a {report.model_dtype} model"


def rows_words(rows) -> str:
    """Which query rows the report checked, in words."""
    if rows.complete:
        return "every query row"
    asked = f" and {rows.requested.size} asked for" if rows.requested.size else ""
    return (f"{rows.rows.size} of {rows.n_tokens} query rows (the first and last {rows.first.size}, "
            f"{rows.random.size} at random, seed {rows.seed}{asked})")


class ErrorMap(LayerHeadMap):
    """log₁₀ of every head's worst |manual − model| / bound, its weight closest to failing; the colour scale ends at
    0, the bound itself: a head at 0 or above fails."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.report = None

    def set_report(self, report, cmap: str = "viridis") -> None:
        self.report = report
        logged = np.log10(np.maximum(report.weights_bound_ratio, RATIO_FLOOR)).astype(np.float32)
        self.set_image(logged, logged.shape, RATIO_LEVELS, cmap, "worst |manual − model| / its bound, every head",
                       "log₁₀ |diff| / bound")

    def hover_text(self, layer: int, head: int) -> str:
        if self.report is None:
            return ""
        r = self.report
        if not r.layers_checked[layer]:
            return f"{head_name(layer, head)}: not checked yet (every head is checked in the background, layer by layer)"
        ratio = float(r.weights_bound_ratio[layer, head])
        query, key = (int(v) for v in r.weights_worst[layer, head])
        return (f"{head_name(layer, head)}: max |manual − model| = {float(r.weights_max_abs_diff[layer, head]):.3e}"
                f" (its bound {float(r.weights_tolerance[layer, head]):.2e}); worst |diff| / bound = {ratio:.3g} "
                f"at query {query}, key {key} ({'PASS' if ratio <= 1 else 'FAIL'})")


class ParityPage(QtWidgets.QScrollArea):
    """Model vs manual for the selected head, the whole layer through W_O, every layer's verdict, and every
    head's worst |diff| / bound. The page scrolls: on a small screen nothing is drawn over the heatmaps."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        page = QtWidgets.QWidget()
        self.model_view = MatrixView("model's attention weights")
        self.manual_view = MatrixView("manual (numpy) weights")
        self.diff_view = MatrixView("|manual − model|")
        self.head_verdict = QtWidgets.QLabel()
        self.layer_verdict = QtWidgets.QLabel()
        self.all_verdict = QtWidgets.QLabel()
        self.checking = QtWidgets.QProgressBar()  # every head's parity, layers checked, while it fills in
        self.checking.setFormat("%v of %m layers checked")
        self.checking.setMaximumWidth(320)
        self.checking.hide()
        for label in (self.head_verdict, self.layer_verdict, self.all_verdict):
            label.setTextFormat(QtCore.Qt.TextFormat.RichText)
            label.setWordWrap(True)
            label.setMinimumWidth(200)
        self.layers_table = QtWidgets.QTableWidget()  # one row per layer: every layer's parity at a glance
        self.layers_table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.layers_table.verticalHeader().setVisible(False)
        self.layers_table.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.error_map = ErrorMap()
        self.error_map.setMinimumHeight(220)
        row = QtWidgets.QHBoxLayout()
        for view in (self.model_view, self.manual_view, self.diff_view):
            view.setMinimumSize(150, 190)
            row.addWidget(view)
        layout = QtWidgets.QVBoxLayout(page)
        layout.addWidget(self.head_verdict)
        layout.addLayout(row, 2)
        layout.addWidget(self.layer_verdict)
        layout.addWidget(self.checking)
        layout.addWidget(self.all_verdict)
        layout.addWidget(self.layers_table)
        layout.addWidget(self.error_map, 2)
        self.setWidget(page)
        self.page = page
        self.report = None
        self.layer = self.head = None  # the head set_data showed

    def figures(self) -> list:
        return [self.model_view, self.manual_view, self.diff_view, self.error_map]

    def set_data(self, result, rec, report, head: int, bound: np.ndarray, cmap: str = "viridis",
                 model_head: np.ndarray | None = None, output: tuple[float, float] | None = None,
                 manual_dtype: str | None = None) -> None:
        """The selected head and its layer; ``report`` every head's (None: it comes later, :meth:`set_report`).
        ``bound`` (n, n): the tolerance of each of the head's weights (``ScratchData.head_bound``); ``model_head``
        (n, n) the model's weights of the head (``ScratchData.model_head``; None: ``result.head_map``); ``output``
        (max |diff|, scale) of the layer's attention output (None: the report's)."""
        from analysis.families import family_named
        from analysis.measures.parity import OUTPUT_RELATIVE_TOLERANCE, UNDERFLOW, UNIT_ROUNDOFF

        layer = rec.layer
        self.layer, self.head = layer, head
        model_w = np.asarray(result.head_map(layer, head) if model_head is None else model_head, dtype=np.float64)
        manual_w = rec.of_head("weights", head).astype(np.float64)
        diff = np.abs(manual_w - model_w)
        ratio = diff / np.maximum(np.asarray(bound, dtype=np.float64), UNDERFLOW)
        largest = np.unravel_index(int(np.argmax(diff)), diff.shape)
        query, key = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        self.model_view.set_matrix(model_w, cmap=cmap)
        self.manual_view.set_matrix(manual_w, cmap=cmap)
        self.diff_view.set_matrix(diff, f", max {diff.max():.2e}", cmap=cmap)
        dtype = manual_dtype or (report.manual_dtype if report is not None else "float32")
        words = (f"each weight's bound derived from float32 rounding for a {result.dtype} model"
                 if result.dtype in UNIT_ROUNDOFF else f"a fixed tolerance for a {result.dtype} model")
        self.head_verdict.setText(pass_badge(
            ratio.max() <= 1, f"{head_name(layer, head)}: max |manual − model| = {diff.max():.3e}, its bound "
            f"{float(bound[largest]):.2e}; worst |diff| / bound = {ratio.max():.3g} at query {query}, key {key}, "
            f"every query row ({words}; manual computed in {dtype})"))
        if output is None:
            out_diff, out_tol = float(report.output_max_abs_diff[layer]), \
                report.output_relative_tolerance * float(report.output_scale[layer])
        else:
            out_diff, out_tol = output[0], OUTPUT_RELATIVE_TOLERANCE[result.dtype] * output[1]
        w_o = family_named(rec.family).output_projection
        self.layer_verdict.setText(pass_badge(
            out_diff <= out_tol, f"whole layer {layer}: heads merged through W_O{f' ({w_o})' if w_o else ''} vs the "
            f"model's attention output: max |diff| = {out_diff:.3e} (tolerance {out_tol:.2e}), every query row"))
        if report is not None:
            self.set_report(report, cmap)
        elif self.report is not None:
            self.error_map.select(layer, head)

    def set_report(self, report, cmap: str = "viridis") -> None:
        """Every head's parity: the verdict, the table of layers and the error map; a report still being filled
        (``report.complete`` False) says how many layers are checked, and the others are blank."""
        from analysis.display import format_duration, seconds_left

        self.report = report
        done, total = int(report.layers_checked.sum()), len(report.layers_checked)
        self.checking.setRange(0, total)
        self.checking.setValue(done)
        self.checking.setVisible(done < total)
        left = seconds_left(report.seconds, done, total - done)
        estimate = "" if left is None else f", about {format_duration(left)} left"
        if done == 0:
            self.all_verdict.setText(f"<i>Checking every head: layer 1 of {total}…</i>")
        else:
            worst = np.unravel_index(np.nanargmax(report.weights_max_abs_diff), report.weights_max_abs_diff.shape)
            text = (f"worst max |diff| {report.max_abs_diff_weights:.3e} ({head_name(*worst)}) against "
                    f"its bound {report.weight_tolerance:.2e}; worst |diff| / bound {report.max_bound_ratio:.3g}; "
                    f"{rows_words(report.rows)} against every key; worst layer output "
                    f"{report.max_abs_diff_output:.3e}; computed in {report.seconds * 1000:.0f} ms")
            if report.complete:
                self.all_verdict.setText(pass_badge(report.passed, f"all {report.weights_max_abs_diff.size} heads: "
                                                                   + text))
            else:
                so_far = bool(np.nan_to_num(report.weights_bound_ratio, nan=0).max() <= 1
                              and report.layers_output_passed[report.layers_checked].all())
                self.all_verdict.setText(
                    f"<i>Checking every head: {done} of {total} layers so far{estimate}, "
                    f"{'all within their bounds' if so_far else 'some outside their bounds'}</i> — " + text)
        self._fill_layers(report)
        self.error_map.set_report(report, cmap)
        if getattr(self, "layer", None) is not None:
            self.error_map.select(self.layer, self.head)

    def _fill_layers(self, report) -> None:
        table = self.layers_table
        rows = report.to_dict()["layers"]
        headers = ["layer", "worst head |diff|", "its bound", "worst |diff| / bound", "output |diff|",
                   "output tolerance", ""]
        table.setColumnCount(len(headers))
        table.setHorizontalHeaderLabels(headers)
        table.setRowCount(len(rows))
        verdict = len(headers) - 1
        for i, row in enumerate(rows):
            cells = (str(row["layer"]), f"{row['max_abs_diff_weights']:.3e}", f"{row['weights_tolerance']:.2e}",
                     f"{row['max_bound_ratio']:.3g}", f"{row['max_abs_diff_output']:.3e}",
                     f"{row['output_tolerance']:.2e}", "PASS" if row["passed"] else "FAIL")
            for j, text in enumerate(cells):
                item = QtWidgets.QTableWidgetItem(text)
                item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
                if j == verdict:
                    item.setForeground(QtGui.QColor("#137333" if row["passed"] else "#b3261e"))
                table.setItem(i, j, item)
        table.resizeColumnsToContents()
        shown = min(len(rows), 8)  # taller than 8 layers: the table scrolls inside the page
        table.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAsNeeded if len(rows) > 8
                                         else QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        height = table.horizontalHeader().height() + 2 * table.frameWidth() + 2
        height += sum(table.rowHeight(i) for i in range(shown))
        table.setFixedHeight(height)
