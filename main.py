#!/usr/bin/env python3
"""AttnScope: look inside the attention of GPT-2.

    python main.py                         open the app (bundled model, or GPT-2 if cached)
    python main.py --model gpt2 --text "…" open the app on a model and a text
    python main.py export --model bundled --text "…" --out DIR
    python main.py calc --q '[[1,0,0.5,1]]' --k '[[…]]' --v '[[…]]' [--causal]

Heavy imports happen inside the commands, so ``--help`` answers at once.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _add_model_options(p: argparse.ArgumentParser, default_model: str | None) -> None:
    p.add_argument("--model", default=default_model,
                   help="bundled, a hub id (gpt2, distilgpt2, gpt2-medium, gpt2-large, gpt2-xl) or a model folder")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                   help="float16/bfloat16 only on a GPU")
    p.add_argument("--allow-pickle", action="store_true",
                   help="allow a folder with only pickle weights (*.bin); pickle can run code: only for folders you trust")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnscope", description="Look inside the attention of GPT-2.")
    _add_model_options(parser, None)
    parser.add_argument("--text", help="text to run as soon as the model is loaded")
    parser.add_argument("--select", metavar="L.H", help="select layer L, head H (e.g. 3.1)")
    parser.add_argument("--screenshot", metavar="DIR", type=Path,
                        help="save screenshots of the main views into DIR once painted, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    export = sub.add_parser("export", help="run a text and write attention, scores, parity and figures")
    _add_model_options(export, "bundled")
    source = export.add_mutually_exclusive_group(required=True)
    source.add_argument("--text")
    source.add_argument("--text-file", type=Path)
    export.add_argument("--out", type=Path, required=True, help="output folder")
    export.add_argument("--format", default="png", choices=("png", "svg", "pdf"), help="image format")
    bos = export.add_mutually_exclusive_group()
    bos.add_argument("--bos", dest="bos", action="store_true", default=None,
                     help="prepend <|endoftext|> (the bundled model does by default)")
    bos.add_argument("--no-bos", dest="bos", action="store_false")
    export.add_argument("--no-head-images", action="store_true", help="write grid image only, not one per head")
    export.add_argument("--parity-dtype", default="float32", choices=("float32", "float64"))

    calc = sub.add_parser("calc", help="the attention calculator: softmax(QKᵀ/√d_k)·V on your matrices, as JSON")
    calc.add_argument("--q", required=True, help="JSON: one query vector or a list of rows")
    calc.add_argument("--k", required=True, help="JSON: key rows")
    calc.add_argument("--v", required=True, help="JSON: value rows")
    calc.add_argument("--causal", action="store_true")
    bench = sub.add_parser("bench", help="measure speed and memory against a bare forward and the notebook tools")
    bench.add_argument("--quick", action="store_true", help="small model, n ≤ 512: under a minute")
    bench.add_argument("--xl", action="store_true", help="also a GPT-2-xl-shaped model (48×25×1600; slow, ~20 GB)")
    bench.add_argument("--peers", action="store_true", help="also bertviz and CircuitsVis (pip install '.[bench]')")
    bench.add_argument("--json", type=Path, help="write every figure to this JSON file")
    bench.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    bench.add_argument("--no-stall", action="store_true", help="skip the GUI stall measurement")
    bench.add_argument("--models", help="comma-separated: small, bundled, xl (default: small and bundled)")
    bench.add_argument("--ns", help="comma-separated token counts (default 16,128,256,512,1024)")
    bench.add_argument("--repeats", type=int, help="runs per figure (the median is reported)")
    return parser


def fail(message: str) -> int:
    print(f"attnscope: error: {message}", file=sys.stderr)
    return 2


def cmd_calc(args) -> int:
    from analysis.errors import AttnScopeError
    from analysis.manual_attention import attend

    try:
        q, k, v = (json.loads(x) for x in (args.q, args.k, args.v))
    except ValueError as exc:
        return fail(f"--q, --k and --v must be JSON arrays: {exc}")
    try:
        result = attend(q, k, v, causal=args.causal)
    except AttnScopeError as exc:
        return fail(str(exc))
    print(json.dumps(result.to_dict(), indent=2))
    return 0


def cmd_export(args) -> int:
    from analysis.errors import AttnScopeError
    from analysis.export import check_writable_dir, export_bundle

    if args.text_file is not None:
        try:
            text = args.text_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return fail(f"cannot read {args.text_file}: {exc}")
    else:
        text = args.text
    try:
        if not text or not text.strip():
            from analysis.errors import InputError

            raise InputError("The text is empty: give --text or a non-empty --text-file.")
        check_writable_dir(args.out)  # fail before the slow part
        from analysis.head_scores import all_scores
        from analysis.inference import run_text
        from analysis.loading import load_model
        from analysis.parity import parity_report

        started = time.perf_counter()
        loaded = load_model(args.model, device=args.device, dtype=args.dtype, allow_pickle=args.allow_pickle,
                            progress=_terminal_progress())
        loaded_at = time.perf_counter()
        result = run_text(loaded, text, bos=args.bos)
        for warning in result.warnings:
            print(f"attnscope: warning: {warning}", file=sys.stderr)
        scores = all_scores(result)
        scored_at = time.perf_counter()
        parity = parity_report(result, [loaded.attention_parameters(l) for l in range(loaded.n_layer)],
                               args.parity_dtype)
        from gui.figures import write_result_images

        timings = {"load_s": loaded_at - started, "scores_s": scored_at - loaded_at - result.timings["total_s"],
                   "parity_s": parity.seconds}
        written = export_bundle(
            args.out, result, scores, parity, timings=timings,
            image_writer=lambda folder: write_result_images(result, folder, args.format,
                                                            heads=not args.no_head_images))
    except AttnScopeError as exc:
        return fail(str(exc))
    print(f"wrote {len(written)} files to {args.out} ({result.n_tokens} tokens, {result.n_layer}×{result.n_head} heads, "
          f"parity max |Δw| {parity.max_abs_diff_weights:.2e} {'passed' if parity.passed else 'FAILED'})")
    return 0


def _terminal_progress():
    last = {"t": 0.0}

    def report(message: str, done: int, total: int) -> None:
        now = time.monotonic()
        if total and (now - last["t"] > 0.5 or done >= total):
            last["t"] = now
            print(f"\r{message}: {done / 1e6:.1f} / {total / 1e6:.1f} MB", end="\n" if done >= total else "",
                  file=sys.stderr, flush=True)

    return report


def cmd_bench(args) -> int:
    from gui.bench import bench_main

    return bench_main(args)


def cmd_gui(args) -> int:
    from gui.app import run_app

    return run_app(args)


def main(argv: list[str] | None = None) -> int:
    import os

    args = build_parser().parse_args(argv)
    command = {"calc": cmd_calc, "export": cmd_export, "bench": cmd_bench}.get(args.command, cmd_gui)
    try:
        return command(args)
    except KeyboardInterrupt:
        return fail("interrupted")
    except Exception as exc:  # a bug: one line for the user, the traceback when debugging
        if os.environ.get("ATTNSCOPE_DEBUG"):
            raise
        return fail(f"unexpected {type(exc).__name__}: {exc} (set ATTNSCOPE_DEBUG=1 for the traceback)")


if __name__ == "__main__":
    sys.exit(main())
