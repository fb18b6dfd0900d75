"""The Figure… dialog's fields, grouped in plain words, and the :class:`FigureOptions` they say.

:func:`starting_options` is what is on screen (the selected head, colormap, scale); :class:`FigureForm` shows any
options (:meth:`FigureForm.set_options`) and reads them back (:meth:`FigureForm.options`), refusing a field that
does not read (a bad head list, an empty token range) with one sentence (InputError). Empty text fields mean "the
default" (the model's name as title, every token, every layer)."""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from analysis.display import head_name
from analysis.errors import InputError
from analysis.export.figure_options import (DRAWINGS, LABEL_STYLES, SCALES, FigureOptions, check_scores,
                                            parse_index_list, parse_token_range)
from analysis.export.layout import check_heads, parse_export_heads
from analysis.measures.head_scores import SCORE_NAMES

from ..state.view_state import COLORMAPS

GRID, HEAD, HEADS = "grid", "head", "heads"
WHAT = ((GRID, "The grid of heads"), (HEAD, "This head"), (HEADS, "These heads, side by side"))
UNITS = ("in", "px")
NO_BADGES = "(no badges)"



def starting_options(state, source: str) -> FigureOptions:
    """The figure of what is on screen: the selected head of the current result, in the view's colormap and scale,
    for the model ``source`` (what ``main.py figure --from`` loads again)."""
    r = state.result
    return FigureOptions(model=source, text=r.text, bos=r.bos, heads=((state.layer, state.head),),
                         cmap=state.colormap, scale=state.scale, dpi=300, width_in=3.3,
                         hide_first=bool(state.hide_first))


def _line(placeholder: str, tip: str) -> QtWidgets.QLineEdit:
    edit = QtWidgets.QLineEdit()
    edit.setPlaceholderText(placeholder)
    edit.setToolTip(tip)
    edit.setClearButtonEnabled(True)
    return edit


def _combo(items, tip: str) -> QtWidgets.QComboBox:
    box = QtWidgets.QComboBox()
    for data, text in items:
        box.addItem(text, data)
    box.setToolTip(tip)
    return box


def _select(box: QtWidgets.QComboBox, data) -> None:
    index = box.findData(data)
    if index < 0:  # a value the list does not offer (a colormap name from a JSON): offered as it is
        box.addItem(str(data), data)
        index = box.count() - 1
    box.setCurrentIndex(index)


def _text(value) -> str:
    return "" if value is None else str(value)


