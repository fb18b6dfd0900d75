"""The token strip: every token of the result on screen, a click highlights its query row."""
from __future__ import annotations

import html

from PySide6 import QtCore, QtWidgets

from ..state.view_state import ViewState


class TokenStrip(QtWidgets.QListWidget):
    """Every token with its index; hover shows the id; a click highlights that query row (in the state).

    Tab passes through it (one stop): its items are chosen with the arrow keys or the mouse."""

    def __init__(self, state: ViewState, parent=None):
        super().__init__(parent)
        self.state = state
        self.setFlow(QtWidgets.QListView.Flow.LeftToRight)
        self.setWrapping(False)
        self.setHorizontalScrollMode(QtWidgets.QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setVerticalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTabKeyNavigation(False)
        self.setSpacing(1)
        # two lines of text (the index and the token), the items' padding, the frame and a thin scroll bar
        self.horizontalScrollBar().setStyleSheet("QScrollBar:horizontal { height: 8px; }")
        self.setFixedHeight(2 * self.fontMetrics().lineSpacing() + 8 + 2 * self.frameWidth() + 8)
        self.setUniformItemSizes(False)
        self.setToolTip("The tokens the model saw; click one to highlight its row in the head map")
        self.itemClicked.connect(lambda item: state.toggle_query_row(self.row(item)))
        state.on_bundle(self._bundle_changed, "token strip")
        state.query_row_changed.connect(self._query_row_changed)

    def _bundle_changed(self, bundle) -> None:
        self.clear()
        if bundle is None:
            return
        r = bundle.result
        for i, (token, token_id) in enumerate(zip(r.tokens, r.token_ids)):
            item = QtWidgets.QListWidgetItem(f"{i}\n{token}")
            item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
            item.setToolTip(f"token {i}: '{html.escape(token)}' — id {int(token_id)}")  # tooltips are rich text
            self.addItem(item)

    def _query_row_changed(self, row) -> None:
        if row is None:
            self.clearSelection()
        else:
            self.setCurrentRow(row)
