"""The tabs on the right of the window, one folder each (protocol.py: what every tab provides)."""
