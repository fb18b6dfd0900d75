"""The Head tab's figure on a long map: the GUI thread's cost of showing one head's n × n map, and its longest stall
while the user zooms and pans it. The map is a synthetic causal one (a sink column, a previous-token diagonal,
noise): what the figure costs depends on n, not on the model that made the map."""
from __future__ import annotations

import time

import numpy as np

from .paint import run_events_for, timer_stall_ms

HEAD_VIEW_NS = (2048, 8192)
FIGURE_PX = (900, 700)  # about the Head tab's figure in a 1366 × 768 window
ZOOM_STEPS = 24  # wheel steps in, then out, with a pan between; one every STEP_MS
STEP_MS = 40


def long_map(n: int) -> np.ndarray:
    """(n, n) float32 causal weights: 0.5 on key 0, 0.3 on the previous token, the rest noise; zeros after the
    query."""
    rng = np.random.default_rng(0)
    w = np.empty((n, n), dtype=np.float32)
    for start in range(0, n, 1024):  # a block of rows at a time: no float64 n × n temporary
        block = rng.random((min(1024, n - start), n), dtype=np.float32) * np.float32(0.01)
        rows = np.arange(start, start + len(block))
        block[np.arange(n)[None, :] > rows[:, None]] = 0
        block[:, 0] += 0.5
        block[rows[1:] - start, rows[1:] - 1] += 0.3
        block /= block.sum(axis=1, keepdims=True)
        w[start:start + len(block)] = block
    return w


def head_view_figures(n: int, every_cell: bool = False) -> dict:
    """{"show_ms": set_head and the first paint, "zoom_stall_ms": the longest stall over ZOOM_STEPS wheel steps
    and pans with the tiles they ask for}; ``every_cell``: the figure as before issue 21, one image of all n²
    cells (OVERVIEW_CELLS raised past n), for the ratio."""
    from PySide6 import QtCore

    from gui.plots import figures, tiles
    from gui.plots.figures import HeadPlot, dispose_figure
    from gui.qt import ensure_qapp

    app = ensure_qapp()
    w, tokens = long_map(n), [f"t{i}" for i in range(n)]
    limit = tiles.OVERVIEW_CELLS
    if every_cell:
        figures.OVERVIEW_CELLS = n
    try:
        fig = HeadPlot()
        if every_cell:
            fig._tile_timer.timeout.disconnect()  # no tiles either: the image of every cell, scaled by the screen
        fig.resize(*FIGURE_PX)
        fig.show()
        run_events_for(app, 0.2)
        started = time.perf_counter()
        fig.set_head(w, tokens, "bench")
        fig.viewport().repaint()  # painted now, not when the event loop comes to it
        show_ms = (time.perf_counter() - started) * 1000
        run_events_for(app, 0.5)
        vb = fig.plot.getViewBox()

        def zoom():
            centre = QtCore.QPointF(n * 0.6, n * 0.62)
            for step in range(ZOOM_STEPS):
                factor = 0.7 if step < ZOOM_STEPS // 2 else 1 / 0.7
                vb.scaleBy((factor, factor), center=centre)
                if step == ZOOM_STEPS // 2:
                    vb.translateBy(x=(vb.viewRange()[0][1] - vb.viewRange()[0][0]) * 0.4)
                fig.viewport().repaint()
                run_events_for(app, STEP_MS / 1000)
            run_events_for(app, 0.3)

        stall = timer_stall_ms(app, zoom)
        dispose_figure(fig)
    finally:
        figures.OVERVIEW_CELLS = limit
    return {"n": n, "show_ms": show_ms, "zoom_stall_ms": stall}


def bench_head_view(ns=HEAD_VIEW_NS) -> list[dict]:
    """Each n: the figure as it is and as it was (every cell one image), printed as measured."""
    rows = []
    print("head view (a synthetic causal map, figure 900 × 700; times on the GUI thread, ms):", flush=True)
    for n in ns:
        now, before = head_view_figures(n), head_view_figures(n, every_cell=True)
        row = {"n": n, "show_ms": now["show_ms"], "zoom_stall_ms": now["zoom_stall_ms"],
               "every_cell_show_ms": before["show_ms"], "every_cell_zoom_stall_ms": before["zoom_stall_ms"]}
        print(f"  n = {n:>5,}: show {now['show_ms']:7.0f} (every cell as one image: {before['show_ms']:7.0f}, "
              f"{before['show_ms'] / now['show_ms']:.1f}×); longest stall while zooming {now['zoom_stall_ms']:6.1f} "
              f"(every cell: {before['zoom_stall_ms']:7.1f})", flush=True)
        rows.append(row)
    return rows
