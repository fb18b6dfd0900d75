"""The attention calculator: softmax(QKᵀ/√d_k)·V on the user's own small matrices, every step kept.

One head, no projections: the numbers a newcomer types (``parse_matrix`` reads JSON vectors or tables and
refuses anything else in one sentence) give the scores, the scaled scores, the masked scores (``causal``),
the weights and the output, computed in float64 so that scores past float32's range stay exact.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .manual_attention import attention_scores, causal_mask, mix_values, scale_scores, softmax

#: The longest JSON text the calculator parses (it is for small, hand-made matrices).
MAX_JSON_CHARS = 1_000_000


@dataclass(frozen=True)
class CalculatorResult:
    """The attention calculator's steps on user matrices (one head, no projections).

    Scores that a 64-bit float cannot hold (|QKᵀ| above about 1.8e308) are ``±inf`` in ``scores``
    and ``scaled`` and listed in ``notes``; the weights are still exact, computed from the scores
    relative to each row's largest (see :func:`attend`). Masked entries are ``−inf`` in ``masked``.
    """

    scores: np.ndarray  # (n_q, n_k) QKᵀ
    scaled: np.ndarray  # (n_q, n_k) QKᵀ/√dk
    masked: np.ndarray  # (n_q, n_k) as scaled, with −∞ on future keys when causal
    weights: np.ndarray  # (n_q, n_k), each row sums to 1
    output: np.ndarray  # (n_q, d_v)
    d_k: int
    sqrt_d_k: float
    causal: bool
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Plain JSON values: numbers, and ``null`` for a masked (−∞) or unrepresentable (±∞) entry —
        never NaN or Infinity, which are not JSON."""
        def listify(a):
            return [[float(x) if np.isfinite(x) else None for x in row] for row in np.atleast_2d(a)]

        return {"d_k": self.d_k, "sqrt_d_k": self.sqrt_d_k, "causal": self.causal, "scores": listify(self.scores),
                "scaled": listify(self.scaled), "masked": listify(self.masked), "weights": listify(self.weights),
                "output": listify(self.output), "row_sums": [float(s) for s in self.weights.sum(axis=-1)],
                "notes": list(self.notes)}


def _matrix(value, name: str) -> np.ndarray:
    """A number, a vector or a table of plain numbers (not strings, not booleans) as a float64 array."""
    def is_number(x):
        return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))

    if isinstance(value, np.ndarray):
        rows = value.tolist() if value.ndim <= 2 else None
    else:
        rows = value
    if is_number(rows):
        rows = [rows]
    if not isinstance(rows, (list, tuple)):
        raise InputError(f"{name} must be a vector or a table of numbers.")
    if not any(isinstance(x, (list, tuple)) for x in rows):
        rows = [rows]  # one vector: one row
    if not all(isinstance(r, (list, tuple)) for r in rows):
        raise InputError(f"{name} must be a vector or a table of numbers (rows are tokens), not nested deeper.")
    if len({len(r) for r in rows}) > 1:
        raise InputError(f"{name} is ragged: every row needs the same number of entries.")
    if not all(is_number(x) for r in rows for x in r):
        raise InputError(f"{name} must hold numbers only (no strings, booleans or nested lists).")
    try:
        array = np.array(rows, dtype=np.float64).reshape(len(rows), len(rows[0]) if rows else 0)
    except OverflowError:
        raise InputError(f"{name} holds a number too large for a 64-bit float (the largest is about 1.8e308).") from None
    if not np.isfinite(array).all():
        raise InputError(f"{name} must hold finite numbers (no NaN or infinity; the largest is about 1.8e308).")
    return array


def parse_matrix(text: str, name: str = "the matrix") -> np.ndarray:
    """Parse a JSON number, vector or table (as typed on the command line or in the app) into float64,
    or InputError with a sentence: not JSON, nested too deeply, not numbers, ragged, too large."""
    import json

    if len(text) > MAX_JSON_CHARS:
        raise InputError(f"{name} is longer than {MAX_JSON_CHARS:,} characters; the calculator is for small matrices.")
    try:
        value = json.loads(text)
    except RecursionError:
        raise InputError(f"{name} is nested too deeply: give a vector or a table such as [[1, 0], [0, 1]].") from None
    except ValueError as exc:
        raise InputError(f"{name} is not JSON ({exc}): give a vector or a table such as [[1, 0], [0, 1]].") from None
    return _matrix(value, name)


