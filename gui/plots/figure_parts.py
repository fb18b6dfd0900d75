"""The pieces a figure of ``main.py figure`` is made of, shared by one head (figure_make.head_figure) and several
side by side (panel_figure.py): the tokens and map shown (cropped, renormalised), the colour scale's top and label,
the labels' font and style, the size at LAYOUT_DPI, and lines between two columns of tokens."""
from __future__ import annotations


import numpy as np

from analysis.display import apply_scale
from analysis.errors import InputError
from analysis.export.figure_options import FigureOptions

from .figure_text import FigureFont

LAYOUT_DPI = 96  # logical pixels an inch of the offscreen scene (Qt's)
SPACE_MARK = "␣"


def shown_labels(tokens, first: int, style: str) -> list[str]:
    """The axis labels of ``tokens`` (the display tokens from position ``first``): "marked" keeps "␣" for a leading
    space and adds " [index]"; "plain" is the token as written, without the marker or the index."""
    if style == "plain":
        return [t.replace(SPACE_MARK, " ").strip() or t for t in tokens]
    return [f"{t} [{first + i}]" for i, t in enumerate(tokens)]


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


def figure_map(result, layer: int, head: int, options: FigureOptions, key_norms=None) -> np.ndarray:
    """The map a figure draws of head (``layer``, ``head``): its rows and columns first … stop-1
    (:func:`shown_range`), as the model gave them, or with ``options.renormalise`` each row divided by its sum over
    the keys shown, w'[q, k] = w[q, k] / Σ_k' w[q, k'] (k, k' in the range; a row summing to 0 is NaN, drawn as
    background like the causal mask). Before the crop: with ``options.weighting`` "value" the value-weighted map
    (:func:`value_weighted_map`, ``key_norms`` (L, H, n) ‖f_h(x_k)‖ of every head, :func:`check_key_norms`), then
    with ``options.hide_first`` key 0 hidden and each row renormalised over the rest
    (analysis.display.without_first_key). float32 (rows, keys)."""
    first, stop = shown_range(result, options)
    weights = np.asarray(result.head_map(layer, head), dtype=np.float32)
    if options.weighting == "value":
        weights = value_weighted_map(weights, check_key_norms(options, key_norms, result)[layer, head])
    if options.hide_first:  # key 0 NaN, each row over keys 1 …: before the crop, as the GUI hides the first token
        from analysis.display import without_first_key

        weights = without_first_key(weights)
    weights = weights[first:stop, first:stop]
    if not options.renormalise:
        return weights
    sums = np.nansum(weights, axis=1, keepdims=True, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(sums > 0, weights / np.where(sums > 0, sums, 1.0), np.nan)
    return out.astype(np.float32)


VALUE_QUANTITY = "share of row N"  # what a value-weighted map's colour bar names, in figures and the app's grid
VALUE_TITLE = "value-weighted"  # what its title adds (a figure's default title, the app's grid panel)


def value_weighted_map(weights: np.ndarray, key_norms: np.ndarray) -> np.ndarray:
    """(n, n) float32: w'[q, k] = A[q, k] · ‖f_h(x_k)‖ / Σ_k' A[q, k'] · ‖f_h(x_k')‖ of one head's weights A (n, n)
    and its key norms ‖f_h(x_k)‖ (n,) (lenses.weighted_by_norms, then lenses.row_normalise in float64: a row summing
    to 0 stays 0)."""
    from analysis.measures.lenses import row_normalise, weighted_by_norms

    return row_normalise(weighted_by_norms(weights, key_norms))


def check_key_norms(options: FigureOptions, key_norms, result) -> np.ndarray:
    """``key_norms`` as a (L, H, n) float array when ``options`` weight by value; refused in one sentence when they
    are missing or are not of ``result``'s shape."""
    if key_norms is None:
        raise InputError("A value-weighted figure needs the heads' value norms: draw it with main.py figure "
                         "--value-weighted, which computes them with the model.")
    norms = np.asarray(key_norms)
    if norms.shape != (result.n_layer, result.n_head, result.n_tokens):
        raise InputError(f"The value norms are of shape {norms.shape}, not this text's "
                         f"{(result.n_layer, result.n_head, result.n_tokens)}; compute them for this run.")
    return norms


def weighting_label(label: str, options: FigureOptions) -> str:
    """A colour bar's label (``label``: the scale's, "√weight") naming what a value-weighted figure draws
    (:data:`VALUE_QUANTITY` for "weight": "√share of row N"); unchanged for the attention weights."""
    if options.weighting != "value" or VALUE_QUANTITY in label:
        return label
    return label.replace("weight", VALUE_QUANTITY)


def figure_bar_label(options: FigureOptions, scale_label: str) -> str:
    """The colour bar's label: ``options.bar_label``, else the scale's own (``scale_label``: "weight", "√weight"),
    with "(first key hidden)" when ``options.hide_first`` and "(renormalised)" when each row was divided by its sum
    over the keys shown (short: a bar beside a small map has little room); "share of row N" for "weight" when the
    figure is value-weighted (:func:`weighting_label`)."""
    if options.bar_label is not None:
        return options.bar_label
    scale_label = weighting_label(scale_label, options)
    if options.hide_first and "first key hidden" not in scale_label:
        scale_label += " (first key hidden)"
    return f"{scale_label} (renormalised)" if options.renormalise else scale_label


def scale_top(vmax: float, scale: str) -> tuple[float, float]:
    """The colour scale's (low, high) levels with ``vmax`` at its top, on ``scale`` as analysis.display.apply_scale
    draws it (linear vmax, power vmax^γ, log log₁₀ vmax)."""
    return apply_scale(np.array([vmax], np.float32), scale)[1]


def lines_of_heads(result, options: FigureOptions, maps: dict, labels: list[str], title: str):
    """``maps`` ((layer, head) → the map shown, :func:`figure_map`) as lines between two columns of tokens
    (gui/plots/lines_plot.lines_figure), refused past its token limit. One colour a head: by head index as the Lines
    view colours a layer's heads, or by place in the figure where two heads of different layers share an index
    (L16H0 and L22H0)."""
    from .lines_plot import LINES_MAX_TOKENS, head_colour, lines_figure

    if len(labels) > LINES_MAX_TOKENS:
        raise InputError(f"Lines are drawn for at most {LINES_MAX_TOKENS} tokens and this figure shows "
                         f"{len(labels)}; use --drawing matrix, or --tokens to show fewer.")
    heads = list(maps)
    width = None if options.pixels is None else layout_size(options, (1, 1))[0]
    colours = None
    if len({h for _, h in heads}) < len(heads):
        colours = [head_colour(i, len(heads)) for i in range(len(heads))]
    return lines_figure(labels, maps, heads, n_head=result.n_head, causal=result.causal, scale=options.scale,
                        title=title, width=width, fonts=FigureFont.of(options.font_pt), colours=colours)
