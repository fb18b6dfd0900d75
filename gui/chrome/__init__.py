"""The window's chrome: the main window's assembly, layout, menus, status bar, help, the GPT-2 download and tab order."""
