"""What a run's attention takes in memory, and refusing a run that would not fit.

A run takes one of two ways (:func:`plan_run`):

- every map kept: the eager capture copies every layer's and head's (n, n) map, L·H·n²·4 bytes
  (:func:`attention_memory_bytes`), when that is at most :data:`MAPS_KEPT_BYTES` (GPT-2 small at 1,024 tokens:
  576 MiB). Everything is then read from the maps in memory, as it always was;
- attention on demand: the forward keeps the queries and keys each layer's weights are computed from
  (run.qk_capture) and everything derived is streamed in blocks of query rows (measures.streamed):
  :func:`streamed_memory_bytes` plus the residual stream and attention output of every layer (2·L·n·d·4), nothing
  that grows as L·H·n² (SmolLM2 at its 8,192-token context: 2.84 GiB, against 67.5 GiB for every map; its
  measured peak was 2.3 GiB above the model).

Either way a run may take :data:`MEMORY_SHARE` of the memory the system says is available, or what
``ATTNSCOPE_ATTENTION_BUDGET_MB`` fixes (:func:`attention_memory_budget`); a run that would not fit is refused with
one sentence before the forward. ``run_text``, ``scan_texts`` (every map kept: :func:`check_attention_memory`) and the
app's status bar ask here.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from ..display import format_bytes
from ..errors import InputError
from .tokenize import counted

#: Set to a number of megabytes to fix the memory a run's attention may take (else: from /proc/meminfo).
MEMORY_BUDGET_ENV = "ATTNSCOPE_ATTENTION_BUDGET_MB"
#: Share of the memory the system says is available (MemAvailable) that a run's attention may take: the
#: rest is for the copies on the way (a layer's torch tensor, thumbnails, an export's buffers) and the app.
MEMORY_SHARE = 0.5
#: The budget when the available memory cannot be read (not Linux).
FALLBACK_BUDGET_BYTES = 8 * 2**30
#: A run keeps every head's map when they take at most this many bytes (and fit the budget); a longer one computes
#: them on demand. 1 GiB: GPT-2 small keeps its maps up to its whole 1,024-token context (576 MiB), where the eager
#: capture is as fast as ever; SmolLM2 (30 × 9 heads) up to 997 tokens, beyond which on-demand maps are faster
#: (qk_capture.StoredMaps' measurements). ``ATTNSCOPE_KEEP_MAPS_MB`` sets it (0: always on demand).
MAPS_KEPT_BYTES = 2**30
KEEP_MAPS_ENV = "ATTNSCOPE_KEEP_MAPS_MB"


def attention_memory_bytes(n_layer: int, n_head: int, n_tokens: int) -> int:
    """Bytes the attention of one run takes: every layer's and head's (n, n) map in float32,
    n_layer × n_head × n_tokens² × 4 (GPT-2 small at 1024 tokens: 12 × 12 × 1024² × 4 = 604 MB)."""
    return int(n_layer) * int(n_head) * int(n_tokens) ** 2 * 4


def available_memory_bytes() -> int | None:
    """What the system says a new allocation can take without swapping (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def attention_memory_budget() -> int:
    """The most bytes a run's attention may take: ``ATTNSCOPE_ATTENTION_BUDGET_MB`` when set, else
    :data:`MEMORY_SHARE` of the available memory, else :data:`FALLBACK_BUDGET_BYTES`."""
    fixed = os.environ.get(MEMORY_BUDGET_ENV, "").strip()
    if fixed:
        try:
            megabytes = float(fixed)
        except ValueError:
            megabytes = math.nan
        if not math.isfinite(megabytes) or megabytes < 0:  # "abc", "nan", "inf", "1e400", "-1"
            raise InputError(f"{MEMORY_BUDGET_ENV}={fixed!r} is not a number of megabytes (0 or more).")
        return int(megabytes * 2**20)
    available = available_memory_bytes()
    return int(available * MEMORY_SHARE) if available is not None else FALLBACK_BUDGET_BYTES



def max_tokens_for(n_layer: int, n_head: int, budget: int) -> int:
    """The longest run whose attention fits in ``budget`` bytes."""
    return int(np.sqrt(max(0, budget) / (4 * max(1, n_layer * n_head))))


def check_attention_memory(n_layer: int, n_head: int, n_tokens: int, budget: int | None = None) -> int:
    """The bytes the attention will take, or InputError (one sentence) when that is more than ``budget``
    (default :func:`attention_memory_budget`)."""
    need = attention_memory_bytes(n_layer, n_head, n_tokens)
    budget = attention_memory_budget() if budget is None else budget
    if need > budget:
        fits = max_tokens_for(n_layer, n_head, budget)
        if fits >= 1:
            advice = f"; use a shorter text or a token cap of at most {fits:,} (--max-tokens)"
        else:  # not even one token fits: no cap helps
            advice = (", too small for any text; " + (f"raise {MEMORY_BUDGET_ENV}" if os.environ.get(
                MEMORY_BUDGET_ENV, "").strip() else "free some memory"))
        raise InputError(
            f"The attention of {counted(n_tokens, 'token')} would take {format_bytes(need)} ({counted(n_layer, 'layer')} × "
            f"{counted(n_head, 'head')} × {n_tokens:,}² × 4 bytes), more than the {format_bytes(budget)} this run may "
            f"use{advice}.")
    return need


# ----------------------------------------------------------------------------- attention on demand, streamed
#: Blocks of weights (heads × rows × tokens in float32, about qk_capture.BLOCK_BYTES each) a streamed pass
#: (measures/streamed.py) is counted to hold at its peak: the reused block and its scratch (qk_capture._RowBuffer),
#: what the consumers copy of a block, and what the C allocator keeps of the memory freed between blocks. Measured on
#: SmolLM2 (2 threads, a loaded machine), the whole pass's peak RSS above the capture, blocks reused: 2,048 tokens
#: +215 MiB, 8,192 tokens +628 MiB (9.5 blocks; before the buffer was reused, +348 to +408 and +670 to +1,031 MiB).
#: 16 keeps the margin those runs' spread showed.
STREAM_BLOCKS = 16
#: What a streamed pass's consumers copy besides, each a bounded chunk at a time (the entropy's float32 terms,
#: gathers of pattern cells in float64, TL's cells), and the per-layer sums (heads × tokens, float64).
STREAM_CHUNK_BYTES = 64 * 2**20


def streamed_memory_bytes(n_layer: int, n_head: int, n_kv_head: int, d_head: int, n_tokens: int,
                          store: str = "float32", thumbnail_px: int = 96, weighted_thumbnails: bool = False,
                          rollout: bool = False, causal: bool = True) -> int:
    """Bytes a run takes that captures queries and keys (run.qk_capture) and streams everything derived from them
    in blocks of query rows (measures.streamed), beyond the model:

        the capture                  L·n·((H + g)·dk·s + 4·H)               (qk_capture.qk_capture_bytes)
        one block and its copies     STREAM_BLOCKS · 4·H·b·n, b = qk_capture.block_rows(n, H): ~16 × 64 MiB
        the consumers' chunks        STREAM_CHUNK_BYTES + 3 · 8·H·n (a layer's row sums, column 0, diagonal)
        the thumbnails               L·H·c²·4, c = min(n, thumbnail_px); twice with the value-weighted grid
        rollout, when asked          n²·8 (R, float64; a second one for a bidirectional model) + a block's
                                     head-mean rows in float64 (2·8·b·n)

    Nothing in it grows as L·H·n²: SmolLM2 (30 × 9 heads, 3 key/value heads of 64) at 8,192 tokens takes
    1.78 GiB (the capture 728 MiB), against 67.5 GiB for every map; its rollout adds 540 MiB."""
    from .qk_capture import block_rows, qk_capture_bytes

    L, H, n = int(n_layer), int(n_head), int(n_tokens)
    b = min(n, block_rows(n, H))
    block = 4 * H * b * n
    c = min(n, int(thumbnail_px))
    need = (qk_capture_bytes(L, H, n_kv_head, d_head, n, store) + STREAM_BLOCKS * block + STREAM_CHUNK_BYTES
            + 3 * 8 * H * n + (2 if weighted_thumbnails else 1) * L * H * c * c * 4)
    if rollout:
        need += (1 if causal else 2) * 8 * n * n + 2 * 8 * b * n
    return int(need)


def streamed_memory_bytes_of(loaded, n_tokens: int, **options) -> int:
    """:func:`streamed_memory_bytes` for ``loaded``'s shape (``options`` as that function's keywords)."""
    shape = loaded.shape
    return streamed_memory_bytes(shape.n_layer, shape.n_head, shape.n_kv_head, shape.d_head, n_tokens,
                                 causal=bool(loaded.causal), **options)


# ----------------------------------------------------------------------------- which way a run takes
@dataclass(frozen=True)
class RunPlan:
    """How a run of ``n_tokens`` will hold its attention, and what it will take."""

    n_tokens: int
    keeps_maps: bool  # True: every map copied (the eager capture); False: queries and keys, maps on demand
    need_bytes: int  # what the run's attention takes: every map, or the streamed design (plan_run's docstring)
    maps_bytes: int  # what every map would take (attention_memory_bytes), kept or not

    def describe(self) -> str:
        """``attention 576 MiB`` or ``attention on demand 1.4 GiB`` (the status bar's words)."""
        return f"attention {'' if self.keeps_maps else 'on demand '}{format_bytes(self.need_bytes)}"


def maps_kept_bytes() -> int:
    """:data:`MAPS_KEPT_BYTES`, or ``ATTNSCOPE_KEEP_MAPS_MB`` megabytes when set."""
    fixed = os.environ.get(KEEP_MAPS_ENV, "").strip()
    if not fixed:
        return MAPS_KEPT_BYTES
    try:
        megabytes = float(fixed)
    except ValueError:
        megabytes = math.nan
    if not math.isfinite(megabytes) or megabytes < 0:
        raise InputError(f"{KEEP_MAPS_ENV}={fixed!r} is not a number of megabytes (0 or more).")
    return int(megabytes * 2**20)


def on_demand_bytes(n_layer: int, n_head: int, n_kv_head: int, d_head: int, d_model: int, n_tokens: int,
                    causal: bool = True) -> int:
    """Bytes a run with attention on demand takes: :func:`streamed_memory_bytes` (the capture, a block and its
    copies, the thumbnails) plus the residual stream and the attention output, 2·L·n·d·4 (computed when parity or
    From scratch first reads them, analysis/run/residual.py; counted, since they will be)."""
    return (streamed_memory_bytes(n_layer, n_head, n_kv_head, d_head, n_tokens, causal=causal)
            + 2 * int(n_layer) * int(n_tokens) * int(d_model) * 4)


def plan_run(n_layer: int, n_head: int, n_kv_head: int, d_head: int, d_model: int, n_tokens: int,
             keep_maps: bool | None = None, budget: int | None = None, causal: bool = True) -> RunPlan:
    """The way a run of ``n_tokens`` takes (module docstring) and the bytes it needs; InputError (one sentence) when
    that is more than ``budget`` (default :func:`attention_memory_budget`).

    ``keep_maps`` None: every map is kept when they take at most :func:`maps_kept_bytes` and fit the budget; True
    or False asks for one way (True is refused when the maps do not fit)."""
    budget = attention_memory_budget() if budget is None else budget
    maps = attention_memory_bytes(n_layer, n_head, n_tokens)
    if keep_maps is None:
        keep_maps = maps <= min(maps_kept_bytes(), budget)
    if keep_maps:
        check_attention_memory(n_layer, n_head, n_tokens, budget)
        return RunPlan(int(n_tokens), True, maps, maps)
    shape = (n_layer, n_head, n_kv_head or n_head, d_head, d_model)
    need = on_demand_bytes(*shape, n_tokens, causal=causal)
    if need > budget:
        fits = _longest_on_demand(shape, budget, causal)
        advice = (f"; use a shorter text or a token cap of at most {fits:,} (--max-tokens)" if fits >= 1 else
                  ", too small for any text; " + (f"raise {MEMORY_BUDGET_ENV}" if os.environ.get(
                      MEMORY_BUDGET_ENV, "").strip() else "free some memory"))
        raise InputError(
            f"A run of {counted(n_tokens, 'token')} would take {format_bytes(need)} (the queries and keys of "
            f"{counted(n_layer, 'layer')}, blocks of attention computed on demand, the residual stream), more than "
            f"the {format_bytes(budget)} this run may use{advice}.")
    return RunPlan(int(n_tokens), False, need, maps)


def plan_run_of(loaded, n_tokens: int, keep_maps: bool | None = None, budget: int | None = None) -> RunPlan:
    """:func:`plan_run` for ``loaded``'s shape."""
    s = loaded.shape
    return plan_run(s.n_layer, s.n_head, s.n_kv_head, s.d_head, s.d_model, n_tokens, keep_maps, budget,
                    causal=bool(loaded.causal))


def _longest_on_demand(shape: tuple, budget: int, causal: bool) -> int:
    """The most tokens whose on-demand run fits in ``budget`` (0: none), by bisection (the need grows with n)."""
    lo, hi = 0, 1
    while on_demand_bytes(*shape, hi, causal=causal) <= budget and hi < 2**24:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if on_demand_bytes(*shape, mid, causal=causal) <= budget else (lo, mid)
    return lo
