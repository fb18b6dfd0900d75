"""Soak check (not part of the pytest suite): many GUI runs with model switches and exports in between.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/soak/soak_gui.py [--runs 500]

Drives the real window: runs texts, switches between the bundled model and a tiny random GPT-2
folder every 25 runs, exports (a head PNG, a data folder) every 20 runs, and prints the resident
memory every 50 runs. The baseline is taken after the first 50 runs (both models loaded once, every
code path warm); exits 1 if memory at the end is more than 5 % above it.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
GROWTH_LIMIT = 0.05


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def wait(signal, start, timeout_s: float = 120.0):
    """Call ``start()`` and run the event loop until ``signal`` fires; returns its arguments."""
    from PySide6 import QtCore

    loop, got = QtCore.QEventLoop(), []

    def done(*args):
        got.append(args)
        loop.quit()

    signal.connect(done)
    QtCore.QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    start()
    if not got:
        loop.exec()
    signal.disconnect(done)
    if not got:
        raise SystemExit(f"soak: timed out waiting for {signal}")
    return got[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    from PySide6 import QtCore

    from analysis.model.synthetic import save_random_gpt2, tiny_tokenizer
    from gui.qt import ensure_qapp
    from gui.chrome.window import MainWindow

    app = ensure_qapp()
    work = Path(tempfile.mkdtemp(prefix="attnscope-soak-"))
    tiny = str(save_random_gpt2(work / "tiny", n_layer=3, n_head=4, d_model=64, n_positions=128,
                                tokenizer=tiny_tokenizer(), seed=1))
    window = MainWindow(QtCore.QSettings(str(work / "settings.ini"), QtCore.QSettings.Format.IniFormat))
    window.resize(1366, 768)
    window.show()
    models = ["bundled", tiny]
    wait(window.model_ready, lambda: window.load_model(models[0]))
    words = "the cat sat on the mat because it was tired and the server rejected the request".split()
    baseline, started = None, time.perf_counter()
    for i in range(1, args.runs + 1):
        if i % 25 == 0:
            wait(window.model_ready, lambda: window.load_model(models[(i // 25) % 2]))
        text = " ".join(words[(i * 7 + k) % len(words)] for k in range(5 + i % 20))
        window.set_text(text)
        wait(window.result_shown, window.run_text)
        if i % 20 == 0:
            what, path = (("head", work / "out" / f"h{i % 3}.png") if i % 40 else ("data", work / "out" / "data"))
            window.exporter.ask_overwrite = lambda *_: True
            wait(window.exporter.finished, lambda: window.exporter.start(what, path, None, 800))
        app.processEvents()
        if i % 50 == 0:
            rss = rss_mb()
            if baseline is None:
                baseline = rss
            print(f"run {i:4d}  RSS {rss:7.1f} MB  ({(rss / baseline - 1) * 100:+.1f} % vs run 50)  "
                  f"{time.perf_counter() - started:6.0f} s", flush=True)
    final = rss_mb()
    window.close()
    growth = final / baseline - 1 if baseline else 0.0
    print(f"soak: {args.runs} runs, RSS {baseline:.1f} → {final:.1f} MB ({growth * 100:+.1f} %)")
    return 1 if growth > GROWTH_LIMIT else 0


if __name__ == "__main__":
    sys.exit(main())
