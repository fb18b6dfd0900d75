"""AttnScope's Qt layer: windows, widgets, figures and the worker thread. No maths lives here."""