def _stable_scaled_weights(q: np.ndarray, k: np.ndarray, masked_out: np.ndarray) -> np.ndarray:
    """softmax(QKᵀ/√dk) when QKᵀ itself overflows float64: with a = max|Q|, b = max|K|, c = a·b/√dk,
    QKᵀ/√dk = c·R with R = (Q/a)(K/b)ᵀ bounded by dk. Each weight is exp(c·(R − max R)) / Σ, and
    c·(R − max R) is formed in logs so it never overflows (a term below −1e300 is exactly 0 after exp)."""
    d_k = q.shape[1]
    a, b = np.abs(q).max(), np.abs(k).max()
    r = (q / a) @ (k / b).T  # (n_q, n_k), |r| ≤ dk
    r = np.where(masked_out, -np.inf, r)
    diff = r - r.max(axis=-1, keepdims=True)  # ≤ 0; 0 at each row's largest
    log_c = np.log(a) + np.log(b) - 0.5 * np.log(d_k)
    with np.errstate(divide="ignore"):  # log(0) = −inf at each row's largest: exp(−inf) = 0 below
        log_gap = np.log(-diff)
    exponent = -np.exp(np.minimum(log_c + log_gap, 700.0))  # c·(R − max R), floored at −e^700 (exp → 0)
    exp = np.exp(exponent)
    return exp / exp.sum(axis=-1, keepdims=True)


def attend(Q, K, V, causal: bool = False) -> CalculatorResult:
    """softmax(QKᵀ/√dk)·V on user matrices: Q (n_q, dk), K (n_k, dk), V (n_k, dv). A 1-D Q is one query.

    Causal: the queries are the last n_q positions of the n_k keys (query i sits at key position
    n_k − n_q + i and sees keys up to it), so there must be at least as many keys as queries.
    Computed in float64 and stably: the row max is subtracted before exp; if QKᵀ overflows float64,
    the weights come from :func:`_stable_scaled_weights` and ``notes`` says which steps could not be
    represented. Never NaN: every row of weights sums to 1.
    """
    q, k, v = _matrix(Q, "Q"), _matrix(K, "K"), _matrix(V, "V")
    if q.size == 0 or k.size == 0 or v.size == 0:
        raise InputError("Q, K and V must not be empty.")
    if q.shape[1] != k.shape[1]:
        raise InputError(f"Q and K need the same width d_k: Q is {q.shape[0]}×{q.shape[1]}, K is {k.shape[0]}×{k.shape[1]}.")
    if k.shape[0] != v.shape[0]:
        raise InputError(f"K and V need one row per key: K has {k.shape[0]} rows, V has {v.shape[0]}.")
    if causal and q.shape[0] > k.shape[0]:
        raise InputError(f"With causal masking each query sits at a key's position: {q.shape[0]} queries need at "
                         f"least {q.shape[0]} keys, K has {k.shape[0]}.")
    d_k = q.shape[1]
    notes = []
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is detected just below, not warned about
        scores = attention_scores(q, k)  # (n_q, n_k); a finite entry never overflowed on the way (inf sticks)
        scaled = scale_scores(scores, 1 / np.sqrt(d_k))
    if not np.isfinite(scores).all():
        # QKᵀ overflowed somewhere (inf, or inf − inf = NaN): recompute those entries as a·b·R with
        # R = (Q/a)(K/b)ᵀ, a = max|Q|, b = max|K|; what is still beyond float64 stays ±inf
        a, b = np.abs(q).max(), np.abs(k).max()
        r = (q / a) @ (k / b).T  # (n_q, n_k), |r| ≤ dk
        with np.errstate(over="ignore"):
            scores = np.where(np.isfinite(scores), scores, (r * a) * b)
            scaled = np.where(np.isfinite(scaled), scaled, (r * a) * (b / np.sqrt(d_k)))
        for name, values in (("scores QKᵀ", scores), ("scaled scores QKᵀ/√d_k", scaled)):
            if not np.isfinite(values).all():
                notes.append(f"{int((~np.isfinite(values)).sum())} of the {values.size} {name} are beyond 64-bit "
                             "floats (about ±1.8e308) and are shown as null.")
    masked_out = np.isneginf(causal_mask(np.zeros_like(scores))) if causal else np.zeros(scores.shape, dtype=bool)
    masked = np.where(masked_out, -np.inf, scaled)
    if np.isfinite(scaled).all():
        weights = softmax(masked)
    else:
        weights = _stable_scaled_weights(q, k, masked_out)
        notes.append("The weights are exact all the same: they are computed from the scores relative to each "
                     "row's largest.")
    v_max = float(np.abs(v).max())
    if v_max > 1e300:  # a convex mixture cannot exceed max|V|, but its partial sums can round past float64
        output = mix_values(weights, v / v_max) * v_max
    else:
        output = mix_values(weights, v)
    return CalculatorResult(scores, scaled, masked, weights, output, d_k, float(np.sqrt(d_k)), causal, tuple(notes))
