"""Display transforms of attention maps (pure numpy, shared by the GUI views and the exports).

Nothing here changes what the model computed; these only decide how it is drawn.
"""
from __future__ import annotations

import numpy as np

SCALES = ("linear", "log", "power")
SCALE_LABELS = {"linear": "linear", "log": "log₁₀", "power": "√ (square root)"}  # ids are saved in settings
POWER_GAMMA = 0.5
LOG_FLOOR = 1e-4  # weights below this are drawn as the floor of the log scale
LABEL_CHARS = 24  # token labels longer than this are elided in figures


def elide(label: str, limit: int = LABEL_CHARS) -> str:
    """``label`` cut to ``limit`` characters, the last one "…" when anything was cut."""
    return label if len(label) <= limit else label[: max(0, limit - 1)] + "…"


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


def shown_weights(weights: np.ndarray, causal: bool = True, hide_first: bool = False) -> np.ndarray:
    """What a head map draws: (n, n) float32, NaN on cells with nothing to show (drawn as background).

    ``causal``: keys after their query (j > i) are NaN, the model's mask; an encoder (False) masks
    nothing. ``hide_first``: :func:`without_first_key` first (key 0 NaN, rows renormalised)."""
    matrix = without_first_key(weights) if hide_first else np.array(weights, dtype=np.float32)
    if causal:
        n_query, n_key = matrix.shape[-2:]
        future = ~np.tri(n_query, n_key, n_key - n_query, dtype=bool)  # j > i + (n_key − n_query)
        matrix = np.where(future, np.float32(np.nan), matrix)
    return matrix.astype(np.float32, copy=False)


def apply_scale(values: np.ndarray, scale: str) -> tuple[np.ndarray, tuple[float, float]]:
    """Map weights to drawable values and the (low, high) levels of the colour scale.

    The top of the scale is the largest finite value (1 when there is none or it is ≤ 0):
    linear draws w on (0, top); power draws √w on (0, √top); log draws log₁₀(max(w, LOG_FLOOR)) on
    (log₁₀ LOG_FLOOR, log₁₀ top). NaN stays NaN (drawn as background).
    """
    v = np.asarray(values, dtype=np.float32)
    finite = v[np.isfinite(v)]
    top = float(finite.max()) if finite.size else 1.0
    top = top if top > 0 else 1.0
    if scale == "linear":
        return v, (0.0, top)
    if scale == "power":
        with np.errstate(invalid="ignore"):
            return np.clip(v, 0, None) ** np.float32(POWER_GAMMA), (0.0, top**POWER_GAMMA)
    if scale == "log":
        with np.errstate(divide="ignore", invalid="ignore"):
            logged = np.log10(np.clip(v, LOG_FLOOR, None))
        logged = np.where(np.isnan(v), np.nan, logged)
        return logged.astype(np.float32), (float(np.log10(LOG_FLOOR)), max(float(np.log10(top)), np.log10(LOG_FLOOR) + 1e-6))
    raise ValueError(f"unknown scale {scale!r}; choose one of {SCALES}")


def pool_edges(n: int, size: int) -> np.ndarray:
    """Start index of each of ``min(n, size)`` bins splitting 0…n−1 as evenly as integers allow."""
    return np.linspace(0, n, min(n, size) + 1).astype(int)[:-1]


def _pool_rows(values: np.ndarray, edges: np.ndarray, row_scale: np.ndarray | None = None) -> np.ndarray:
    """(..., n, m) → (..., c, m): the max (NaN ignored) over each bin of rows, each row first multiplied by
    ``row_scale`` (..., n) when given. One bin at a time: a reduction over whole contiguous rows is fast."""
    bounds = [*edges, values.shape[-2]]
    out = np.empty((*values.shape[:-2], len(edges), values.shape[-1]), dtype=np.float32)
    for b in range(len(edges)):
        block = values[..., bounds[b] : bounds[b + 1], :]
        if row_scale is not None:
            block = block * row_scale[..., bounds[b] : bounds[b + 1], None]
        np.fmax.reduce(block, axis=-2, out=out[..., b, :])
    return out


def pooled(matrix: np.ndarray, size: int) -> np.ndarray:
    """Shrink (..., n, n) to at most (..., size, size) by max-pooling (NaN ignored), so one-pixel lines
    (a previous-token diagonal) stay visible in a thumbnail. Maps already small enough are returned as they are."""
    n = matrix.shape[-1]
    if n <= size:
        return matrix
    edges = pool_edges(n, size)
    return np.fmax.reduceat(_pool_rows(np.asarray(matrix, dtype=np.float32), edges), edges, axis=-1)


