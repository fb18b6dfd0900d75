"""The window's chrome: the main window's assembly, layout, menus, notes, status bar, help and tab order."""
