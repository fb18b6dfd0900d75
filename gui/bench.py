"""``python main.py bench``: how fast AttnScope is, against the floor (a bare transformers forward)
and against the notebook tools (bertviz, CircuitsVis), measured in the same run.

For each model and each n (tokens): medians of several runs of
  a  forward_s        bare ``model(ids, output_attentions=True)``, eager: the floor
  b  run_s            AttnScope's ``run_text`` (text → frozen result), run_ratio = b / a
  c  scores_s         every head score; tl_scores_s: the TransformerLens-style scores (both measures)
  d  grid_paint_s     painting the whole grid offscreen (from the thumbnails the run pooled)
  e  detail_paint_s   one head's heatmap with its token labels
  f  recompute_s      the numpy recomputation + parity of every head, recompute_ratio = f / a
  g  peak_rss_above_model_mb   in a fresh process: peak resident memory of run + scores above the loaded model
  h  gui_stall_ms     the longest stall of the GUI thread (a 10 ms timer in the real window) during a run
Scan (``scan``, unless ``--no-scan``): the batched scan against one text at a time on GPT-2-small shapes
with 64-token texts cut from the bundled sample set: tokens per second of each, best of the runs, at a
few batch sizes, and their ratio (``scan.scan_speeds``; the scores of both must agree); then the most
batching could give on this machine (``batching_ceiling``), so a ratio can be read against what is possible.
Peers (``--peers``, n ≤ 512): bertviz ``model_view(..., html_action='return')`` and CircuitsVis
``attention_heads`` on the same attention and tokens: time to a viewable all-heads figure and its size.

Speed does not depend on weight values, so the models are GPT-2-shaped with random weights,
built once and cached in ``.bench-cache/``.
"""
from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analysis.model.synthetic import SMALL, XL

CACHE = Path(__file__).resolve().parent.parent / ".bench-cache"
TEXT_SEED = ("The server rejected the request because it was overloaded, and the cat sat on the mat because it "
             "was tired. ")


def model_folder(name: str) -> Path:
    """The cached random GPT-2-shaped folder for ``small`` or ``xl`` (built on first use), or the bundled model."""
    from analysis.model.loading import BUNDLED_MODEL_DIR

    if name == "bundled":
        return BUNDLED_MODEL_DIR
    folder = CACHE / f"gpt2-{name}-random"
    if not (folder / "model.safetensors").exists() and not (folder / "model.safetensors.index.json").exists():
        from analysis.model.synthetic import save_random_gpt2, tiny_tokenizer

        print(f"building a random GPT-2-{name}-shaped model in {folder} (once)…", file=sys.stderr, flush=True)
        tokenizer = tiny_tokenizer(2048)
        shape = {"small": SMALL, "xl": XL}[name]
        save_random_gpt2(folder, tokenizer=tokenizer, vocab_size=50257, **shape)
    return folder


