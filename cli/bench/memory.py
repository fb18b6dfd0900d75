"""Peak memory of a run: ``run_text`` + ``all_scores`` in a fresh process (``python -m cli.bench.memory
FOLDER N``), so nothing the benchmark did before is counted."""
from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def peak_rss_above_model(folder: Path, n: int) -> float:
    """MB: peak RSS during run_text + all_scores minus the RSS after loading, in a fresh process."""
    # run from the checkout, so that ``-m`` finds this package before any other of its name
    out = subprocess.run([sys.executable, "-m", "cli.bench.memory", str(Path(folder).resolve()), str(n)],
                         capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-500:])
    return float(out.stdout.strip().splitlines()[-1])


def rss(field: str) -> float:
    """MB: ``VmRSS:`` (resident now) or ``VmHWM:`` (the peak since the last reset) of this process."""
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024


def measure(folder: str, n: int) -> float:
    """In the fresh process: MB the run of an ``n``-token text and its scores take above the loaded model."""
    from analysis.measures.head_scores import all_scores
    from analysis.model.loading import load_model
    from analysis.run.inference import run_text

    from .workload import text_of_length

    m = load_model(folder, device="cpu")
    text = text_of_length(m.tokenizer, n)
    run_text(m, text[:20], bos=False)  # warm up (probe, first-call allocations)
    gc.collect()
    base = rss("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM)
    r = run_text(m, text, bos=False)
    all_scores(r)
    return rss("VmHWM:") - base


if __name__ == "__main__":
    print(measure(sys.argv[1], int(sys.argv[2])))
