"""Display transforms of attention maps (pure numpy, shared by the GUI views and the exports).

Nothing here changes what the model computed; these only decide how it is drawn.
"""
from __future__ import annotations

import numpy as np

SCALES = ("linear", "log", "power")
POWER_GAMMA = 0.5
LOG_FLOOR = 1e-4  # weights below this are drawn as the floor of the log scale


def without_first_key(weights: np.ndarray) -> np.ndarray:
    """Drop key 0 and renormalise each row over the remaining keys, to see past an attention sink.

    (..., n, n) → (..., n, n): column 0 becomes NaN; a row with no other allowed key (row 0) is all NaN.
    """
    w = np.array(weights, dtype=np.float64)
    rest = w[..., 1:]
    total = rest.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        renormalised = np.where(total > 0, rest / total, np.nan)
    out = np.full(w.shape, np.nan)
    out[..., 1:] = renormalised
    return out.astype(np.float32)


def apply_scale(values: np.ndarray, scale: str, vmax: float = 1.0) -> tuple[np.ndarray, tuple[float, float]]:
    """Map weights to drawable values and the (low, high) levels of the colour scale."""
    v = np.asarray(values, dtype=np.float32)
    vmax = float(vmax) if np.isfinite(vmax) and vmax > 0 else 1.0
    if scale == "linear":
        return v, (0.0, vmax)
    if scale == "power":
        return np.clip(v, 0, None) ** np.float32(POWER_GAMMA), (0.0, vmax**POWER_GAMMA)
    if scale == "log":
        with np.errstate(divide="ignore", invalid="ignore"):
            logged = np.log10(np.clip(v, LOG_FLOOR, None))
        logged = np.where(np.isnan(v), np.nan, logged)
        return logged.astype(np.float32), (float(np.log10(LOG_FLOOR)), float(np.log10(vmax)))
    raise ValueError(f"unknown scale {scale!r}; choose one of {SCALES}")


def pooled(matrix: np.ndarray, size: int) -> np.ndarray:
    """Shrink an (n, n) map to at most (size, size) by max-pooling, so one-pixel lines (a previous-token
    diagonal) stay visible in a thumbnail. Maps already small enough are returned as they are."""
    n = matrix.shape[-1]
    if n <= size:
        return matrix
    edges = np.linspace(0, n, size + 1).astype(int)
    rows = np.maximum.reduceat(matrix, edges[:-1], axis=-2)
    return np.maximum.reduceat(rows, edges[:-1], axis=-1)


def grid_mosaic(attentions: np.ndarray, cell: int, gap: int = 1) -> tuple[np.ndarray, int]:
    """Tile every head into one (layer·(c+gap), head·(c+gap)) image, c = min(n, cell); NaN in the gaps.

    Returns the mosaic and the cell size c used. Row blocks are layers, column blocks heads.
    """
    L, H, n, _ = attentions.shape
    c = min(n, cell)
    pitch = c + gap
    mosaic = np.full((L * pitch - gap, H * pitch - gap), np.nan, dtype=np.float32)
    for layer in range(L):
        block = pooled(attentions[layer], c)  # (H, c, c)
        for head in range(H):
            mosaic[layer * pitch : layer * pitch + c, head * pitch : head * pitch + c] = block[head]
    return mosaic, c
