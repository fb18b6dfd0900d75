"""The grid figure of ``main.py figure`` (no ``heads``): the heads of every layer, or those ``FigureOptions`` choose, as
pooled thumbnails."""
from __future__ import annotations

from analysis.export.figure_options import FigureOptions

from ..export.figure_files import settle_layout
from .figure_size import layout_size
from .figures import offscreen_grid_figure


def grid_figure(result, options: FigureOptions):
    """The grid of ``result`` as ``options`` ask, laid out offscreen, and what it shows (for the options file)."""
    fig = offscreen_grid_figure(result, options.cmap, options.scale, title=options.title)
    if options.pixels is not None:
        fig.resize(*layout_size(options, (fig.width(), fig.height())))
    settle_layout()
    return fig, {"head": None, "tokens": list(result.tokens)}