def text_of_length(tokenizer, n: int) -> str:
    """A text that tokenises to exactly ``n`` tokens (trimmed or padded with " a" until it does)."""
    def count(t: str) -> int:
        return len(tokenizer(t, add_special_tokens=False)["input_ids"])

    seed_ids = tokenizer(TEXT_SEED, add_special_tokens=False)["input_ids"]
    text = tokenizer.decode((seed_ids * (n // max(1, len(seed_ids)) + 2))[:n])
    for _ in range(4 * n + 16):
        c = count(text)
        if c == n:
            break
        text = text + " a" if c < n else text[:-1]
    return text


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def peak_rss_above_model(folder: Path, n: int) -> float:
    """MB: peak RSS during run_text + all_scores minus the RSS after loading, in a fresh process."""
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from analysis.model.loading import load_model
from analysis.run.inference import run_text
from analysis.measures.head_scores import all_scores
from gui.bench import text_of_length
def rss(field):
    for line in open('/proc/self/status'):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
m = load_model({str(folder)!r}, device='cpu')
text = text_of_length(m.tokenizer, {n})
run_text(m, text[:20], bos=False)  # warm up (probe, first-call allocations)
import gc; gc.collect()
base = rss('VmRSS:')
open('/proc/self/clear_refs', 'w').write('5')  # reset the peak (VmHWM)
r = run_text(m, text, bos=False)
all_scores(r)
print(rss('VmHWM:') - base)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-500:])
    return float(out.stdout.strip().splitlines()[-1])


def gui_stall_ms(folder: Path, ns: list[int]) -> dict[int, float]:
    """Longest gap between ticks of a 10 ms timer in the real window while each run is in flight and painted."""
    from PySide6 import QtCore

    from .qt import ensure_qapp
    from .chrome.window import MainWindow

    app = ensure_qapp()
    with tempfile.TemporaryDirectory() as tmp:
        settings = QtCore.QSettings(str(Path(tmp) / "s.ini"), QtCore.QSettings.Format.IniFormat)
        window = MainWindow(settings)
        window.text_input.auto_box.setChecked(False)
        window.resize(1400, 900)
        window.show()
        loop = QtCore.QEventLoop()
        window.model_ready.connect(lambda _info: loop.quit())
        window.load_model(str(folder))
        loop.exec()
        from analysis.model.loading import load_model

        tokenizer = load_model(str(folder), device="cpu").tokenizer
        stalls = {}
        for n in ns:
            window.set_text(text_of_length(tokenizer, n))
            ticks = []
            timer = QtCore.QTimer()
            timer.setInterval(10)
            timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
            done = QtCore.QEventLoop()

            def shown(_rid):
                QtCore.QTimer.singleShot(300, done.quit)  # keep ticking while it paints

            window.result_shown.connect(shown)
            timer.start()
            ticks.append(time.perf_counter())
            window.run_text()
            done.exec()
            timer.stop()
            window.result_shown.disconnect(shown)
            gaps = [b - a for a, b in zip(ticks, ticks[1:])]
            stalls[n] = max(0.0, (max(gaps) - 0.010) * 1000) if gaps else float("nan")
        window.close()
        app.processEvents()
    return stalls


def paint_times(result, repeats: int) -> tuple[float, float]:
    from .plots.figures import GridPlot, HeadPlot, lay_out_offscreen, dispose_figure, grid_source

    grid, detail = GridPlot(), HeadPlot()
    lay_out_offscreen(grid, 700, 800)
    lay_out_offscreen(detail, 900, 900)
    counter = iter(range(10**9))

    def paint_grid():
        grid.set_attentions(grid_source(result), key=next(counter))  # a new key: nothing is reused
        grid.grab()

    def paint_detail():
        detail.set_head(result.attentions[3 % result.n_layer, 1 % result.n_head], result.tokens, "bench")
        detail.grab()

    paint_grid(), paint_detail()  # warm up
    grid_s, detail_s = median_time(paint_grid, repeats), median_time(paint_detail, repeats)
    dispose_figure(grid)
    dispose_figure(detail)
    return grid_s, detail_s


def peer_times(result) -> dict:
    """bertviz and CircuitsVis on the same attention and tokens; None where not installed."""
    import torch

    out = {}
    attention = [torch.from_numpy(result.attentions[layer][None].copy()) for layer in range(result.n_layer)]
    tokens = list(result.tokens)
    try:
        from bertviz import model_view
    except ImportError:
        out["bertviz_s"] = None
    else:
        t = time.perf_counter()
        html_out = model_view(attention, tokens, html_action="return")
        out["bertviz_s"] = time.perf_counter() - t
        out["bertviz_mb"] = len(getattr(html_out, "data", str(html_out))) / 1e6
    try:
        import circuitsvis as cv
    except ImportError:
        out["circuitsvis_s"] = None
    else:
        t = time.perf_counter()
        rendered = cv.attention.attention_heads(attention=torch.cat(attention, 0).reshape(-1, *attention[0].shape[-2:]),
                                                tokens=tokens)
        html_text = str(rendered)
        out["circuitsvis_s"] = time.perf_counter() - t
        out["circuitsvis_mb"] = len(html_text) / 1e6
    return out


def bench_model(name: str, folder: Path, ns: list[int], repeats: int, peers: bool, memory: bool,
                stall: bool) -> list[dict]:
    import torch

    from analysis.measures.head_scores import all_scores
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model
    from analysis.measures.parity import parity_report
    from analysis.measures.tl_scores import ERROR_MEASURES, detect_all

    loaded = load_model(str(folder), device="cpu")
    params = [loaded.attention_weights(layer) for layer in range(loaded.n_layer)]
    run_text(loaded, "warm up", bos=False)
    skipped = [n for n in ns if n > loaded.context_length]
    if skipped:
        print(f"{name}: skipping n = {', '.join(map(str, skipped))} (its context holds {loaded.context_length} tokens)",
              file=sys.stderr, flush=True)
    ns = [n for n in ns if n <= loaded.context_length]
    stalls = gui_stall_ms(folder, ns) if stall else {}
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
        tl_scores_s = median_time(lambda r=result: [detect_all(r.attentions, r.token_ids, error_measure=m)
                                                    for m in ERROR_MEASURES], reps)
        grid_s, detail_s = paint_times(result, reps)
        recompute_s = median_time(lambda r=result: parity_report(r, params), max(1, reps // 2))
        row = {"model": name, "n": int(ids.shape[1]), "forward_s": forward_s, "run_s": run_s,
               "run_ratio": run_s / forward_s, "scores_s": scores_s, "tl_scores_s": tl_scores_s, "grid_paint_s": grid_s,
               "detail_paint_s": detail_s, "recompute_s": recompute_s, "recompute_ratio": recompute_s / forward_s,
               "peak_rss_above_model_mb": peak_rss_above_model(folder, n) if memory else None,
               "gui_stall_ms": stalls.get(n), "bertviz_s": None, "circuitsvis_s": None}
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
           ("peak_rss_above_model_mb", "{:>8.0f}"), ("gui_stall_ms", "{:>7.1f}"), ("bertviz_s", "{:>8.2f}"),
           ("bertviz_speedup", "{:>6.0f}x"), ("circuitsvis_s", "{:>8.2f}"), ("circuitsvis_speedup", "{:>6.0f}x")]
HEADERS = ["model", "n", "forward", "run", "b/a", "scores", "TL", "grid", "detail", "recomp", "f/a", "RSS MB",
           "stall", "bertviz", "×", "cvis", "×"]


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


SCAN_TOKENS = 64
SCAN_BATCHES = (8, 16, 32)


def bench_scan(folder: Path, n_texts: int, batch_sizes=SCAN_BATCHES, repeats: int = 2) -> dict:
    """Tokens per second of ``scan_texts`` one text at a time and at each batch size, on ``n_texts``
    texts of :data:`SCAN_TOKENS` tokens; the best batch size's ratio to one at a time."""
    from analysis.model.loading import load_model
    from analysis.measures.scan import SAMPLE_TEXTS, max_abs_diff, read_texts, scan_speeds, texts_of_length

    loaded = load_model(str(folder), device="cpu")
    texts = texts_of_length(loaded, read_texts(SAMPLE_TEXTS), SCAN_TOKENS, n_texts)
    best = scan_speeds(loaded, texts, (1, *batch_sizes), repeats)
    one = best[1]
    rows = [{"batch_size": b, "tokens_per_second": best[b].tokens_per_second,
             "ratio": best[b].tokens_per_second / one.tokens_per_second, "max_abs_diff": max_abs_diff(one, best[b])}
            for b in batch_sizes]
    top = max(rows, key=lambda row: row["ratio"])
    report = {"texts": one.n_texts, "tokens": one.tokens, "tokens_per_text": SCAN_TOKENS,
              "one_at_a_time_tokens_per_second": one.tokens_per_second, "batched": rows,
              "best_batch_size": top["batch_size"], "batched_tokens_per_second": top["tokens_per_second"],
              "ratio": top["ratio"]}
    print(f"scan, {one.n_texts} texts × {SCAN_TOKENS} tokens: one at a time {one.tokens_per_second:.0f} tokens/s; "
          + ", ".join(f"batch {row['batch_size']} {row['tokens_per_second']:.0f} tokens/s ({row['ratio']:.2f}×)"
                      for row in rows), flush=True)
    print(f"scan ratio {top['ratio']:.2f}× (batch {top['batch_size']}: {top['tokens_per_second']:.0f} vs "
          f"{one.tokens_per_second:.0f} tokens/s one at a time; largest score difference "
          f"{max(row['max_abs_diff'] for row in rows):.1e})", flush=True)
    report["ceiling"] = batching_ceiling(loaded.model.base_model, max(batch_sizes))
    c = report["ceiling"]
    print(f"batching ceiling here {c['ratio']:.2f}×: a bare forward one text at a time on {c['threads']} threads "
          f"takes {1000 * c['one_text_s']:.1f} ms a text; one thread alone, at batch {c['batch_size']}, "
          f"{1000 * c['one_thread_batched_s']:.1f} ms a text, so {c['threads']} perfectly used cores "
          f"{1000 * c['one_thread_batched_s'] / c['threads']:.1f} ms at best", flush=True)
    return report


def batching_ceiling(model, batch_size: int, n_tokens: int = SCAN_TOKENS, repeats: int = 3) -> dict:
    """The most batching can give on this machine, from the bare model (no AttnScope code):

        ratio = t₁ / (t_B¹ / T)

    t₁: seconds a text of a forward at batch 1 on all T threads (what one at a time does);
    t_B¹: seconds a text at batch B on one thread. A batch can at best keep every core as busy as
    one thread keeps one core with a whole batch to itself, so t_B¹ / T is about the best batched time
    a text can have (float32, the precision AttnScope reports in). On a GPU, or many cores, t₁
    leaves most of the machine idle and the ratio is large; on two CPU cores it is not."""
    import torch

    threads = torch.get_num_threads()

    def per_text(batch: int) -> float:
        ids = torch.randint(0, model.config.vocab_size, (batch, n_tokens))
        with torch.inference_mode():
            model(input_ids=ids, output_attentions=True)  # warm-up
            return median_time(lambda: model(input_ids=ids, output_attentions=True), repeats) / batch

    one = per_text(1)
    torch.set_num_threads(1)
    try:
        batched = per_text(batch_size)
    finally:
        torch.set_num_threads(threads)
    return {"threads": threads, "batch_size": batch_size, "one_text_s": one, "one_thread_batched_s": batched,
            "ratio": one / (batched / threads)}


def bench_main(args) -> int:
    """``main.py bench``. The options arrive checked by main.py's parser (``--models`` and ``--ns`` as lists,
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
    from .qt import ensure_qapp

    ensure_qapp()
    print(f"AttnScope benchmark — torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"medians of {repeats} runs (times in seconds)", flush=True)
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
    scan = None
    if not getattr(args, "no_scan", False):
        scan = bench_scan(model_folder("small"), n_texts=24 if args.quick else 64, repeats=2 if args.quick else 3)
    if args.json:
        figures = {"torch": torch.__version__, "threads": torch.get_num_threads(), "repeats": repeats,
                   "rows": rows, "scan": scan}
        write_file_atomically(Path(args.json), lambda tmp: write_json(figures, Path(tmp)))  # NaN → null
        print(f"wrote {args.json}", flush=True)
    return 0
