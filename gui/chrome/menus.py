"""The window's menus (File, Run, View, Help): their actions, shortcuts and what each one calls."""
from __future__ import annotations

from typing import NamedTuple

from PySide6 import QtGui

from ..tabs.scores.scores_tab import ScoresTab


class MenuActions(NamedTuple):
    """The actions the window changes after building: shown or hidden, retitled."""

    download: QtGui.QAction  # File → Download GPT-2…, hidden once GPT-2 is in the hub cache
    token_limit: QtGui.QAction  # Run → Token limit (n)…


def action(menu, text: str, shortcut, slot) -> QtGui.QAction:
    """Add ``text`` to ``menu``, calling ``slot()`` on ``shortcut`` (a string, a StandardKey or None)."""
    added = menu.addAction(text)
    if shortcut:
        added.setShortcut(QtGui.QKeySequence(shortcut))
    added.triggered.connect(lambda _=False: slot())
    return added


def build_menus(window) -> MenuActions:
    """Fill ``window``'s (a MainWindow's) menu bar."""
    from . import help as help_dialogs
    from ..export.figure_dialog import open_figure_dialog
    from .downloads import download_gpt2

    bar, tabs, text_input = window.menuBar(), window.tabs, window.text_input
    file_menu = bar.addMenu("&File")
    action(file_menu, "Open model folder…", QtGui.QKeySequence.StandardKey.Open, window.open_folder)
    action(file_menu, "Open GGUF file…", None, window.model_files.open_gguf_file)
    action(file_menu, "Model folders…", None, window.model_files.manage_folders)
    download = action(file_menu, "Download GPT-2 (550 MB)…", None, lambda: download_gpt2(window))
    file_menu.addSeparator()
    action(file_menu, "Export…", "Ctrl+E", window.exporter.open_dialog)
    action(file_menu, "Figure…", "Ctrl+Shift+F", lambda: open_figure_dialog(window))
    action(file_menu, "Copy figure", "Ctrl+Shift+C", window.copy_figure)
    file_menu.addSeparator()
    action(file_menu, "Quit", QtGui.QKeySequence.StandardKey.Quit, window.close)
    run_menu = bar.addMenu("&Run")
    action(run_menu, "Run text", "Ctrl+Return", text_input.run)
    action(run_menu, "Run text (keypad)", "Ctrl+Enter", text_input.run).setVisible(False)
    action(run_menu, "Run again", "F5", text_input.run)
    action(run_menu, "Go to the text box", "Ctrl+L", text_input.setFocus)
    token_limit = action(run_menu, "Token limit…", None, window.ask_max_tokens)
    action(run_menu, "Scores over many texts…", None,
           lambda: tabs.setCurrentWidget(window.tab(ScoresTab)) or window.tab(ScoresTab).open_scan_dialog())
    view_menu = bar.addMenu("&View")
    for text, keys, step in (("Next head", "Alt+Right", (0, 1)), ("Previous head", "Alt+Left", (0, -1)),
                             ("Next layer", "Alt+Down", (1, 0)), ("Previous layer", "Alt+Up", (-1, 0))):
        action(view_menu, text, keys, lambda s=step: window.state.move_selection(*s))
    view_menu.addSeparator()
    for index in range(tabs.count()):
        action(view_menu, tabs.tabText(index), f"Ctrl+{index + 1}",
               lambda w=tabs.widget(index): tabs.setCurrentWidget(w))
    help_menu = bar.addMenu("&Help")
    action(help_menu, "Keyboard shortcuts", "F1", lambda: help_dialogs.keyboard_dialog(window).exec())
    action(help_menu, "About AttnScope and the models", None,
           lambda: help_dialogs.model_card_dialog(window).exec())
    help_dialogs.with_shortcut_tooltips(bar)
    return MenuActions(download, token_limit)
