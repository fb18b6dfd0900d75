"""Exporting from the window: the dialog, the shared export path, and figures to PNG/SVG/PDF files."""
