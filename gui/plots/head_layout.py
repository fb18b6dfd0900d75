"""Where each head's cell lies in a layer × head map whose layers may be wrapped into several side-by-side blocks.

A map of L layers × H heads is drawn as ``blocks`` blocks of R = ⌈L / blocks⌉ layers each, left to right: block b
holds layers b·R … b·R + R − 1, top to bottom, each layer's heads left to right. In data coordinates every cell is a
unit square: head h of layer l, with b = l // R, is

    x ∈ [b·H + h, b·H + h + 1],   y ∈ [l − b·R, l − b·R + 1]

and the whole map is ``columns`` = blocks·H wide and ``rows`` = R tall. One block is the plain map (x = h, y = l).
The last block's cells past layer L − 1 hold no head. A tall, narrow grid (SmolLM2's 30 layers × 9 heads) in a
panel wider than that fills it in two blocks of 15 layers with cells near square (:func:`blocks_for`), instead of a
column of tiny square cells a third of the panel wide, or cells stretched three times wider than tall.

Pure arithmetic (no Qt): the grid, its clicks, hover, badges, selection and separators all ask this one object.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HeadLayout:
    n_layer: int
    n_head: int
    blocks: int = 1

    def __post_init__(self):
        if self.n_layer < 0 or self.n_head < 0 or self.blocks < 1:
            raise ValueError(f"no layout of {self.n_layer} × {self.n_head} heads in {self.blocks} blocks")

    @property
    def rows(self) -> int:
        """R = ⌈L / blocks⌉: the layers a block holds (the map's height in cells)."""
        return -(-self.n_layer // self.blocks)

    @property
    def columns(self) -> int:
        """blocks·H: the map's width in cells."""
        return self.blocks * self.n_head

    def origin(self, layer: int, head: int) -> tuple[int, int]:
        """(x, y) of the top-left corner of head ``head`` of ``layer``'s unit cell."""
        b, row = divmod(int(layer), self.rows)
        return b * self.n_head + int(head), row

    def block_layers(self, block: int) -> range:
        """The layers of block ``block``, top to bottom."""
        return range(block * self.rows, min(self.n_layer, (block + 1) * self.rows))

    def axis_label(self) -> str:
        """The label under the map: "head", and with blocks which layers each block holds, left to right
        ("head · blocks left to right: L0–L14 | L15–L29"): every block's heads read H0…H8 alike."""
        if self.blocks == 1:
            return "head"
        spans = [self.block_layers(b) for b in range(self.blocks)]
        return "head · blocks left to right: " + " | ".join(
            f"L{span[0]}–L{span[-1]}" if len(span) > 1 else f"L{span[0]}" for span in spans if len(span))

    def head_at(self, row: int, column: int) -> tuple[int, int] | None:
        """(layer, head) of the cell in grid row ``row``, column ``column`` (cell units, 0-based); None outside the
        map or on a cell that holds no head (the last block's tail)."""
        row, column = int(row), int(column)
        if not (0 <= row < self.rows and 0 <= column < self.columns):
            return None
        b, head = divmod(column, self.n_head)
        layer = b * self.rows + row
        return (layer, head) if layer < self.n_layer else None

    def wrap(self, cells: np.ndarray) -> np.ndarray:
        """(layer, head, c, c) thumbnails → the (rows·c, columns·c) float32 image of this layout, NaN (background)
        on the cells that hold no head."""
        L, H, c, _ = cells.shape
        if (L, H) != (self.n_layer, self.n_head):
            raise ValueError(f"{L} × {H} thumbnails for a {self.n_layer} × {self.n_head} layout")
        R, k = self.rows, self.blocks
        padded = np.full((k * R, H, c, c), np.nan, dtype=np.float32)
        padded[:L] = cells
        # (block, row, head, c, c) → (row, c, block, head, c) → (R·c, k·H·c)
        return np.ascontiguousarray(padded.reshape(k, R, H, c, c).transpose(1, 3, 0, 2, 4).reshape(R * c, k * H * c))


#: Cells may be at most this much wider than tall, or taller than wide, when the map fills its panel
#: (past it the map is letterboxed: a head's pattern is never stretched more).
MAX_CELL_ASPECT = 2.0


def blocks_for(n_layer: int, n_head: int, width: float, height: float) -> int:
    """How many blocks of layers fill a ``width`` × ``height`` pixel view with cells nearest square: the k ≥ 1
    minimising |log(w / h)| for cells w = width / (k·H) wide and h = height / ⌈L / k⌉ tall, among the k that leave
    no block empty (⌈L / ⌈L / k⌉⌉ = k); the fewest blocks on a tie. 1 for an empty map or an unsized view."""
    if n_layer < 1 or n_head < 1 or width <= 0 or height <= 0:
        return 1
    best, best_error = 1, math.inf
    for k in range(1, n_layer + 1):
        rows = -(-n_layer // k)
        if -(-n_layer // rows) != k:
            continue  # a block would be empty: the same rows in fewer blocks
        error = abs(math.log((width / (k * n_head)) / (height / rows)))
        if error < best_error - 1e-9:
            best, best_error = k, error
    return best
