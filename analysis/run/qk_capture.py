"""Attention from what it is computed from: the queries and keys captured during a fast (sdpa) forward, and a
head's weights computed when they are needed, a block of query rows at a time.

Letters used in shape comments:
    L   layers          H   query heads        g   key/value heads (H is a multiple of g)
    n   tokens          dk  one head's width   d   d_model           b   query rows in a block

The eager capture (capture.py) copies every head's n × n map, L·H·n²·4 bytes: SmolLM2 (30 × 9 heads) at its
8,192-token context, 72 GB. This one keeps, per layer, what those maps are computed from:

    q          (H, n, dk)  the queries the attention kernel is given (after rotary; not yet scaled)
    k          (g, n, dk)  the keys (after rotary, before grouped-query sharing: head h reads k[h // (H/g)])
    key_norms  (H, n)      ‖f_h(x_j)‖ = ‖v_j W_O^h‖, the value-output norms of lenses.value_norms (float32)
    scaling, causal, window, softcap: the rest of the model's arithmetic, as the model passed it

L·n·((H + g)·dk·s + 4·H) bytes, s = 4 (float32) or 2 (float16): SmolLM2 at 8,192 tokens, 764 MB (728 MiB;
:func:`qk_capture_bytes`) against 72 GB of maps. A head's weights for query rows i are then computed as
transformers' eager attention computes them (``matmul(q, kᵀ) * scaling``, ``+ mask``, ``softmax(dtype=float32)``):

    s[i, j] = (q_h[i] · k_h[j]) · scaling             (b, n) float32
    s       = softcap · tanh(s / softcap)              only where the model soft-caps (Gemma 2's attention)
    s[i, j] = −∞ where j > i (causal) or j ≤ i − w     the mask the kernel was given (w: sliding window)
    A[i]    = softmax(s[i])                            every row sums to 1

by :func:`head_weights` (one head, chosen rows) and :func:`iter_row_blocks` (every head, a block of rows at a
time, for consumers that stream: scores, thumbnails), never all maps at once.

How it is captured: transformers 5 runs every attention layer through ``ALL_ATTENTION_FUNCTIONS[
config._attn_implementation](module, query, key, value, attention_mask, scaling=…, sliding_window=…, …)``, with
the exact tensors the model uses. Every family AttnScope reads does so in transformers 5.24 (gpt2, llama, qwen2,
mistral, gpt_neox, bert, roberta, distilbert: tests/analysis/test_qk_capture.py runs each), so no family needs a
fallback. :class:`QKRecorder` registers :data:`ATTENTION_NAME` there, with sdpa's own mask builder under the same
name (so the model builds the masks it builds for sdpa), switches the model to it for the forward and back
afterwards. The registered function computes each layer's output with transformers' sdpa path (the fast kernel;
for a soft-capping model, which sdpa refuses, with the same arithmetic as above in torch) and copies q and k.

The mask is not copied: it is checked. A mask the kernel is given (a sliding window shorter than the text, a padded
batch) is compared with the one (causal, window, the sequence's length) describes, and the layer is refused when
they differ; with no mask the kernel applies the causal rule of the module itself (sdpa's ``is_causal``). A padded
batch is right-padded (capture.forward's ``pad_id``): each sequence keeps its own n_b real tokens only, and since
no real query sees a pad key, its weights are those of the sequence run alone.

Short texts may keep the eager capture (every map copied, :class:`StoredMaps`): both answer the same
``weights(layer, heads, rows)`` and ``key_norms(layer)``, so :func:`head_weights` and :func:`iter_row_blocks`
read either.
"""
from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Protocol, Sequence

import numpy as np

#: The name the capture's attention function (and its mask builder) is registered under in transformers.
ATTENTION_NAME = "attnscope_qk"
#: Bytes one block of weights (heads × rows × keys, float32) may take; a block's computation holds about three.
BLOCK_BYTES = 64 * 2**20
#: Rows a block has at most. A causal block of b rows starting at row r computes keys 0 … r + b − 1, so the keys no
#: row of it sees (its b × b upper triangle, masked) grow with b: on SmolLM2 at 2,048 tokens (b = 910 by the bytes
#: alone) blocks of 256 rows made the streamed pass 1.37 × faster (6.55 s → 4.79 s, quiet machine; 128 rows: 4.92 s).
MAX_BLOCK_ROWS = 256
StoreDtype = Literal["float32", "float16"]
_STORE_BYTES = {"float32": 4, "float16": 2}
#: Query rows the mask check compares at once (a (B, rows, n) bool block).
_MASK_CHECK_ROWS = 1024


# ----------------------------------------------------------------------------- what is kept
@dataclass(frozen=True)
class LayerQK:
    """One layer of one sequence, as its attention kernel saw it. Tensors on the model's device."""

    q: Any  # torch (H, n, dk): queries after rotary, before scaling
    k: Any  # torch (g, n, dk): keys after rotary, before grouped-query sharing
    key_norms: Any  # torch (H, n) float32: ‖v_j W_O^h‖ per head and key
    scaling: float  # the factor on q·k (1/√dk unless the model says otherwise, e.g. GPT-2's per-layer scaling)
    causal: bool  # query i sees keys j ≤ i only
    window: int | None  # keys a query sees, itself included (j > i − window); None: every key the rule allows
    softcap: float | None  # scores soft-capped to ±softcap (softcap · tanh(s / softcap)); None: not capped


