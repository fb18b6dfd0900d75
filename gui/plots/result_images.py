"""The figures of an export (``main.py export``): the grid and each head, drawn by the routines of ``main.py figure``
(gui/plots/grid_figure.py ``grid_figure``, gui/plots/figure_make.py ``head_figure``) from the
:class:`~analysis.export.figure_options.FigureOptions` written beside each (heads/L0H0.png → heads/L0H0.json), so
that ``main.py figure --from heads/L0H0.json --out x.png`` draws the export's PNG again byte for byte."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from analysis.export.contents import figure_files

from .figure_make import write_figure


def write_result_images(result, folder: Path, fmt: str = "png", cmap: str = "viridis", scale: str = "linear",
                        heads=True, hide_first: bool = False, check: Callable[[], None] | None = None,
                        png_width: int | None = None) -> list[Path]:
    """The figures of an export into ``folder``, named by ``contents.figure_files``: the grid and, if asked,
    every head (``heads`` True) or the (layer, head) pairs ``heads`` lists (``grid.<fmt>``,
    ``heads/L{layer}H{head}.<fmt>``; ``ExportLayout.image_heads``: the heads asked for, above the budget). A head's
    map is ``result.head_map`` (computed then, on demand); the grid is the pooled thumbnails.

    ``check()`` is called before each figure is drawn (a caller raises from it to stop between
    figures, never inside a paint); ``png_width`` sets the width of every PNG."""
    check = check or (lambda: None)
    folder = Path(folder)
    chosen = None if heads is True else list(heads or ())
    (grid_name, _, _), *head_files = figure_files(result.n_layer, result.n_head, fmt, heads=chosen)
    written = []
    check()
    written += write_figure(result, export_options(result, (), cmap, scale, png_width, hide_first), folder / grid_name)
    if head_files:
        for subfolder in dict.fromkeys((folder / name).parent for name, _, _ in head_files):
            subfolder.mkdir(exist_ok=True)
        for name, layer, head in head_files:
            check()
            options = export_options(result, ((layer, head),), cmap, scale, png_width, hide_first)
            written += write_figure(result, options, folder / name)  # main.py figure's, options JSON beside it
    return written


def export_options(result, heads, cmap: str, scale: str, png_width: int | None, hide_first: bool = False):
    """The :class:`FigureOptions` of an export's figure: the model, the text, the head (none: the grid), how it is
    drawn; drawn and written beside it by ``main.py figure``'s own routine (figure_make.write_figure)."""
    from analysis.export.figure_options import FigureOptions

    return FigureOptions(model=result.model_label, text=getattr(result, "text", ""), bos=getattr(result, "bos", None),
                         heads=tuple(heads), width_px=png_width, cmap=cmap, scale=scale, fmt="png",
                        hide_first=bool(hide_first))
