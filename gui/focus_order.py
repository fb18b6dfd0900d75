"""The window's Tab order: the layout's order, then each tab's own widgets, wrapping back to the first."""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets


def set_tab_order(order: list[QtWidgets.QWidget], tabs: QtWidgets.QTabWidget) -> None:
    """Tab visits ``order`` → the tab bar of ``tabs`` → the tab's contents (each tab keeps its own order)."""
    order = order + [tabs.tabBar()]
    for first, second in zip(order, order[1:]):
        QtWidgets.QWidget.setTabOrder(first, second)
    last = tabs.tabBar()
    for index in range(tabs.count()):  # every tab's widgets follow the tab bar, in tab order
        page = tabs.widget(index)
        chain = [w for w in page.findChildren(QtWidgets.QWidget)
                 if w.focusPolicy() & QtCore.Qt.FocusPolicy.TabFocus and not w.isWindow()
                 and w.window() is page.window()]  # not a combo box's popup
        if page.focusPolicy() & QtCore.Qt.FocusPolicy.TabFocus:
            chain.insert(0, page)
        for widget in _chain_order(page, chain):
            QtWidgets.QWidget.setTabOrder(last, widget)
            last = widget


def _chain_order(page: QtWidgets.QWidget, widgets: list) -> list:
    """``widgets`` in the order the page's own focus chain has them."""
    wanted, ordered = set(map(id, widgets)), []
    node = page
    for _ in range(100_000):
        node = node.nextInFocusChain()
        if node is page:
            break
        if id(node) in wanted and node not in ordered:
            ordered.append(node)
    return ordered + [w for w in widgets if w not in ordered]


def wrap_focus(window: QtWidgets.QWidget, next_: bool) -> bool:
    """For ``window.focusNextPrevChild``: when Tab (``next_``) or Shift+Tab passes the end of ``window``'s
    focus chain, focus the first (last) widget that takes Tab and return True; else False, for Qt to
    move the focus. (Qt 6.11 wraps a main window's focus to its first *text* control, which skipped the
    model bar.)"""
    current = QtWidgets.QApplication.focusWidget()
    if current is None or current.window() is not window:
        return False
    node, wrapped = current, False
    for _ in range(100_000):
        node = node.nextInFocusChain() if next_ else node.previousInFocusChain()
        if node is current:
            return False
        if node is window:
            wrapped = True
            continue
        if (node.focusPolicy() & QtCore.Qt.FocusPolicy.TabFocus and node.focusProxy() is None
                and node.isEnabled() and node.isVisibleTo(window) and node.window() is window):
            break
    if not wrapped:
        return False
    node.setFocus(QtCore.Qt.FocusReason.TabFocusReason if next_ else QtCore.Qt.FocusReason.BacktabFocusReason)
    return True
