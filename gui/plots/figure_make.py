"""A figure drawn from :class:`analysis.export.figure_options.FigureOptions` (``main.py figure``): one head with
HeadPlot or every head with GridPlot (gui/plots/figures.py), laid out at the figure's size in inches, and written with
the options beside it (heads/L0H0.png → heads/L0H0.json).

Size: the scene is laid out at 96 logical pixels an inch (Qt's), so a figure ``width_in`` wide is laid out
``width_in`` · 96 pixels wide and its text has its point size on paper; the PNG is drawn ``width_in`` · dpi pixels
wide (``FigureOptions.pixels``). Without a width the figure keeps the export's own size.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis.display import head_name
from analysis.export.figure_options import FigureOptions, model_name, sidecar

from ..export.figure_files import save_figure, settle_layout
from .figure_size import LAYOUT_DPI, layout_size  # noqa: F401  (LAYOUT_DPI: read here by tests)
from .figures import HeadPlot, dispose_figure, fit_title, head_figure_size, lay_out_offscreen

SPACE_MARK = "␣"


def shown_labels(tokens, first: int, style: str) -> list[str]:
    """The axis labels of ``tokens`` (the display tokens from position ``first``): "marked" keeps "␣" for a leading
    space and adds " [index]"; "plain" is the token as written, without the marker or the index."""
    if style == "plain":
        return [t.replace(SPACE_MARK, " ").strip() or t for t in tokens]
    return [f"{t} [{first + i}]" for i, t in enumerate(tokens)]


def head_title(options: FigureOptions, label: str, layer: int, head: int) -> str:
    return options.title if options.title is not None else f"{model_name(label)} — {head_name(layer, head)}"


def head_figure(result, options: FigureOptions) -> tuple[HeadPlot, dict]:
    """The head ``options.heads[0]`` of ``result`` over ``options.tokens`` (the map's rows and columns first … stop-1,
    as they are: no renormalising), and what it shows (its tokens, layer and head) for the options file."""
    (layer, head), = options.heads
    n = result.n_tokens
    first, stop = options.tokens if options.tokens is not None else (0, n)
    if stop > n:
        from analysis.errors import InputError

        raise InputError(f"The token range {first}:{stop} runs past the text's {n} tokens.")
    weights = np.asarray(result.head_map(layer, head))[first:stop, first:stop]
    tokens = list(result.tokens[first:stop])
    labels = shown_labels(tokens, first, options.labels)
    fig = HeadPlot()
    for axis in (fig.left_axis, fig.bottom_axis):
        axis.label_chars = options.label_chars or 0  # whole unless asked, the same on both axes
    lay_out_offscreen(fig, *layout_size(options, head_figure_size(len(tokens))))
    fig.set_head(weights, tokens, head_title(options, result.model_label, layer, head), cmap=options.cmap,
                 scale=options.scale, causal=result.causal)
    for axis in (fig.left_axis, fig.bottom_axis):
        axis.set_tokens(labels, with_index=False)
    if options.bar_label is not None:
        fig.colorbar.axis.setLabel(options.bar_label)
    settle_layout()
    fig.update_label_density()
    fit_title(fig)  # the title and the colour bar's label inside the picture (the PNG keeps the width asked for)
    fig.update_label_density()
    settle_layout()
    return fig, {"head": head_name(layer, head), "tokens": tokens, "token_range": [first, stop], "labels": labels}


def make_figure(result, options: FigureOptions):
    """The laid-out offscreen figure ``options`` ask for and what it shows (for the options file): the grid (no heads;
    gui/plots/grid_figure.py), one head (here) or several side by side (gui/plots/panel_figure.py)."""
    if not options.heads:
        from .grid_figure import grid_figure

        return grid_figure(result, options)
    if len(options.heads) > 1:
        from .panel_figure import panel_figure

        return panel_figure(result, options)
    return head_figure(result, options)


def write_figure(result, options: FigureOptions, path: Path) -> list[Path]:
    """Draw the figure ``options`` ask for and write it to ``path`` (PNG, SVG or PDF by its extension) with its options
    file beside it (:func:`analysis.export.figure_options.sidecar`); both paths."""
    from ..qt import ensure_qapp

    ensure_qapp()
    path = Path(path)
    fig, shown = make_figure(result, options)
    try:
        save_figure(fig, path, options.pixels)
    finally:
        dispose_figure(fig)
    options = options.with_(fmt=path.suffix.lower().lstrip("."))
    side = sidecar(path)
    side.write_text(options.to_json(model_label=result.model_label, text=result.text, **shown), encoding="utf-8")
    return [path, side]
