"""Small generic widgets the views share: a focus ring round a figure, arrow keys that move the selected
head, a combo box of named choices that elides its text, and a one-line rich-text label that elides
between words."""
from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from .state.view_state import ViewState

FOCUS_STYLE = "QGraphicsView {{ border: 2px solid {}; }}"
FOCUS_COLOUR = "#3d8ee0"

def show_focus_ring(figure: QtWidgets.QGraphicsView) -> None:
    """Draw a coloured frame round ``figure`` while it has the keyboard focus (transparent otherwise)."""

    class Ring(QtCore.QObject):
        def eventFilter(self, obj, event):  # noqa: N802
            if event.type() == QtCore.QEvent.Type.FocusIn:
                obj.setStyleSheet(FOCUS_STYLE.format(FOCUS_COLOUR))
            elif event.type() == QtCore.QEvent.Type.FocusOut:
                obj.setStyleSheet(FOCUS_STYLE.format("transparent"))
            return False

    figure.setStyleSheet(FOCUS_STYLE.format("transparent"))
    figure.setFocusPolicy(QtCore.Qt.FocusPolicy.StrongFocus)
    ring = Ring(figure)
    figure.installEventFilter(ring)


def add_arrow_keys(widget: QtWidgets.QWidget, state: ViewState) -> None:
    """Plain arrow keys move the selected head while ``widget`` (or a child) has the focus."""
    for key, step in (("Left", (0, -1)), ("Right", (0, 1)), ("Up", (-1, 0)), ("Down", (1, 0))):
        shortcut = QtGui.QShortcut(QtGui.QKeySequence(key), widget)
        shortcut.setContext(QtCore.Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(lambda s=step: state.move_selection(*s))


def placeholder_label(parent: QtWidgets.QWidget | None = None) -> QtWidgets.QLabel:
    """The line a view shows where its figure goes while it has nothing to draw ("no model loaded", "computing…"):
    centred, plain text, wrapped, in the palette's placeholder colour."""
    label = QtWidgets.QLabel(parent)
    label.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
    label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setStyleSheet("color: palette(placeholder-text); font-size: 13pt;")
    return label


class ElidingComboBox(QtWidgets.QComboBox):
    """A combo box that ends its current text in "…" when the box is narrower than it (Qt's styles cut it)."""

    def paintEvent(self, ev):  # noqa: N802
        style = QtWidgets.QStyle
        painter = QtWidgets.QStylePainter(self)
        option = QtWidgets.QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(style.ComplexControl.CC_ComboBox, option)
        field = self.style().subControlRect(style.ComplexControl.CC_ComboBox, option,
                                            style.SubControl.SC_ComboBoxEditField, self)
        option.currentText = self.fontMetrics().elidedText(option.currentText, QtCore.Qt.TextElideMode.ElideRight,
                                                           field.width())
        painter.drawControl(style.ControlElement.CE_ComboBoxLabel, option)


def choice_box(ids, labels: dict, current: str, setter, tooltip: str, chars: int | None = None) -> QtWidgets.QComboBox:
    """A combo box of ``ids`` shown by their ``labels``; ``chars``: the box is that many characters wide and
    elides a longer choice (its open list shows every choice whole)."""
    box = ElidingComboBox()
    for name in ids:
        box.addItem(labels.get(name, name), name)
    if chars is not None:
        box.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        box.setMinimumContentsLength(chars)
    box.setCurrentIndex(box.findData(current))
    box.setToolTip(tooltip)
    box.currentIndexChanged.connect(lambda _: setter(box.currentData()))
    return box


class ElidedLabel(QtWidgets.QLabel):
    """A one-line rich-text label that ends in "…" when it is wider than its room, cut between words (never
    inside one, nor right after a dash, colon or comma). ``text()`` keeps the whole text (and the caller puts
    it in the tooltip); only the painting is cut."""

    DANGLING = "—–-·:,;&"  # a cut right after one of these reads as a half sentence: cut before its word too

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.shorter: tuple[str, ...] = ()  # shorter wordings of the text, shown (whole) when it does not fit

    def set_texts(self, text: str, *shorter: str) -> None:
        """Show ``text``, or the first of the ``shorter`` wordings that fits; the last one is elided if need be."""
        self.shorter = shorter
        self.setText(text)
        self.update()

    def _document(self, text: str | None = None) -> QtGui.QTextDocument:
        doc = QtGui.QTextDocument()
        doc.setDefaultFont(self.font())
        doc.setDocumentMargin(0)
        option = QtGui.QTextOption()
        option.setWrapMode(QtGui.QTextOption.WrapMode.NoWrap)
        doc.setDefaultTextOption(option)
        doc.setHtml(self.text() if text is None else text)
        return doc

    def shown_document(self) -> QtGui.QTextDocument:
        """The text as painted: the text or the first shorter wording that fits whole, else the shortest
        wording cut before a space and ended with "…"."""
        room = self.contentsRect().width()
        for text in (self.text(), *self.shorter):
            doc = self._document(text)
            if doc.idealWidth() <= room:
                return doc
        # the shortest wording (``text``, HTML) is cut in its own rich document, so that its bold and italics and
        # its escaped "&lt;" stay as they are; its plain text only finds where the words end
        end = doc.characterCount() - 1  # without the closing paragraph separator
        plain = doc.toPlainText()  # one block: character i is document position i
        cuts = [0] + [i for i in range(1, len(plain)) if plain[i].isspace() and not plain[i - 1].isspace()
                      and plain[i - 1] not in self.DANGLING]

        def cut(keep: int) -> QtGui.QTextDocument:
            shorter = self._document(text)
            cursor = QtGui.QTextCursor(shorter)
            cursor.setPosition(keep)
            cursor.setPosition(end, QtGui.QTextCursor.MoveMode.KeepAnchor)
            cursor.insertText("…")
            return shorter

        low, high = 0, len(cuts) - 1  # the longest kept run of words whose cut text fits (binary search)
        while low < high:
            middle = (low + high + 1) // 2
            if cut(cuts[middle]).idealWidth() <= room:
                low = middle
            else:
                high = middle - 1
        return cut(cuts[low])

    def plain_text(self) -> str:
        return self._document().toPlainText()

    def is_elided(self) -> bool:
        return self.shown_document().toPlainText() != self.plain_text()

    def paintEvent(self, ev):  # noqa: N802
        doc = self.shown_document()
        painter = QtGui.QPainter(self)
        rect = self.contentsRect()
        painter.translate(rect.left(), rect.top() + (rect.height() - doc.size().height()) / 2)
        context = QtGui.QAbstractTextDocumentLayout.PaintContext()
        roles = QtGui.QPalette.ColorRole
        context.palette.setColor(roles.Text, self.palette().color(roles.WindowText))
        context.clip = QtCore.QRectF(0, 0, rect.width(), doc.size().height())
        doc.documentLayout().draw(painter, context)
        painter.end()


class StaleMark(QtWidgets.QWidget):
    """A one-line label over the top of ``target`` while what it shows is not the newest result (:meth:`mark` with
    the words, :meth:`clear`): a small box centred near the target's top edge (a tab widget's: below its tab bar).
    Outside any layout, so showing it moves nothing (a label in the layout relaid out every view below it), and only
    the box's own rectangle is painted again: a wash over the whole target made Qt paint every view under it again,
    10–20 ms of the GUI thread at each run's start and end (``gui_stall_ms``); the maps dim themselves instead
    (plot_items.RunDimmer). Transparent to the mouse: what is under it can still be hovered and used."""

    def __init__(self, target: QtWidgets.QWidget):
        super().__init__(target)
        self.target, self.text = target, ""
        self.setAttribute(QtCore.Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setFocusPolicy(QtCore.Qt.FocusPolicy.NoFocus)
        font = QtGui.QFont(self.font())
        font.setBold(True)
        self.setFont(font)
        target.installEventFilter(self)
        self.hide()

    @property
    def marked(self) -> bool:
        return not self.isHidden()

    def mark(self, text: str) -> None:
        """Mark the target: ``text`` says what it shows and what is coming (also the mark's tooltip)."""
        if self.marked and text == self.text:
            return
        self.text = text
        self.setToolTip(text)
        self._place()
        self.show()
        self.raise_()
        self.update()

    def clear(self) -> None:
        if self.marked:
            self.hide()

    def _place(self) -> None:
        metrics = QtGui.QFontMetrics(self.font())
        width = max(0, min(self.target.width() - 8, metrics.horizontalAdvance(self.text) + 16))
        top = 4
        if isinstance(self.target, QtWidgets.QTabWidget):  # every tab's name stays readable
            top += self.target.tabBar().geometry().bottom() + 1
        self.setGeometry((self.target.width() - width) // 2, top, width, metrics.height() + 8)

    def eventFilter(self, obj, event):  # noqa: N802
        if obj is self.target and event.type() == QtCore.QEvent.Type.Resize and self.marked:
            self._place()
        return False

    def paintEvent(self, event):  # noqa: N802
        painter = QtGui.QPainter(self)
        metrics = QtGui.QFontMetrics(self.font())
        text = metrics.elidedText(self.text, QtCore.Qt.TextElideMode.ElideRight, max(0, self.width() - 16))
        painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing)
        painter.setPen(QtGui.QPen(self.palette().color(QtGui.QPalette.ColorRole.Mid)))
        painter.setBrush(self.palette().color(QtGui.QPalette.ColorRole.ToolTipBase))
        painter.drawRoundedRect(QtCore.QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)
        painter.setPen(self.palette().color(QtGui.QPalette.ColorRole.ToolTipText))
        painter.drawText(self.rect(), QtCore.Qt.AlignmentFlag.AlignCenter, text)
