"""``attnscope bench``: every model's rows of the table (each figure measured, the row printed as it is
done), the scan's ratio, and the JSON of every figure."""
from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

from .memory import peak_rss_above_model
from .paint import gui_stall_ms, paint_times
from .peers import peer_times
from .real import REAL_NS, bench_real
from .scan import bench_scan
from .workload import median_time, model_folder, text_of_length


def bench_model(name: str, folder: Path, ns: list[int], repeats: int, peers: bool, memory: bool,
                stall: bool) -> list[dict]:
    import torch

    from analysis.measures.head_scores import all_scores
    from analysis.measures.parity import parity_report
    from analysis.measures.measured import run_measured as run_text, tl_scores_of_result
    from analysis.measures.tl_patterns import ERROR_MEASURES
    from analysis.model.loading import load_model

    loaded = load_model(str(folder), device="cpu")
    params = [loaded.attention_weights(layer) for layer in range(loaded.n_layer)]
    run_text(loaded, "warm up", bos=False)
    skipped = [n for n in ns if n > loaded.context_length]
    if skipped:
        print(f"{name}: skipping n = {', '.join(map(str, skipped))} (its context holds {loaded.context_length} tokens)",
              file=sys.stderr, flush=True)
    ns = [n for n in ns if n <= loaded.context_length]
    busy: dict = {}
    stalls = gui_stall_ms(folder, ns, busy=busy) if stall else {}
    rows = []
    for n in ns:
        text = text_of_length(loaded.tokenizer, n)
        ids = torch.tensor([loaded.tokenizer(text, add_special_tokens=False)["input_ids"]])
        reps = repeats if n <= 512 or loaded.n_layer <= 12 else max(1, repeats // 3)

        def floor():
            with torch.inference_mode():
                out = loaded.model(ids, output_attentions=True, use_cache=False)
            assert len(out.attentions) == loaded.n_layer, "no attention weights: not eager?"

        floor()
        forward_s = median_time(floor, reps)
        result = run_text(loaded, text, bos=False)
        run_s = median_time(lambda: run_text(loaded, text, bos=False), reps)
        scores_s = median_time(lambda r=result: all_scores(r), reps)
        tl_scores_s = median_time(lambda r=result: [tl_scores_of_result(r, error_measure=m)
                                                    for m in ERROR_MEASURES], reps)
        grid_s, detail_s = paint_times(result, reps)
        recompute_s = median_time(lambda r=result: parity_report(r, params), max(1, reps // 2))
        row = {"model": name, "n": int(ids.shape[1]), "forward_s": forward_s, "run_s": run_s,
               "run_ratio": run_s / forward_s, "scores_s": scores_s, "tl_scores_s": tl_scores_s, "grid_paint_s": grid_s,
               "detail_paint_s": detail_s, "recompute_s": recompute_s, "recompute_ratio": recompute_s / forward_s,
               "peak_rss_above_model_mb": peak_rss_above_model(folder, n) if memory else None,
               "gui_stall_ms": stalls.get(n), "gui_work_ms": busy.get(n), "bertviz_s": None, "circuitsvis_s": None}
        figure_s = run_s + grid_s  # text → a viewable all-heads figure
        row["attnscope_figure_s"] = figure_s
        if peers and n <= 512:
            row.update(peer_times(result))
            for peer in ("bertviz", "circuitsvis"):
                if row.get(f"{peer}_s"):
                    # the peers need the same forward first: compare text → figure with text → figure
                    row[f"{peer}_ratio"] = figure_s / (forward_s + row[f"{peer}_s"])
                    row[f"{peer}_speedup"] = (forward_s + row[f"{peer}_s"]) / figure_s
        rows.append(row)
        print_row(row)
        del result
        gc.collect()
    return rows


COLUMNS = [("model", "{:>8}"), ("n", "{:>5}"), ("forward_s", "{:>9.3f}"), ("run_s", "{:>7.3f}"),
           ("run_ratio", "{:>6.2f}"), ("scores_s", "{:>8.3f}"), ("tl_scores_s", "{:>8.3f}"), ("grid_paint_s", "{:>8.3f}"),
           ("detail_paint_s", "{:>8.3f}"), ("recompute_s", "{:>9.3f}"), ("recompute_ratio", "{:>6.2f}"),
           ("peak_rss_above_model_mb", "{:>8.0f}"), ("gui_stall_ms", "{:>7.1f}"), ("gui_work_ms", "{:>6.1f}"), ("bertviz_s", "{:>8.2f}"),
           ("bertviz_speedup", "{:>6.0f}x"), ("circuitsvis_s", "{:>8.2f}"), ("circuitsvis_speedup", "{:>6.0f}x")]
HEADERS = ["model", "n", "forward", "run", "b/a", "scores", "TL", "grid", "detail", "recomp", "f/a", "RSS MB",
           "stall", "work", "bertviz", "×", "cvis", "×"]


def print_header() -> None:
    widths = [len(f.format(0) if "s}" not in f else f.format("x")) for _, f in COLUMNS]
    print(" ".join(h.rjust(w) for h, w in zip(HEADERS, widths)), flush=True)


def print_row(row: dict) -> None:
    cells = []
    for key, f in COLUMNS:
        value = row.get(key)
        width = len(f.format(0) if "s}" not in f else f.format("x"))
        cells.append("—".rjust(width) if value is None else f.format(value))
    print(" ".join(cells), flush=True)


def bench_real_stall(ns: list[int]) -> dict[int, dict]:
    """The longest GUI-thread stall (:func:`~cli.bench.paint.gui_stall_ms`) of the real window while SmolLM2 runs
    a text of each n tokens and its result is painted, beside the floor (the same timer while only the bare forward
    runs) and the GUI thread's longest stretch of work (its CPU time); printed with the view slowest to receive it."""
    views: dict = {}
    busy: dict = {}
    floor: dict = {}
    print("\nGUI-thread stall, SmolLM2 in the real window (1400 × 900, a 10 ms timer), longest gap less 10 ms; the "
          "same timer while the bare forward runs in a thread (the floor); the GUI thread's longest stretch of work, "
          "its own CPU ms:", flush=True)
    stalls = gui_stall_ms("smollm2", ns, views=views, busy=busy, floor=floor)
    for n, ms in stalls.items():
        slowest = views.get(n)
        print(f"  n = {n:>5}: {ms:7.1f} ms   floor {floor.get(n, float('nan')):6.1f} ms   longest GUI work "
              f"{busy.get(n, float('nan')):5.1f} ms" + (f"   (slowest view to fill: {slowest[0]} {slowest[1]:.1f} ms)"
                                                        if slowest else ""), flush=True)
    return {n: {"stall_ms": ms, "floor_stall_ms": floor.get(n), "gui_work_ms": busy.get(n)} for n, ms in stalls.items()}


def cmd_bench(args) -> int:
    """``main.py bench``. The options arrive checked by ``cli.parser`` (``--models`` and ``--ns`` as lists,
    ``--repeats`` ≥ 1); the ``--json`` target is checked before anything is measured and written whole at the end."""
    from analysis.export.folders import write_file_atomically
    from analysis.export.paths import check_file_target
    from analysis.export.writers import write_json

    if args.json:
        check_file_target(args.json)  # an hour of measuring must not end in "is a folder" (ExportError: one line)
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    ns = list(args.ns) if args.ns else ([16, 128, 256, 512] if args.quick else [16, 128, 256, 512, 1024])
    repeats = args.repeats or (3 if args.quick else 5)
    models = ["small"] + (["bundled"] if not args.quick else []) + (["xl"] if args.xl else [])
    if args.models:
        models = list(args.models)
    elif args.real:  # the real model's table alone, unless --models asks for GPT-2 rows too
        models = []
    from gui.qt import ensure_qapp

    ensure_qapp()
    print(f"AttnScope benchmark — torch {torch.__version__}, {torch.get_num_threads()} threads"
          + (f", medians of {repeats} runs (times in seconds)" if models else ""), flush=True)
    if models:
        print_header()
    rows = []
    for name in models:
        folder = model_folder(name)
        if not (folder / "config.json").exists():
            print(f"skipping {name}: no model at {folder}", file=sys.stderr)
            continue
        rows += bench_model(name, folder, ns, repeats if name != "xl" else min(repeats, 2),
                            peers=args.peers and name == "small", memory=not args.no_memory,
                            stall=not args.no_stall and name != "xl")
    real = None
    if args.real:
        print(flush=True)
        real = bench_real(list(args.real_ns or REAL_NS), repeats=args.repeats or 1, memory=not args.no_memory)
    real_stall = None
    if args.real and real and not args.no_stall:
        real_stall = bench_real_stall([row["n"] for row in real])
    importance = None
    if args.real and not args.no_importance:
        from .importance import bench_importance

        print(flush=True)
        importance = bench_importance()
    head_view = None
    if not args.no_stall:
        from .head_view import bench_head_view

        print(flush=True)
        head_view = bench_head_view()
    scan = None
    if not args.no_scan and not (args.real and not args.models):
        scan = bench_scan(model_folder("small"), n_texts=24 if args.quick else 64, repeats=2 if args.quick else 3)
    if args.json:
        figures = {"torch": torch.__version__, "threads": torch.get_num_threads(), "repeats": repeats,
                   "rows": rows, "real": real, "scan": scan,
                   "importance": importance, "head_view": head_view, "real_gui_stall_ms": real_stall}
        write_file_atomically(Path(args.json), lambda tmp: write_json(figures, Path(tmp)))  # NaN → null
        print(f"wrote {args.json}", flush=True)
    return 0
