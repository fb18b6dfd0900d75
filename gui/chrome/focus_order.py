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


def takes_tab(widget: QtWidgets.QWidget, window: QtWidgets.QWidget) -> bool:
    """Whether Tab stops at ``widget``: it takes Tab focus, is enabled and shown in ``window``, and is no
    other widget's stand-in (a focus proxy's owner is skipped: Tab stops at the proxy)."""
    return bool(widget.focusPolicy() & QtCore.Qt.FocusPolicy.TabFocus and widget.focusProxy() is None
                and widget.isEnabled() and widget.isVisibleTo(window) and widget.window() is window)


def wrap_focus(window: QtWidgets.QWidget, next_: bool) -> bool:
    """For ``window.focusNextPrevChild``: move the focus to the next (``next_``: Tab) or previous (Shift+Tab)
    widget of ``window``'s focus chain that takes Tab (:func:`takes_tab`), past the end back to the first
    (the model bar), and return True; False when the focus is not in ``window`` or nothing else takes
    Tab, for Qt to decide.

    Every step is taken here, not only the wrap: Qt 6.11 wraps a main window's focus to its first *text*
    control, and from a note's ✕ it skipped the note's own buttons and the model bar (text → … → ✕ →
    text), so the model bar was reachable with Shift+Tab only."""
    current = QtWidgets.QApplication.focusWidget()
    if current is None or current.window() is not window:
        return False
    node = current
    for _ in range(100_000):
        node = node.nextInFocusChain() if next_ else node.previousInFocusChain()
        if node is current:
            return False
        if node is not window and takes_tab(node, window):
            break
    else:
        return False
    node.setFocus(QtCore.Qt.FocusReason.TabFocusReason if next_ else QtCore.Qt.FocusReason.BacktabFocusReason)
    return True
