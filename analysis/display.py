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

    (..., n, n) → (..., n, n) float32: column 0 becomes NaN; a row with no other allowed key (row 0) is all NaN.
    Each row's sum over keys 1 … n−1 is taken in float64; the division is float32, in place in the copy (no float64
    copy of the map: 512 MiB at 8,192 tokens)."""
    w = np.array(weights, dtype=np.float32)  # the copy returned
    rest = w[..., 1:]
    total = rest.sum(axis=-1, keepdims=True, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        np.divide(rest, np.where(total > 0, total, np.nan).astype(np.float32), out=rest)
    w[..., 0] = np.nan
    return w


def shown_weights(weights: np.ndarray, causal: bool = True, hide_first: bool = False) -> np.ndarray:
    """What a head map draws: (n, n) float32, NaN on cells with nothing to show (drawn as background).

    ``causal``: keys after their query (j > i) are NaN, the model's mask; an encoder (False) masks
    nothing. ``hide_first``: :func:`without_first_key` first (key 0 NaN, rows renormalised). One float32 copy,
    masked in place row by row (no n × n mask beside it)."""
    matrix = without_first_key(weights) if hide_first else np.array(weights, dtype=np.float32)
    if causal:
        n_query, n_key = matrix.shape[-2:]
        offset = n_key - n_query  # query i sees keys 0 … i + offset
        for i in range(max(0, -offset - 1), n_query):
            matrix[..., i, max(0, i + offset + 1):] = np.nan
    return matrix


def apply_scale(values: np.ndarray, scale: str) -> tuple[np.ndarray, tuple[float, float]]:
    """Map weights to drawable values and the (low, high) levels of the colour scale.

    The top of the scale is the largest finite value (1 when there is none or it is ≤ 0):
    linear draws w on (0, top); power draws √w on (0, √top); log draws log₁₀(max(w, LOG_FLOOR)) on
    (log₁₀ LOG_FLOOR, log₁₀ top). NaN stays NaN (drawn as background).
    """
    v = np.asarray(values, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        top = float(np.fmax.reduce(v, axis=None)) if v.size else np.nan  # NaN ignored; NaN when all are NaN
    top = top if np.isfinite(top) and top > 0 else 1.0
    if scale == "linear":
        return v, (0.0, top)
    if scale == "power":
        with np.errstate(invalid="ignore"):
            rooted = np.clip(v, 0, None)  # NaN stays NaN
            return np.sqrt(rooted, out=rooted) if POWER_GAMMA == 0.5 else rooted ** np.float32(POWER_GAMMA), (
                0.0, top**POWER_GAMMA)
    if scale == "log":
        logged = np.clip(v, np.float32(LOG_FLOOR), None)  # NaN stays NaN, through the log too
        with np.errstate(divide="ignore", invalid="ignore"):
            np.log10(logged, out=logged)
        return logged, (float(np.log10(LOG_FLOOR)), max(float(np.log10(top)), np.log10(LOG_FLOOR) + 1e-6))
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


def pool_stride(extent: int, pixels: int) -> int:
    """The cells one pixel of :func:`pool_window` covers along a side of ``extent`` cells drawn on ``pixels``
    screen pixels: ⌈extent / pixels⌉, at least 1 (1: every cell its own pixel or more, full resolution)."""
    return max(1, -(-int(extent) // max(1, int(pixels))))


def pool_window(values: np.ndarray, rows: tuple[int, int], cols: tuple[int, int], stride: int) -> np.ndarray:
    """The window ``values[rows[0]:rows[1], cols[0]:cols[1]]`` of an (n, m) map max-pooled over square bins of
    ``stride`` × ``stride`` cells: out[a, b] = max of values[r0 + a·s : r0 + (a+1)·s, c0 + b·s : c0 + (b+1)·s]
    (the last bins of a side hold what is left), NaN ignored, NaN where a bin has only NaN (a causal map's
    future, a hidden first key). (⌈h / s⌉, ⌈w / s⌉) float32. A max, not a mean: a one-cell line (a
    previous-token diagonal, one key every query reads) keeps its full value at any stride, and a monotone
    colour scale (linear, √, log) gives the same picture pooled before or after it. ``stride`` 1: the window
    itself (a float32 copy)."""
    s = int(stride)
    if s < 1:
        raise ValueError(f"stride must be at least 1, got {stride}")
    (r0, r1), (c0, c1) = (max(0, int(r)) for r in rows), (max(0, int(c)) for c in cols)
    window = np.asarray(values)[r0:r1, c0:c1]
    if s == 1:
        return np.array(window, dtype=np.float32)
    h, w = window.shape
    out = np.empty((-(-h // s), -(-w // s)), dtype=np.float32)
    for a, start in enumerate(range(0, h, s)):  # one band of s rows at a time: a reduction over whole rows is fast
        band = np.fmax.reduce(np.asarray(window[start:start + s], dtype=np.float32), axis=0)  # (w,)
        out[a] = np.fmax.reduceat(band, np.arange(0, w, s))
    return out


class ShownMap:
    """What a head map draws (:func:`shown_weights`) read cell by cell, row by row or pooled, without the n × n
    float32 copy shown_weights makes (256 MiB at 8,192 tokens, most of a second of first-touch page faults here).

    ``weights`` (n_query, n_key), kept as given (read-only). The cell (i, j) shown is NaN where the model hides
    key j from query i (``causal``: j > i + n_key − n_query), else w[i, j]; with ``hide_first`` NaN for j = 0
    and w[i, j] / Σ_{j' ≥ 1} w[i, j'] (the row renormalised over keys 1 …, NaN where that sum is 0), the sums
    taken once in float64. Equal, cell for cell, to ``shown_weights(weights, causal, hide_first)``."""

    def __init__(self, weights: np.ndarray, causal: bool = True, hide_first: bool = False):
        self.weights = np.asarray(weights)
        if self.weights.ndim != 2:
            raise ValueError(f"a head map is (query, key), got shape {self.weights.shape}")
        self.shape = self.weights.shape
        self.causal, self.hide_first = bool(causal), bool(hide_first)
        self.offset = self.shape[1] - self.shape[0]  # query i sees keys 0 … i + offset
        self.scale: np.ndarray | None = None  # hide_first: 1 / Σ_{j ≥ 1} w[i, j] per row (NaN where it is 0)
        if hide_first:
            total = self.weights[:, 1:].sum(axis=1, dtype=np.float64)
            with np.errstate(divide="ignore"):
                self.scale = np.where(total > 0, 1 / np.where(total > 0, total, 1), np.nan)

    def __getitem__(self, cell: tuple[int, int]) -> float:
        """The value shown at cell (query, key)."""
        q, k = (int(c) for c in cell)
        if (self.causal and k > q + self.offset) or (self.hide_first and k == 0):
            return float("nan")
        value = float(self.weights[q, k])
        return value if self.scale is None else float(np.float32(value * self.scale[q]))

    def row(self, q: int) -> np.ndarray:
        """Query ``q``'s row as shown: (n_key,) float32, NaN where hidden or masked."""
        out = np.array(self.weights[q], dtype=np.float32)
        if self.scale is not None:
            out *= np.float32(self.scale[q])
            out[0] = np.nan
        if self.causal:
            out[max(0, q + self.offset + 1):] = np.nan
        return out

    def pooled(self, rows: tuple[int, int], cols: tuple[int, int], stride: int) -> np.ndarray:
        """:func:`pool_window` of the shown map: each stride × stride bin's max over its shown cells, NaN where
        it has none. Pooled from the weights themselves: a causal map's hidden cells are weights of 0 (the
        softmax of a masked score), so they never raise a bin's max, and a bin that holds only hidden cells (all
        of its keys after all of its queries) is set to NaN; the first key is left out of its bin with
        ``hide_first``, each row scaled before it is pooled."""
        s = int(stride)
        if s < 1:
            raise ValueError(f"stride must be at least 1, got {stride}")
        r0, r1 = max(0, int(rows[0])), min(self.shape[0], int(rows[1]))
        c0, c1 = max(0, int(cols[0])), min(self.shape[1], int(cols[1]))
        h, w = r1 - r0, c1 - c0
        out = np.empty((-(-h // s), -(-w // s)), dtype=np.float32)
        starts = np.arange(0, w, s)
        for a, start in enumerate(range(r0, r1, s)):
            block = np.asarray(self.weights[start:min(r1, start + s), c0:c1], dtype=np.float32)
            if self.scale is not None:
                block = block * self.scale[start:start + block.shape[0], None].astype(np.float32)
            band = np.fmax.reduce(block, axis=0)  # (w,)
            if self.hide_first and c0 == 0:
                band[0] = np.nan
            if self.causal:  # keys after the band's last query: hidden from every row of the band
                band[max(0, start + block.shape[0] - 1 + self.offset + 1 - c0):] = np.nan
            out[a] = np.fmax.reduceat(band, starts) if s > 1 else band
        return out


#: A map with more tokens than this a side is drawn as a pooled overview (:func:`overview`) plus a detail tile.
OVERVIEW_CELLS = 1024


def overview(weights: np.ndarray, causal: bool, hide_first: bool, cells: int = OVERVIEW_CELLS,
             shown: ShownMap | None = None) -> np.ndarray | None:
    """The whole map as a long head view draws it: :meth:`ShownMap.pooled` over every cell at stride
    ``pool_stride(n, cells)`` (each bin's max over its shown cells); None when the map fits ``cells`` a side
    (stride 1: the map itself is drawn). 8,192² cells take ~90 ms here: computed where the map is, off the GUI
    thread (:class:`PreparedHead`). ``shown``: the map's ShownMap for these options when it is made already."""
    shown = ShownMap(weights, causal, hide_first) if shown is None else shown
    stride = pool_stride(max(shown.shape), cells)
    if stride == 1:
        return None
    pooled = shown.pooled((0, shown.shape[0]), (0, shown.shape[1]), stride)
    pooled.setflags(write=False)
    return pooled


def top_keys(row: np.ndarray, k: int = 5) -> list[tuple[int, float]]:
    """The ``k`` largest finite values of one query's row as (key, value), largest first; ties in key order.
    NaN (a masked or hidden key) is never among them."""
    values = np.asarray(row, dtype=np.float64)
    finite = np.flatnonzero(np.isfinite(values))
    if not finite.size or k < 1:
        return []
    order = finite[np.argsort(-values[finite], kind="stable")][:k]
    return [(int(j), float(values[j])) for j in order]


def in_context(tokens, index: int, around: int = 3) -> tuple[str, str, str]:
    """Token ``index`` with up to ``around`` tokens each side, joined as the text reads: (before, the token, after),
    "…" where the text goes on."""
    before = "".join(tokens[max(0, index - around):index])
    after = "".join(tokens[index + 1:index + 1 + around])
    return ("…" if index - around > 0 else "") + before, tokens[index], after + (
        "…" if index + 1 + around < len(tokens) else "")


def pooled_row(row: np.ndarray, bins: int) -> tuple[np.ndarray, int]:
    """One query's row (n,) max-pooled over bins of s = ⌈n / bins⌉ keys (NaN ignored; NaN where a bin has only
    NaN): (the (⌈n / s⌉,) maxima, s). A strip of n keys on fewer pixels keeps every peak."""
    values = np.asarray(row, dtype=np.float32)
    s = pool_stride(values.shape[0], bins)
    if s == 1:
        return values.copy(), 1
    return np.fmax.reduceat(values, np.arange(0, values.shape[0], s)), s


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


def seconds_left(elapsed: float, done: int, left: int) -> float | None:
    """Seconds ``left`` more steps will take at the pace of the ``done`` ones (``elapsed`` seconds); None before a
    step is done (no pace yet)."""
    return None if done < 1 or elapsed <= 0 else elapsed / done * left


def format_duration(seconds: float | None) -> str:
    """An estimate for people, rounded: "12 s", "3 min", "1 h 05 min"; "?" when there is none (None or NaN)."""
    if seconds is None or not seconds == seconds:
        return "?"
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    return f"{int(seconds // 3600)} h {round(seconds % 3600 / 60):02d} min"


def head_name(layer: int, head: int) -> str:
    """How the app names a head everywhere it names one: "L1H0" is layer 1, head 0 (both counted from 0), as
    TransformerLens writes it. ``--heads``, ``--select`` and the Ablation field accept it beside "1.0"."""
    return f"L{int(layer)}H{int(head)}"


#: Decimals of every head score the app shows (tables, badges, maps, hovers, exports' captions): one rule, so a
#: head reads the same everywhere (0.998 is "0.998" in the table, on its badge and on the map, never "1.00" or "1.0").
SCORE_DECIMALS = 3


def format_score(value: float, signed: bool = False) -> str:
    """A head score as the app shows it: rounded to :data:`SCORE_DECIMALS` decimals ("0.998"); ``signed`` writes the
    sign of a change ("+0.770", "−0.012", with a true minus); "–" for NaN (a score that does not apply)."""
    value = float(value)
    if not value == value:
        return "–"
    text = f"{value:+.{SCORE_DECIMALS}f}" if signed else f"{value:.{SCORE_DECIMALS}f}"
    return text.replace("-", "−")


def colour_index(drawn: np.ndarray, levels: tuple[float, float]) -> np.ndarray:
    """(rows, columns) uint16: each cell's entry in a table of 256 colours spread over ``levels`` (low, high), as
    pyqtgraph colours an image: v → ⌊(v − low) · 256 / (high − low)⌋ clipped to 0 … 255 (a span of 0 counts as 1);
    NaN → 256, the table's transparent entry. Computed in float64, as pyqtgraph does."""
    drawn = np.asarray(drawn)
    low, high = float(levels[0]), float(levels[1])
    scale = 256 / (high - low if high != low else 1)
    nan = np.isnan(drawn)
    index = np.where(nan, low, drawn).astype(np.float64)
    index -= low
    index *= scale
    np.clip(index, 0, 255, out=index)
    out = index.astype(np.uint16)
    out[nan] = 256
    return out


class PreparedHead:
    """Everything a head figure draws of one map, made where the map is (the worker) so that the GUI thread only
    hands it over: at 2,048 tokens or more, ~20 ms of numpy a new head otherwise (bench: the GUI-thread stall).

    For ``weights`` (n, n) drawn with ``causal``, ``hide_first`` and ``scale``: ``stride`` (:func:`pool_stride` of
    n over ``cells``); ``matrix`` what the figure looks cells up in (:func:`shown_weights` at stride 1, else the
    :class:`ShownMap`); ``drawn`` and ``levels`` the image (the map, or its :func:`overview`) through
    :func:`apply_scale`; ``index`` its :func:`colour_index`. Read-only."""

    def __init__(self, weights: np.ndarray, causal: bool, hide_first: bool, scale: str,
                 cells: int = OVERVIEW_CELLS):
        self.weights, self.causal, self.hide_first, self.scale = weights, bool(causal), bool(hide_first), scale
        self.shown = shown = ShownMap(weights, causal, hide_first)
        self.stride = pool_stride(max(shown.shape), cells)
        pooled = overview(weights, causal, hide_first, cells, shown=shown)
        # up to ``cells`` a side the image is the map as shown; past it the overview, cells looked up in the ShownMap
        self.matrix = shown_weights(weights, causal, hide_first) if pooled is None else shown
        image = self.matrix if pooled is None else pooled
        self.drawn, self.levels = apply_scale(image, scale)  # a max over cells commutes with the monotone scales
        self.index = colour_index(self.drawn, self.levels)
        for array in (self.drawn, self.index) + ((self.matrix,) if pooled is None else ()):
            array.setflags(write=False)

    def fits(self, weights: np.ndarray, causal: bool, hide_first: bool, scale: str) -> bool:
        """Whether this is the drawing of ``weights`` (the same array) with these options."""
        return (self.weights is weights and self.causal == bool(causal) and self.hide_first == bool(hide_first)
                and self.scale == scale)
