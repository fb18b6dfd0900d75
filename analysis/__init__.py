"""AttnScope's analysis core, in layers (each imports only those below it; tests/analysis/test_layers.py):

    export/     what an export holds, the format registry, writers, path checks, atomic folders
    measures/   head scores, TL-style scores, lenses, ablation, scans, parity, │ peers
                all of it streamed in blocks of query rows (streamed)          │
    lessons/    the GPT-2 lesson in numpy, the calculator, the lab             │
    run/        tokenizing, the chat format, the memory check, the one capture, run_text → AttentionResult
    model/      catalogue, hub, the checks a folder passes, load_model → LoadedModel
    families/   one adapter per family, the common weight shape, the step-by-step recompute
    errors, tokens, textfiles, display   the base

Plain Python, numpy and torch; never imports Qt. Heavy imports (torch, transformers) happen
inside the functions that need them so that importing this package is fast.

One axis order everywhere: attention arrays are ``(layer, head, query, key)``.
"""
