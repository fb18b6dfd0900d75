"""The size a figure of ``main.py figure`` is laid out at (see gui/plots/figure_make.py): the scene at 96 logical
pixels an inch (Qt's), so a figure ``width_in`` wide has its text at its point size on paper."""
from __future__ import annotations

from analysis.export.figure_options import FigureOptions

LAYOUT_DPI = 96  # logical pixels an inch of the offscreen scene (Qt's)


def layout_size(options: FigureOptions, natural: tuple[int, int]) -> tuple[int, int]:
    """The offscreen size (w, h) in logical pixels: ``natural`` (the export's) without a width, else the width in
    inches at :data:`LAYOUT_DPI` with the natural aspect."""
    pixels = options.pixels
    if pixels is None:
        return natural
    w = max(160, int(round(pixels / options.dpi * LAYOUT_DPI)))
    return w, max(120, int(round(w * natural[1] / natural[0])))
