"""Display transforms: scales, hiding the first key, pooling for thumbnails."""
import numpy as np
import pytest

from analysis.display import LOG_FLOOR, apply_scale, grid_mosaic, pooled, without_first_key


def test_scales():
    w = np.array([[1.0, 0.0], [0.25, 0.75]], dtype=np.float32)
    drawn, levels = apply_scale(w, "linear", 1.0)
    assert levels == (0.0, 1.0) and np.array_equal(drawn, w)
    drawn, levels = apply_scale(w, "power", 1.0)
    np.testing.assert_allclose(drawn, np.sqrt(w)) and levels == (0.0, 1.0)
    drawn, levels = apply_scale(w, "log", 1.0)
    assert levels == (np.log10(LOG_FLOOR), 0.0) and drawn[0, 1] == np.float32(np.log10(LOG_FLOOR))
    with pytest.raises(ValueError):
        apply_scale(w, "cubic")


def test_without_first_key_renormalises_rows():
    w = np.array([[1, 0, 0], [0.5, 0.5, 0], [0.6, 0.2, 0.2]], dtype=np.float32)
    out = without_first_key(w)
    assert np.isnan(out[:, 0]).all() and np.isnan(out[0]).all()
    np.testing.assert_allclose(out[2, 1:], [0.5, 0.5])
    np.testing.assert_allclose(out[1, 1:], [1.0, 0.0])


def test_pooling_keeps_the_maximum_and_tiles_heads():
    a = np.zeros((2, 3, 10, 10), dtype=np.float32)
    a[1, 2, 7, 3] = 0.9  # one bright cell must survive pooling
    assert pooled(a[1, 2], 5)[3, 1] == np.float32(0.9)
    mosaic, cell = grid_mosaic(a, 5)
    assert cell == 5 and mosaic.shape == (2 * 6 - 1, 3 * 6 - 1)
    assert np.nanmax(mosaic[6:11, 12:17]) == np.float32(0.9) and np.isnan(mosaic[5, 0])
