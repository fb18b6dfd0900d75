"""Head detectors: one number per (layer, head) saying how much a head behaves in a known way.

Every function is pure: it reads ``attentions`` (layer, head, query, key) and never writes to
it. Query positions are i = 0 … n−1 and key positions j ≤ i (the causal pattern).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

ScoreName = Literal["previous_token", "sink", "self", "duplicate_token", "induction", "induction_probe", "entropy"]
SCORE_NAMES: tuple[str, ...] = ("previous_token", "sink", "self", "duplicate_token", "induction",
                                "induction_probe", "entropy")
SCORE_DESCRIPTIONS = {
    "previous_token": "attention to the token just before (mean over i ≥ 1 of A[i, i−1])",
    "sink": "attention to the first token (mean over i ≥ 1 of A[i, 0])",
    "self": "attention to itself (mean over i ≥ 1 of A[i, i])",
    "duplicate_token": "attention to earlier copies of the same token",
    "induction": "attention to the token after an earlier copy of the current token",
    "induction_probe": "induction on a seeded probe of random tokens repeated twice",
    "entropy": "how spread the attention is (0 = one key, 1 = uniform over allowed keys)",
}


def _check(attentions: np.ndarray) -> np.ndarray:
    a = np.asarray(attentions)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"attentions must be (layer, head, n, n), got shape {a.shape}")
    return a


def _diagonal_mean(attentions: np.ndarray, offset: int) -> np.ndarray:
    """Mean over i ≥ 1 of A[i, i − offset] (offset 0: self, 1: previous token). NaN when n < 2."""
    a = _check(attentions)
    n = a.shape[-1]
    if n < 2:
        return np.full(a.shape[:2], np.nan)
    queries = np.arange(1, n)
    return a[..., queries, queries - offset].astype(np.float64).mean(axis=-1)


def previous_token(attentions: np.ndarray) -> np.ndarray:
    """Mean over query positions i ≥ 1 of A[i, i−1]. (layer, head); NaN for a 1-token text."""
    return _diagonal_mean(attentions, 1)


def self_attention(attentions: np.ndarray) -> np.ndarray:
    """Mean over i ≥ 1 of A[i, i] (row 0 is excluded: it can only attend to itself). (layer, head)"""
    return _diagonal_mean(attentions, 0)


def sink(attentions: np.ndarray) -> np.ndarray:
    """Mean over i ≥ 1 of A[i, 0]: the mass parked on the first token. (layer, head)"""
    a = _check(attentions)
    if a.shape[-1] < 2:
        return np.full(a.shape[:2], np.nan)
    return a[..., 1:, 0].astype(np.float64).mean(axis=-1)


def repeat_pairs(token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """All (i, j) with j < i and token[j] == token[i]; and how many positions i have at least one."""
    ids = np.asarray(token_ids).ravel()
    same = ids[:, None] == ids[None, :]  # (n, n)
    i, j = np.nonzero(np.tril(same, k=-1))
    return i, j, int(np.unique(i).size)


def duplicate_token(attentions: np.ndarray, token_ids: np.ndarray) -> np.ndarray:
    """Mean, over positions i whose token occurred earlier, of Σ_{j<i, tok[j]=tok[i]} A[i, j].

    (layer, head); all NaN when no token repeats.
    """
    a = _check(attentions)
    i, j, n_positions = repeat_pairs(token_ids)
    if n_positions == 0:
        return np.full(a.shape[:2], np.nan)
    return a[..., i, j].astype(np.float64).sum(axis=-1) / n_positions


def induction(attentions: np.ndarray, token_ids: np.ndarray) -> np.ndarray:
    """Mean, over positions i whose token occurred earlier, of Σ_{j<i, tok[j]=tok[i]} A[i, j+1]:
    the attention on the token that followed each earlier occurrence (what an induction head copies).

    (layer, head); all NaN when no token repeats.
    """
    a = _check(attentions)
    i, j, n_positions = repeat_pairs(token_ids)
    if n_positions == 0:
        return np.full(a.shape[:2], np.nan)
    return a[..., i, j + 1].astype(np.float64).sum(axis=-1) / n_positions


def induction_probe(probe_attentions: np.ndarray, probe_token_ids: np.ndarray) -> np.ndarray:
    """``induction`` on the probe sequence (BOS, random tokens R, R again), so it is defined for any text."""
    return induction(probe_attentions, probe_token_ids)


def entropy(attentions: np.ndarray) -> np.ndarray:
    """Mean over i ≥ 1 of H(A[i, :i+1]) / log(i+1): 0 when a row puts all weight on one key, 1 when uniform.

    Row 0 is excluded (one allowed key: its entropy is 0 by necessity). (layer, head)
    """
    a = _check(attentions)
    n = a.shape[-1]
    if n < 2:
        return np.full(a.shape[:2], np.nan)
    total = np.zeros(a.shape[:2])
    for i in range(1, n):
        row = a[..., i, : i + 1].astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.where(row > 0, row * np.log(row), 0.0)
        total += -plogp.sum(axis=-1) / np.log(i + 1)
    return total / (n - 1)


@dataclass(frozen=True)
class HeadScores:
    """Every score for every head: ``values[name]`` is (layer, head)."""

    values: dict

    def __getitem__(self, name: str) -> np.ndarray:
        return self.values[name]

    @property
    def shape(self) -> tuple[int, int]:
        return next(iter(self.values.values())).shape

    def rows(self) -> list[dict]:
        """One dict per head: layer, head and every score (NaN kept as float('nan'))."""
        n_layer, n_head = self.shape
        return [{"layer": layer, "head": head, **{k: float(self.values[k][layer, head]) for k in SCORE_NAMES}}
                for layer in range(n_layer) for head in range(n_head)]


def all_scores(result) -> HeadScores:
    """All scores of an AttentionResult (``induction_probe`` is NaN when the result has no probe)."""
    a, ids = result.attentions, result.token_ids
    values = {
        "previous_token": previous_token(a),
        "sink": sink(a),
        "self": self_attention(a),
        "duplicate_token": duplicate_token(a, ids),
        "induction": induction(a, ids),
        "induction_probe": (induction_probe(result.probe.attentions, result.probe.token_ids)
                            if result.probe is not None else np.full(a.shape[:2], np.nan)),
        "entropy": entropy(a),
    }
    for v in values.values():
        v.setflags(write=False)
    return HeadScores(values)
