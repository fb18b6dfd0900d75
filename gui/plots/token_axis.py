"""Token labels along a head map's axes (pyqtgraph): "token [index]" at every k-th row or column, the query
labels as lines of text down the left, the key labels rotated by 90° along the bottom.

A token list is labelled and measured once (:class:`LabelSizes`: each distinct piece of text measured once with
the font's metrics, not each of n labels); a zoom, a pan or a thinner stride only chooses which of those labels
to draw, and only the labels in view are laid out.
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from analysis.display import LABEL_CHARS, elide

#: A rotated token label (token and index) is elided to this many characters, so that one long token
#: ("<|endoftext|> [0]") does not take the map's height; a common word and its index ("␣because [6]") is whole.
ROTATED_LABEL_CHARS = 14
LABEL_TOP_PX = 4  # a rotated label starts this far below its axis line
AXIS_TITLE_GAP_PX = 5  # at least this much air between the longest rotated label and the axis title below it
AXIS_LABEL_NUDGE_PX = 5  # pyqtgraph's AxisItem.resizeEvent moves a bottom axis' title this far down
LONGEST_SLACK_PX = 3.0  # a label's advance from its pieces is within this of its own (kerning at the joins)


def tick_font() -> QtGui.QFont:
    font = QtGui.QFont(QtWidgets.QApplication.font())
    font.setPointSizeF(8.5)
    return font


def token_label(token: str, index: int, limit: int | None = None) -> str:
    """The label of token ``index`` on either axis: the token, then its position in brackets, "1 [12]" (the hover
    reads "'1' [12]"), so that a number token is never mistaken for its index. With ``limit`` the token is elided
    so that the whole label has at most ``limit`` characters; the index is never cut. Tick labels are plain text
    (pyqtgraph draws them with ``drawText``), so the token is not HTML-escaped here."""
    suffix = f" [{index}]"
    if limit is None:
        return elide(token) + suffix
    return elide(token, max(1, limit - len(suffix))) + suffix


def _elided(tokens, limit: int | None, with_index: bool) -> list[str]:
    """The token part of each label of ``tokens``: token i as :func:`token_label` (``with_index``) or ``elide``
    shows it (the label is that and " [i]"), each distinct token elided once per index length (the room left beside
    " [i]" depends only on how many digits i has): a text of 8,192 tokens has a few hundred distinct ones, and its
    labels took 5 ms one by one."""
    tokens = list(tokens)
    if limit is None or not with_index:
        spans = [(0, len(tokens), LABEL_CHARS if limit is None else limit)]
    else:  # the indices of one length: 0 … 9, 10 … 99, …, each room as token_label leaves it
        spans, first = [], 0
        while first < len(tokens):
            stop = min(len(tokens), 10 ** len(str(first)))
            spans.append((first, stop, max(1, limit - len(f" [{first}]"))))
            first = stop
    out: list[str] = []
    for first, stop, room in spans:
        part = tokens[first:stop]
        shown = {token: elide(token, room) for token in set(part)}
        out.extend(map(shown.__getitem__, part))
    return out


def rotated_label(token: str, index: int) -> str:
    """The label of key ``index`` on a rotated axis: :func:`token_label` of at most :data:`ROTATED_LABEL_CHARS`."""
    return token_label(token, index, ROTATED_LABEL_CHARS)


class LabelSizes:
    """Font metrics of token labels, each distinct piece of text measured once.

    A label is a token's text (few distinct ones in a text of n tokens) and, when indexed, " [index]" (ASCII:
    brackets and digits). Its ink box across the baseline (:meth:`thickness`) is the union of its pieces' boxes,
    as Qt's ``boundingRect`` unites the glyphs' boxes; its advance (:meth:`longest`) is the pieces' advances
    summed, checked against the label's own advance for the few labels that could be the longest."""

    def __init__(self, font: QtGui.QFont):
        self.metrics = QtGui.QFontMetrics(font)
        self._metrics_f = QtGui.QFontMetricsF(font)
        self._pieces: dict[str, tuple[float, float, float]] = {}  # text → (ink top, ink bottom, advance), px
        self._advances: dict[str, int] = {}  # label → its own advance (QFontMetrics.horizontalAdvance)
        self.measured = 0  # pieces and labels measured with the font's metrics (tests count it)

    def piece(self, text: str) -> tuple[float, float, float]:
        """(top, bottom, advance) of ``text``: its ink box from the baseline (y down, the baseline included, as
        ``QFontMetricsF.boundingRect``) and its advance, in pixels."""
        sizes = self._pieces.get(text)
        if sizes is None:
            box = self._metrics_f.boundingRect(text)
            sizes = (box.top(), box.bottom(), self._metrics_f.horizontalAdvance(text))
            self._pieces[text] = sizes
            self.measured += 1
        return sizes

    def width(self, label: str) -> float:
        """The label's width as pyqtgraph measures a tick label (``QPainter.boundingRect``'s width of one line:
        its ``QFontMetricsF`` advance), measured once per label."""
        return self.piece(label)[2]

    def advance(self, label: str) -> int:
        """The label's own advance, ``QFontMetrics.horizontalAdvance``, measured once per label."""
        width = self._advances.get(label)
        if width is None:
            width = self._advances[label] = self.metrics.horizontalAdvance(label)
            self.measured += 1
        return width

    def _of_texts(self, texts: list[str]) -> np.ndarray:
        """(n, 3) :meth:`piece` of each text, each distinct text measured once (the last list's kept, by identity:
        :meth:`thickness` and :meth:`longest` of one token list ask for the same). Read-only."""
        kept = getattr(self, "_texts_sizes", None)
        if kept is not None and kept[0] is texts:
            return kept[1]
        distinct = {text: k for k, text in enumerate(dict.fromkeys(texts))}
        table = np.array([self.piece(text) for text in distinct], dtype=np.float64).reshape(len(distinct), 3)
        sizes = table[np.fromiter(map(distinct.__getitem__, texts), dtype=np.intp, count=len(texts))]
        sizes.setflags(write=False)
        self._texts_sizes = (texts, sizes)
        return sizes

    def _of_indices(self, n: int) -> np.ndarray:
        """(n, 3) the (top, bottom, advance) of " [i]" for i < n, from its brackets' and digits' own (the last n's
        kept: :meth:`thickness` and :meth:`longest` of one token list ask for the same). Read-only."""
        kept = getattr(self, "_indices", None)
        if kept is None or len(kept) != n:
            kept = self._indices = self._indices_of(n)
            kept.setflags(write=False)
        return kept

    def _indices_of(self, n: int) -> np.ndarray:
        brackets = [self.piece(" ["), self.piece("]")]
        sizes = np.empty((n, 3))
        sizes[:, 0] = min(b[0] for b in brackets)
        sizes[:, 1] = max(b[1] for b in brackets)
        sizes[:, 2] = sum(b[2] for b in brackets)
        digits = np.array([self.piece(str(d)) for d in range(10)])  # (10, 3)
        index, place = np.arange(n), 1
        while True:
            shown = index >= place if place > 1 else np.ones(n, bool)  # i has a digit at this place
            if not shown.any():
                return sizes
            digit = digits[(index // place) % 10]
            sizes[shown, 0] = np.minimum(sizes[shown, 0], digit[shown, 0])
            sizes[shown, 1] = np.maximum(sizes[shown, 1], digit[shown, 1])
            sizes[shown, 2] += digit[shown, 2]
            place *= 10

    def _odd(self, sizes: np.ndarray) -> np.ndarray:
        """(n,) bool: texts whose box does not straddle the baseline, or is taller than four lines (a script the
        font engine cannot shape: its box is reported far away, and its label is not the sum of its pieces)."""
        top, bottom = sizes[:, 0], sizes[:, 1]
        return (top > 0) | (bottom < 0) | (bottom - top > 4 * self.metrics.height())

    def thickness(self, texts: list[str], labels: list[str], indexed: bool) -> int:
        """The thickest of ``labels`` (``texts[i]`` + " [i]" when ``indexed``) across the baseline, in whole
        pixels: ``max(QFontMetrics.boundingRect(label).height())`` (fallback glyphs such as ␣ are taller than
        letters); a line's height when there are none. A label whose text's box does not straddle the baseline (a
        script the font engine cannot shape reports a box far away) is measured whole, as Qt measures it."""
        if not labels:
            return self.metrics.height()
        sizes = self._of_texts(texts)
        top, bottom = sizes[:, 0], sizes[:, 1]
        odd = self._odd(sizes)
        if indexed:
            index = self._of_indices(len(texts))
            top, bottom = np.minimum(top, index[:, 0]), np.maximum(bottom, index[:, 1])
        heights = np.floor(bottom - top + 0.5)  # Qt rounds the box's height (qRound)
        for i in np.flatnonzero(odd):
            heights[i] = self.metrics.boundingRect(labels[i]).height()
            self.measured += 1
        return int(heights.max())

    def longest(self, texts: list[str], labels: list[str], indexed: bool, default: int = 10) -> int:
        """The longest of ``labels`` (``texts[i]`` + " [i]" when ``indexed``), ``max(QFontMetrics
        .horizontalAdvance(label))``: estimated from the pieces for every label, then measured for the few that
        come within :data:`LONGEST_SLACK_PX` of the longest (kerning where the pieces meet), and for those whose
        text the font engine cannot shape (:meth:`_odd`)."""
        if not labels:
            return default
        sizes = self._of_texts(texts)
        estimate = sizes[:, 2]
        if indexed:
            estimate = estimate + self._of_indices(len(texts))[:, 2]
        close = np.flatnonzero((estimate >= estimate.max() - LONGEST_SLACK_PX) | self._odd(sizes))
        return max(self.advance(labels[i]) for i in close)


class TokenAxis(pg.AxisItem):
    """An axis whose ticks are token labels, "token [index]" (:func:`token_label`: the token elided to 24
    characters; rotated ones to :data:`ROTATED_LABEL_CHARS` in all); on the bottom they are drawn rotated by 90°.
    :meth:`label_px` is the room one label needs along the axis, from the font.

    :meth:`set_tokens` labels and measures a token list once (the same list again changes nothing);
    :meth:`set_stride` only picks every k-th of those labels. A rotated axis lays out only the labels in view."""

    def __init__(self, orientation: str, rotate: bool = False, on_click=None, **kwargs):
        super().__init__(orientation, **kwargs)
        self.on_click = on_click  # on_click(index): a left click on a label (or beside it, along the axis)
        self.rotate = rotate and orientation in ("bottom", "top")
        #: a figure's own label length (both axes alike: ``main.py figure --label-chars``); 0 = whole; None = the
        #: app's (a rotated label shortened to ROTATED_LABEL_CHARS)
        self.label_chars: int | None = None
        #: a figure's axis (figure_text.set_figure_font): a rotated one is as tall as the labels its stride draws,
        #: not as its longest label, which a stride may leave out (the gap above "key" of plain labels); the app's
        #: keeps one height while zooming changes the stride
        self.fit_drawn = False
        self._labels: list[str] = []
        self._texts: list[str] = []  # each label's token text (without " [index]"), for measuring
        self._tokens_key: tuple | None = None  # (tokens, with_index) that _labels are of
        self._primed: tuple | None = None  # (its _prime_key, its _labelled) of the tokens prime_tokens was given
        self._indexed = True
        self._stride: int | None = None
        self._label_px = 12.0
        self.setStyle(autoExpandTextSpace=True, tickLength=-3, tickFont=tick_font())
        self.sizes = LabelSizes(self.style["tickFont"])

    def set_tokens(self, tokens, with_index: bool = True) -> None:
        """All labels, measured once (the ␣ marker and other fallback glyphs can be taller than letters); the
        same tokens again keep the labels, their sizes and the stride. Tokens :meth:`prime_tokens` was given are
        only put up (their labels and sizes were made then)."""
        key = (tuple(tokens), with_index)
        if key == self._tokens_key:
            return
        self._tokens_key = key
        primed, self._primed = self._primed, None
        labelled = primed[1] if primed is not None and primed[0] == self._prime_key(key) else self._labelled(key)
        self._labels, self._texts, self._indexed, self._label_px, longest = labelled
        if self.rotate:
            self._longest = longest
            self._fit_height()
        self._stride = None
        self._show_every(1)  # (the figure picks the stride next: the labels' width is found for that one)

    def prime_tokens(self, tokens, with_index: bool = True) -> None:
        """Make the labels of ``tokens`` and measure them now, for a later :meth:`set_tokens` of the same tokens to
        put up at once: a new result's tokens are known before its first map (computed on demand), and labelling
        2,048 tokens takes ~4 ms that would otherwise run in one turn with that map's drawing and paint."""
        key = (tuple(tokens), with_index)
        if key != self._tokens_key:
            self._primed = (self._prime_key(key), self._labelled(key))

    def _prime_key(self, key: tuple) -> tuple:
        """What :meth:`_labelled` depends on besides the tokens: the label length and the font's metrics."""
        return key, self.label_chars, self.sizes

    def _labelled(self, key: tuple) -> tuple:
        """(labels, texts, indexed, label_px, longest) of ``key`` = (tokens, with_index): each label; on a rotated
        axis each label's token text and the labels' thickness along the axis and longest advance, fallback glyphs
        (␣) included; on a horizontal one the line height (labels one line apart read as lines of a text, a
        fallback glyph's taller box notwithstanding: it thinned ~15 px rows, n4 #5) and no texts."""
        tokens, with_index = key
        limit = ROTATED_LABEL_CHARS if self.rotate else None
        if self.label_chars == 0:  # a figure's labels whole, on both axes
            texts = list(tokens)
        else:
            limit = limit if self.label_chars is None else self.label_chars
            texts = _elided(tokens, limit, with_index)
        labels = [f"{t} [{i}]" for i, t in enumerate(texts)] if with_index else texts
        if not self.rotate:
            return labels, [], with_index, self.sizes.metrics.height(), None
        return (labels, texts, with_index, self.sizes.thickness(texts, labels, with_index),
                self.sizes.longest(texts, labels, with_index))

    def _fit_height(self) -> None:
        """A rotated axis is as tall as its longest label (up to 206 px) plus its title ("key") below it, with
        AXIS_TITLE_GAP_PX between them (the title touched the longest labels: n4 #3)."""
        if not getattr(self, "rotate", False):  # (pyqtgraph's __init__ may set a label before ours has run)
            return
        labels_end = LABEL_TOP_PX + min(getattr(self, "_longest", 10), 206) + 2  # drawPicture's rect is width + 2
        title = 0.0
        if self.label is not None and self.label.isVisible():  # pyqtgraph puts the title's box AXIS_LABEL_NUDGE_PX
            box = self.label.boundingRect().height()  # below the axis; its text starts a document margin in
            title = box - AXIS_LABEL_NUDGE_PX - self.label.document().documentMargin()
        height = int(math.ceil(labels_end + AXIS_TITLE_GAP_PX + title))
        if height != self.fixedHeight:  # (pyqtgraph's setHeight throws the drawn picture away, even for the same)
            self.setHeight(height)

    def setLabel(self, *args, **kwargs):  # noqa: N802 (pyqtgraph's name): the title's height changes ours
        super().setLabel(*args, **kwargs)
        self._fit_height()

    def showLabel(self, show=True):  # noqa: N802
        super().showLabel(show)
        if getattr(self, "_labels", None) is not None:
            self._fit_height()

    def index_at(self, scene_pos) -> int | None:
        """The token whose label lies at ``scene_pos`` along this axis, or None outside the tokens."""
        view = self.linkedView()
        if view is None or not self._labels:
            return None
        point = view.mapSceneToView(scene_pos)
        value = point.x() if self.orientation in ("bottom", "top") else point.y()
        index = int(math.floor(value))
        return index if 0 <= index < len(self._labels) else None

    def mouseClickEvent(self, ev):  # noqa: N802
        if self.on_click is None or ev.button() != QtCore.Qt.MouseButton.LeftButton:
            return super().mouseClickEvent(ev)
        index = self.index_at(ev.scenePos())
        if index is None:
            ev.ignore()
            return
        ev.accept()
        self.on_click(index)

    def label_px(self) -> float:
        """The room one label needs along the axis: a rotated label its thickness and a little air; a
        horizontal one the text's line height (labels are thinned only when rows are shorter than that)."""
        return self._label_px + 2 if self.rotate else self._label_px

    def set_stride(self, stride: int) -> None:
        """Label every ``stride``-th token (token i's tick at i + 0.5); the same stride again changes nothing."""
        stride = max(1, stride)
        if stride == self._stride:
            return
        self._show_every(stride)

    def _show_every(self, stride: int) -> None:
        self._stride = stride
        self.setTicks([[(i + 0.5, self._labels[i]) for i in range(0, len(self._labels), stride)], []])
        if self.rotate and self.fit_drawn and self._texts:  # as tall as the longest label drawn
            self._longest = self.sizes.longest(self._texts[::stride], self._labels[::stride], self._indexed)
            self._fit_height()

    def _in_view(self, margin: int = 0) -> range:
        """The indices of the labelled ticks (i + 0.5, every stride-th i) within the axis' range, and ``margin``
        more ticks on either side."""
        if not self._stride or not self._labels:
            return range(0)
        low, high = sorted(self.range)
        stride = self._stride
        first = max(0, math.ceil((low - 0.5) / stride) - margin) * stride
        last = min(len(self._labels) - 1, math.floor(high - 0.5) + margin * stride)
        return range(first, last + 1, stride)

    def fit_width(self) -> None:
        """A horizontal axis is told the width of its widest label in view now (after a new stride, or when the
        view has moved), as pyqtgraph would find it while painting (AxisItem.generateDrawSpecs →
        _updateMaxTextSize): the figure is laid out again now, with the new labels, and not after a first paint,
        which then paints the whole figure a second time."""
        if self.rotate or not self.style["autoExpandTextSpace"] or not self._stride:
            return
        widths = [self.sizes.width(self._labels[i]) for i in self._in_view()]
        if widths:
            self._updateMaxTextSize(max(widths))

    def generateDrawSpecs(self, p):  # noqa: N802 (pyqtgraph's name)
        """pyqtgraph's axis line and ticks; a rotated axis' text specs are its own: (x, label, advance) of each
        labelled tick in view (only those are looked at, each label's advance measured once)."""
        if not self.rotate:
            return super().generateDrawSpecs(p)
        # pyqtgraph would measure each label in view as horizontal text, for drawPicture to throw away: it lays
        # out no text of a rotated axis (whose height is fixed, _fit_height), so nothing else depends on that
        self.style["showValues"] = False
        try:
            specs = super().generateDrawSpecs(p)
        finally:
            self.style["showValues"] = True
        if specs is None:
            return None
        axis_spec, tick_specs, _ = specs
        return axis_spec, tick_specs, self._rotated_specs() if self._stride else []

    def _rotated_specs(self) -> list[tuple[float, str, int]]:
        """(x in this item, label, advance) of every labelled tick in view, placed as pyqtgraph places its ticks
        (AxisItem.generateDrawSpecs: x = value · scale − offset, kept when within the axis)."""
        low, high = self.range
        if high == low:
            return []
        width = self.mapRectFromParent(self.geometry()).width()
        scale = width / (high - low)
        offset = low * scale
        x_min, x_max = sorted((low * scale - offset, high * scale - offset))
        specs = []
        for i in self._in_view(margin=1):  # (the ticks at the ends: kept or not by pyqtgraph's own test below)
            x = (i + 0.5) * scale - offset
            if x_min <= x <= x_max:
                label = self._labels[i]
                specs.append((x, label, self.sizes.advance(label)))
        return specs

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):  # noqa: N802 (Qt naming)
        if not self.rotate:
            return super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
        # pyqtgraph drops labels whose horizontal box would overlap or leave the axis; rotated
        # labels are thinned by their height instead, so one is drawn at every labelled tick in view.
        super().drawPicture(p, axisSpec, tickSpecs, [])
        p.setRenderHint(QtGui.QPainter.RenderHint.TextAntialiasing, True)
        p.setFont(self.style["tickFont"])
        p.setPen(self.textPen())
        line = p.fontMetrics().height()
        top = axisSpec[1].y() + LABEL_TOP_PX
        for x, text, width in textSpecs:
            p.save()
            p.translate(x, top)
            p.rotate(-90)
            p.drawText(QtCore.QRectF(-width - 2, -line / 2, width + 2, line),
                       QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter, text)
            p.restore()
