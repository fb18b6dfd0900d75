"""What a run's attention takes in memory, and refusing a run that would not fit.

The attention of every layer and head is held as float32, L·H·n²·4 bytes (:func:`attention_memory_bytes`); a run
may take :data:`MEMORY_SHARE` of the memory the system says is available, or what ``ATTNSCOPE_ATTENTION_BUDGET_MB``
fixes (:func:`attention_memory_budget`). ``run_text``, ``scan_texts`` and the app's status bar ask here.
"""
from __future__ import annotations

import math
import os

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
