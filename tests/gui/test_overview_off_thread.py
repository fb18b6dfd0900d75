"""A long head map's overview is pooled, and its image coloured, where the map is made (the head-map worker), not when
the Head tab draws it: at 8,192 tokens the pooling was the longest GUI-thread stall of a run (89 ms), at 2,048 the
colouring (~20 ms, in the paint)."""
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
    from gui.plots import plot_items
    from gui.plots.figures import HeadPlot
    from gui.state.head_maps import head_map_task

    n = 1500  # past OVERVIEW_CELLS: a pooled overview
    w = causal_map(n)
    result = SimpleNamespace(causal=True, head_map=lambda layer, head: w)
    kind, layer, head, values, prepared, hide_first = head_map_task(result, "weights", 1, 2, hide_first=False,
                                                                   scale="power")(None)
    assert (kind, layer, head, hide_first) == ("weights", 1, 2, False) and values is w
    want, want_levels = display.apply_scale(display.overview(w, True, False), "power")
    np.testing.assert_array_equal(prepared.drawn, want)
    assert prepared.levels == want_levels and prepared.fits(w, True, False, "power")
    assert not prepared.fits(w, True, False, "linear") and not prepared.fits(w.copy(), True, False, "power")
    fig = shown_figure(HeadPlot, 600, 600)
    calls, coloured = [], []
    real, real_index = ShownMap.pooled, plot_items.colour_index
    monkeypatch.setattr(ShownMap, "pooled", lambda self, *a: calls.append(a) or real(self, *a))
    monkeypatch.setattr(plot_items, "colour_index", lambda *a: coloured.append(a) or real_index(*a))
    monkeypatch.setattr(display, "colour_index", lambda *a: coloured.append(a) or real_index(*a))
    fig.set_head(w, [f"t{i}" for i in range(n)], "t", scale="power", prepared=prepared)
    fig.image.render()
    assert not any(a[0] == (0, n) and a[1] == (0, n) for a in calls)  # the whole map was not pooled again
    assert not coloured  # nor its image coloured: the worker's colour index was used
    np.testing.assert_array_equal(fig.image.image, want)
    prepared_pixels = fig.image.qimage.copy()
    fig.set_head(w, [f"t{i}" for i in range(n)], "t", scale="power")  # none given: made here, the same picture
    fig.image.render()
    assert any(a[0] == (0, n) and a[1] == (0, n) for a in calls) and coloured
    assert fig.image.qimage == prepared_pixels
    fig.set_head(w, [f"t{i}" for i in range(n)], "t", hide_first=True, prepared=prepared)  # another option: not used
    np.testing.assert_allclose(fig.image.image, display.overview(w, True, True), equal_nan=True)


def test_the_colour_index_is_how_pyqtgraph_colours_an_image(qtbot):
    """Each cell's colour through the index and the 257-entry table equals pyqtgraph's own rendering of the image
    (no NaN, so pyqtgraph colours every cell), on values at, between and past the levels."""
    import pyqtgraph as pg
    from PySide6 import QtGui

    from gui.plots.plot_items import argb_with_nan, colormap
    from analysis.display import colour_index

    rng = np.random.default_rng(3)
    image = np.concatenate([rng.random((20, 40)), np.linspace(-0.2, 1.3, 40)[None]]).astype(np.float32)
    levels = (0.1, 0.9)
    lut = colormap("viridis").getLookupTable(nPts=256, alpha=True)
    item = pg.ImageItem(axisOrder="row-major")
    item.setImage(image, levels=levels, autoLevels=False, lut=lut)
    item.render()
    theirs = item.qimage.convertToFormat(QtGui.QImage.Format.Format_ARGB32)
    ours = argb_with_nan(image, np.asarray(levels), lut, colour_index(image, levels))
    assert ours.size() == theirs.size()
    assert all(ours.pixel(x, y) == theirs.pixel(x, y) for y in range(image.shape[0]) for x in range(image.shape[1]))
    with_nan = image.copy()
    with_nan[0, :5] = np.nan
    index = colour_index(with_nan, levels)
    assert (index[0, :5] == 256).all() and index.max() == 256 and index[1:].max() == 255
    assert QtGui.QColor.fromRgba(argb_with_nan(with_nan, np.asarray(levels), lut, index).pixel(0, 0)).alpha() == 0
