"""``attnscope scan``: every head score over many texts (mean, std and per text), as CSV."""
from __future__ import annotations

from pathlib import Path

from .inputs import check_apart, load_model_of
from .output import count_progress, counted, warn
from .signals import Signals, stopped


def cmd_scan(args) -> int:
    return stopped(args, lambda signals: _scan(args, signals))


def _scan(args, signals: Signals) -> int:
    from analysis.errors import InputError
    from analysis.export.contents import write_scan
    from analysis.export.folders import check_export_target
    from analysis.measures.scan import scan_texts
    from analysis.measures.scan_inputs import SAMPLE_TEXTS, read_texts

    if not args.texts or not args.texts.strip():
        raise InputError("No texts given: name a file, a folder of .txt files, or 'sample'.")
    check_apart(args)
    texts = read_texts(SAMPLE_TEXTS if args.texts.strip() == "sample" else Path(args.texts))
    for warning in texts.warnings:  # what a folder held that is not a text (links to nothing, pipes, …)
        warn(warning)
    check_export_target(args.out)  # fail before the slow part (creates nothing)
    loaded = load_model_of(args)
    result = scan_texts(loaded, texts, batch_size=args.batch, max_texts=args.max_texts, bos=args.bos,
                        max_tokens=args.max_tokens, progress=count_progress("scanning"), chat=args.chat)
    cut = result.truncation_warning()
    if cut:
        warn(cut)
    signals.deferred = True  # from here on a signal waits for the next safe point
    written = write_scan(result, args.out, args.sink_epsilon, check=signals.check)
    sinks = result.sink_rate(args.sink_epsilon)
    print(f"scanned {counted(result.n_texts, 'text')} ({counted(result.tokens, 'token')}) in {result.seconds:.1f} s, "
          f"{result.tokens_per_second:.0f} tokens/s (batch {result.batch_size}); sink rate {sinks.rate:.2f} "
          f"at ε {sinks.epsilon:g}; wrote {len(written)} files to {args.out}")
    for warning in written.warnings:
        warn(warning)
    return 0
