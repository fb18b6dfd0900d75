"""The importance map's speed-up on the real model: the cached, truncated, batched path (``ablation.importance_map``)
against one whole forward per head (``ablation.importance_map_by_forwards``), on SmolLM2 at 64 tokens, with what
truncation alone could give and the machine's batching ceiling beside it."""
from __future__ import annotations

import sys
import time

import numpy as np

from .scan import batching_ceiling
from .workload import text_of_length

IMPORTANCE_TOKENS = 64


def bench_importance(loaded=None, n_tokens: int = IMPORTANCE_TOKENS) -> dict | None:
    """Seconds of both ways on every head (each once: the one-forward-per-head map takes ~40 s here), their ratio,
    the largest difference in a head's ablated loss, and two ceilings:

    - truncation: L / mean over heads of the blocks run (L − l), what re-running only the later layers saves alone;
    - batching: :func:`batching_ceiling` of the bare model at batch H, what batching could give on this machine.
    """
    from analysis.measures.ablation import importance_map, importance_map_by_forwards, text_tokens

    if loaded is None:
        from analysis.model.catalogue import resolve_source, smollm2_file
        from analysis.model.loading import load_model

        if smollm2_file() is None:
            print("skipping the importance map: SmolLM2 is not installed (make smollm2)", file=sys.stderr, flush=True)
            return None
        loaded = load_model(resolve_source("smollm2"), device="cpu")
    tokens = text_tokens(loaded, text_of_length(loaded.tokenizer, n_tokens), bos=False)
    importance_map(loaded, tokens, group=1)  # warm-up (first-call allocations)
    started = time.perf_counter()
    fast = importance_map(loaded, tokens)
    fast_s = time.perf_counter() - started
    started = time.perf_counter()
    plain = importance_map_by_forwards(loaded, tokens)
    plain_s = time.perf_counter() - started
    L, H = loaded.n_layer, loaded.n_head
    report = {"n_tokens": tokens.n_tokens, "heads": L * H, "one_forward_per_head_s": plain_s, "cached_batched_s": fast_s,
              "ratio": plain_s / fast_s,
              "max_abs_diff_loss": float(np.abs(fast.ablated_loss - plain.ablated_loss).max()),
              "truncation_ceiling": L / np.mean([L - layer for layer in range(L)]),
              "ceiling": batching_ceiling(loaded.model.base_model, H, tokens.n_tokens, attentions=False)}
    c = report["ceiling"]
    print(f"importance map, {L * H} heads at {tokens.n_tokens} tokens: one forward per head {plain_s:.1f} s, "
          f"cached + truncated + batched {fast_s:.1f} s: {report['ratio']:.2f}× (largest loss difference "
          f"{report['max_abs_diff_loss']:.1e}); truncation alone could give {report['truncation_ceiling']:.2f}×, "
          f"batching {H} rows at most {c['ratio']:.2f}× here", flush=True)
    return report
