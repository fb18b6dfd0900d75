"""The token strip: every token of the result on screen, a click highlights its query row.

A list view over a model that makes each token's label when Qt asks for it, laid out in batches: 8,192 tokens
cost no Python object per token and no single long layout pass on the GUI thread (a QListWidget item per token
was 36 ms of Python and a one-go layout of every item, the longest stall of an 8,192-token run)."""
from __future__ import annotations

import html

from PySide6 import QtCore, QtWidgets

from ..state.view_state import ViewState

LAYOUT_BATCH = 64  # items laid out per event-loop turn (QListView's batched layout; 256 took 7–12 ms a turn at 2,048)
LAYOUT_RETRY_MS = 20  # how often a row to bring into view checks whether the layout has placed it


class TokenModel(QtCore.QAbstractListModel):
    """Row i is token i: its text "i\\ntoken", centred; its tooltip names the token and its id."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.tokens: list[str] = []
        self.ids: list[int] = []

    def set_tokens(self, tokens, ids) -> None:
        self.beginResetModel()
        self.tokens, self.ids = list(tokens), [int(i) for i in ids]
        self.endResetModel()

    def rowCount(self, parent=QtCore.QModelIndex()) -> int:  # noqa: N802 (Qt's name)
        return 0 if parent.isValid() else len(self.tokens)

    def data(self, index, role=QtCore.Qt.ItemDataRole.DisplayRole):
        i, Role = index.row(), QtCore.Qt.ItemDataRole
        if not index.isValid() or not 0 <= i < len(self.tokens):
            return None
        if role == Role.DisplayRole:
            return f"{i}\n{self.tokens[i]}"
        if role == Role.TextAlignmentRole:
            return QtCore.Qt.AlignmentFlag.AlignCenter
        if role == Role.ToolTipRole:  # tooltips are rich text
            return f"token {i}: '{html.escape(self.tokens[i])}' — id {self.ids[i]}"
        return None


class TokenStrip(QtWidgets.QListView):
    """Every token with its index; hover shows the id; a click highlights that query row (in the state).

    Tab passes through it (one stop): its items are chosen with the arrow keys or the mouse."""

    def __init__(self, state: ViewState, parent=None):
        super().__init__(parent)
        self.state = state
        self.tokens = TokenModel(self)
        self.setModel(self.tokens)
        self.setFlow(QtWidgets.QListView.Flow.LeftToRight)
        self.setWrapping(False)
        self.setLayoutMode(QtWidgets.QListView.LayoutMode.Batched)
        self.setBatchSize(LAYOUT_BATCH)
        self.setHorizontalScrollMode(QtWidgets.QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setTabKeyNavigation(False)
        self.setSpacing(1)
        # two lines of text (the index and the token), the items' padding, the frame and a thin scroll bar
        self.horizontalScrollBar().setStyleSheet("QScrollBar:horizontal { height: 8px; }")
        self.setFixedHeight(2 * self.fontMetrics().lineSpacing() + 8 + 2 * self.frameWidth() + 8)
        self.setUniformItemSizes(False)
        self.setToolTip("The tokens the model saw; click one to highlight its row in the head map")
        self.clicked.connect(lambda index: state.toggle_query_row(index.row()))
        self._scroll_to: int | None = None  # a row to bring into view once the batched layout reaches it
        state.on_bundle(self._bundle_changed, "token strip")
        state.query_row_changed.connect(self._query_row_changed)

    # ----------------------------------------------------------------- what the strip shows
    def count(self) -> int:
        return self.tokens.rowCount()

    def label(self, i: int) -> str:
        """Token ``i``'s text on the strip: "i\\ntoken"."""
        return self.tokens.index(i).data()

    def tooltip(self, i: int) -> str:
        return self.tokens.index(i).data(QtCore.Qt.ItemDataRole.ToolTipRole)

    def item_rect(self, i: int) -> QtCore.QRect:
        """Token ``i``'s box in the viewport."""
        return self.visualRect(self.tokens.index(i))

    def current_row(self) -> int:
        return self.currentIndex().row()

    # ----------------------------------------------------------------- the state
    def _bundle_changed(self, bundle) -> None:
        if bundle is None:
            self.tokens.set_tokens([], [])
            return
        r = bundle.result
        self.tokens.set_tokens(r.tokens, r.token_ids)

    def _query_row_changed(self, row) -> None:
        if row is None:
            self._scroll_to = None
            self.clearSelection()
        else:
            self.setCurrentIndex(self.tokens.index(row))
            self._scroll_to = row
            self._scroll_when_laid_out()

    def _scroll_when_laid_out(self) -> None:
        """Scroll the chosen row into view once the batched layout is done (before, the scroll range is still
        growing and the row would slide out of view again)."""
        row = self._scroll_to
        if row is None or row >= self.count():
            return
        if self.item_rect(self.count() - 1).isValid():  # laid out to the end: the scroll range is final
            self._scroll_to = None
            self.scrollTo(self.tokens.index(row))
        else:
            QtCore.QTimer.singleShot(LAYOUT_RETRY_MS, self, self._scroll_when_laid_out)  # dropped with the strip
