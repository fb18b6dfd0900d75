"""Display transforms: scales, hiding the first key, pooling for thumbnails, label eliding."""
import numpy as np
import pytest

from analysis.display import (LOG_FLOOR, SCALE_LABELS, SCALES, apply_scale, elide, grid_mosaic, pooled,
                              pooled_heads, shown_weights, without_first_key)


def test_scales():
    w = np.array([[1.0, 0.0], [0.25, 0.75]], dtype=np.float32)
    drawn, levels = apply_scale(w, "linear")
    assert levels == (0.0, 1.0) and np.array_equal(drawn, w)
    drawn, levels = apply_scale(w, "power")
    np.testing.assert_allclose(drawn, np.sqrt(w))
    assert levels == (0.0, 1.0)
    drawn, levels = apply_scale(w, "log")
    assert levels == (np.log10(LOG_FLOOR), 0.0) and drawn[0, 1] == np.float32(np.log10(LOG_FLOOR))
    with pytest.raises(ValueError):
        apply_scale(w, "cubic")
    assert set(SCALE_LABELS) == set(SCALES) and "√" in SCALE_LABELS["power"]


def test_scale_top_is_the_largest_finite_value():
    w = np.array([[0.5, np.nan], [0.25, 0.125]], dtype=np.float32)
    assert apply_scale(w, "linear")[1] == (0.0, 0.5)
    assert apply_scale(w, "power")[1] == pytest.approx((0.0, np.sqrt(0.5)))
    assert apply_scale(w, "log")[1] == pytest.approx((np.log10(LOG_FLOOR), np.log10(0.5)))
    assert np.isnan(apply_scale(w, "log")[0][0, 1])  # NaN (hidden, masked) stays background
    assert apply_scale(np.full((2, 2), np.nan, dtype=np.float32), "linear")[1] == (0.0, 1.0)


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


def causal_attention(L, H, n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.random((L, H, n, n)).astype(np.float32) * np.tri(n, dtype=np.float32)
    return a / a.sum(-1, keepdims=True)


@pytest.mark.parametrize("n, size", [(40, 7), (40, 25), (33, 32), (12, 40), (50, 50)])
def test_pooled_heads_past_the_first_key_equals_pooling_the_renormalised_map(n, size):
    a = causal_attention(2, 3, n)
    got = pooled_heads(a, size, hide_first=True)
    expected = np.stack([pooled(without_first_key(a[layer]), size) for layer in range(2)])
    assert got.shape == expected.shape == (2, 3, min(n, size), min(n, size))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7, equal_nan=True)
    np.testing.assert_array_equal(pooled_heads(a, size), np.stack([pooled(a[layer], size) for layer in range(2)]))


def test_a_one_token_wide_diagonal_survives_pooling_at_any_size():
    n = 200
    a = np.zeros((1, 1, n, n), dtype=np.float32)
    a[0, 0, np.arange(1, n), np.arange(n - 1)] = 1.0  # a previous-token head
    for size in (7, 30, 61, 96, 150):
        p = pooled_heads(a, size)[0, 0]
        c = p.shape[0]
        # every pooled row except the first holds the diagonal, on or next to the main diagonal
        assert all(p[i, max(0, i - 1) : i + 1].max() == 1.0 for i in range(1, c))


def test_input_is_not_modified():
    a = causal_attention(1, 2, 30)
    before = a.copy()
    pooled_heads(a, 8, hide_first=True), grid_mosaic(a, 8, hide_first=True), apply_scale(a, "log")
    np.testing.assert_array_equal(a, before)


def test_elide():
    assert elide("short") == "short"
    long = "x" * 30
    assert elide(long) == "x" * 23 + "…" and len(elide(long)) == 24
    assert elide("x" * 24) == "x" * 24
    assert elide("abcdefgh", 5) == "abcd…" and elide("abcdefgh", 1) == "…"


def test_shown_weights_masks_future_keys_only_for_a_causal_model():
    rng = np.random.default_rng(0)
    full = rng.random((5, 5)).astype(np.float32)
    full /= full.sum(-1, keepdims=True)  # an encoder's rows: every key has weight
    encoder = shown_weights(full, causal=False)
    assert not np.isnan(encoder).any() and np.array_equal(encoder, full)  # nothing drawn as masked
    decoder = shown_weights(full, causal=True)
    i, j = np.indices((5, 5))
    assert np.array_equal(np.isnan(decoder), j > i)  # exactly the future keys, written out by hand
    assert np.array_equal(decoder[j <= i], full[j <= i])
    hidden = shown_weights(full, causal=False, hide_first=True)
    assert np.isnan(hidden[:, 0]).all() and not np.isnan(hidden[:, 1:]).any()
    np.testing.assert_allclose(hidden[2, 1:], full[2, 1:] / full[2, 1:].sum(), rtol=1e-6)  # renormalised by hand
    assert np.array_equal(full, shown_weights(full, False))  # not aliased: the input is unchanged below
    shown_weights(full, True)[0, 0] = 7
    assert full[0, 0] != 7


