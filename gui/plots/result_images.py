"""The figures of an export (``main.py export``): the grid and each head, drawn by the routines of ``main.py figure``
(gui/plots/grid_figure.py ``grid_figure``, gui/plots/figure_make.py ``head_figure``) from the
:class:`~analysis.export.figure_options.FigureOptions` written beside each (heads/L0H0.png → heads/L0H0.json), so
that ``main.py figure --from heads/L0H0.json --out x.png`` draws the export's PNG again byte for byte."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


from analysis.display import head_name
from analysis.export.contents import figure_files

from ..export.figure_files import save_figure
from .figure_make import head_figure
from .figures import dispose_figure
from .grid_figure import grid_figure


def write_result_images(result, folder: Path, fmt: str = "png", cmap: str = "viridis", scale: str = "linear",
                        heads=True, hide_first: bool = False, check: Callable[[], None] | None = None,
                        png_width: int | None = None) -> list[Path]:
    """The figures of an export into ``folder``, named by ``contents.figure_files``: the grid and, if asked,
    every head (``heads`` True) or the (layer, head) pairs ``heads`` lists (``grid.<fmt>``,
    ``heads/L{layer}H{head}.<fmt>``; ``ExportLayout.image_heads``: the heads asked for, above the budget). A head's
    map is ``result.head_map`` (computed then, on demand); the grid is the pooled thumbnails.

    ``check()`` is called before each figure is drawn (a caller raises from it to stop between
    figures, never inside a paint); ``png_width`` sets the width of every PNG."""
    from ..qt import ensure_qapp

    ensure_qapp()
    check = check or (lambda: None)
    folder = Path(folder)
    chosen = None if heads is True else list(heads or ())
    (grid_name, _, _), *head_files = figure_files(result.n_layer, result.n_head, fmt, heads=chosen)
    written = []
    check()
    grid, shown = grid_figure(result, export_options(result, (), cmap, scale, png_width, hide_first))
    try:
        written.append(save_figure(grid, folder / grid_name, png_width))
        written.append(write_options(result, folder / grid_name, (), cmap, scale, png_width, shown, hide_first))
    finally:
        dispose_figure(grid)
    if head_files:
        for subfolder in dict.fromkeys((folder / name).parent for name, _, _ in head_files):
            subfolder.mkdir(exist_ok=True)
        for name, layer, head in head_files:
            check()
            options = export_options(result, ((layer, head),), cmap, scale, png_width, hide_first)
            # the figure of main.py figure --from heads/L0H0.json (figure_make.head_figure)
            fig, shown = head_figure(result, options)
            try:
                written.append(save_figure(fig, folder / name, png_width))
                written.append(write_options(result, folder / name, ((layer, head),), cmap, scale, png_width, shown,
                                             hide_first))
            finally:
                dispose_figure(fig)
    return written


def export_options(result, heads, cmap: str, scale: str, png_width: int | None, hide_first: bool = False):
    """The :class:`FigureOptions` of an export's figure: the model, the text, the head (none: the grid), how it is
    drawn; written beside it (:func:`write_options`) and drawn by the same routine as ``main.py figure``."""
    from analysis.export.figure_options import FigureOptions

    return FigureOptions(model=result.model_label, text=getattr(result, "text", ""), bos=getattr(result, "bos", None),
                         heads=tuple(heads), width_px=png_width, cmap=cmap, scale=scale, fmt="png",
                        hide_first=bool(hide_first))


def write_options(result, path: Path, heads, cmap: str, scale: str, png_width: int | None,
                  shown: dict | None = None, hide_first: bool = False) -> Path:
    """The options file beside an export's figure (heads/L0H0.png → heads/L0H0.json, :func:`sidecar`): the model,
    the text, the head and how it was drawn, which ``main.py figure --from`` takes; ``shown``: what the figure shows
    (figure_make's, as ``main.py figure`` writes it)."""
    from analysis.export.figure_options import sidecar

    options = export_options(result, heads, cmap, scale, png_width, hide_first).with_(fmt=Path(path).suffix.lower().lstrip("."))
    shown = dict(shown or {"tokens": list(result.tokens), "head": head_name(*heads[0]) if heads else None})
    side = sidecar(path)
    side.write_text(options.to_json(model_label=result.model_label, text=getattr(result, "text", ""), **shown),
                    encoding="utf-8")
    return side
