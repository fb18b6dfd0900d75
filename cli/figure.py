"""``attnscope figure``: one head (or the grid of every head) as a figure a paper can use, drawn from options
(analysis/export/figure_options.py) that are written beside it as JSON; ``--from THAT.json`` draws it again."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from .inputs import load_model_of


def cmd_figure(args) -> int:
    from analysis.errors import InputError
    from analysis.export.figure_options import FigureOptions, parse_index_list, parse_token_range
    from analysis.export.formats import IMAGE_FORMATS
    from analysis.export.layout import check_heads, parse_export_heads

    fmt = args.out.suffix.lower().lstrip(".")
    if not args.out.parent.is_dir():
        raise InputError(f"The folder {args.out.parent} does not exist; create it or choose another --out.")
    if fmt not in IMAGE_FORMATS:
        raise InputError(f"--out must end in .{', .'.join(IMAGE_FORMATS)}, not '{args.out.name}'.")
    if args.from_file is not None:
        options = FigureOptions.read(args.from_file)
    else:
        if not args.text or not args.text.strip():
            raise InputError("The text is empty: give --text (or --from an options file).")
        heads = parse_export_heads(args.head) if args.head else ()
        options = FigureOptions(
            model=args.model, text=args.text, bos=args.bos, heads=tuple(heads),
            tokens=parse_token_range(args.tokens) if args.tokens else None, title=args.title,
            width_px=args.width_px, width_in=args.width_in, dpi=args.dpi, font_pt=args.font_pt, labels=args.labels,
            label_chars=args.label_chars, cmap=args.cmap, scale=args.scale, bar_label=args.bar_label, fmt=fmt,
            renormalise=args.renormalise, drawing=args.drawing, columns=args.columns,
            shared_scale=not args.own_scales, scores=tuple(s for s in (args.scores or "").split(",") if s.strip()),
            layers=parse_index_list(args.layers, "layers") if args.layers else None,
            grid_heads=parse_index_list(args.grid_heads, "heads") if args.grid_heads else None,
            aspect=args.aspect, badges=args.badges, vmax=args.vmax, hide_first=args.hide_first,
            weighting="value" if args.value_weighted else "attention")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from analysis.measures.measured import run_measured
    from gui.plots.grid_figure import check_badges

    check_badges(options.badges)  # before the model loads

    loaded = load_model_of(argparse.Namespace(model=options.model, device="cpu", dtype=None, allow_pickle=False,
                                              device_map=None, max_memory=None))
    check_heads(list(options.heads), loaded.n_layer, loaded.n_head)
    _check_grid_choice(options.layers, loaded.n_layer, "layer")
    _check_grid_choice(options.grid_heads, loaded.n_head, "head")
    result = run_measured(loaded, options.text, bos=options.bos)
    key_norms = None
    if options.weighting == "value":  # ‖f_h(x_k)‖ with the model, as the app's value lens
        from analysis.export.figure_options import figure_key_norms

        key_norms = figure_key_norms(loaded, result)
    from gui.plots.figure_make import write_figure

    image, side = write_figure(result, options, Path(args.out), key_norms)  # every text at options.font_pt (FigureFont)
    print(f"wrote {image} and {side}")
    return 0


def _check_grid_choice(chosen, count: int, what: str) -> None:
    """Each of the ``chosen`` layers (heads) exists: 0 … ``count`` − 1."""
    from analysis.errors import InputError

    wrong = [i for i in chosen or () if i >= count]
    if wrong:
        raise InputError(f"The model has {count} {what}s (0–{count - 1}); there is no {what} {wrong[0]}.")


def add_figure_parser(sub, add_model_options, add_bos) -> None:
    from analysis.export.figure_options import DRAWINGS, LABEL_STYLES, SCALES

    p = sub.add_parser("figure", help="one head (or every head) as a figure for a paper, with its options as JSON "
                                      "beside it")
    add_model_options(p, main_parser=False)
    p.add_argument("--text", help="the text to run")
    p.add_argument("--from", dest="from_file", type=Path, metavar="JSON",
                   help="draw again the figure whose options file (written beside every figure) is JSON")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the figure: .png, .svg or .pdf")
    p.add_argument("--head", metavar="L1H0[,L2H3…]",
                   help="the head (L1H0 or 1.0), or several heads side by side on one colour scale; without it, the "
                        "grid of every head")
    p.add_argument("--tokens", metavar="FIRST:STOP", help="only the queries and keys FIRST … STOP-1 (a head)")
    p.add_argument("--renormalise", action="store_true",
                   help="with --tokens: each row divided by its sum over the keys shown")
    p.add_argument("--drawing", choices=DRAWINGS, default="matrix",
                   help="a head as its matrix (default) or as lines between two columns of tokens (short texts)")
    p.add_argument("--columns", type=int, metavar="N", help="several heads: N panels a row (default near square)")
    p.add_argument("--own-scales", action="store_true",
                   help="several heads: each panel on its own colour scale (default: one scale for all)")
    p.add_argument("--scores", metavar="NAME[,NAME…]",
                   help="several heads: these head scores under each panel's title (e.g. previous_token,sink)")
    p.add_argument("--layers", metavar="0,2,5-7", help="the grid: only these layers")
    p.add_argument("--grid-heads", metavar="0-3", help="the grid: only these heads of each layer")
    p.add_argument("--aspect", type=float, metavar="W/H",
                   help="the grid: its width / height (default as near square as its shape allows)")
    p.add_argument("--badges", metavar="SCORE", help="the grid: mark the standout heads of this score, with a legend")
    p.add_argument("--hide-first", action="store_true",
                   help="hide the first token as a key and renormalise each row over the rest (as the app's Hide first "
                        "token)")
    p.add_argument("--value-weighted", action="store_true",
                   help="draw value-weighted maps, A[q, k]·‖f_h(x_k)‖ with each row summing to 1 (as the app's "
                        "value-weighted view; the norms computed with the model)")
    p.add_argument("--vmax", type=float, metavar="V", help="the colour scale's top (default: the data's maximum)")
    p.add_argument("--title", help="the title (default: the model's name and the head)")
    width = p.add_mutually_exclusive_group()
    width.add_argument("--width-in", type=float, metavar="IN", help="the width in inches (at --dpi)")
    width.add_argument("--width-px", type=int, metavar="PX", help="the PNG's width in pixels")
    p.add_argument("--dpi", type=int, default=300, help="pixels an inch of a PNG with --width-in (default 300)")
    p.add_argument("--font-pt", type=float, metavar="PT", help="the figure's text size in points: every label (the title 11/8.5 times it; default 8.5)")
    p.add_argument("--labels", choices=LABEL_STYLES, default="marked",
                   help="marked: '␣' for a leading space and [index] (default); plain: the tokens as written")
    p.add_argument("--label-chars", type=int, metavar="N", help="shorten labels to N characters, on both axes")
    p.add_argument("--cmap", default="viridis", help="the colormap (default viridis)")
    p.add_argument("--scale", choices=SCALES, default="linear", help="the colour scale")
    p.add_argument("--bar-label", metavar="TEXT", help="the colour bar's label (default: the scale's)")
    add_bos(p)
