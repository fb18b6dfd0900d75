"""``attnscope figure``: one head (or the grid of every head) as a figure a paper can use, drawn from options
(analysis/export/figure_options.py) that are written beside it as JSON; ``--from THAT.json`` draws it again."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from .inputs import load_model_of


def cmd_figure(args) -> int:
    from analysis.errors import InputError
    from analysis.export.figure_options import FigureOptions, parse_token_range
    from analysis.export.formats import IMAGE_FORMATS
    from analysis.export.layout import check_heads, parse_export_heads

    fmt = args.out.suffix.lower().lstrip(".")
    if fmt not in IMAGE_FORMATS:
        raise InputError(f"--out must end in .{', .'.join(IMAGE_FORMATS)}, not '{args.out.name}'.")
    if args.from_file is not None:
        options = FigureOptions.read(args.from_file)
    else:
        if not args.text or not args.text.strip():
            raise InputError("The text is empty: give --text (or --from an options file).")
        heads = parse_export_heads(args.head) if args.head else ()
        if len(heads) > 1:
            raise InputError("--head takes one head (L1H0); a figure of several heads is not made yet.")
        options = FigureOptions(
            model=args.model, text=args.text, bos=args.bos, heads=tuple(heads),
            tokens=parse_token_range(args.tokens) if args.tokens else None, title=args.title,
            width_px=args.width_px, width_in=args.width_in, dpi=args.dpi, font_pt=args.font_pt, labels=args.labels,
            label_chars=args.label_chars, cmap=args.cmap, scale=args.scale, bar_label=args.bar_label, fmt=fmt)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from analysis.measures.measured import run_measured

    loaded = load_model_of(argparse.Namespace(model=options.model, device="cpu", dtype=None, allow_pickle=False,
                                              device_map=None, max_memory=None))
    check_heads(list(options.heads), loaded.n_layer, loaded.n_head)
    result = run_measured(loaded, options.text, bos=options.bos)
    _set_font(options.font_pt)
    from gui.plots.figure_make import write_figure

    image, side = write_figure(result, options, Path(args.out))
    print(f"wrote {image} and {side}")
    return 0


def _set_font(font_pt: float | None) -> None:
    """The figure's text at ``font_pt`` points (the labels, the colour bar): the application's font, which the
    figures' axes take."""
    if font_pt is None:
        return
    from gui.qt import ensure_qapp

    app = ensure_qapp()
    font = app.font()
    font.setPointSizeF(float(font_pt))
    app.setFont(font)


def add_figure_parser(sub, add_model_options, add_bos) -> None:
    from analysis.export.figure_options import LABEL_STYLES, SCALES

    p = sub.add_parser("figure", help="one head (or every head) as a figure for a paper, with its options as JSON "
                                      "beside it")
    add_model_options(p, main_parser=False)
    p.add_argument("--text", help="the text to run")
    p.add_argument("--from", dest="from_file", type=Path, metavar="JSON",
                   help="draw again the figure whose options file (written beside every figure) is JSON")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the figure: .png, .svg or .pdf")
    p.add_argument("--head", metavar="L1H0", help="the head (L1H0 or 1.0); without it, the grid of every head")
    p.add_argument("--tokens", metavar="FIRST:STOP", help="only the queries and keys FIRST … STOP-1 (a head)")
    p.add_argument("--title", help="the title (default: the model's name and the head)")
    width = p.add_mutually_exclusive_group()
    width.add_argument("--width-in", type=float, metavar="IN", help="the width in inches (at --dpi)")
    width.add_argument("--width-px", type=int, metavar="PX", help="the PNG's width in pixels")
    p.add_argument("--dpi", type=int, default=300, help="pixels an inch of a PNG with --width-in (default 300)")
    p.add_argument("--font-pt", type=float, metavar="PT", help="the labels' font size in points")
    p.add_argument("--labels", choices=LABEL_STYLES, default="marked",
                   help="marked: '␣' for a leading space and [index] (default); plain: the tokens as written")
    p.add_argument("--label-chars", type=int, metavar="N", help="shorten labels to N characters, on both axes")
    p.add_argument("--cmap", default="viridis", help="the colormap (default viridis)")
    p.add_argument("--scale", choices=SCALES, default="linear", help="the colour scale")
    p.add_argument("--bar-label", metavar="TEXT", help="the colour bar's label (default: the scale's)")
    add_bos(p)
