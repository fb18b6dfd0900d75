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
from PySide6 import QtGui

from analysis.display import apply_scale, head_name
from analysis.errors import InputError
from analysis.export.figure_options import FigureOptions, model_name, sidecar

from ..export.figure_files import save_figure, settle_layout
from .figures import HeadPlot, dispose_figure, fit_title, head_figure_size, lay_out_offscreen, offscreen_grid_figure

LAYOUT_DPI = 96  # logical pixels an inch of the offscreen scene (Qt's)
SPACE_MARK = "␣"


def shown_labels(tokens, first: int, style: str) -> list[str]:
    """The axis labels of ``tokens`` (the display tokens from position ``first``): "marked" keeps "␣" for a leading
    space and adds " [index]"; "plain" is the token as written, without the marker or the index."""
    if style == "plain":
        return [t.replace(SPACE_MARK, " ").strip() or t for t in tokens]
    return [f"{t} [{first + i}]" for i, t in enumerate(tokens)]


def head_title(options: FigureOptions, label: str, layer: int, head: int) -> str:
    return options.title if options.title is not None else f"{model_name(label)} — {head_name(layer, head)}"


def layout_size(options: FigureOptions, natural: tuple[int, int]) -> tuple[int, int]:
    """The offscreen size (w, h) in logical pixels: ``natural`` (the export's) without a width, else the width in
    inches at :data:`LAYOUT_DPI` with the natural aspect."""
    pixels = options.pixels
    if pixels is None:
        return natural
    w = max(160, int(round(pixels / options.dpi * LAYOUT_DPI)))
    return w, max(120, int(round(w * natural[1] / natural[0])))


def shown_range(result, options: FigureOptions) -> tuple[int, int]:
    """The (first, stop) of the queries and keys a figure shows: ``options.tokens`` or every token."""
    n = result.n_tokens
    first, stop = options.tokens if options.tokens is not None else (0, n)
    if stop > n:
        raise InputError(f"The token range {first}:{stop} runs past the text's {n} tokens.")
    return first, stop


def figure_map(result, layer: int, head: int, options: FigureOptions) -> np.ndarray:
    """The map a figure draws of head (``layer``, ``head``): its rows and columns first … stop-1
    (:func:`shown_range`), as the model gave them, or with ``options.renormalise`` each row divided by its sum over
    the keys shown, w'[q, k] = w[q, k] / Σ_k' w[q, k'] (k, k' in the range; a row summing to 0 is NaN, drawn as
    background like the causal mask). float32 (rows, keys)."""
    first, stop = shown_range(result, options)
    weights = np.asarray(result.head_map(layer, head), dtype=np.float32)[first:stop, first:stop]
    if not options.renormalise:
        return weights
    sums = np.nansum(weights, axis=1, keepdims=True, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(sums > 0, weights / np.where(sums > 0, sums, 1.0), np.nan)
    return out.astype(np.float32)


def figure_bar_label(options: FigureOptions, scale_label: str) -> str:
    """The colour bar's label: ``options.bar_label``, else the scale's own (``scale_label``: "weight", "√weight"),
    with "renormalised over tokens a:b" when the rows were renormalised over the range shown."""
    if options.bar_label is not None:
        return options.bar_label
    if options.renormalise:
        first, stop = options.tokens if options.tokens is not None else (None, None)
        where = f" over tokens {first}:{stop}" if first is not None else ""
        return f"{scale_label} (renormalised{where})"
    return scale_label


def scale_top(vmax: float, scale: str) -> tuple[float, float]:
    """The colour scale's (low, high) levels with ``vmax`` at its top, on ``scale`` as analysis.display.apply_scale
    draws it (linear vmax, power vmax^γ, log log₁₀ vmax)."""
    return apply_scale(np.array([vmax], np.float32), scale)[1]


def set_figure_font(axes, font_pt: float | None) -> None:
    """The token labels of ``axes`` at ``font_pt`` points (``--font-pt``; the axes' own 8.5 pt otherwise): their tick
    font and the metrics they thin labels by."""
    if font_pt is None:
        return
    from .token_axis import LabelSizes

    for axis in axes:
        font = QtGui.QFont(axis.style["tickFont"])
        font.setPointSizeF(float(font_pt))
        axis.setStyle(tickFont=font)
        axis.sizes = LabelSizes(font)
        axis._tokens_key = None  # measured again with the new font at the next set_tokens


def head_figure(result, options: FigureOptions):
    """The head ``options.heads[0]`` of ``result`` over ``options.tokens`` (:func:`figure_map`: cropped, renormalised
    if asked), coloured up to ``options.vmax`` if given, as a matrix (HeadPlot) or as lines (``drawing="lines"``,
    :func:`lines_of_heads`), and what it shows (its tokens, layer and head) for the options file."""
    (layer, head), = options.heads
    first, stop = shown_range(result, options)
    weights = figure_map(result, layer, head, options)
    tokens = list(result.tokens[first:stop])
    labels = shown_labels(tokens, first, options.labels)
    shown = {"head": head_name(layer, head), "tokens": tokens, "token_range": [first, stop], "labels": labels}
    if options.drawing == "lines":
        return lines_of_heads(result, options, {(layer, head): weights}, labels,
                              head_title(options, result.model_label, layer, head)), shown
    fig = HeadPlot()
    for axis in (fig.left_axis, fig.bottom_axis):
        axis.label_chars = options.label_chars or 0  # whole unless asked, the same on both axes
    set_figure_font((fig.left_axis, fig.bottom_axis), options.font_pt)
    lay_out_offscreen(fig, *layout_size(options, head_figure_size(len(tokens))))
    fig.set_head(weights, tokens, head_title(options, result.model_label, layer, head), cmap=options.cmap,
                 scale=options.scale, causal=result.causal)
    for axis in (fig.left_axis, fig.bottom_axis):
        axis.set_tokens(labels, with_index=False)
    if options.vmax is not None:
        levels = scale_top(options.vmax, options.scale)
        fig.image.setLevels(levels)
        fig.colorbar.setLevels(levels)
    label = figure_bar_label(options, fig.colorbar.axis.labelText)
    if label != fig.colorbar.axis.labelText:
        fig.colorbar.axis.setLabel(label)
    settle_layout()
    fig.update_label_density()
    fit_title(fig)  # the title and the colour bar's label inside the picture (the PNG keeps the width asked for)
    fig.update_label_density()
    settle_layout()
    return fig, shown


def lines_of_heads(result, options: FigureOptions, maps: dict, labels: list[str], title: str):
    """``maps`` ((layer, head) → the map shown, :func:`figure_map`) as lines between two columns of tokens
    (gui/plots/lines_plot.lines_figure, one colour a head), refused past its token limit."""
    from .lines_plot import LINES_MAX_TOKENS, lines_figure

    if len(labels) > LINES_MAX_TOKENS:
        raise InputError(f"Lines are drawn for at most {LINES_MAX_TOKENS} tokens and this figure shows "
                         f"{len(labels)}; use --drawing matrix, or --tokens to show fewer.")
    return lines_figure(labels, maps, list(maps), n_head=result.n_head, causal=result.causal, scale=options.scale,
                        title=title)


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
