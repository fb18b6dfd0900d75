"""How fast a scan goes: batched against one text at a time, on texts of a given length (``main.py bench``)."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from .scan import DEFAULT_BATCH, ScanResult, scan_texts


def texts_of_length(loaded, lines: Iterable[str], n_tokens: int, count: int) -> list[str]:
    """Up to ``count`` texts of about ``n_tokens`` tokens each, cut from the running concatenation of
    ``lines`` (decoding then re-encoding may shift a boundary by a token or two)."""
    texts, buffer = [], []
    for line in lines:
        buffer += loaded.tokenizer(line + " ", add_special_tokens=False, verbose=False)["input_ids"]
        while len(buffer) >= n_tokens and len(texts) < count:
            texts.append(loaded.tokenizer.decode(buffer[:n_tokens]))
            buffer = buffer[n_tokens:]
    return texts


def scan_speeds(loaded, texts: list[str], batch_sizes: Iterable[int] = (1, DEFAULT_BATCH), repeats: int = 2
                ) -> dict[int, ScanResult]:
    """The fastest of ``repeats`` scans of ``texts`` at each batch size (interleaved, so every size sees
    the same machine load), after one small warm-up scan (the probe, the allocator, the kernels)."""
    sizes = list(dict.fromkeys(int(b) for b in batch_sizes))
    scan_texts(loaded, texts[:2], batch_size=2)
    best: dict[int, ScanResult] = {}
    for _ in range(max(1, repeats)):
        for size in sizes:
            run = scan_texts(loaded, texts, batch_size=size)
            if size not in best or run.seconds < best[size].seconds:
                best[size] = run
    return best


def compare_batched(loaded, texts: list[str], batch_size: int = DEFAULT_BATCH, repeats: int = 2) -> dict:
    """Tokens per second of the same scan one text at a time and in batches (best of ``repeats`` each),
    their ratio, and the largest score difference between the two."""
    best = scan_speeds(loaded, texts, (1, batch_size), repeats)
    one, many = best[1], best[batch_size]
    return {"texts": one.n_texts, "tokens": one.tokens, "batch_size": batch_size,
            "one_at_a_time_tokens_per_second": one.tokens_per_second,
            "batched_tokens_per_second": many.tokens_per_second,
            "ratio": many.tokens_per_second / one.tokens_per_second,
            "max_abs_diff": max_abs_diff(one, many)}


def max_abs_diff(a: ScanResult, b: ScanResult) -> float:
    """The largest |difference| between two scans' per-text scores; where both are undefined (NaN) they
    agree, where only one is the difference is infinite."""
    if (np.isnan(a.per_text) != np.isnan(b.per_text)).any():
        return float("inf")
    diff = np.abs(a.per_text - b.per_text)
    return float(np.nanmax(diff)) if np.isfinite(diff).any() else 0.0
