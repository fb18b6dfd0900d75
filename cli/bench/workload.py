"""What the benchmark measures on, and how it times: the cached random GPT-2-shaped models, texts of
exactly n tokens, the median of several runs."""
from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

from analysis.model.synthetic import SMALL, XL

CACHE = Path(__file__).resolve().parents[2] / ".bench-cache"
TEXT_SEED = ("The server rejected the request because it was overloaded, and the cat sat on the mat because it "
             "was tired. ")


def model_folder(name: str) -> Path:
    """The cached random GPT-2-shaped folder for ``small`` or ``xl`` (built on first use), or the bundled model."""
    from analysis.model.catalogue import BUNDLED_MODEL_DIR

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


def paired_times(first, second, repeats: int) -> tuple[float, float, float]:
    """(median seconds of ``first``, of ``second``, median of the per-pair ratios second / first), the two run in
    turn ``repeats`` times: a machine whose load changes during the benchmark slows both of a pair alike, where
    all of one and then all of the other would put the change into the ratio."""
    a, b = [], []
    for _ in range(repeats):
        for fn, times in ((first, a), (second, b)):
            gc.collect()
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(a), statistics.median(b), statistics.median(y / x for x, y in zip(a, b))


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)
