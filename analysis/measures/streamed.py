"""Everything derived from attention, computed a block of query rows at a time from maps computed on demand.

Letters used in shape comments:
    L   layers          H   heads          n   tokens (query and key positions)
    b   query rows in a block              c   thumbnail bins a side, min(n, size)

The all-maps path reads every layer's and head's (n, n) map at once (``AttentionResult.attentions``: L·H·n²·4
bytes). Here the same numbers come from an :class:`~analysis.run.qk_capture.AttentionMaps` (a
:class:`~analysis.run.qk_capture.QKCapture`, whose weights are computed from the queries and keys when asked, or
:class:`~analysis.run.qk_capture.StoredMaps` over maps already in memory), one layer at a time and within it a block
of query rows at a time (``iter_row_blocks``: every head's weights for b rows, ~64 MiB), never all maps at once:

    for layer l:                                        one pass over the layer's blocks feeds every consumer:
        for rows, A[:, rows, :] in row blocks of l      (H, b, n) float32
            head scores   Σ over the rows of each score's term (head_scores.HEAD_SCORES[…].row_sum)
            TL scores     row sums, column 0, diagonal, the pattern's cells (tl_scores._HeadSums.add)
            thumbnails    the max of each (row bin, key bin) so far (display.PooledRows)
        → that layer's (H,) scores, (H, c, c) thumbnails

A causal layer of a capture (no soft-capping) is read in small blocks cut after their last visible key
(qk_capture.iter_causal_blocks: a block of b rows starting at r holds keys 0 … r + b − 1, sized to stay in the
processor's cache), with each row's entropy computed from its scores there, not from a logarithm of every weight;
the other consumers read the cut block as they read a full one (the keys past the cut are zeros). Those numbers
equal the full-width blocks' to float32 rounding (≤ 1e-6 on a score, tests/analysis/test_streamed.py's CUT_ATOL;
test_causal_blocks.py). The value-weighted and first-key-hidden thumbnails read full-width blocks.

Every number is computed by the same definition the all-maps path uses (the score's ``row_sum``, ``_HeadSums``,
``PooledRows``, lenses' ``residual_rows`` and ``weighted_by_norms``); only the rows each call sees differ, so the
results equal ``all_scores`` / ``scores_of_text`` / ``detect`` / capture's thumbnails / lenses on the same maps to
float64 summation order (tests/analysis/test_streamed.py: ≤ 1e-9 on a score, thumbnails exactly).

Memory: the capture, one block and what its consumers copy of it (each a chunk at a time), the (L, H, c, c)
thumbnails and per layer (H, n) row sums: bounded by a block, never by L·H·n² (``run.memory.streamed_memory_bytes``).
On demand, per head: the value-weighted map (:func:`value_weighted`, the rows asked for) and rollout
(:func:`rollout_layer`, which needs every earlier layer: an n × n float64 matrix is unavoidable there). The rare TL
score that rounding leaves undecided is settled by the reference on that head's whole map (n × n, a few float64
copies: ``tl_scores._HeadSums.exactly``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..display import PooledRows
from ..run.capture import THUMBNAIL_PX
from ..run.qk_capture import (AttentionMaps, QKCapture, _index, _rows, block_rows, head_weights, iter_causal_blocks,
                               iter_row_blocks)
from . import head_scores as hs
from . import tl_scores as tl
from .lenses import (SINK_EPSILON, SinkRate, iter_rollout, residual_rows, row_normalise, sink_rate_of_scores,
                     weighted_by_norms)
from .tl_patterns import HEAD_NAMES, ErrorMeasure

#: What ``probe`` may be: the (L, H) induction_probe values already computed, the probe run's (maps, token ids)
#: to compute them from, or None (no probe run: NaN).
Probe = np.ndarray | tuple[AttentionMaps, np.ndarray] | None


@dataclass(frozen=True)
class TLOptions:
    """TransformerLens's options for the TL-style scores (tl_scores.detect_all's): which patterns, which heads
    (None: all; else TL's list of (layer, head) or {layer: [heads]}, the rest −1), the error measure, the
    exclusions."""

    names: tuple[str, ...] = HEAD_NAMES
    heads: Any = None
    error_measure: ErrorMeasure = "mul"
    exclude_bos: bool = False
    exclude_current_token: bool = False


@dataclass(frozen=True)
class Streamed:
    """What one pass over the maps computed. Read-only arrays, (layer, head, …) order; None: not asked for."""

    scores: hs.HeadScores | None  # every head score, as head_scores.all_scores gives them
    tl: Mapping[str, np.ndarray] | None  # {TL pattern name: (L, H)}, as tl_scores.scores_of_text / detect_all
    thumbnails: np.ndarray | None  # (L, H, c, c) max-pooled as capture's thumbnails (the maps when n ≤ size)
    weighted_thumbnails: np.ndarray | None  # (L, H, c, c) the value-weighted maps (row-normalised N) pooled alike

    def sink_rate(self, epsilon: float = SINK_EPSILON) -> SinkRate:
        """lenses.sink_rate of the same maps: the share of heads whose first-token score exceeds ε."""
        if self.scores is None or "sink" not in self.scores.values:
            raise ValueError("this pass computed no sink score")
        return sink_rate_of_scores(self.scores["sink"], epsilon)


def streamed_pass(maps: AttentionMaps, token_ids: np.ndarray, *, probe: Probe = None, causal: bool = True,
                  windows: hs.Windows = None, scores: Sequence[str] | None = hs.SCORE_NAMES,
                  tl_options: TLOptions | None = TLOptions(), thumbnail_px: int | None = THUMBNAIL_PX,
                  hide_first: bool = False, weighted: bool = False, rows_per_block: int | None = None,
                  on_layer: Callable[[int], None] | None = None) -> Streamed:
    """One pass over every layer's row blocks of ``maps``, feeding every consumer asked for from the same block.

    ``scores``: the head scores to compute (names of ``HEAD_SCORES``; None: none), with ``causal``, ``windows``
    (per layer, as ``score_values``) and ``probe`` (:data:`Probe`) as ``score_values`` takes them.
    ``tl_options``: the TL-style scores (None: none). ``thumbnail_px``: the pooled grid's size a side (None: none);
    ``hide_first`` pools each row renormalised past key 0 (display.pooled_heads); ``weighted`` also pools the
    value-weighted maps (row-normalised A·‖f_h(x_j)‖, the maps' ``key_norms``). ``rows_per_block``: query rows a
    block (None: as many as fit in qk_capture.BLOCK_BYTES). ``on_layer(l)`` after each layer (progress)."""
    ids = np.asarray(token_ids).ravel()
    L, H, n = maps.n_layer, maps.n_head, maps.n_tokens
    if ids.size != n:
        raise ValueError(f"{ids.size} token ids for {n} attention positions")
    per_layer = hs.layer_windows(windows, L)
    entries = _score_entries(scores, causal)
    tl_heads = _tl_heads(tl_options, L, H, n)
    score_values = {e.name: np.full((L, H), np.nan) for e in entries}
    tl_values = None if tl_heads is None else {name: np.full((L, H), -1.0) for name in tl_options.names}
    pooled = None if thumbnail_px is None else []
    pooled_weighted = [] if weighted and thumbnail_px is not None else None
    memo = {}  # the text's repeat pairs per block of rows: the same for every layer, found once
    for layer in range(L):
        sums = {e.name: [] for e in entries}
        heads = None if tl_heads is None else tl_heads[layer]
        tl_sums = None if heads is None or not heads.size else _tl_sums(maps, layer, heads, ids, tl_options,
                                                                         memo=memo)
        pool = None if pooled is None else PooledRows(H, n, thumbnail_px, hide_first)
        pool_weighted = None if pooled_weighted is None else PooledRows(H, n, thumbnail_px, hide_first)
        norms = maps.key_norms(layer)[:, None, :] if pool_weighted is not None else None  # (H, 1, n)
        blocks = _blocks(maps, layer, rows_per_block, cut=not hide_first and pool_weighted is None)
        for start, block, entropy, row_sums in blocks:  # (H, b, n) or causally cut (H, b, stop); valid until the next
            q = hs.QueryRows(block, start, ids, causal, per_layer[layer], n_keys=n, row_entropy=entropy, pairs=memo)
            for e in entries:
                sums[e.name].append(e.row_sum(q))
            if tl_sums is not None:
                if heads.size == H:
                    tl_sums.add(start, block, row_sums)
                else:
                    tl_sums.add(start, block[heads], None if row_sums is None else row_sums[heads])
            if pool is not None:
                pool.add(start, block)
            if pool_weighted is not None:
                pool_weighted.add(start, row_normalise(weighted_by_norms(block, norms).astype(np.float32)))
        for e in entries:
            score_values[e.name][layer] = hs.mean_of_sums(sums[e.name], H)
        if tl_sums is not None:
            for name, values in tl.pattern_scores(tl_sums).items():
                tl_values[name][layer, heads] = values
        if pool is not None:
            pooled.append(pool.result)
        if pool_weighted is not None:
            pooled_weighted.append(pool_weighted.result)
        if on_layer is not None:
            on_layer(layer)
    head = None if scores is None else _head_scores(score_values, scores, maps, probe, causal, windows,
                                                       rows_per_block)
    if tl_values is not None and n < 2:  # TL refuses a text under 2 tokens: scores_of_text's NaN
        tl_values = {name: np.full((L, H), np.nan) for name in tl_values}
    return Streamed(head, None if tl_values is None else _frozen_map(tl_values), _stacked(pooled),
                    _stacked(pooled_weighted))


def streamed_scores(maps: AttentionMaps, token_ids: np.ndarray, probe: Probe = None, *, causal: bool = True,
                    windows: hs.Windows = None, rows_per_block: int | None = None) -> hs.HeadScores:
    """Every head score of ``HEAD_SCORES``, as ``all_scores`` gives them from the full maps (``score_values`` with
    the same ``probe``, ``causal``, ``windows``), computed a block of query rows at a time."""
    return streamed_pass(maps, token_ids, probe=probe, causal=causal, windows=windows, tl_options=None,
                         thumbnail_px=None, rows_per_block=rows_per_block).scores


def streamed_tl_scores(maps: AttentionMaps, token_ids: np.ndarray, *, error_measure: ErrorMeasure = "mul",
                       exclude_bos: bool = False, exclude_current_token: bool = False,
                       rows_per_block: int | None = None) -> dict[str, np.ndarray]:
    """The three TL patterns, {name: (L, H)}, as ``tl_scores.scores_of_text`` gives them from the full maps (NaN
    for every head of a text under 2 tokens), a block of query rows at a time."""
    options = TLOptions(HEAD_NAMES, None, error_measure, exclude_bos, exclude_current_token)
    return dict(streamed_pass(maps, token_ids, scores=None, tl_options=options, thumbnail_px=None,
                              rows_per_block=rows_per_block).tl)


def streamed_detect(maps: AttentionMaps, token_ids: np.ndarray, pattern: str | np.ndarray, *, heads=None,
                    exclude_bos: bool = False, exclude_current_token: bool = False,
                    error_measure: ErrorMeasure = "mul", rows_per_block: int | None = None) -> np.ndarray:
    """``tl_scores.detect`` (TL's ``detect_head``) from maps computed a block of rows at a time: (L, H) scores of
    one named pattern or an (n, n) lower triangular matrix, −1 for heads not in ``heads``; refused (ValueError)
    as detect refuses (a text under 2 tokens, an unknown pattern or measure, a head outside the model)."""
    L, H, n = maps.n_layer, maps.n_head, maps.n_tokens
    if n < 2:
        raise ValueError("the sequence needs at least 2 tokens to be scored")
    tl._check_options(error_measure)
    ids = np.asarray(token_ids).ravel()
    cells = (tl._named_cells([pattern], ids, n)[pattern] if isinstance(pattern, str)
             else tl._Cells.of(tl._pattern(pattern, ids, n)))
    options = TLOptions(("p",), heads, error_measure, exclude_bos, exclude_current_token)
    chosen = tl._head_mask(heads, L, H)
    out = -np.ones((L, H))
    for layer in range(L):
        layer_heads = np.flatnonzero(chosen[layer])
        if not layer_heads.size:
            continue
        sums = _tl_sums(maps, layer, layer_heads, ids, options, {"p": cells})
        for rows, block in iter_row_blocks(maps, layer, rows_per_block, reuse=True):
            sums.add(rows.start, block if layer_heads.size == H else block[layer_heads])
        out[layer, layer_heads] = tl.pattern_scores(sums)["p"]
    return out


def streamed_thumbnails(maps: AttentionMaps, size: int = THUMBNAIL_PX, hide_first: bool = False,
                        rows_per_block: int | None = None) -> np.ndarray:
    """(L, H, c, c), c = min(n, size): every head max-pooled as capture's thumbnails (display.pooled; with
    ``hide_first``, display.pooled_heads past the first key), from blocks of query rows."""
    return streamed_pass(maps, np.zeros(maps.n_tokens, dtype=np.int64), scores=None, tl_options=None,
                         thumbnail_px=size, hide_first=hide_first, rows_per_block=rows_per_block).thumbnails


# ----------------------------------------------------------------------------- on demand, one head or layer
def value_weighted(maps: AttentionMaps, layer: int, head: int, rows=None, normalised: bool = True) -> np.ndarray:
    """(len(rows), n) float32: head ``head`` of ``layer``'s value-weighted map for query ``rows`` (as head_weights
    takes them; None: all): N[i, j] = A[i, j] · ‖f_h(x_j)‖ (lenses.ValueNorms.value_norms), each row divided by its
    sum when ``normalised`` (ValueNorms.row_normalised, what the Head tab's value-weighted view shows). Reads that
    head's rows, a block at a time, and the layer's key norms (``maps.key_norms``), nothing else: memory is the
    answer and one block's float64 copies."""
    wanted = _rows(rows, maps.n_tokens)
    norms = maps.key_norms(layer)[_index(head, maps.n_head, "head")]  # (n,)
    out = np.empty((wanted.size, maps.n_tokens), dtype=np.float32)
    step = block_rows(maps.n_tokens, 2)  # the float64 product and its row sums: about two float32 blocks
    for start in range(0, wanted.size, step):
        picked = wanted[start:start + step]
        n = weighted_by_norms(head_weights(maps, layer, head, picked), norms).astype(np.float32)  # as ValueNorms
        out[start:start + picked.size] = row_normalise(n) if normalised else n
    return out


def rollout_layer(maps: AttentionMaps, layer: int, rows=None, rows_per_block: int | None = None,
                  causal: bool | None = None) -> np.ndarray:
    """(len(rows), n) float32: rollout R(``layer``) for query ``rows`` (an index, a slice, indices; None: every row),
    as lenses.rollout defines it: Â(l) = 0.5 · mean_h A(l) + 0.5 · I, rows renormalised; R(0) = Â(0),
    R(l) = Â(l) · R(l−1).

    Cost: R(l) composes every layer 0 … l, so every earlier layer's head-mean map is computed (all its heads, a
    block of rows at a time), and R(l−1) is needed whole, whatever ``rows`` asks: an n × n float64 matrix that no
    blocking avoids (8,192 tokens: 512 MiB), and l matrix products of n³ multiply-adds (a third of that for a
    causal model, whose Â and R are lower triangular). Asking for some rows saves only the last layer's product.
    Memory: R, one block of weights and its head-mean rows; for a bidirectional model (``causal`` False) a second
    n × n matrix (the next R, since every row reads every row of the last). ``causal`` None: the maps' own
    (a QKCapture says), else False — the general product, right for any maps."""
    n = maps.n_tokens
    last = _index(layer, maps.n_layer, "layer")
    wanted = _rows(rows, n)
    causal = bool(getattr(maps, "causal", False)) if causal is None else bool(causal)
    composed = last if rows is None else last - 1  # with rows asked for, the last layer gives only those rows
    r = None  # R(composed), float64 (n, n); None: the identity, below layer 0
    for _, r in (iter_rollout(maps, causal=causal, last=composed, rows_per_block=rows_per_block)
                 if composed >= 0 else ()):
        pass
    if rows is None:
        return r[wanted].astype(np.float32)
    a_hat = residual_rows(maps.weights(last, None, wanted), wanted)  # Â(last)'s rows ``wanted`` (b, n) float64
    return (a_hat if r is None else a_hat @ r).astype(np.float32)


# ----------------------------------------------------------------------------- helpers
def _blocks(maps: AttentionMaps, layer: int, rows_per_block: int | None, cut: bool
            ) -> Iterable[tuple[int, np.ndarray, np.ndarray | None, np.ndarray | None]]:
    """(first row, weights, row entropies or None, row sums or None) of every block of ``layer``. A causal layer
    of a capture (no soft-capping) comes from qk_capture.iter_causal_blocks when ``cut`` allows its blocks to end
    at their last visible key: the weights of the same arithmetic, each row's entropy and sum computed from its
    scores in cache. Every other layer: iter_row_blocks (full width; the consumers take entropy and sums from the
    weights)."""
    if cut and isinstance(maps, QKCapture):
        lqk = maps.layers[layer]
        if lqk.causal and lqk.softcap is None:
            for block in iter_causal_blocks(maps, layer, rows_per_block):
                yield block.start, block.weights, block.entropy, block.row_sums
            return
    for rows, block in iter_row_blocks(maps, layer, rows_per_block, reuse=True):
        yield rows.start, block, None, None


def _score_entries(names: Sequence[str] | None, causal: bool) -> list[hs.HeadScore]:
    """The registry's entries of ``names`` that apply and are sums over this text's rows (not the probe's)."""
    if names is None:
        return []
    unknown = set(names) - set(hs.SCORE_NAMES)
    if unknown:
        raise ValueError(f"unknown head scores: {', '.join(sorted(unknown))}")
    return [e for e in hs.HEAD_SCORES if e.name in names and e.applies_to(causal) and e.row_sum is not None]


def _head_scores(values: dict, names: Sequence[str], maps: AttentionMaps, probe: Probe, causal: bool,
                 windows: hs.Windows, rows_per_block: int | None) -> hs.HeadScores:
    """HeadScores of ``values`` as all_scores builds them: every name, NaN where a score does not apply."""
    L, H = maps.n_layer, maps.n_head
    out = {}
    for e in hs.HEAD_SCORES:
        if e.name not in names:
            continue
        if not e.applies_to(causal):
            out[e.name] = np.full((L, H), np.nan)
        elif e.name == "induction_probe":
            out[e.name] = _probe_values(probe, windows, (L, H), rows_per_block)
        else:
            out[e.name] = values[e.name]
    for v in out.values():
        v.setflags(write=False)
    return hs.HeadScores(out, hs.applicable_scores(causal) & set(out), causal)


def _probe_values(probe: Probe, windows: hs.Windows, shape: tuple[int, int], rows_per_block: int | None
                  ) -> np.ndarray:
    """The induction_probe values: as given, computed from the probe run's maps (induction, the text's windows, in
    blocks of the text's size), or NaN without a probe run."""
    if probe is None:
        return np.full(shape, np.nan)
    if isinstance(probe, tuple):
        probe_maps, probe_ids = probe
        scores = streamed_pass(probe_maps, probe_ids, causal=True, windows=windows, scores=("induction",),
                               tl_options=None, thumbnail_px=None, rows_per_block=rows_per_block).scores
        return np.array(scores["induction"], dtype=np.float64)
    return np.array(probe, dtype=np.float64)


def _tl_heads(options: TLOptions | None, L: int, H: int, n: int) -> list[np.ndarray] | None:
    """Per layer the heads the TL scores read (checked as detect checks them), or None (no TL scores)."""
    if options is None:
        return None
    tl._check_options(options.error_measure)
    for name in options.names:
        if name not in HEAD_NAMES:
            tl.detection_pattern(name, np.zeros(1))  # raises: unknown name
    chosen = tl._head_mask(options.heads, L, H)
    return [np.flatnonzero(chosen[layer]) if n >= 2 else np.zeros(0, dtype=np.int64) for layer in range(L)]


def _tl_sums(maps: AttentionMaps, layer: int, heads: np.ndarray, ids: np.ndarray, options: TLOptions,
             patterns: Mapping | None = None, memo: dict | None = None) -> "tl._HeadSums":
    """A ``_HeadSums`` of ``layer``'s ``heads``; a head's whole map, when the reference must settle its score, is
    computed again on demand (head_weights). ``memo``: the pass's repeat pairs (tl._named_cells)."""
    n = maps.n_tokens
    patterns = tl._named_cells(options.names, ids, n, memo) if patterns is None else patterns
    return tl._HeadSums(heads.size, n, np.float32, patterns, options.error_measure, options.exclude_bos,
                        options.exclude_current_token, lambda k: head_weights(maps, layer, int(heads[k])))


def _stacked(layers: Iterable[np.ndarray] | None) -> np.ndarray | None:
    if layers is None:
        return None
    out = np.stack(list(layers))
    out.setflags(write=False)
    return out


def _frozen_map(values: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
    from types import MappingProxyType

    for v in values.values():
        v.setflags(write=False)
    return MappingProxyType(values)


__all__ = ["Probe", "Streamed", "TLOptions", "rollout_layer", "streamed_detect", "streamed_pass", "streamed_scores",
           "streamed_thumbnails", "streamed_tl_scores", "value_weighted"]
