"""The attention arithmetic every family shares, one numpy function per step, and ``recompute``.

Letters used in shape comments:
    n   tokens (query and key positions)
    d   d_model, the width of the residual stream
    h   query heads
    g   key/value heads (g = h without grouped-query attention; h is a multiple of g)
    dk  d_head, the width of one head's query, key and value
    r   rotary_dim, how many of a head's dk dimensions rotary rotates (r = dk unless partial)

The recomputation, in order (``recompute`` calls each step once; a family's ``steps`` names the
ones its models take; ``step_views.STEPS`` what each is called and shows):
    x (n, d)  --norm-->  x_ln (n, d)                 LayerNorm / RMSNorm / none (post-LN: x enters as is)
       --project-->      q (n, h·dk), k, v (n, g·dk)  x_ln @ W + b, weights stored (in, out)
       --split_heads-->  q (h, n, dk), k, v (g, n, dk)
       --rotate-->       q, k turned by position      rotary, HF's rotate-half pairing, first r dims
       --repeat_kv-->    k, v (h, n, dk)              query head i uses key/value head i // (h/g)
       --scores-->       QKᵀ (h, n, n)
       --scale-->        QKᵀ·scale (h, n, n)          scale = 1/√dk
       --mask-->         −∞ where a key is hidden     causal (future keys), sliding window, or none
       --softmax-->      weights (h, n, n), rows sum to 1
       --mix_values-->   weights·V (h, n, dk)
       --merge_heads-->  (n, h·dk)
       --output-->       @ W_O + b_O: (n, d), the attention output before the residual
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .weights import AttentionWeights, Norm, _freeze_fields

#: Largest |manual − model| of an attention weight that counts as a match for a half-precision model. A float32
#: model's weights each get a tolerance derived from float32 rounding instead (analysis/measures/parity.py).
WEIGHT_TOLERANCE = {"float16": 2e-3, "bfloat16": 2e-2}
#: Same for the attention sub-layer output, relative to max(1, max |model output|) of the layer.
OUTPUT_RELATIVE_TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 5e-2}


# ----------------------------------------------------------------------------- the steps
def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm: each token to zero mean and unit variance, then scale and shift. (n, d) → (n, d)"""
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)  # biased, as torch.nn.LayerNorm
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def rms_norm(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm: divide each token by its root mean square, then scale; no centring, no shift. (n, d) → (n, d)"""
    rms = np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)  # (n, 1)
    return x / rms * gamma


def normalise(x: np.ndarray, norm: Norm | None, dtype=np.float32) -> np.ndarray:
    """What enters attention: the normed stream for pre-LN models, the block input itself for post-LN."""
    if norm is None:
        return x.copy()
    gamma = np.asarray(norm.weight, dtype=dtype)
    if norm.kind == "rmsnorm":
        return rms_norm(x, gamma, norm.eps)
    return layer_norm(x, gamma, np.asarray(norm.bias, dtype=dtype), norm.eps)


def project(x_ln: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """One linear projection: (n, d) @ (d, m) + (m,) → (n, m)."""
    return x_ln @ weight + bias


def split_heads(t: np.ndarray, n_heads: int) -> np.ndarray:
    """(n, heads·dk) → (n, heads, dk) → (heads, n, dk); head i owns columns i·dk … (i+1)·dk."""
    n, width = t.shape
    return t.reshape(n, n_heads, width // n_heads).transpose(1, 0, 2)


def rotary_angles(positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """θ[p, i] = position p · inv_freq[i]. (n,) × (r/2,) → (n, r/2) radians.

    Computed in float32, as transformers does, so long positions round the same way."""
    return positions.astype(np.float32)[:, None] * inv_freq.astype(np.float32)[None, :]


def rotate_half(x: np.ndarray) -> np.ndarray:
    """HF's pairing: dimension i goes with i + r/2. (…, r) → (…, r) as [−x₂, x₁]."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rotate_interleaved(x: np.ndarray) -> np.ndarray:
    """The original RoPE paper's pairing (2i with 2i+1): right for Meta's checkpoints, *wrong* for HF's."""
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    return out


def apply_rotary(x: np.ndarray, angles: np.ndarray, rotary_dim: int, pairing: str = "half",
                 trailing: bool = False) -> np.ndarray:
    """Turn each pair of the first r dims of every head by its angle: x·cos θ + rotate_half(x)·sin θ.

    (heads, n, dk) → (heads, n, dk). Dims r … dk pass through unchanged (partial rotary).
    ``pairing="interleaved"`` and ``trailing=True`` (rotate the last r dims) are deliberate mistakes
    the parity tests must catch."""
    dk = x.shape[-1]
    if pairing == "interleaved":
        theta = np.repeat(angles, 2, axis=-1)  # (n, r): θ0 θ0 θ1 θ1 …
        turn = rotate_interleaved
    else:
        theta = np.concatenate([angles, angles], axis=-1)  # (n, r): θ0 θ1 … θ0 θ1 …
        turn = rotate_half
    cos, sin = np.cos(theta).astype(x.dtype), np.sin(theta).astype(x.dtype)  # (n, r)
    part = slice(dk - rotary_dim, dk) if trailing else slice(0, rotary_dim)
    out = x.copy()
    out[..., part] = x[..., part] * cos + turn(x[..., part]) * sin
    return out


def attention_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """QKᵀ: how well each query matches each key. (h, n, dk) × (h, n, dk) → (h, n, n)"""
    return q @ np.swapaxes(k, -1, -2)


def scale_scores(scores: np.ndarray, scale: float) -> np.ndarray:
    """Multiply by 1/√dk so the scores keep unit variance and the softmax does not saturate."""
    return scores * scale


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row-wise softmax, numerically stable: subtract the row max before exponentiating."""
    row_max = scores.max(axis=-1, keepdims=True)
    exp = np.exp(scores - row_max)
    return exp / exp.sum(axis=-1, keepdims=True)


def mix_values(weights: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Each output row is a weighted average (a convex mixture) of value rows. (h, n, n) @ (h, n, dk) → (h, n, dk)"""
    return weights @ v


def merge_heads(head_outputs: np.ndarray) -> np.ndarray:
    """Concatenate the heads side by side: (h, n, dk) → (n, h, dk) → (n, d)"""
    h, n, dk = head_outputs.shape
    return head_outputs.transpose(1, 0, 2).reshape(n, h * dk)


def repeat_kv(t: np.ndarray, kv_head_of: np.ndarray) -> np.ndarray:
    """Grouped-query attention: give every query head the key/value head it reads. (g, n, dk) → (h, n, dk)"""
    return t[kv_head_of]


def hidden_keys(n_query: int, n_key: int, causal: bool, sliding_window: int | None,
                query_positions: np.ndarray | None = None) -> np.ndarray:
    """(n, n) True where query i may *not* see key j: a future key (causal), or one ``sliding_window`` or more back.

    The queries are the last ``n_query`` positions, or those of ``query_positions`` (R,): then (R, n_key)."""
    i = (np.arange(n_query) + (n_key - n_query) if query_positions is None else np.asarray(query_positions))[:, None]
    j = np.arange(n_key)[None, :]
    hidden = np.zeros((n_query, n_key), dtype=bool)
    if causal:
        hidden |= j > i
    if sliding_window is not None:
        hidden |= j <= i - sliding_window
    return hidden


def mask(scores: np.ndarray, hidden: np.ndarray) -> np.ndarray:
    """Set hidden keys to −∞ *before* the softmax, so their weights are exactly 0 and rows still sum to 1."""
    return np.where(hidden, -np.inf, scores)


# ----------------------------------------------------------------------------- the recomputation
@dataclass(frozen=True)
class Mistakes:
    """Deliberately wrong recomputations: each must make parity fail (the tests prove the checks can fail)."""

    skip_rotation: bool = False  # forget rotary altogether
    rotary_pairing: str = "half"  # "interleaved": pair 2i with 2i+1 instead of HF's i with i + r/2
    rotate_trailing_dims: bool = False  # rotate the last r dims of each head instead of the first (partial rotary)
    kv_tiled: bool = False  # query head i reads key/value head i % g instead of i // (h/g)
    causal: bool | None = None  # force a causal mask on (True) or off (False)


@dataclass(frozen=True)
class FamilyRecomputation:
    """Every intermediate of one layer's attention, in the dtype it was computed in.

    From the scores on, only the query rows ``rows`` are there (every row when None); q, k, v have every row.
    Field names match ``manual_attention.LayerRecomputation`` where the meaning is the same: ``q``, ``k``,
    ``v`` are what each *query head* uses (after rotation and after repeating key/value heads)."""

    layer: int
    family: str
    steps: tuple[str, ...]  # the steps this family takes, in order
    x: np.ndarray  # (n, d) the block's input (residual stream)
    x_ln: np.ndarray  # (n, d) what enters attention (normed; = x for post-LN)
    qkv: np.ndarray  # (n, (h+2g)·dk) the projections side by side [Q | K | V]
    q_before_rotation: np.ndarray  # (h, n, dk)
    k_before_rotation: np.ndarray  # (g, n, dk)
    angles: np.ndarray | None  # (n, r/2) radians each pair is turned by, None without rotary
    k_per_kv_head: np.ndarray  # (g, n, dk) after rotation, before repeating
    v_per_kv_head: np.ndarray  # (g, n, dk)
    kv_head_of: np.ndarray  # (h,) the key/value head each query head reads
    q: np.ndarray  # (h, n, dk) after rotation
    k: np.ndarray  # (h, n, dk) after rotation and repeat
    v: np.ndarray  # (h, n, dk) after repeat
    scores: np.ndarray  # (h, R, n) QKᵀ; R = n query rows unless ``rows`` names fewer
    scaled: np.ndarray  # (h, R, n) QKᵀ·scale
    hidden: np.ndarray  # (R, n) bool, True where a key is masked
    masked: np.ndarray  # (h, R, n) scaled with −∞ on hidden keys
    weights: np.ndarray  # (h, R, n)
    head_outputs: np.ndarray  # (h, R, dk)
    merged: np.ndarray  # (R, h·dk)
    output: np.ndarray  # (R, d) after W_O, before the residual
    scale: float
    causal: bool
    sliding_window: int | None
    rotary_dim: int  # 0 without rotary
    rows: np.ndarray | None = None  # (R,) the query rows recomputed, ascending; None: every row (R = n)
    heads: np.ndarray | None = None  # (h',) the query heads whose scores … weights are kept, ascending; None: all

    def __post_init__(self):
        _freeze_fields(self)

    def head_slot(self, head: int) -> int:
        """Where query head ``head`` is in the per-kept-head fields (:data:`KEPT_PER_HEAD`)."""
        if self.heads is None:
            return int(head)
        found = np.flatnonzero(self.heads == int(head))
        if not found.size:
            raise ValueError(f"head {head} was not kept by this recomputation (kept: {self.heads.tolist()})")
        return int(found[0])

    def of_head(self, field: str, head: int) -> np.ndarray:
        """Field ``field`` of query head ``head`` (any per-head field: q, k, v, scores … weights, head_outputs)."""
        values = getattr(self, field)
        return values[self.head_slot(head)] if field in KEPT_PER_HEAD else values[int(head)]


#: The fields of a FamilyRecomputation that hold only the kept heads (``heads``): the n² ones.
KEPT_PER_HEAD = ("scores", "scaled", "masked", "weights")


def recompute(weights: AttentionWeights, layer_input: np.ndarray, steps: tuple[str, ...] = (),
              positions: np.ndarray | None = None, dtype: type = np.float32,
              mistakes: Mistakes | None = None, rows: np.ndarray | None = None,
              heads=None) -> FamilyRecomputation:
    """Recompute one layer's attention from the block input with plain numpy, keeping every step.

    ``rows`` (ascending query positions): compute the scores, weights and output of those query rows only, against
    every key — what parity needs of a long text, at R·n instead of n² memory. None: every row.
    ``heads`` (query heads): keep the scores, scaled scores, masked scores and weights of those heads only
    (:data:`KEPT_PER_HEAD`; the From-scratch tab's selected head): every head is still computed, one at a time, for
    its output (so the merged heads and W_O are the whole layer's), but only h' × R × n of each n² step is kept,
    not h × R × n. None: every head, computed together."""
    m = mistakes or Mistakes()
    w = weights
    as_dtype = lambda a: np.asarray(a, dtype=dtype)  # noqa: E731
    x = np.array(layer_input, dtype=dtype)  # (n, d), a copy: the caller's array is never touched
    n = x.shape[0]
    x_ln = normalise(x, w.norm, dtype)  # (n, d)
    q_flat = project(x_ln, as_dtype(w.q_weight), as_dtype(w.q_bias))  # (n, h·dk)
    k_flat = project(x_ln, as_dtype(w.k_weight), as_dtype(w.k_bias))  # (n, g·dk)
    v_flat = project(x_ln, as_dtype(w.v_weight), as_dtype(w.v_bias))  # (n, g·dk)
    q0 = split_heads(q_flat, w.n_head)  # (h, n, dk)
    k0 = split_heads(k_flat, w.n_kv_head)  # (g, n, dk)
    v_kv = split_heads(v_flat, w.n_kv_head)  # (g, n, dk)
    angles = None
    q_rot, k_rot = q0, k0
    if w.rotary is not None:
        if w.rotary.max_positions is not None and n >= w.rotary.max_positions:
            raise InputError(
                f"This model's dynamic RoPE rescales its frequencies from {w.rotary.max_positions} tokens on, "
                f"which the recomputation does not follow; use a text under {w.rotary.max_positions} tokens.")
        pos = np.arange(n) if positions is None else np.asarray(positions)
        angles = rotary_angles(pos, w.rotary.inv_freq)  # (n, r/2)
        if not m.skip_rotation:
            rotate = lambda t: apply_rotary(t, angles, w.rotary.rotary_dim, m.rotary_pairing,  # noqa: E731
                                            m.rotate_trailing_dims)
            q_rot, k_rot = rotate(q0), rotate(k0)  # (h, n, dk), (g, n, dk)
    kv_head_of = np.arange(w.n_head) % w.n_kv_head if m.kv_tiled else w.kv_head_of()  # (h,)
    k = repeat_kv(k_rot, kv_head_of)  # (h, n, dk)
    v = repeat_kv(v_kv, kv_head_of)  # (h, n, dk)
    if rows is not None:
        rows = np.asarray(rows, dtype=np.int64)
    q_rows = q_rot if rows is None else q_rot[:, rows]  # (h, R, dk)
    causal = w.causal if m.causal is None else m.causal
    hidden = hidden_keys(len(rows) if rows is not None else n, n, causal, w.sliding_window, rows)  # (R, n)
    kept = None if heads is None else np.unique(np.asarray(heads, dtype=np.int64))
    if kept is None:
        scores = attention_scores(q_rows, k)  # (h, R, n)
        scaled = scale_scores(scores, dtype(w.scale))  # (h, R, n)
        masked = mask(scaled, hidden)  # (h, R, n)
        attn = softmax(masked)  # (h, R, n)
        head_outputs = mix_values(attn, v)  # (h, R, dk)
    else:
        if kept.size and (kept[0] < 0 or kept[-1] >= w.n_head):
            raise ValueError(f"heads must be in 0 … {w.n_head - 1}, got {kept.tolist()}")
        steps_of = {"scores": [], "scaled": [], "masked": [], "weights": []}
        head_outputs = np.empty((w.n_head, q_rows.shape[1], v.shape[-1]), dtype=dtype)  # (h, R, dk)
        for head in range(w.n_head):  # one head's R × n at a time, the same steps as above
            one = slice(head, head + 1)
            s_h = attention_scores(q_rows[one], k[one])  # (1, R, n)
            scaled_h = scale_scores(s_h, dtype(w.scale))
            masked_h = mask(scaled_h, hidden)
            attn_h = softmax(masked_h)
            head_outputs[one] = mix_values(attn_h, v[one])
            if head in kept:
                for name, value in (("scores", s_h), ("scaled", scaled_h), ("masked", masked_h), ("weights", attn_h)):
                    steps_of[name].append(value[0])
        empty = np.empty((0, q_rows.shape[1], n), dtype=dtype)
        scores, scaled, masked, attn = (np.stack(steps_of[name]) if steps_of[name] else empty
                                        for name in ("scores", "scaled", "masked", "weights"))
    merged = merge_heads(head_outputs)  # (R, h·dk)
    output = project(merged, as_dtype(w.out_weight), as_dtype(w.out_bias))  # (R, d)
    return FamilyRecomputation(
        layer=w.layer, family=w.family, steps=steps, x=x, x_ln=x_ln,
        qkv=np.concatenate([q_flat, k_flat, v_flat], axis=-1), q_before_rotation=q0, k_before_rotation=k0,
        angles=angles, k_per_kv_head=k_rot, v_per_kv_head=v_kv, kv_head_of=kv_head_of, q=q_rot, k=k, v=v,
        scores=scores, scaled=scaled, hidden=hidden, masked=masked, weights=attn, head_outputs=head_outputs,
        merged=merged, output=output, scale=float(w.scale), causal=causal, sliding_window=w.sliding_window,
        rotary_dim=w.rotary.rotary_dim if w.rotary is not None else 0, rows=rows, heads=kept,
    )


__all__ = ["KEPT_PER_HEAD", "OUTPUT_RELATIVE_TOLERANCE", "WEIGHT_TOLERANCE", "FamilyRecomputation", "Mistakes",
           "recompute"]
