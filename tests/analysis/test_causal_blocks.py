"""qk_capture.iter_causal_blocks: a causal layer's blocks cut after their last visible key, with each row's
entropy from its scores, against the full-width blocks of iter_row_blocks and a float64 entropy of their weights;
and display.PooledRows fed cut blocks against the same maps pooled whole."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis.display import PooledRows, pooled
from analysis.run.qk_capture import LayerQK, QKCapture, iter_causal_blocks, iter_row_blocks


def capture(n, window=None, spread=1.0, H=4, g=2, dk=8, seed=0, softcap=None, causal=True):
    """One layer of random queries and keys; ``spread`` scales the scores (large: peaked rows)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(H, n, dk, generator=gen) * spread
    k = torch.randn(g, n, dk, generator=gen)
    return QKCapture((LayerQK(q, k, torch.ones(H, n), dk ** -0.5, causal, window, softcap),))


def entropy64(weights: np.ndarray) -> np.ndarray:
    p = weights.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(-1)


@pytest.mark.parametrize("n,window,spread,rows", [(1, None, 1.0, None), (9, None, 1.0, 4), (50, None, 1.0, 7),
                                                  (50, 6, 1.0, 7), (40, None, 30.0, 5), (40, 3, 30.0, 1)])
def test_cut_blocks_equal_the_full_blocks_and_their_entropy(n, window, spread, rows):
    """Weights within float32 rounding of the full-width block's, zeros past the cut only; each row's entropy within
    1e-6 of −Σ p ln p in float64 of those weights, peaked rows (scores ×30) and sliding windows included. A score
    s carries a rounding of |s|·ε that its weight inherits, so the bounds grow with the scores' spread."""
    maps = capture(n, window, spread)
    full = np.concatenate([b for _, b in iter_row_blocks(maps, 0, rows)], axis=1)  # (H, n, n)
    seen = 0
    for block in iter_causal_blocks(maps, 0, rows):
        b, stop = block.weights.shape[1], block.start + block.weights.shape[1]
        assert block.weights.shape == (4, b, stop) and block.start == seen
        want = full[:, block.start:stop]
        assert not want[..., stop:].any()  # nothing is cut that a row sees
        np.testing.assert_allclose(block.weights, want[..., :stop], rtol=0, atol=2e-7 * spread)
        np.testing.assert_allclose(block.entropy, entropy64(want), rtol=0, atol=1e-6 * spread)
        seen = stop
    assert seen == n


def test_a_wrong_entropy_would_be_seen():
    """The entropy check above can fail: a uniform row's ln(keys) against a peaked row's ≈ 0."""
    flat, peaked = capture(30, spread=0.0), capture(30, spread=50.0)
    h_flat = np.concatenate([b.entropy for b in iter_causal_blocks(flat, 0)], axis=1)
    h_peaked = np.concatenate([b.entropy for b in iter_causal_blocks(peaked, 0)], axis=1)
    np.testing.assert_allclose(h_flat, np.log(np.arange(1, 31))[None].repeat(4, 0), rtol=0, atol=1e-6)
    assert h_peaked[:, 10:].mean() < 0.5 * h_flat[:, 10:].mean()


def test_soft_capping_and_encoders_are_refused():
    with pytest.raises(ValueError):
        next(iter_causal_blocks(capture(5, softcap=20.0), 0))
    with pytest.raises(ValueError):
        next(iter_causal_blocks(capture(5, causal=False), 0))


@pytest.mark.parametrize("n,size,rows", [(10, 4, 3), (50, 7, 6), (13, 96, 5)])
def test_pooled_rows_of_cut_blocks_equal_the_whole_maps_pooled(n, size, rows):
    maps = capture(n)
    full = np.concatenate([b for _, b in iter_row_blocks(maps, 0, rows)], axis=1)
    pool = PooledRows(4, n, size)
    for block in iter_causal_blocks(maps, 0, rows):
        pool.add(block.start, np.ascontiguousarray(block.weights))
    np.testing.assert_allclose(pool.result, pooled(full, size), rtol=0, atol=2e-7)
    with pytest.raises(ValueError):
        PooledRows(4, n, size, hide_first=True).add(0, full[:, :2, :2])