@dataclass(frozen=True)
class QKCapture:
    """What one forward kept of one sequence: per layer, what its attention is computed from (:class:`LayerQK`)."""

    layers: tuple[LayerQK, ...]

    @property
    def n_layer(self) -> int:
        return len(self.layers)

    @property
    def n_head(self) -> int:
        return int(self.layers[0].q.shape[0])

    @property
    def n_kv_head(self) -> int:
        return int(self.layers[0].k.shape[0])

    @property
    def n_tokens(self) -> int:
        return int(self.layers[0].q.shape[1])

    @property
    def d_head(self) -> int:
        return int(self.layers[0].q.shape[2])

    @property
    def device(self) -> str:
        return str(self.layers[0].q.device)

    @property
    def causal(self) -> bool:
        return all(layer.causal for layer in self.layers)

    @property
    def sliding_windows(self) -> tuple[int | None, ...]:
        """Per layer, the window its mask applied (None: none), as AttentionResult.sliding_windows."""
        return tuple(layer.window for layer in self.layers)

    @property
    def nbytes(self) -> int:
        """Bytes the captured tensors take on their device."""
        return sum(t.numel() * t.element_size() for layer in self.layers for t in (layer.q, layer.k, layer.key_norms))

    def key_norms(self, layer: int) -> np.ndarray:
        """(H, n) float32 ‖f_h(x_j)‖ of ``layer``: the key norms of lenses.value_norms, from the model's own v."""
        return self.layers[_index(layer, self.n_layer, "layer")].key_norms.detach().cpu().numpy()

    def weights(self, layer: int, heads=None, rows=None, to_numpy: bool = True):
        """(h, r, n) float32: the softmax weights of ``heads`` (None: all) for query ``rows`` (None: all), computed
        from q and k in blocks of rows (module docstring). numpy, or a torch tensor on the capture's device.
        Consecutive rows (None, a slice of step 1, ascending neighbours) take :func:`_fill_rows`, any others
        :func:`_block_weights`; the two agree to float32 rounding (~1e-7)."""
        import torch

        lqk = self.layers[_index(layer, self.n_layer, "layer")]
        head_ids = None if heads is None else _heads(heads, self.n_head)
        row_ids = _rows(rows, self.n_tokens)
        n, h = self.n_tokens, self.n_head if head_ids is None else len(head_ids)
        step = block_rows(n, h)
        if _consecutive(row_ids):
            first, r = (int(row_ids[0]) if row_ids.size else 0), len(row_ids)
            out = torch.zeros((h, r, n), dtype=torch.float32, device=lqk.q.device)
            keys = None if head_ids is None else _head_keys(lqk, head_ids)
            if r <= step:
                _fill_rows(lqk, first, first + r, out, head_ids, keys)
            else:
                buffer = _RowBuffer()
                for start in range(0, r, step):
                    stop = min(r, start + step)
                    out[:, start:stop] = buffer.fill(lqk, first + start, first + stop, head_ids, keys)
            return out.cpu().numpy() if to_numpy else out
        head_ids = np.arange(self.n_head) if head_ids is None else head_ids
        group = self.n_head // self.n_kv_head
        q = lqk.q[torch.as_tensor(head_ids, device=lqk.q.device)]  # (h, n, dk)
        k = lqk.k[torch.as_tensor(head_ids // group, device=lqk.k.device)]  # (h, n, dk): each head's own keys
        out = (np.zeros((h, len(row_ids), n), dtype=np.float32) if to_numpy
               else torch.zeros((h, len(row_ids), n), dtype=torch.float32, device=lqk.q.device))
        with torch.inference_mode():
            for start in range(0, len(row_ids), step):
                block = row_ids[start:start + step]
                lo, hi, w = _block_weights(lqk, q, k, block, n)
                out[:, start:start + len(block), lo:hi] = w.cpu().numpy() if to_numpy else w
        return out


def _consecutive(rows: np.ndarray) -> bool:
    """Whether ``rows`` are ascending neighbours (r, r + 1, …): a block :func:`_fill_rows` computes."""
    return rows.size <= 1 or bool(rows[-1] - rows[0] == rows.size - 1 and np.all(np.diff(rows) == 1))


def _key_range(lqk: LayerQK, first: int, last: int, n: int) -> tuple[int, int]:
    """(lo, hi): the keys lo … hi − 1 some query first … last sees; every other key is hidden from all of them."""
    hi = last + 1 if lqk.causal else n
    lo = max(0, first - lqk.window + 1) if lqk.window is not None else 0
    return lo, hi


def _head_keys(lqk: LayerQK, heads: np.ndarray):
    """(h, n, dk): the keys each of ``heads`` reads (head h: key head h // (H/g)), a copy of the few asked for."""
    import torch

    group = lqk.q.shape[0] // lqk.k.shape[0]
    return lqk.k[torch.as_tensor(heads // group, device=lqk.k.device)]


def _fill_rows(lqk: LayerQK, start: int, stop: int, out, heads: np.ndarray | None = None, keys=None,
               scratch=None) -> tuple[int, int]:
    """The softmax weights of query rows start … stop − 1 written into ``out`` (h, b, n) float32 torch, contiguous,
    on the capture's device, at keys lo … hi − 1 (:func:`_key_range`); the other columns are left as they are (the
    caller's zeros). ``heads`` None: every head, else those (``keys``: their :func:`_head_keys`). ``scratch``: a
    flat float32 tensor of at least h·b·(hi − lo) values to compute in (None: one is allocated). Returns (lo, hi).

    The arithmetic is the module docstring's, in place in the scratch block s (h, b, m), m = hi − lo: s = (q·kᵀ) ·
    scaling (one batched matmul per key head, the queries of its H/g heads stacked, (g, H/g·b, dk) · (g, dk, m), so
    no key is copied per head; the scale is the matmul's alpha, one rounding as eager's ``matmul(q, kᵀ) *
    scaling``), soft-capped, −∞ on the keys the mask hides (the block's b × b causal triangle, the window's band:
    the only columns a row of the block may not see), softmax in float32 (torch's kernel, over its input), then
    copied into ``out``'s columns lo … hi − 1 (torch's out= writes a strided view as if contiguous: never given one)."""
    import torch

    H, n, dk = lqk.q.shape
    g, b = lqk.k.shape[0], stop - start
    lo, hi = _key_range(lqk, start, stop - 1, n)
    h, m = out.shape[0], hi - lo
    with torch.inference_mode():
        if scratch is None or scratch.numel() < h * b * m or scratch.device != out.device:
            scratch = torch.empty(h * b * m, dtype=torch.float32, device=out.device)
        s = scratch[:h * b * m].view(h, b, m)
        if heads is None:
            qb = lqk.q[:, start:stop].reshape(g, (H // g) * b, dk)  # (g, H/g·b, dk): head c·H/g + r's rows at r·b
            kt = lqk.k[:, lo:hi].transpose(1, 2)  # (g, dk, m) a view
            target = s.view(g, (H // g) * b, m)
        else:
            qb = lqk.q[torch.as_tensor(heads, device=lqk.q.device), start:stop]  # (h, b, dk)
            kt = keys[:, lo:hi].transpose(1, 2)  # (h, dk, m)
            target = s
        if qb.dtype != torch.float32:
            qb, kt = qb.float(), kt.float()
        torch.baddbmm(target, qb, kt, beta=0, alpha=lqk.scaling, out=target)
        if lqk.softcap is not None:
            s.div_(lqk.softcap).tanh_().mul_(lqk.softcap)
        _hide_keys(s, lqk, start, stop, lo, hi, float("-inf"))
        _softmax_in_place(s)  # every row sees itself, so no row is all −∞
        out[:, :, lo:hi] = s
    return lo, hi


def _hide_keys(s, lqk: LayerQK, start: int, stop: int, lo: int, hi: int, value: float) -> None:
    """``value`` written over the keys the mask hides from query rows start … stop − 1 in their scores s (h, b, m),
    whose columns are keys lo … hi − 1 (:func:`_key_range`): the block's b × b causal triangle and the sliding
    window's band, the only columns a row of the block may not see."""
    import torch

    b = stop - start
    if lqk.causal and b > 1:  # row start + r hides keys start + r + 1 … stop − 1 (hi = stop)
        s[:, :, start - lo:].masked_fill_(_upper_triangle(b, str(s.device)), value)
    if lqk.window is not None:  # row i hides keys j ≤ i − w: of lo … hi − 1, only keys below stop − w
        width = min(hi, stop - lqk.window) - lo
        if width > 0:
            i = torch.arange(start, stop, device=s.device)[:, None]
            j = torch.arange(lo, lo + width, device=s.device)[None, :]
            s[:, :, :width].masked_fill_(j <= i - lqk.window, value)


@functools.lru_cache(maxsize=4)
def _upper_triangle(b: int, device: str):
    """(b, b) bool, True above the diagonal (key r + 1 … of row r), made once per block size: a pass asks for it
    every block, and two tiny torch calls on a loaded machine took ~10 ms each."""
    import torch

    return torch.ones(b, b, dtype=torch.bool, device=device).triu(1)


def _softmax_in_place(s) -> None:
    """s ← softmax(s, dim=−1) in float32 for a contiguous s: torch.softmax's own kernel writing over its input (it
    reads each row before it writes it), no temporary."""
    import torch

    if not s.is_contiguous():
        raise ValueError("an in-place softmax needs a contiguous block")
    try:
        torch._softmax(s, -1, False, out=s)
    except (AttributeError, RuntimeError, TypeError):  # a torch without the out= overload: a temporary
        s.copy_(torch.softmax(s, dim=-1, dtype=torch.float32))


class _RowBuffer:
    """One (h, b, n) float32 buffer that consecutive blocks of rows are computed into (:func:`_fill_rows`, in a
    scratch block kept alike), so a pass allocates, and faults in, one block's memory once, not once a block: glibc
    maps a block that large afresh on every allocation, and touching its pages cost more than computing it. Keys outside the block's lo …
    hi − 1 are zeroed where an earlier block wrote them. A block is valid until the next :meth:`fill`."""

    def __init__(self):
        self.flat = None  # the memory, float32, as many values as the largest block
        self.shape = None  # (h, b, n) of the view the last block was written in
        self.written = (0, 0)  # its keys lo … hi − 1 that may be non-zero
        self.scratch = None  # where _fill_rows computes a block before it is copied in

    def fill(self, lqk: LayerQK, start: int, stop: int, heads: np.ndarray | None = None, keys=None):
        """(h, stop − start, n) torch: the weights of rows start … stop − 1, in the buffer."""
        import torch

        H, n, _ = lqk.q.shape
        shape = (H if heads is None else len(heads), stop - start, n)
        size = shape[0] * shape[1] * shape[2]
        if self.flat is None or self.flat.numel() < size or self.flat.device != lqk.q.device:
            self.flat = torch.zeros(size, dtype=torch.float32, device=lqk.q.device)
            self.shape, self.written = shape, (0, 0)
        view = self.flat[:size].view(shape)
        lo, hi = _key_range(lqk, start, stop - 1, n)
        if shape != self.shape:
            view.zero_()
        else:
            was_lo, was_hi = self.written
            if was_lo < min(lo, was_hi):
                view[:, :, was_lo:min(lo, was_hi)] = 0
            if max(hi, was_lo) < was_hi:
                view[:, :, max(hi, was_lo):was_hi] = 0
        self.shape, self.written = shape, (lo, hi)
        if self.scratch is None or self.scratch.numel() < size or self.scratch.device != view.device:
            self.scratch = torch.empty(size, dtype=torch.float32, device=view.device)
        _fill_rows(lqk, start, stop, view, heads, keys, self.scratch)
        return view


def _block_weights(lqk: LayerQK, q, k, rows: np.ndarray, n: int):
    """(lo, hi, weights (h, b, hi − lo)) for query ``rows``: keys outside lo…hi − 1 are hidden from every row of the
    block by the mask (their weight is 0), so only the keys some row sees are computed."""
    import torch

    lo, hi = _key_range(lqk, int(rows.min()), int(rows.max()), n)
    i = torch.as_tensor(rows, device=q.device)[:, None]  # (b, 1) query positions
    j = torch.arange(lo, hi, device=q.device)[None, :]  # (1, m) key positions
    qb = q[:, i[:, 0]].float()  # (h, b, dk)
    s = torch.matmul(qb, k[:, lo:hi].float().transpose(-1, -2)) * lqk.scaling  # (h, b, m), as eager: matmul, then ×
    if lqk.softcap is not None:
        s = torch.tanh(s / lqk.softcap) * lqk.softcap
    hidden = torch.zeros_like(s[0], dtype=torch.bool)  # (b, m)
    if lqk.causal:
        hidden |= j > i
    if lqk.window is not None:
        hidden |= j <= i - lqk.window
    s = s.masked_fill(hidden, float("-inf"))  # every row sees itself, so no row is all −∞
    return lo, hi, torch.softmax(s, dim=-1, dtype=torch.float32)  # (h, b, m)


@dataclass(frozen=True)
class StoredMaps:
    """Every head's map already in memory (the eager capture, ``AttentionResult.attentions``), behind the same
    ``weights`` as :class:`QKCapture`. Only the shortest texts gain by it: on SmolLM2 (one CPU thread) the eager
    forward with every map took 0.14 s at 32 tokens against 0.16 s for the capture plus 0.03 s for every map on
    demand, and was as slow or slower from 128 tokens on (0.53 s against 0.43 s; 2.1× the capture at 512, 4.4× at
    2,048)."""

    attentions: np.ndarray  # (L, H, n, n) float32
    norms: np.ndarray | None = None  # (L, H, n) ‖f_h(x_j)‖ (lenses.ValueNorms.key_norms), when computed

    @property
    def n_layer(self) -> int:
        return int(self.attentions.shape[0])

    @property
    def n_head(self) -> int:
        return int(self.attentions.shape[1])

    @property
    def n_tokens(self) -> int:
        return int(self.attentions.shape[-1])

    @property
    def nbytes(self) -> int:
        return int(self.attentions.nbytes) + (0 if self.norms is None else int(self.norms.nbytes))

    def key_norms(self, layer: int) -> np.ndarray:
        if self.norms is None:
            raise ValueError("these maps were stored without their value norms")
        return np.asarray(self.norms[_index(layer, self.n_layer, "layer")], dtype=np.float32)

    def weights(self, layer: int, heads=None, rows=None, to_numpy: bool = True):
        """(h, r, n) float32, a copy of the stored maps' ``heads`` (None: all) and query ``rows`` (None: all)."""
        a = self.attentions[_index(layer, self.n_layer, "layer")]
        out = np.array(a[_heads(heads, self.n_head)][:, _rows(rows, self.n_tokens)], dtype=np.float32)
        if to_numpy:
            return out
        import torch

        return torch.from_numpy(out)


class AttentionMaps(Protocol):
    """What :func:`head_weights` and :func:`iter_row_blocks` read: a :class:`QKCapture` or :class:`StoredMaps`."""

    n_layer: int
    n_head: int
    n_tokens: int

    def weights(self, layer: int, heads=None, rows=None, to_numpy: bool = True): ...

    def key_norms(self, layer: int) -> np.ndarray: ...


# ----------------------------------------------------------------------------- reading weights
def head_weights(maps: AttentionMaps, layer: int, head: int, rows=None) -> np.ndarray:
    """(len(rows), n) float32: head ``head`` of ``layer``'s softmax weights for query ``rows`` (an index, a slice,
    indices, or None for every row), in the model's own arithmetic (module docstring); row r is query rows[r], its
    key columns every key 0…n − 1 (hidden keys 0). Equal to transformers' eager ``output_attentions`` ≤ 1e-5 for a
    float32 model."""
    return maps.weights(layer, [_index(head, maps.n_head, "head")], rows)[0]


def iter_row_blocks(maps: AttentionMaps, layer: int, rows_per_block: int | None = None, heads=None,
                    to_numpy: bool = True, reuse: bool = False) -> Iterator[tuple[slice, Any]]:
    """Every query row of ``layer`` in order, a block at a time: (rows, weights (h, b, n)) with ``rows`` a slice of
    query positions and the weights of ``heads`` (None: every head) for them, so a consumer (a score, a pooled
    thumbnail) holds one block, never the layer's maps. ``rows_per_block`` None: as many rows as fit in
    :data:`BLOCK_BYTES`. numpy float32, or torch on the capture's device (``to_numpy=False``; numpy of a CPU
    capture's block is a view of it). ``reuse``: a capture computes every block into one buffer (:class:`_RowBuffer`),
    valid only until the next block is asked for, for a consumer that keeps nothing of a block (the streamed pass);
    the numbers are the same either way (the same :func:`_fill_rows`)."""
    n = maps.n_tokens
    _index(layer, maps.n_layer, "layer")
    if rows_per_block is None:
        step = block_rows(n, len(_heads(heads, maps.n_head)))
    elif isinstance(rows_per_block, bool) or not isinstance(rows_per_block, (int, np.integer)) or rows_per_block < 1:
        raise ValueError(f"rows_per_block must be a whole number of at least 1, got {rows_per_block!r}")
    else:
        step = int(rows_per_block)
    if not isinstance(maps, QKCapture):
        for start in range(0, n, step):
            rows = slice(start, min(n, start + step))
            yield rows, maps.weights(layer, heads, rows, to_numpy=to_numpy)
        return
    import torch

    lqk = maps.layers[layer]
    head_ids = None if heads is None else _heads(heads, maps.n_head)
    keys = None if head_ids is None else _head_keys(lqk, head_ids)
    h = maps.n_head if head_ids is None else len(head_ids)
    buffer = _RowBuffer() if reuse else None
    for start in range(0, n, step):
        stop = min(n, start + step)
        if buffer is not None:
            block = buffer.fill(lqk, start, stop, head_ids, keys)
        else:
            block = torch.zeros((h, stop - start, n), dtype=torch.float32, device=lqk.q.device)
            _fill_rows(lqk, start, stop, block, head_ids, keys)
        yield slice(start, stop), (block.cpu().numpy() if to_numpy else block)


#: Bytes of one (H, b, n) float32 block in :func:`iter_causal_blocks`: small enough that its scores, its weights
#: and the consumers' passes over them stay in the processor's cache (SmolLM2 at 2,048 tokens: 64 rows).
CACHED_BLOCK_BYTES = 5 * 2**20
#: Rows a cached block has at least: past ~4,000 tokens a block of that many bytes has so few rows that the
#: per-block work of the consumers outweighs the cache (SmolLM2's shape at 8,192 tokens, one layer: 17 rows 2.8 s,
#: 64 rows 1.4 s, 128 rows 1.2 s; at 2,048, 71 rows 0.10 s against 0.12 s for 256).
_MIN_CACHED_ROWS = 64
#: The float32 stand-in for −∞ on hidden keys in :func:`iter_causal_blocks`: its exp is 0 like −∞'s, and 0 times it
#: is 0 (−∞ would make the entropy's Σ A·s NaN there).
_HIDDEN = -float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class CausalBlock:
    """Query rows start … stop − 1 of every head of one layer, over keys 0 … stop − 1 only (a causal row sees no
    later key: the columns past stop are the zeros :func:`iter_row_blocks` would have written). Valid until the
    next block is asked for."""

    start: int
    weights: np.ndarray  # (H, b, stop) float32 softmax weights, a view of the iterator's buffer
    entropy: np.ndarray  # (H, b) float64 −Σ_j A[i, j] ln A[i, j] of each row (0 ln 0 = 0)
    row_sums: np.ndarray  # (H, b) float32 Σ_j A[i, j] of each row as computed (1 to float32 rounding)


def iter_causal_blocks(capture: "QKCapture", layer: int, rows_per_block: int | None = None
                       ) -> Iterator[CausalBlock]:
    """Every query row of a causal ``layer`` of ``capture`` in order, a :class:`CausalBlock` at a time: the weights
    of :func:`iter_row_blocks` (the same arithmetic as :func:`_fill_rows`: s = (q·kᵀ)·scaling, hidden keys masked,
    float32 softmax) with each row's entropy, computed where the block still sits in cache, so the streamed pass
    need not take a logarithm of every weight.

    The entropy from the scores: with m_i = max_j s_ij and d_ij = s_ij − m_i ≤ 0, A_ij = e^{d_ij} / Z_i and
    Z_i = Σ_j e^{d_ij} = 1 / max_j A_ij (the row's largest weight is e⁰ / Z_i), so

        H_i = −Σ_j A_ij ln A_ij = −Σ_j A_ij (d_ij − ln Z_i) = −ln(max_j A_ij) − Σ_j A_ij d_ij   (Σ_j A_ij = 1)

    two terms ≥ 0, so nothing cancels: each is within a few float32 roundings of its value (relative), and the
    sum as well; a hidden key has A = 0 and adds nothing. ``rows_per_block`` None: :data:`CACHED_BLOCK_BYTES`.
    Soft-capping and non-causal layers are not taken here (ValueError): :func:`iter_row_blocks` computes those."""
    import torch

    lqk = capture.layers[_index(layer, capture.n_layer, "layer")]
    if not lqk.causal or lqk.softcap is not None:
        raise ValueError("iter_causal_blocks takes causal layers without soft-capping")
    H, n, dk = lqk.q.shape
    g = lqk.k.shape[0]
    step = (max(_MIN_CACHED_ROWS, block_rows(n, H, CACHED_BLOCK_BYTES)) if rows_per_block is None
            else int(rows_per_block))
    kt = lqk.k.transpose(1, 2).contiguous()  # (g, dk, n): a matmul reads contiguous keys twice as fast
    q = lqk.q
    if q.dtype != torch.float32:
        q, kt = q.float(), kt.float()
    scores = torch.empty(H * step * n, dtype=torch.float32, device=q.device)
    weights = torch.empty(H * step * n, dtype=torch.float32, device=q.device)
    with torch.inference_mode():
        for start in range(0, n, step):
            stop = min(n, start + step)
            b = stop - start
            s = scores[:H * b * stop].view(H, b, stop)
            a = weights[:H * b * stop].view(H, b, stop)
            grouped = s.view(g, (H // g) * b, stop)
            torch.baddbmm(grouped, q[:, start:stop].reshape(g, (H // g) * b, dk), kt[:, :, :stop], beta=0,
                          alpha=lqk.scaling, out=grouped)
            _hide_keys(s, lqk, start, stop, 0, stop, _HIDDEN)  # keys 0 … stop − 1
            s.sub_(s.amax(dim=-1, keepdim=True))  # d = s − m (hidden keys stay at the float32 minimum)
            torch._softmax(s, -1, False, out=a)
            entropy = (torch.linalg.vecdot(a, s).neg_().sub_(torch.log(a.amax(dim=-1)))).double()
            yield CausalBlock(start, a.cpu().numpy(), entropy.cpu().numpy(), a.sum(dim=-1).cpu().numpy())


def block_rows(n_tokens: int, n_heads: int, budget: int | None = None) -> int:
    """Query rows of ``n_heads`` heads over ``n_tokens`` keys whose float32 weights fit in ``budget`` bytes (None:
    :data:`BLOCK_BYTES`), at least 1 and at most :data:`MAX_BLOCK_ROWS`."""
    budget = BLOCK_BYTES if budget is None else budget
    return max(1, min(MAX_BLOCK_ROWS, budget // (4 * max(1, n_heads) * max(1, n_tokens))))


def _index(i, size: int, what: str) -> int:
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < size:
        raise IndexError(f"{what} {i!r} out of range 0..{size - 1}")
    return int(i)


def _heads(heads, n_head: int) -> np.ndarray:
    if heads is None:
        return np.arange(n_head)
    ids = _indices(heads, n_head)
    if ids is None:
        raise IndexError(f"heads {heads!r}: each must be a head 0..{n_head - 1}")
    return ids


def _rows(rows, n: int) -> np.ndarray:
    if rows is None:
        return np.arange(n)
    if isinstance(rows, slice):
        return np.arange(n)[rows]
    ids = _indices(rows, n)
    if ids is None:
        raise IndexError(f"rows {rows!r}: each must be a query position 0..{n - 1}")
    return ids


def _indices(values, size: int) -> np.ndarray | None:
    """``values`` (an index or indices) as int64 indices 0…size − 1; None when they are not."""
    ids = np.atleast_1d(np.asarray(values))
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) or (ids.size and (ids.min() < 0 or ids.max() >= size)):
        return None
    return ids.astype(np.int64)


# ----------------------------------------------------------------------------- memory
def qk_capture_bytes(n_layer: int, n_head: int, n_kv_head: int, d_head: int, n_tokens: int,
                     store: StoreDtype = "float32") -> int:
    """Bytes a capture of one n-token sequence takes on its device: per layer q (H·n·dk), k (g·n·dk) in ``store``
    and the key norms (H·n, float32), L·n·((H + g)·dk·s + 4·H). SmolLM2 (30 layers, 9 heads, 3 key/value heads,
    dk 64) at 8,192 tokens: 764 MB in float32 (the eager maps: 72 GB)."""
    s = _STORE_BYTES[store]
    return int(n_layer) * int(n_tokens) * ((int(n_head) + int(n_kv_head)) * int(d_head) * s + 4 * int(n_head))


def weights_block_bytes(n_tokens: int, n_heads: int = 1, rows: int | None = None) -> int:
    """Bytes the computation of one block of weights holds at its peak (scores, mask, softmax: about three
    float32 blocks of ``n_heads`` × ``rows`` × ``n_tokens``; ``rows`` None: :func:`block_rows`'s), plus the
    finished block a caller keeps; add n² · 4 for a whole head's map kept in numpy (:func:`head_weights`)."""
    b = block_rows(n_tokens, n_heads) if rows is None else rows
    return 4 * 4 * int(n_heads) * int(min(b, n_tokens)) * int(n_tokens)


# ----------------------------------------------------------------------------- the capture
_ACTIVE: dict[int, tuple["QKRecorder", int]] = {}  # id(attention module) → (its recorder, its layer)
#: attention module → (W_O's data pointer and version, its R factors): the QR is taken once per W_O, not per forward
#: (0.15 s a forward for SmolLM2's 30 layers); an edited or replaced W_O (its version moves on) is factored again.
_FACTORS: "weakref.WeakKeyDictionary[Any, tuple[tuple, Any]]" = weakref.WeakKeyDictionary()


def _attention(module, query, key, value, attention_mask, **kwargs):
    """The function registered as :data:`ATTENTION_NAME`: the layer's output as sdpa computes it (query (B, H, T,
    dk), key and value (B, g, T, dk)), and, for a module a recorder watches, a copy of what it was computed from."""
    recorder, layer = _ACTIVE.get(id(module), (None, None))
    if kwargs.get("softcap") is not None:  # sdpa refuses soft-capping: the same arithmetic in torch
        out = _softcapped_output(module, query, key, value, attention_mask, **kwargs)
    else:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        out = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if recorder is not None:
        recorder._record(layer, module, query, key, value, attention_mask, kwargs)
    return out


def _softcapped_output(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None,
                       **kwargs):
    """A soft-capping model's attention output (Gemma 2's eager arithmetic: scores · scaling, softcap · tanh(· /
    softcap), the mask, softmax in float32, · V), for the boolean masks sdpa's builder gives. (B, T, H, dk)."""
    import torch

    groups = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(groups, dim=1)  # (B, H, T, dk)
    v = value.repeat_interleave(groups, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    s = torch.matmul(query, k.transpose(2, 3)) * scaling  # (B, H, T, T)
    s = torch.tanh(s / softcap) * softcap
    if attention_mask is not None:
        s = s.masked_fill(~attention_mask, float("-inf"))
    elif kwargs.get("is_causal", getattr(module, "is_causal", True)) and s.shape[-2] > 1:
        t = s.shape[-1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    w = torch.softmax(s, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(w, v).transpose(1, 2).contiguous(), None


def register() -> None:
    """Register :data:`ATTENTION_NAME` with transformers (idempotent): the attention function, and sdpa's mask
    builder under the same name (a name without a mask builder gets no mask at all: masking_utils skips it)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, _attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


class QKRecorder:
    """``with QKRecorder.for_loaded(loaded, lengths): <one forward of the model>`` → ``recorder.captures``.

    For the forward the model runs :data:`ATTENTION_NAME` (sdpa computing the output); every attention module
    given records its layer once. Any forward works inside (capture.forward with parts other than "attentions",
    logits, padding, edits): :func:`forward_qk` is the usual one. ``lengths``: each batch row's real tokens
    (right padding), None: every row whole. ``store``: the dtype q and k are kept in (float16 halves the memory;
    exact for a float16 model, rounded for a float32 one). The model's attention implementation is restored on
    exit, also when the forward fails."""

    def __init__(self, model, attention_modules: Sequence[Any], output_weights: Sequence[Callable[[], Any]],
                 lengths: Sequence[int] | None = None, store: StoreDtype = "float32", dtype_name: str = "float32"):
        if store not in _STORE_BYTES:
            raise ValueError(f"store must be one of {', '.join(_STORE_BYTES)}, got {store!r}")
        self.model, self.modules = model, list(attention_modules)
        self.output_weights = list(output_weights)
        if len(self.output_weights) != len(self.modules):
            raise ValueError("one output projection per attention module")
        self.lengths = None if lengths is None else [int(n) for n in lengths]
        self.store, self.dtype_name = store, dtype_name
        self._layers: list[list[LayerQK] | None] = [None] * len(self.modules)  # per layer, one LayerQK per sequence
        self._factors: dict[int, Any] = {}  # layer → R (H, dk', dk): ‖v W_O^h‖ = ‖v R_hᵀ‖
        self._masks: dict[tuple, tuple[Any, tuple[bool, int | None]]] = {}  # masks already checked this forward
        self._previous: str | None = None

    @classmethod
    def for_loaded(cls, loaded, lengths: Sequence[int] | None = None, store: StoreDtype = "float32") -> "QKRecorder":
        """A recorder of every layer of ``loaded`` (the family adapter says where its attention modules and W_O are)."""
        family = loaded.family
        blocks = list(family.blocks(loaded.model))
        return cls(loaded.model, [family.attention_module(b) for b in blocks],
                   [(lambda b=b: _output_weight(family, b)) for b in blocks], lengths, store, loaded.dtype)

    def __enter__(self) -> "QKRecorder":
        register()
        for layer, module in enumerate(self.modules):
            if id(module) in _ACTIVE:
                raise RuntimeError("this model's attention is already being recorded")
        self._previous = self.model.config._attn_implementation
        self.model.set_attn_implementation(ATTENTION_NAME)
        for layer, module in enumerate(self.modules):
            _ACTIVE[id(module)] = (self, layer)
        return self

    def __exit__(self, *exc) -> None:
        for module in self.modules:
            if _ACTIVE.get(id(module), (None,))[0] is self:
                del _ACTIVE[id(module)]
        self._masks.clear()
        if self._previous is not None:
            self.model.set_attn_implementation(self._previous)

    @property
    def captures(self) -> list[QKCapture]:
        """One :class:`QKCapture` per batch row; RuntimeError when a layer's attention did not run."""
        missing = [layer for layer, seqs in enumerate(self._layers) if seqs is None]
        if missing:
            raise RuntimeError(f"queries and keys: captured for {len(self._layers) - len(missing)} of "
                               f"{len(self._layers)} layers only")
        return [QKCapture(tuple(seqs[b] for seqs in self._layers)) for b in range(len(self._layers[0]))]

    # --- inside the forward
    def _record(self, layer: int, module, query, key, value, attention_mask, kwargs: dict) -> None:
        import torch

        if self._layers[layer] is not None:
            raise RuntimeError(f"layer {layer}'s attention ran twice in one recorded forward")
        B, H, T, dk = query.shape
        g = key.shape[1]
        if key.shape[2] != T:
            raise RuntimeError(f"layer {layer}: {key.shape[2]} keys for {T} queries (a cache?): only a forward over "
                               "the whole text can be recorded")
        lengths = self.lengths if self.lengths is not None else [T] * B
        if len(lengths) != B or max(lengths) > T or min(lengths) < 1:
            raise RuntimeError(f"layer {layer}: a batch of {B} rows of {T} tokens, not the lengths {lengths}")
        scaling = kwargs.get("scaling")
        scaling = float(dk ** -0.5 if scaling is None else scaling)
        softcap = kwargs.get("softcap")
        softcap = None if softcap is None else float(softcap)
        causal, window = self._semantics(layer, module, attention_mask, kwargs, T, lengths)
        factors = self._value_factors(layer, H, g, dk, query.device)  # (g, H/g, dk', dk)
        dtype = getattr(torch, self.store)
        per_sequence = []
        with torch.inference_mode():
            for b, n in enumerate(lengths):
                own = dict(dtype=dtype, copy=True, memory_format=torch.contiguous_format)  # one copy, contiguous
                # (H, n, dk). The queries are the layer's own fresh tensor (after rotary; no cache holds them), so a
                # whole row already in the stored dtype is kept as it is, a view, not copied (0.18 s a SmolLM2
                # forward at 2,048 tokens); the blocks read it a slice at a time, whatever its strides
                q = (query[b].detach() if n == T and query.dtype == dtype else query[b, :, :n].detach().to(**own))
                k = key[b, :, :n].detach().to(**own)  # (g, n, dk)
                v = value[b, :, :n].detach().float()  # (g, n, dk)
                # ‖v_j W_O^h‖ = ‖v_j R_hᵀ‖ (W_O^hᵀ = Q_h R_h, Q_h orthonormal): dk'·dk work a key instead of dk·d
                moved = torch.matmul(v[:, None], factors.transpose(-1, -2))  # (g, H/g, n, dk')
                norms = torch.linalg.vector_norm(moved, dim=-1).reshape(H, n)  # (H, n)
                if not (torch.isfinite(q).all() and torch.isfinite(k).all() and torch.isfinite(norms).all()):
                    from .capture import not_finite

                    raise not_finite(f"queries, keys and values, layer {layer}", self.dtype_name)
                per_sequence.append(LayerQK(q, k, norms, scaling, causal, window, softcap))
        self._layers[layer] = per_sequence

    def _value_factors(self, layer: int, H: int, g: int, dk: int, device):
        """R (g, H/g, dk', dk), float32 on ``device``: W_O^hᵀ (d, dk) = Q_h R_h, so ‖v W_O^h‖ = ‖v R_hᵀ‖. The QR is
        taken in float64 on the CPU (every device has it there), once per W_O (:data:`_FACTORS`)."""
        if layer not in self._factors:
            import torch

            weight = self.output_weights[layer]()  # (H·dk, d), a view of the model's parameter
            if weight.shape[0] != H * dk:
                raise RuntimeError(f"layer {layer}: W_O has {weight.shape[0]} input rows, not {H} heads × {dk}")
            try:
                stamp = (weight.data_ptr(), weight._version, tuple(weight.shape), str(device))
            except RuntimeError:  # an inference tensor (an offloaded W_O read back for this forward): no version
                stamp = None  # factored again every forward, never matched
            module = self.modules[layer]
            cached = _FACTORS.get(module)
            if cached is None or stamp is None or cached[0] != stamp:
                w = weight.detach().to("cpu", torch.float64)
                per_head = w.reshape(H, dk, -1).transpose(1, 2)  # (H, d, dk): W_O^hᵀ
                r = torch.linalg.qr(per_head, mode="reduced").R  # (H, dk', dk)
                _FACTORS[module] = (stamp, r.reshape(g, H // g, *r.shape[1:]).to(device, torch.float32))
            self._factors[layer] = _FACTORS[module][1]
        return self._factors[layer]

    def _semantics(self, layer: int, module, mask, kwargs: dict, T: int, lengths: list[int]
                   ) -> tuple[bool, int | None]:
        """(causal, window) of the layer's mask as the kernel applies it, checked against the mask it was given."""
        causal = bool(kwargs.get("is_causal", getattr(module, "is_causal", True)))  # sdpa's own rule
        window = kwargs.get("sliding_window")
        window = None if window is None else int(window)
        if mask is None:  # sdpa applies is_causal alone; a window was left out only where it hides nothing
            return causal, (window if window is not None and window >= T else None)
        key = (id(mask), causal, window)
        if key not in self._masks:
            candidates = [(causal, window)] + ([(causal, None)] if window is not None else [])
            found = next((c for c in candidates if _mask_is(mask, lengths, *c)), None)
            if found is None:
                raise RuntimeError(f"layer {layer}'s attention mask is not the causal, sliding-window and padding "
                                   "mask AttnScope can compute weights under")
            self._masks[key] = (mask, found)  # the mask held so that its id is not reused this forward
        return self._masks[key][1]


def _output_weight(family, block):
    """The block's W_O (H·dk, d) as the family adapter finds it; for a block accelerate offloaded (--device-map), whose
    output projection is still a placeholder while its attention runs, a copy read back from the offload."""
    weight = family.output_weight(block)
    if weight.device.type != "meta":
        return weight
    from ..model.device_map import onloaded

    with onloaded(block):
        return family.output_weight(block).detach().clone()


def _mask_is(mask, lengths: list[int], causal: bool, window: int | None) -> bool:
    """Whether a boolean mask (B, 1, T, T), True: attend, equals (causal, window, each row's real length) on every
    real query row (a pad query's row is never read)."""
    import torch

    if mask.dtype != torch.bool or mask.ndim != 4 or mask.shape[1] != 1 or mask.shape[0] != len(lengths):
        return False
    T = mask.shape[-1]
    n = torch.as_tensor(lengths, device=mask.device)[:, None, None]  # (B, 1, 1)
    j = torch.arange(T, device=mask.device)[None, None, :]  # (1, 1, T)
    for start in range(0, T, _MASK_CHECK_ROWS):
        i = torch.arange(start, min(T, start + _MASK_CHECK_ROWS), device=mask.device)[None, :, None]  # (1, b, 1)
        expected = j < n  # (B, 1, T): real keys
        if causal:
            expected = expected & (j <= i)
        if window is not None:
            expected = expected & (j > i - window)
        wrong = (mask[:, 0, start:start + i.shape[1]] != expected) & (i < n)  # (B, b, T), real query rows only
        if bool(wrong.any()):
            return False
    return True


def forward_qk(loaded, batch_ids: list[list[int]], parts: Sequence[str] = (), logits=None, pad_id: int | None = None,
               store: StoreDtype = "float32", edits=None):
    """Run the model once on ``batch_ids`` under a :class:`QKRecorder`; return (one :class:`QKCapture` per sequence,
    capture.forward's Captured per sequence (the ``parts`` asked for: layer_inputs, attention_outputs), the
    logits). ``logits``, ``pad_id`` and ``edits`` as capture.forward; "attentions" is not a part here (no map is
    copied: :func:`head_weights` computes them)."""
    from .capture import forward

    if "attentions" in parts:
        raise ValueError("forward_qk copies no attention maps: compute them from the capture (head_weights)")
    with QKRecorder.for_loaded(loaded, [len(ids) for ids in batch_ids], store) as recorder:
        captured, out = forward(loaded, batch_ids, parts=parts, logits=logits, pad_id=pad_id, edits=edits)
    return recorder.captures, captured, out


def qk_capture_bytes_of(loaded, n_tokens: int, store: StoreDtype = "float32") -> int:
    """:func:`qk_capture_bytes` for ``loaded``'s shape."""
    shape = loaded.shape
    return qk_capture_bytes(shape.n_layer, shape.n_head, shape.n_kv_head, shape.d_head, n_tokens, store)


__all__ = ["ATTENTION_NAME", "AttentionMaps", "LayerQK", "QKCapture", "QKRecorder", "StoredMaps", "forward_qk",
           "CausalBlock", "head_weights", "iter_causal_blocks", "iter_row_blocks", "qk_capture_bytes", "qk_capture_bytes_of", "register",
           "block_rows", "weights_block_bytes"]
