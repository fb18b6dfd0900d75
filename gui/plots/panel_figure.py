"""Several heads side by side on one colour scale (``main.py figure --head L1H0,L2H3``): not made yet."""
from __future__ import annotations

from analysis.errors import InputError
from analysis.export.figure_options import FigureOptions


def panel_figure(result, options: FigureOptions):
    raise InputError("A figure of several heads is not made yet; give one --head.")
