"""An export's arrays at any length, written a block at a time, never every map in memory (layout.py says which).

Letters: L layers, H heads, n tokens, b query rows in a block, k heads asked for, m their layers.

- attention.npz (:func:`write_export_npz`): the NPZ of ``writers._savez_deterministic`` (the same zip entries, the
  same fixed time; the same result gives the same bytes), whose large arrays are streamed into their zip entry a
  head (maps, value norms) or a layer (rollout) at a time: the .npy header, then the rows in C order. A result that
  kept its maps writes the arrays it holds in memory as it always did (byte for byte).
- --all-maps (:func:`write_npy_maps`): attentions.npy (L, H, n, n), value_norms.npy (L, H, n, n) and rollout.npy
  (L, n, n), float32 .npy files (numpy's format: ``np.load(path, mmap_mode="r")`` reads any head lazily, with no
  new dependency) filled by one pass over every layer's blocks of rows: each block of weights (H, b, n) is
  written to both map files where it belongs and composed into rollout (lenses.iter_rollout). The file is sized
  by ``np.lib.format.open_memmap`` and filled with positioned writes (``os.pwrite``), not through the memory map,
  so the pages written never count in the process's memory.

Every rollout array (``rollout``, ``layer_rollout``, rollout.npy) is R(l) itself, or with ``skip_first``
(``export --rollout-skip-first``) lenses.rollout_skip_first of it: the first input NaN, each row renormalised.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from ..measures.lenses import iter_rollout, rollout_skip_first, weighted_by_norms
from .layout import NPY_FILES, ExportLayout
from .writers import NpzWriter, map_chunks

Check = Callable[[], None]


# ----------------------------------------------------------------------------- chunks of every head's arrays
def value_norm_chunks(result, key_norms: np.ndarray, check: Check) -> Iterator[np.ndarray]:
    """Every head's value-weighted map N[i, j] = A[i, j] · ‖f_h(x_j)‖ (n, n) float32 (lenses.value_norms' entries),
    a head at a time; ``key_norms`` (L, H, n) float64."""
    for layer in range(result.n_layer):
        for head in range(result.n_head):
            check()
            yield weighted_by_norms(result.maps.weights(layer, [head])[0], key_norms[layer, head]).astype(np.float32)


def rollout_chunks(result, check: Check, layers: Iterable[int] | None = None,
                   skip_first: bool = False) -> Iterator[np.ndarray]:
    """R(l) (n, n) float32 of every layer (``layers`` None) or of ``layers`` only, in order, composed once
    (lenses.iter_rollout: every layer up to the last asked is read); ``skip_first``: lenses.rollout_skip_first
    of each."""
    wanted = None if layers is None else sorted(set(int(l) for l in layers))
    if wanted == []:
        return
    last = None if wanted is None else wanted[-1]
    for layer, r in iter_rollout(result.maps, causal=bool(result.causal), last=last):
        check()
        if wanted is None or layer in wanted:
            yield rollout_skip_first(r) if skip_first else r.astype(np.float32)


def head_map_chunks(result, heads, check: Check) -> Iterator[np.ndarray]:
    for layer, head in heads:
        check()
        yield result.head_map(layer, head)


def head_value_norm_chunks(result, heads, key_norms: np.ndarray, check: Check) -> Iterator[np.ndarray]:
    for layer, head in heads:
        check()
        yield weighted_by_norms(result.head_map(layer, head), key_norms[layer, head]).astype(np.float32)


# ----------------------------------------------------------------------------- the files
def write_export_npz(path: Path, result, layout: ExportLayout, kept: dict[str, np.ndarray],
                     key_norms: np.ndarray | None, check: Check | None = None, skip_first: bool = False) -> Path:
    """attention.npz of ``layout``: the arrays of every head it holds (``layout.in_npz``; those in ``kept``, {name:
    array} already in memory, as they are, the others streamed from ``result.maps``), the --heads arrays
    (``head_maps``, ``head_value_norms``, ``head_index``, ``layer_rollout``, ``layer_index``), then ``tokens`` and
    ``token_ids``. ``key_norms`` (L, H, n) float64: ‖f_h(x_j)‖ (lenses.key_norms_of), needed for value norms not in
    ``kept`` (None and not kept: no value norms are written, as an export made without the model never had them).
    ``skip_first``: the rollout streamed here (``rollout``, ``layer_rollout``) is lenses.rollout_skip_first
    of R (a kept ``rollout`` is written as given: the lens computed it so). ``check()`` between heads and layers."""
    check = check or (lambda: None)
    L, H, n = result.n_layer, result.n_head, result.n_tokens
    heads = layout.heads
    with NpzWriter(Path(path)) as npz:
        for name in layout.in_npz:
            if name in kept:
                npz.array(name, np.asarray(kept[name], dtype=np.float32))
            elif name == "attentions":
                npz.stream(name, (L, H, n, n), map_chunks(result, check))
            elif name == "value_norms":
                if key_norms is None:  # contents made without the model (no value norms, no key norms): none
                    continue
                npz.stream(name, (L, H, n, n), value_norm_chunks(result, key_norms, check))
            else:
                npz.stream(name, (L, n, n), rollout_chunks(result, check, skip_first=skip_first))
        if heads:
            npz.stream("head_maps", (len(heads), n, n), head_map_chunks(result, heads, check))
            npz.stream("head_value_norms", (len(heads), n, n), head_value_norm_chunks(result, heads, key_norms, check))
            npz.array("head_index", np.array(heads, dtype=np.int64).reshape(-1, 2))
        if layout.rollout_layers:
            layers = layout.rollout_layers
            npz.stream("layer_rollout", (len(layers), n, n),
                       rollout_chunks(result, check, layers, skip_first=skip_first))
            npz.array("layer_index", np.array(layers, dtype=np.int64))
        npz.array("tokens", np.array(result.tokens, dtype=str))
        npz.array("token_ids", result.token_ids.astype(np.int64))
    return Path(path)


class _NpyFile:
    """A float32 .npy file of ``shape`` (header by ``np.lib.format.open_memmap``) filled by positioned writes."""

    def __init__(self, path: Path, shape: tuple[int, ...]):
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
        self.offset, self.shape = int(mm.offset), shape
        del mm  # sized and headed; the data go in by pwrite
        self.fd = os.open(path, os.O_WRONLY)
        self.strides = tuple(4 * int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))  # C order

    def write(self, index: tuple[int, ...], data: np.ndarray) -> None:
        """``data`` (C-contiguous float32) at the element ``index`` (its first axes), as one run of bytes."""
        data = np.ascontiguousarray(data, dtype=np.float32)
        at = self.offset + sum(int(i) * s for i, s in zip(index, self.strides))
        view = memoryview(data).cast("B")
        while view:
            done = os.pwrite(self.fd, view, at)
            view, at = view[done:], at + done

    def close(self) -> None:
        os.close(self.fd)


def write_npy_maps(folder: Path, result, key_norms: np.ndarray, check: Check | None = None,
                   skip_first: bool = False) -> list[Path]:
    """--all-maps: ``attentions.npy`` (L, H, n, n) A[l, h, i, j], ``value_norms.npy`` (L, H, n, n) A · ‖f_h(x_j)‖
    and ``rollout.npy`` (L, n, n) R(l) (lenses' definitions), float32, in ``folder``, from one pass over every
    layer's blocks of rows (lenses.iter_rollout's). Memory: a block of weights and its float64 products, R
    (n, n) float64. ``skip_first``: rollout.npy holds lenses.rollout_skip_first of each R(l). ``check()``
    after every layer."""
    check = check or (lambda: None)
    L, H, n = result.n_layer, result.n_head, result.n_tokens
    paths = [Path(folder) / NPY_FILES[name] for name in ("attentions", "value_norms", "rollout")]
    maps, norms, roll = (_NpyFile(paths[0], (L, H, n, n)), _NpyFile(paths[1], (L, H, n, n)),
                         _NpyFile(paths[2], (L, n, n)))
    try:
        def block(layer: int, rows: slice, weights: np.ndarray) -> None:  # weights (H, b, n)
            weighted = weighted_by_norms(weights, key_norms[layer][:, None, :]).astype(np.float32)  # (H, b, n)
            for head in range(H):  # a head's rows are one run of bytes in (L, H, n, n)
                maps.write((layer, head, rows.start), weights[head])
                norms.write((layer, head, rows.start), weighted[head])

        step = max(1, (64 * 2**20) // (8 * n))  # rows of R converted to float32 at a time
        for layer, r in iter_rollout(result.maps, causal=bool(result.causal), on_block=block):
            for start in range(0, n, step):  # a block of rows of R̃ is the same rows of R renormalised alone
                rows = r[start:start + step]
                roll.write((layer, start), rollout_skip_first(rows) if skip_first else rows.astype(np.float32))
            check()
    finally:
        for f in (maps, norms, roll):
            f.close()
    return paths
