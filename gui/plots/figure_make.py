"""A figure drawn from :class:`analysis.export.figure_options.FigureOptions` (``main.py figure``): one head with
HeadPlot or every head with GridPlot (gui/plots/figures.py), laid out at the figure's size in inches, and written with
the options beside it (heads/L0H0.png → heads/L0H0.json).

Size: the scene is laid out at 96 logical pixels an inch (Qt's), so a figure ``width_in`` wide is laid out
``width_in`` · 96 pixels wide and its text has its point size on paper; the PNG is drawn ``width_in`` · dpi pixels
wide (``FigureOptions.pixels``). Without a width the figure keeps the export's own size.
"""
from __future__ import annotations

from pathlib import Path

from analysis.display import head_name
from analysis.export.figure_options import FigureOptions, model_name, sidecar

from ..export.figure_files import save_figure, settle_layout
from .figure_parts import (  # noqa: F401  (LAYOUT_DPI, layout_size, shown_labels: read here by grid_figure and tests)
    LAYOUT_DPI, SPACE_MARK, VALUE_TITLE, figure_bar_label, figure_map, layout_size, lines_of_heads, scale_top, shown_labels,
    shown_range)
from .figure_text import set_figure_font
from .figures import HeadPlot, dispose_figure, fit_title, head_figure_size, lay_out_offscreen


def head_title(options: FigureOptions, label: str, layer: int, head: int) -> str:
    """``options.title``, else the model's name and the head ("bundled — L0H1"), with ", value-weighted" when the
    figure is (``options.weighting``)."""
    if options.title is not None:
        return options.title
    weighted = f", {VALUE_TITLE}" if options.weighting == "value" else ""
    return f"{model_name(label)} — {head_name(layer, head)}{weighted}"


def head_figure(result, options: FigureOptions, key_norms=None, reuse=None):
    """The head ``options.heads[0]`` of ``result`` over ``options.tokens`` (:func:`figure_map`: cropped, renormalised
    if asked), coloured up to ``options.vmax`` if given, as a matrix (HeadPlot) or as lines (``drawing="lines"``,
    :func:`lines_of_heads`), titled with ``options.scores`` after its name ("… — L16H0 · previous_token 0.769"), and
    what it shows (its tokens, layer and head) for the options file. ``key_norms``: (L, H, n) ‖f_h(x_k)‖ of every head,
    for a value-weighted figure (``options.weighting``, figure_parts.figure_map). ``reuse``: a HeadPlot this drew
    before of the same result with the same options but the head (:class:`FigureCache`), drawn into again rather
    than made and laid out anew: the same bytes, in about half the time."""
    (layer, head), = options.heads
    first, stop = shown_range(result, options)
    weights = figure_map(result, layer, head, options, key_norms)
    tokens = list(result.tokens[first:stop])
    labels = shown_labels(tokens, first, options.labels)
    shown = {"head": head_name(layer, head), "tokens": tokens, "token_range": [first, stop], "labels": labels}
    title = head_title(options, result.model_label, layer, head)
    if options.scores:  # the scores asked for after the title, as panels write them under theirs
        from .panel_figure import panel_scores

        title = " · ".join([title, *panel_scores(result, [(layer, head)], options.scores)[(layer, head)]])
    if options.drawing == "lines":
        return lines_of_heads(result, options, {(layer, head): weights}, labels, title), shown
    size = layout_size(options, head_figure_size(len(tokens)))
    if reuse is not None:
        fig = reuse
        fig.plot.titleLabel.plain_title = None  # fit_title wraps this head's title, not the last one's
    else:
        fig = HeadPlot()
        for axis in (fig.left_axis, fig.bottom_axis):
            axis.label_chars = options.label_chars or 0  # whole unless asked, the same on both axes
        set_figure_font(fig, options.font_pt)  # every text of the figure at its font size
        lay_out_offscreen(fig, *size)
    fig.set_head(weights, tokens, title, cmap=options.cmap,
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


def make_figure(result, options: FigureOptions, key_norms=None):
    """The laid-out offscreen figure ``options`` ask for and what it shows (for the options file): the grid (no heads;
    gui/plots/grid_figure.py), one head (here) or several side by side (gui/plots/panel_figure.py). ``key_norms``:
    (L, H, n) ‖f_h(x_k)‖ of every head, needed by a value-weighted figure (``options.weighting`` "value")."""
    if not options.heads:
        from .grid_figure import grid_figure

        return grid_figure(result, options, key_norms=key_norms)
    if len(options.heads) > 1:
        from .panel_figure import panel_figure

        return panel_figure(result, options, key_norms)
    return head_figure(result, options, key_norms)


class FigureCache:
    """The last head figure drawn (a HeadPlot) and what it was drawn with, for the next head of an export: drawn into
    again when that head's result and options are the same but the head (the heads of a "heads" export), else made
    anew. ``close()`` disposes of it.

    The same bytes as a new figure each (checked on every head of SmolLM2 at 65 tokens, natural width; 90 heads at
    1600 px log scale and at 600 px value-weighted with the first key hidden; the bundled model's 16 at 990 px;
    tests/gui/test_export_redraw.py): the kept figure's widget is not repainted after its first head (its layout is
    what :func:`head_figure` computes; the file is rendered from the scene), which makes the next heads about 2.4 ×
    faster (SmolLM2's 270: 40.9 s new each, 16.9 s kept)."""

    def __init__(self):
        self.fig = None
        self.key = None  # (id of the result, its options without the head) the figure was drawn with

    def make(self, result, options: FigureOptions, key_norms=None):
        """:func:`make_figure`'s figure and what it shows; a head's figure the cache keeps (not the caller's to
        dispose of), any other the caller's."""
        if len(options.heads) != 1 or options.drawing != "matrix":
            return make_figure(result, options, key_norms)
        key = (id(result), options.with_(heads=()))
        if key != self.key:
            self.close()
        fig, shown = head_figure(result, options, key_norms, reuse=self.fig)
        if self.fig is None:  # laid out once as a new figure is; no longer painted on screen after that (the file
            fig.setUpdatesEnabled(False)  # is drawn from the scene): a head's layout then costs ~40% of a repainted one
        self.fig, self.key = fig, key
        return fig, shown

    def keeps(self, fig) -> bool:
        return fig is not None and fig is self.fig

    def close(self) -> None:
        if self.fig is not None:
            dispose_figure(self.fig)
        self.fig = self.key = None


def write_figure(result, options: FigureOptions, path: Path, key_norms=None,
                 cache: FigureCache | None = None) -> list[Path]:
    """Draw the figure ``options`` ask for and write it to ``path`` (PNG, SVG or PDF by its extension) with its options
    file beside it (:func:`analysis.export.figure_options.sidecar`); both paths. ``key_norms``: as
    :func:`make_figure`'s; ``cache``: where a head's figure is kept for the next (:class:`FigureCache`)."""
    from ..qt import ensure_qapp

    ensure_qapp()
    path = Path(path)
    fig, shown = cache.make(result, options, key_norms) if cache is not None else make_figure(result, options,
                                                                                               key_norms)
    try:
        save_figure(fig, path, options.pixels)
    finally:
        if cache is None or not cache.keeps(fig):
            dispose_figure(fig)
    options = options.with_(fmt=path.suffix.lower().lstrip("."))
    side = sidecar(path)
    side.write_text(options.to_json(model_label=result.model_label, text=options.text, **shown), encoding="utf-8")
    return [path, side]
