"""``attnscope export``: run a text and write its attention, scores, parity and figures into one folder."""
from __future__ import annotations

import os
import time
from pathlib import Path

from .inputs import check_apart, load_model_of, read_text_file
from .output import counted, warn
from .signals import Signals, stopped


def cmd_export(args) -> int:
    return stopped(args, lambda signals: _export(args, signals))


def _export(args, signals: Signals) -> int:
    from analysis.errors import InputError
    from analysis.export.contents import export_contents, write_export
    from analysis.export.folders import check_export_target
    from analysis.export.layout import (check_free_disk, check_heads, layout_of, max_export_bytes,
                                        parse_export_heads, plan_export)

    check_apart(args)
    warnings: list[str] = []
    if args.text_file is not None:
        text, warnings = read_text_file(args.text_file)
    else:
        text = args.text
    if not text or not text.strip():
        raise InputError("The text is empty: give --text or a non-empty --text-file.")
    check_export_target(args.out)  # fail before the slow part (creates nothing)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # figures need no display, and must not wait for one
    from analysis.measures.head_scores import all_scores
    from analysis.measures.measured import run_measured
    from analysis.run.tokenize import check_text

    check_text(text)
    started = time.perf_counter()
    loaded = load_model_of(args)
    budget = max_export_bytes(args.max_export_mb)
    heads = check_heads(parse_export_heads(args.heads), loaded.n_layer, loaded.n_head)  # before the slow run

    def sized(n_tokens: int) -> None:  # an --all-maps export that cannot fit is refused before the forward
        check_free_disk(plan_export(loaded.n_layer, loaded.n_head, n_tokens, budget, heads, args.all_maps), args.out)

    loaded_at = time.perf_counter()
    result = run_measured(loaded, text, bos=args.bos, max_tokens=args.max_tokens, chat=args.chat, on_sized=sized)
    for warning in (*warnings, *result.warnings):
        warn(warning)
    layout = layout_of(result, budget, heads, args.all_maps)
    if layout.warning():
        warn(layout.warning())
    scores = all_scores(result)
    scored_at = time.perf_counter()
    contents = export_contents(loaded, result, scores, parity_dtype=args.parity_dtype, sink_epsilon=args.sink_epsilon,
                               tl_options={"error_measure": args.tl_measure, "exclude_bos": args.tl_exclude_bos,
                                           "exclude_current_token": args.tl_exclude_current_token}, layout=layout,
                               rollout_skip_first=args.rollout_skip_first)
    parity = contents.parity
    timings = {"load_s": loaded_at - started, "scores_s": scored_at - loaded_at - result.timings["total_s"],
               **contents.timings}
    signals.deferred = True  # from here on a signal waits for the next safe point
    image_heads = () if args.no_head_images else layout.image_heads()
    written = write_export(args.out, contents, _image_writer(result, args.format, image_heads, signals.check),
                           timings=timings, check=signals.check)
    print(f"wrote {len(written)} files to {args.out} ({counted(result.n_tokens, 'token')}, "
          f"{result.n_layer}×{result.n_head} heads, "
          f"parity max |Δw| {parity.max_abs_diff_weights:.2e} {'passed' if parity.passed else 'FAILED'}: "
          f"its bound {parity.weight_tolerance:.1e}, worst |Δw|/bound {parity.max_bound_ratio:.2g}"
          f"{'' if parity.rows.complete else f', on {parity.rows.rows.size} of {result.n_tokens:,} query rows'})")
    for warning in written.warnings:
        warn(warning)
    return 0


def _image_writer(result, fmt: str, heads, check):
    """Draws the figures: the grid and the images of ``heads`` ((layer, head) pairs); the figure code calls
    ``check`` between figures."""
    from gui.plots.result_images import write_result_images

    def write(folder: Path):
        return write_result_images(result, folder, fmt, heads=heads, check=check)

    return write
