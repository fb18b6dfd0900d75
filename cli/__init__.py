"""The command line: ``main.py``'s parser, its argument types, signal handling, and one module per command
(``calc``, ``export``, ``scan``, ``ablate``, ``bench``, and the app's launch)."""