# ----------------------------------------------------------------------------- long maps: pooled windows, cells, rows
def causal_map(n_query: int, n_key: int, seed: int = 0) -> np.ndarray:
    """A causal attention map: each row a softmax over the keys its query sees, exact zeros after them."""
    rng = np.random.default_rng(seed)
    w = rng.random((n_query, n_key)).astype(np.float32) ** 4
    offset = n_key - n_query
    for i in range(n_query):
        w[i, i + offset + 1:] = 0
    return w / w.sum(axis=1, keepdims=True)


def max_over_bins(values: np.ndarray, rows, cols, s: int) -> np.ndarray:
    """The definition, one bin at a time: the max of each s × s bin's finite cells (NaN when it has none)."""
    window = values[rows[0]:rows[1], cols[0]:cols[1]]
    h, w = -(-window.shape[0] // s), -(-window.shape[1] // s)
    out = np.full((h, w), np.nan, dtype=np.float32)
    for a in range(h):
        for b in range(w):
            cells = window[a * s:(a + 1) * s, b * s:(b + 1) * s]
            cells = cells[np.isfinite(cells)]
            if cells.size:
                out[a, b] = cells.max()
    return out


@pytest.mark.parametrize("stride", [1, 2, 3, 7, 16])
@pytest.mark.parametrize("rows,cols", [((0, 45), (0, 45)), ((5, 33), (2, 41)), ((40, 45), (0, 9))])
def test_pool_window_is_the_max_over_each_bin(stride, rows, cols):
    from analysis.display import pool_window

    values = shown_weights(causal_map(45, 45))  # NaN above the diagonal
    np.testing.assert_array_equal(pool_window(values, rows, cols, stride), max_over_bins(values, rows, cols, stride))
    with pytest.raises(ValueError):
        pool_window(values, rows, cols, 0)


@pytest.mark.parametrize("hide_first", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(40, 40), (23, 40)])
def test_a_shown_map_is_shown_weights_cell_by_cell_row_by_row_and_pooled(hide_first, causal, shape):
    """ShownMap (no n × n copy) against shown_weights (the copy): every cell, every row, and pooled windows
    against the bin-by-bin max of shown_weights; a causal map's hidden cells are the softmax's zeros."""
    from analysis.display import ShownMap

    weights = causal_map(*shape, seed=3)
    expected = shown_weights(weights, causal, hide_first)
    shown = ShownMap(weights, causal, hide_first)
    assert shown.shape == expected.shape
    cells = np.array([[shown[q, k] for k in range(shape[1])] for q in range(shape[0])])
    np.testing.assert_allclose(cells, expected, rtol=3e-7, equal_nan=True)
    for q in range(shape[0]):
        np.testing.assert_allclose(shown.row(q), expected[q], rtol=3e-7, equal_nan=True)
    for stride in (1, 2, 5, 9):
        for rows, cols in (((0, shape[0]), (0, shape[1])), ((3, 20), (1, 37))):
            np.testing.assert_allclose(shown.pooled(rows, cols, stride), max_over_bins(expected, rows, cols, stride),
                                       rtol=3e-7, equal_nan=True)


def test_a_one_cell_diagonal_keeps_its_value_in_every_pooled_bin_it_crosses():
    from analysis.display import ShownMap

    n = 100
    w = np.zeros((n, n), np.float32)
    w[:, 0] = 0.5
    w[np.arange(1, n), np.arange(n - 1)] += 0.4  # previous-token, on top of the sink column
    w[np.arange(n), np.arange(n)] += 1 - w.sum(axis=1)
    pooled = ShownMap(w).pooled((0, n), (0, n), 8)
    for a in range(len(pooled)):  # the diagonal bin of each band of rows holds ≥ 0.4 (0.5 in the first column)
        assert pooled[a, a] >= 0.4 - 1e-6
    assert np.isnan(pooled[0, 1:]).all()  # keys after every query of the band: hidden, background


def test_top_keys_in_context_and_pooled_rows():
    from analysis.display import in_context, pooled_row, top_keys

    row = np.array([0.1, np.nan, 0.5, 0.2, 0.5, np.nan], dtype=np.float32)
    assert top_keys(row, 3) == [(2, 0.5), (4, 0.5), (3, pytest.approx(0.2))]  # ties in key order, NaN never
    assert top_keys(np.full(3, np.nan), 2) == []
    tokens = ["The", " cat", " sat", " on", " the", " mat", "."]
    assert in_context(tokens, 3, 2) == ("… cat sat", " on", " the mat…")
    assert in_context(tokens, 0, 2) == ("", "The", " cat sat…")
    assert in_context(tokens, 6, 2) == ("… the mat", ".", "")
    values = np.arange(10, dtype=np.float32)[::-1].copy()
    values[4] = np.nan
    got, stride = pooled_row(values, 4)
    assert stride == 3 and got.tolist() == [9, 6, 3, 0]  # the max of keys 0–2, 3–5 (NaN ignored), 6–8, 9
    got, stride = pooled_row(values, 20)
    assert stride == 1 and np.array_equal(got, values, equal_nan=True)
