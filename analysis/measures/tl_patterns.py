"""TransformerLens's head detection, one head at a time: its detection patterns and its similarity score.

TransformerLens (``transformer_lens/head_detector.py``) scores a head by comparing its attention
pattern A (n, n) with a 0/1 *detection pattern* P (n, n, lower triangular):

- ``"mul"``: zero A's first column if ``exclude_bos``, its diagonal if ``exclude_current_token``
  (giving A'), then ``score = Σ (A' ⊙ P) / Σ A'``: the share of the (remaining) attention that lands
  where P expects it.
- ``"abs"``: ``D = |A − P|``; zero D's first column / diagonal under the same switches, then
  ``score = 1 − round(Σ D / n, 3)`` (TL writes it ``mean(D) · n``; 1 is a perfect match). A's rows
  sum to 1, so Σ D / n ranges over [0, 2] and the score over [−1, 1].

The patterns (``P[i, j] = 1`` where):
- previous token: j = i − 1;
- duplicate token: j < i and tok[j] = tok[i];
- induction: j ≥ 1 and tok[j − 1] = tok[i] with j − 1 < i (the token after an earlier copy).

``tl_scores`` scores every head at once and is held to ``similarity_score`` here, the reference.
"""
from __future__ import annotations

from typing import Literal, get_args

import numpy as np

HeadName = Literal["previous_token_head", "duplicate_token_head", "induction_head"]
HEAD_NAMES: tuple[str, ...] = get_args(HeadName)
ErrorMeasure = Literal["abs", "mul"]
ERROR_MEASURES: tuple[str, ...] = get_args(ErrorMeasure)
ABS_DECIMALS = 3  # TL rounds the "abs" error to 3 decimals


# ----------------------------------------------------------------------------- detection patterns
def previous_token_pattern(n: int) -> np.ndarray:
    """P[i, i−1] = 1 for i ≥ 1. (n, n) float64"""
    return np.eye(n, k=-1)


def duplicate_token_pattern(token_ids: np.ndarray) -> np.ndarray:
    """P[i, j] = 1 where j < i and tok[j] = tok[i] (a token is not its own duplicate). (n, n) float64"""
    ids = np.asarray(token_ids).ravel()
    return np.tril((ids[:, None] == ids[None, :]).astype(np.float64), k=-1)


def induction_pattern(token_ids: np.ndarray) -> np.ndarray:
    """The duplicate pattern shifted one key to the right: P[i, j + 1] = 1 where j < i and tok[j] = tok[i].

    Column 0 is 0 and the result is lower triangular (j + 1 ≤ i always holds). (n, n) float64
    """
    dup = duplicate_token_pattern(token_ids)
    out = np.zeros_like(dup)
    out[:, 1:] = dup[:, :-1]
    return np.tril(out)


def detection_pattern(name: str, token_ids: np.ndarray) -> np.ndarray:
    """The named TL pattern for these tokens: one of ``HEAD_NAMES``."""
    if name == "previous_token_head":
        return previous_token_pattern(len(np.asarray(token_ids).ravel()))
    if name == "duplicate_token_head":
        return duplicate_token_pattern(token_ids)
    if name == "induction_head":
        return induction_pattern(token_ids)
    raise ValueError(f"unknown head pattern {name!r}; use one of {', '.join(HEAD_NAMES)} or pass a matrix")


# ----------------------------------------------------------------------------- one head
def similarity_score(attention: np.ndarray, pattern: np.ndarray, *, exclude_bos: bool = False,
                     exclude_current_token: bool = False, error_measure: ErrorMeasure = "mul") -> float:
    """TL's ``compute_head_attention_similarity_score`` on one head's (n, n) pattern; see the module
    docstring for the formulas. Neither input is modified."""
    a = np.array(attention, dtype=np.float64)  # a copy: exclusions below never reach the caller's array
    p = np.asarray(pattern, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"the attention pattern must be square (n, n), got shape {a.shape}")
    if p.shape != a.shape:
        raise ValueError(f"the detection pattern must be {a.shape}, got {p.shape}")
    if error_measure == "mul":
        if exclude_bos:
            a[:, 0] = 0
        if exclude_current_token:
            np.fill_diagonal(a, 0)
        total = a.sum()
        return float((a * p).sum() / total) if total != 0 else float("nan")
    if error_measure == "abs":
        diff = np.abs(a - p)  # (n, n)
        if exclude_bos:
            diff[:, 0] = 0
        if exclude_current_token:
            np.fill_diagonal(diff, 0)
        return 1 - round(float(diff.sum() / len(diff)), ABS_DECIMALS)
    raise ValueError(f"unknown error measure {error_measure!r}; use one of {', '.join(ERROR_MEASURES)}")
