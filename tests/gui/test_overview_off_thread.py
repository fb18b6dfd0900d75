"""A long head map's overview is pooled where the map is made (the head-map worker), not when the Head tab draws
it: at 8,192 tokens the pooling was the longest GUI-thread stall of a run (89 ms)."""
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("pytestqt")


def causal_map(n: int, seed: int = 0) -> np.ndarray:
    a = np.random.default_rng(seed).random((n, n)).astype(np.float32) + 0.01
    a = np.where(np.tri(n, dtype=bool), a, np.float32(0))
    return a / a.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("hide_first", [False, True])
def test_the_overview_is_each_bins_max_over_its_shown_cells(hide_first):
    """Against a brute force: the map as shown (NaN where masked or hidden, rows renormalised past key 0), padded
    with NaN to whole bins, each bin's nanmax."""
    from analysis.display import overview, pool_stride, shown_weights

    n, cells = 100, 16
    w = causal_map(n)
    s = pool_stride(n, cells)
    got = overview(w, True, hide_first, cells)
    shown = shown_weights(w, True, hide_first).astype(np.float64)
    m = -(-n // s)
    padded = np.full((m * s, m * s), np.nan)
    padded[:n, :n] = shown
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):  # an all-NaN bin (every key after its queries)
        want = np.nanmax(padded.reshape(m, s, m, s), axis=(1, 3))
    assert got.shape == (m, m) and not got.flags.writeable
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
    assert overview(w, True, hide_first, cells=n) is None  # fits: the map itself is drawn


def test_the_head_map_task_pools_and_the_figure_draws_what_it_was_given(qtbot, shown_figure, monkeypatch):
    import analysis.display as display
    from analysis.display import ShownMap
    from gui.plots.figures import HeadPlot
    from gui.state.head_maps import head_map_task

    n = 1500  # past OVERVIEW_CELLS: a pooled overview
    w = causal_map(n)
    result = SimpleNamespace(causal=True, head_map=lambda layer, head: w)
    kind, layer, head, values, pooled, hide_first = head_map_task(result, "weights", 1, 2, hide_first=False)(None)
    assert (kind, layer, head, hide_first) == ("weights", 1, 2, False) and values is w
    np.testing.assert_array_equal(pooled, display.overview(w, True, False))
    fig = shown_figure(HeadPlot, 600, 600)
    calls = []
    real = ShownMap.pooled
    monkeypatch.setattr(ShownMap, "pooled", lambda self, *a: calls.append(a) or real(self, *a))
    fig.set_head(w, [f"t{i}" for i in range(n)], "t", overview=pooled)
    assert not any(a[0] == (0, n) and a[1] == (0, n) for a in calls)  # the whole map was not pooled again
    np.testing.assert_array_equal(fig.image.image, pooled)
    fig.set_head(w, [f"t{i}" for i in range(n)], "t", hide_first=True)  # none given: pooled here, as before
    assert any(a[0] == (0, n) and a[1] == (0, n) for a in calls)
    np.testing.assert_allclose(fig.image.image, display.overview(w, True, True), equal_nan=True)