class PooledRows:
    """H heads' (n, n) maps max-pooled as :func:`pooled_heads` pools them (``hide_first`` too), from blocks of
    query rows given in any order (:meth:`add`), so a map computed a block at a time is pooled without ever being
    whole: the max of a bin is the max of its rows' maxima, whichever block each row came in. ``result`` (H, c, c)
    float32, c = min(n, size); NaN where a bin has nothing (hide_first: the first key's bin, row 0). When n ≤ size
    the maps are kept as they are (with ``hide_first``, :func:`without_first_key` of each row)."""

    def __init__(self, n_heads: int, n: int, size: int, hide_first: bool = False):
        self.n, self.hide_first = n, hide_first
        self.edges = pool_edges(n, size) if n > size else None
        c = n if self.edges is None else len(self.edges)
        self.result = np.full((n_heads, c, c), np.nan, dtype=np.float32)

    def add(self, start: int, block: np.ndarray) -> None:
        """Query rows start … start + b − 1 of every head: block (H, b, n), or (H, b, m) with m < n for a block of a
        causal map cut after its last visible key (the keys m … n − 1 are zeros there: weights ≥ 0, so a bin of
        them pools to 0; not with ``hide_first``)."""
        stop = start + block.shape[-2]
        width = block.shape[-1]
        if width < self.n and self.hide_first:
            raise ValueError("a cut block cannot be pooled with the first key hidden")
        if self.edges is None:
            self.result[:, start:stop, :width] = without_first_key(block) if self.hide_first else block
            self.result[:, start:stop, width:] = 0
            return
        first, last = np.searchsorted(self.edges, [start, stop - 1], side="right") - 1  # the row bins touched
        local = np.maximum(self.edges[first:last + 1] - start, 0)  # where each bin's rows start in the block
        values = np.asarray(block, dtype=np.float32)
        if self.hide_first:
            rest = values[..., 1:]  # (H, b, n−1), a view
            total = rest.sum(axis=-1)  # (H, b)
            with np.errstate(divide="ignore"):
                scale = np.where(total > 0, 1 / total, np.float32(np.nan)).astype(np.float32)  # row 0: NaN, ignored
            part = np.fmax.reduceat(_pool_rows(rest, local, scale), np.maximum(self.edges - 1, 0), axis=-1)
            if self.edges[1] == 1:
                part[..., 0] = np.nan  # the first key bin held key 0 alone
        else:  # the key bins that start before the block's last column (all of them unless it is cut)
            part = np.fmax.reduceat(_pool_rows(values, local), self.edges[self.edges < width], axis=-1)
        bins = self.result[:, first:last + 1]  # (H, bins touched, c)
        inside = part.shape[-1]
        np.fmax(bins[..., :inside], part, out=bins[..., :inside])
        np.fmax(bins[..., inside:], 0, out=bins[..., inside:])  # a cut block's keys past its width: zeros


def pooled_heads(attentions: np.ndarray, size: int, hide_first: bool = False) -> np.ndarray:
    """(layer, head, n, n) → (layer, head, c, c), c = min(n, size): each head max-pooled, after
    :func:`without_first_key` when ``hide_first``. Equal to ``pooled(without_first_key(a), size)``
    but without a renormalised float64 copy of every head: each row bin is scaled by 1 / (its rows'
    sums over keys ≥ 1) just before it is pooled, one layer at a time, in float32 (:class:`PooledRows`)."""
    L, H, n, _ = attentions.shape
    if not hide_first:
        return np.stack([pooled(np.asarray(attentions[layer], dtype=np.float32), size) for layer in range(L)])
    if n <= size:
        return np.stack([without_first_key(attentions[layer]) for layer in range(L)])
    out = np.empty((L, H, min(n, size), min(n, size)), dtype=np.float32)
    for layer in range(L):
        rows = PooledRows(H, n, size, hide_first=True)
        rows.add(0, attentions[layer])
        out[layer] = rows.result
    return out


def grid_mosaic(attentions: np.ndarray, cell: int, gap: int = 1, hide_first: bool = False) -> tuple[np.ndarray, int]:
    """Tile every head into one (layer·(c+gap)−gap, head·(c+gap)−gap) image, c = min(n, cell); NaN in the gaps.

    Each head is :func:`pooled_heads` (max-pooled to c, renormalised past key 0 when ``hide_first``).
    Returns the mosaic and the cell size c used. Row blocks are layers, column blocks heads.
    """
    blocks = pooled_heads(attentions, cell, hide_first)  # (L, H, c, c)
    L, H, c, _ = blocks.shape
    pitch = c + gap
    mosaic = np.full((L * pitch - gap, H * pitch - gap), np.nan, dtype=np.float32)
    for layer in range(L):
        for head in range(H):
            mosaic[layer * pitch : layer * pitch + c, head * pitch : head * pitch + c] = blocks[layer, head]
    return mosaic, c


def format_bytes(b: float) -> str:
    """Bytes for people, in binary units everywhere AttnScope shows a size: whole bytes below one KiB,
    KiB below one MiB (1 KiB = 1024 bytes), MiB below one GiB, GiB above."""
    if b < 2**10:
        return f"{b:,.0f} bytes"
    if b >= 2**30:
        return f"{b / 2**30:,.2f} GiB"
    return f"{b / 2**10:,.1f} KiB" if b < 2**20 else f"{b / 2**20:,.2f} MiB"
