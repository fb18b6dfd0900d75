"""The batched scan against one text at a time, and the most batching could give on this machine."""
from __future__ import annotations

from pathlib import Path

from .workload import median_time

SCAN_TOKENS = 64
SCAN_BATCHES = (8, 16, 32)


def bench_scan(folder: Path, n_texts: int, batch_sizes=SCAN_BATCHES, repeats: int = 2) -> dict:
    """Tokens per second of ``scan_texts`` one text at a time and at each batch size, on ``n_texts``
    texts of :data:`SCAN_TOKENS` tokens; the best batch size's ratio to one at a time."""
    from analysis.measures.scan_inputs import SAMPLE_TEXTS, read_texts
    from analysis.measures.scan_speed import max_abs_diff, scan_speeds, texts_of_length
    from analysis.model.loading import load_model

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


def batching_ceiling(model, batch_size: int, n_tokens: int = SCAN_TOKENS, repeats: int = 3,
                     attentions: bool = True) -> dict:
    """The most batching can give on this machine, from the bare model (no AttnScope code):

        ratio = t₁ / (t_B¹ / T)

    t₁: seconds a text of a forward at batch 1 on all T threads (what one at a time does);
    t_B¹: seconds a text at batch B on one thread. A batch can at best keep every core as busy as
    one thread keeps one core with a whole batch to itself, so t_B¹ / T is about the best batched time
    a text can have (float32, the precision AttnScope reports in). On a GPU, or many cores, t₁
    leaves most of the machine idle and the ratio is large; on two CPU cores it is not. ``attentions``: the forward
    returns the attention weights (the scan's) or not (the importance map's)."""
    import torch

    threads = torch.get_num_threads()

    def per_text(batch: int) -> float:
        ids = torch.randint(0, model.config.vocab_size, (batch, n_tokens))
        with torch.inference_mode():
            model(input_ids=ids, output_attentions=attentions)  # warm-up
            return median_time(lambda: model(input_ids=ids, output_attentions=attentions), repeats) / batch

    one = per_text(1)
    torch.set_num_threads(1)
    try:
        batched = per_text(batch_size)
    finally:
        torch.set_num_threads(threads)
    return {"threads": threads, "batch_size": batch_size, "one_text_s": one, "one_thread_batched_s": batched,
            "ratio": one / (batched / threads)}