class FigureForm(QtWidgets.QWidget):
    """Every option of a figure; ``changed`` on any edit. ``n_layer`` × ``n_head``: the model's heads (checked)."""

    changed = QtCore.Signal()

    def __init__(self, n_layer: int, n_head: int, n_tokens: int, parent=None):
        super().__init__(parent)
        self.n_layer, self.n_head, self.n_tokens = n_layer, n_head, n_tokens
        self._base = FigureOptions()  # model, text and bos: not fields of the form
        self.what = _combo(WHAT, "What the figure shows")
        self.head_list = _line("L1H0, L2H3", "The head (this head) or heads (side by side), as L1H0 or 1.0, "
                                             "separated by commas")
        self.drawing = _combo([(d, {"matrix": "Matrix", "lines": "Lines between two columns (≤ 64 tokens)"}[d])
                               for d in DRAWINGS], "A head as its matrix, or as lines from each query to each key")
        self.tokens = _line(f"all (0:{n_tokens})", "Only the queries and keys FIRST … STOP-1, as FIRST:STOP")
        self.renormalise = QtWidgets.QCheckBox("Renormalise each row over the keys shown")
        self.hide_first = QtWidgets.QCheckBox("Hide the first token (each row over the rest)")
        self.hide_first.setToolTip("As the view's Hide first token: key 0 hidden, each row renormalised over the "
                                   "other keys (to see past an attention sink)")
        self.title = _line("the model's name and the head", "The figure's title")
        self.width_spin = QtWidgets.QDoubleSpinBox()
        self.width_spin.setRange(0.5, 12000)
        self.width_spin.setDecimals(2)
        self.width_spin.setToolTip("The figure's width (a paper's column: 3.3 in; a slide: 10 in)")
        self.unit = _combo([(u, {"in": "inches", "px": "pixels"}[u]) for u in UNITS], "The width's unit")
        self.dpi = QtWidgets.QSpinBox()
        self.dpi.setRange(30, 1200)
        self.dpi.setSuffix(" dpi")
        self.dpi.setToolTip("Pixels an inch of the PNG (a width in inches × DPI = its pixels)")
        self.font_pt = QtWidgets.QDoubleSpinBox()
        self.font_pt.setRange(0, 72)
        self.font_pt.setDecimals(1)
        self.font_pt.setSuffix(" pt")
        self.font_pt.setSpecialValueText("8.5 pt (default)")
        self.font_pt.setToolTip("The size of the figure's text: every label, the colour bar's numbers; the title is "
                                "11/8.5 times it (0: the default, 8.5 pt)")
        self.labels = _combo([(s, {"marked": "Marked: ␣ for a leading space and [index]",
                                   "plain": "Plain: the tokens as written"}[s]) for s in LABEL_STYLES],
                             "How the axes write the tokens")
        self.label_chars = QtWidgets.QSpinBox()
        self.label_chars.setRange(0, 200)
        self.label_chars.setSpecialValueText("whole")
        self.label_chars.setSuffix(" characters")
        self.label_chars.setToolTip("Shorten labels to this many characters, the same on both axes (0: whole)")
        self.cmap = _combo([(c, c) for c in COLORMAPS], "The colormap")
        self.scale = _combo([(s, s) for s in SCALES], "How weights map to colours")
        self.vmax = _line("the data's maximum", "The colour scale's top for every map of the figure")
        self.bar_label = _line("the scale's own", "The colour bar's label")
        self.columns = QtWidgets.QSpinBox()
        self.columns.setRange(0, 64)
        self.columns.setSpecialValueText("near square")
        self.columns.setToolTip("Panels a row (0: near square)")
        self.shared_scale = QtWidgets.QCheckBox("One colour scale for every panel")
        self.scores = _line("e.g. previous_token, sink", "Head scores printed under each panel's title: "
                                                         + ", ".join(SCORE_NAMES))
        self.layers = _line(f"all (0-{n_layer - 1})", "The layers the grid shows, as 0,2,5-7")
        self.grid_heads = _line(f"all (0-{n_head - 1})", "The heads of each layer the grid shows, as 0-3")
        self.aspect = _line("as near square as its shape allows", "The grid's width / height, e.g. 1.5")
        self.badges = _combo([(None, NO_BADGES)] + [(s, s) for s in SCORE_NAMES],
                             "Mark the standout heads of this score, with a legend")
        self._build()
        for edit in self.findChildren(QtWidgets.QLineEdit):
            edit.textChanged.connect(self.changed)
        for box in self.findChildren(QtWidgets.QComboBox):
            box.currentIndexChanged.connect(self.changed)
        for spin in self.findChildren(QtWidgets.QAbstractSpinBox):
            spin.valueChanged.connect(self.changed)
        for check in self.findChildren(QtWidgets.QCheckBox):
            check.toggled.connect(self.changed)
        self.what.currentIndexChanged.connect(self._enable)
        self.unit.currentIndexChanged.connect(self._unit_changed)

    def _build(self) -> None:
        def group(title: str, rows) -> QtWidgets.QGroupBox:
            box = QtWidgets.QGroupBox(title)
            form = QtWidgets.QFormLayout(box)
            form.setFieldGrowthPolicy(QtWidgets.QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
            for label, widget in rows:
                if label is None:
                    form.addRow(widget)
                else:
                    form.addRow(label, widget)
            return box

        width_row = QtWidgets.QHBoxLayout()
        width_row.setContentsMargins(0, 0, 0, 0)
        for w in (self.width_spin, self.unit, self.dpi):
            width_row.addWidget(w)
        width_box = QtWidgets.QWidget()
        width_box.setLayout(width_row)
        self.groups = {
            "what": group("What", [("Show", self.what), ("Heads", self.head_list), ("Drawing", self.drawing)]),
            "tokens": group("Tokens", [("Range", self.tokens), (None, self.renormalise), (None, self.hide_first)]),
            "size": group("Size", [("Width", width_box), ("Font", self.font_pt)]),
            "labels": group("Labels", [("Title", self.title), ("Tokens", self.labels), ("Shorten to", self.label_chars)]),
            "colour": group("Colour", [("Colormap", self.cmap), ("Scale", self.scale), ("Scale top", self.vmax),
                                       ("Bar label", self.bar_label)]),
            "panels": group("Panels (these heads)", [("Columns", self.columns), (None, self.shared_scale),
                                                     ("Scores", self.scores)]),
            "grid": group("Grid", [("Layers", self.layers), ("Heads", self.grid_heads), ("Aspect", self.aspect),
                                   ("Badges", self.badges)]),
        }
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for box in self.groups.values():
            layout.addWidget(box)
        layout.addStretch(1)

    # ----------------------------------------------------------------- options → fields
    def set_options(self, o: FigureOptions) -> None:
        """Show ``o`` in the fields (one ``changed`` afterwards, not one a field)."""
        self.blockSignals(True)
        try:
            self._base = o
            _select(self.what, GRID if not o.heads else HEAD if len(o.heads) == 1 else HEADS)
            self.head_list.setText(", ".join(head_name(l, h) for l, h in o.heads))
            _select(self.drawing, o.drawing)
            self.tokens.setText("" if o.tokens is None else f"{o.tokens[0]}:{o.tokens[1]}")
            self.renormalise.setChecked(o.renormalise)
            self.hide_first.setChecked(o.hide_first)
            self.title.setText(_text(o.title))
            if o.width_in is not None or o.width_px is None:
                _select(self.unit, "in")
                self.width_spin.setValue(o.width_in if o.width_in is not None else 3.3)
            else:
                _select(self.unit, "px")
                self.width_spin.setValue(o.width_px)
            self.dpi.setValue(o.dpi)
            self.font_pt.setValue(o.font_pt or 0)
            _select(self.labels, o.labels)
            self.label_chars.setValue(o.label_chars or 0)
            _select(self.cmap, o.cmap)
            _select(self.scale, o.scale)
            self.vmax.setText(_text(o.vmax))
            self.bar_label.setText(_text(o.bar_label))
            self.columns.setValue(o.columns or 0)
            self.shared_scale.setChecked(o.shared_scale)
            self.scores.setText(", ".join(o.scores))
            self.layers.setText(_indices(o.layers))
            self.grid_heads.setText(_indices(o.grid_heads))
            self.aspect.setText(_text(o.aspect))
            _select(self.badges, o.badges)
            self._enable()
        finally:
            self.blockSignals(False)
        self.changed.emit()

    def _enable(self) -> None:
        """Only the groups of what is shown can be changed: a head's tokens, panels' columns, the grid's layers."""
        what = self.what.currentData()
        self.head_list.setEnabled(what != GRID)
        self.drawing.setEnabled(what != GRID)
        self.groups["tokens"].setEnabled(what != GRID)
        self.groups["panels"].setEnabled(what == HEADS)
        self.groups["grid"].setEnabled(what == GRID)

    def _unit_changed(self) -> None:
        """Inches ↔ pixels at the DPI: the same width in the other unit."""
        self.width_spin.blockSignals(True)
        if self.unit.currentData() == "px":
            self.width_spin.setDecimals(0)
            self.width_spin.setValue(round(self.width_spin.value() * self.dpi.value()))
        else:
            self.width_spin.setValue(self.width_spin.value() / self.dpi.value())
            self.width_spin.setDecimals(2)
        self.width_spin.blockSignals(False)

    # ----------------------------------------------------------------- fields → options
    def options(self) -> FigureOptions:
        """The options the fields say; InputError (one sentence) for a field that does not read."""
        what = self.what.currentData()
        heads: tuple = ()
        if what != GRID:
            spec = self.head_list.text().strip()
            if not spec:
                raise InputError("Name the heads to show, e.g. L1H0, L2H3.")
            heads = check_heads(parse_export_heads(spec), self.n_layer, self.n_head)
            if what == HEAD and len(heads) != 1:
                raise InputError(f"'This head' shows one head; {len(heads)} are named (choose 'These heads').")
            if what == HEADS and len(heads) < 2:
                raise InputError("'These heads' shows two or more heads side by side; name another, or choose "
                                 "'This head'.")
        tokens = None
        if what != GRID and self.tokens.text().strip():
            tokens = parse_token_range(self.tokens.text())
            if tokens[1] > self.n_tokens:
                raise InputError(f"The token range {tokens[0]}:{tokens[1]} runs past the text's {self.n_tokens} "
                                 "tokens.")
        width = self.width_spin.value()
        in_inches = self.unit.currentData() == "in"
        grid = what == GRID
        return self._base.with_(
            heads=heads, tokens=tokens, renormalise=self.renormalise.isChecked() and tokens is not None,
            hide_first=self.hide_first.isChecked(),
            title=self.title.text() or None,
            width_in=width if in_inches else None, width_px=None if in_inches else int(round(width)),
            dpi=self.dpi.value(), font_pt=self.font_pt.value() or None,
            labels=self.labels.currentData(), label_chars=self.label_chars.value() or None,
            cmap=self.cmap.currentData(), scale=self.scale.currentData(),
            vmax=_number(self.vmax.text(), "colour scale's top"), bar_label=self.bar_label.text() or None,
            drawing=self.drawing.currentData() if not grid else "matrix",
            columns=(self.columns.value() or None) if what == HEADS else None,
            shared_scale=self.shared_scale.isChecked(),
            scores=_names(self.scores.text()) if what == HEADS else (),
            layers=_chosen(self.layers.text(), "layers", self.n_layer) if grid else None,
            grid_heads=_chosen(self.grid_heads.text(), "heads", self.n_head) if grid else None,
            aspect=_number(self.aspect.text(), "aspect") if grid else None,
            badges=self.badges.currentData() if grid else None)


def _indices(values) -> str:
    return "" if values is None else ",".join(str(v) for v in values)


def _number(text: str, what: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise InputError(f"The {what} is a number, not '{text}'.") from None


def _names(text: str) -> tuple[str, ...]:
    return check_scores(s.strip() for s in text.split(",") if s.strip())


def _chosen(text: str, what: str, count: int) -> tuple[int, ...] | None:
    """The grid's layers (heads) ``text`` names, each one of 0 … ``count`` − 1; None for an empty field (all)."""
    if not text.strip():
        return None
    chosen = parse_index_list(text, what)
    wrong = [i for i in chosen if i >= count]
    if wrong:
        raise InputError(f"The model has {count} {what} (0–{count - 1}); there is no {what[:-1]} {wrong[0]}.")
    return chosen
