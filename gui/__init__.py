"""AttnScope's Qt layer (tests/gui/test_gui_layers.py holds its layers): chrome/ assembles the window from
input/, plots/ and one folder per tab in tabs/, over state/ (the one view state, the worker thread, jobs);
export/ writes figures and exports. No maths lives here: it shows what analysis/ computes."""
