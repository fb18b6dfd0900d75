"""GPT-2's attention, from scratch in numpy, one readable step at a time.

This is GPT-2's own form (one fused c_attn), the lesson: every step's code is here (the calculator on
user matrices is lessons/calculator.py).
The engine does not import it: every family, GPT-2 included, is recomputed by
``analysis.families.steps.recompute`` from its own copy of the same steps plus what a family adds (RMSNorm,
rotary, grouped key/value heads, no mask for encoders); ``parity_report`` uses that one, and a test holds
the two to the same numbers.

Letters used in shape comments:
    n   tokens in the sequence (query and key positions)
    d   d_model, the width of the residual stream
    h   heads
    dk  d_k = d / h, the width of one head's query, key and value

The steps, in order (a layer's ``recompute_layer`` calls each once):
    x  --layer_norm-->  x_ln (n, d)
       --project_qkv--> qkv (n, 3d)            GPT-2's fused c_attn: x @ W + b (Conv1D stores W as (in, out))
       --split_heads--> q, k, v (h, n, dk)
       --attention_scores--> QKᵀ (h, n, n)
       --scale_scores-->  QKᵀ/√dk (h, n, n)
       --causal_mask-->   future keys set to −∞ (h, n, n)
       --softmax-->       weights (h, n, n), each row sums to 1
       --mix_values-->    weights·V (h, n, dk)
       --merge_heads-->   (n, d)
       --output_projection--> c_proj: (n, d)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..families.weights import AttentionWeights


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """ln_1: normalise each token vector to zero mean and unit variance, then scale and shift. (n, d) → (n, d)"""
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)  # biased, as torch.nn.LayerNorm
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def project_qkv(x_ln: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """GPT-2's fused c_attn projection: (n, d) @ (d, 3d) + (3d,) → (n, 3d), laid out [Q | K | V]."""
    return x_ln @ weight + bias


def split_heads(qkv: np.ndarray, n_head: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, 3d) → q, k, v each (h, n, dk); head i owns columns i·dk … (i+1)·dk of each third."""
    n, three_d = qkv.shape
    d = three_d // 3
    q, k, v = qkv[:, :d], qkv[:, d : 2 * d], qkv[:, 2 * d :]

    def heads(t):  # (n, d) → (n, h, dk) → (h, n, dk)
        return t.reshape(n, n_head, d // n_head).transpose(1, 0, 2)

    return heads(q), heads(k), heads(v)


def attention_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """QKᵀ: how well each query matches each key. (h, n, dk) × (h, n, dk) → (h, n, n)"""
    return q @ np.swapaxes(k, -1, -2)


def scale_scores(scores: np.ndarray, scale: float) -> np.ndarray:
    """Multiply by 1/√dk so the scores keep unit variance and the softmax does not saturate."""
    return scores * scale


def causal_mask(scores: np.ndarray) -> np.ndarray:
    """Set every key after its query to −∞ *before* the softmax, so those weights are exactly 0
    and each row still sums to 1 (masking after the softmax would break the budget)."""
    n_query, n_key = scores.shape[-2:]
    future = np.triu(np.ones((n_query, n_key), dtype=bool), k=1 + (n_key - n_query))
    return np.where(future, -np.inf, scores)


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


def output_projection(merged: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """c_proj (W_O): mixes the heads' outputs back into the residual stream. (n, d) @ (d, d) + (d,) → (n, d)"""
    return merged @ weight + bias


@dataclass(frozen=True)
class LayerRecomputation:
    """Every intermediate of one layer's attention, in the dtype it was computed in."""

    layer: int
    x: np.ndarray  # (n, d) the layer's input (residual stream)
    x_ln: np.ndarray  # (n, d)
    qkv: np.ndarray  # (n, 3d)
    q: np.ndarray  # (h, n, dk)
    k: np.ndarray  # (h, n, dk)
    v: np.ndarray  # (h, n, dk)
    scores: np.ndarray  # (h, n, n) QKᵀ
    scaled: np.ndarray  # (h, n, n) QKᵀ·scale
    masked: np.ndarray  # (h, n, n) with −∞ above the diagonal
    weights: np.ndarray  # (h, n, n)
    head_outputs: np.ndarray  # (h, n, dk)
    merged: np.ndarray  # (n, d)
    output: np.ndarray  # (n, d) after c_proj
    scale: float


def recompute_layer(params: AttentionWeights, layer_input: np.ndarray, layer: int = 0,
                    dtype: type = np.float32) -> LayerRecomputation:
    """Recompute one GPT-2 layer's attention from its input with plain numpy, keeping every step.

    ``params``: the layer's ``loaded.attention_weights(layer)``; c_attn is put back together from its
    thirds, [W_Q | W_K | W_V], as GPT-2 stores it."""
    if params.qkv_layout != "fused [Q|K|V]" or params.norm is None or params.norm.kind != "layernorm":
        raise ValueError(f"recompute_layer is GPT-2's attention; a {params.family} layer is recomputed by its family")
    as_dtype = lambda a: np.asarray(a, dtype=dtype)  # noqa: E731
    qkv_weight = np.concatenate([params.q_weight, params.k_weight, params.v_weight], axis=1)  # (d, 3d) c_attn
    qkv_bias = np.concatenate([params.q_bias, params.k_bias, params.v_bias])  # (3d,)
    x = as_dtype(layer_input)  # (n, d)
    x_ln = layer_norm(x, as_dtype(params.norm.weight), as_dtype(params.norm.bias), params.norm.eps)  # (n, d)
    qkv = project_qkv(x_ln, as_dtype(qkv_weight), as_dtype(qkv_bias))  # (n, 3d)
    q, k, v = split_heads(qkv, params.n_head)  # (h, n, dk) each
    scores = attention_scores(q, k)
    scaled = scale_scores(scores, dtype(params.scale))
    masked = causal_mask(scaled)
    weights = softmax(masked)
    head_outputs = mix_values(weights, v)
    merged = merge_heads(head_outputs)
    output = output_projection(merged, as_dtype(params.out_weight), as_dtype(params.out_bias))
    return LayerRecomputation(layer, x, x_ln, qkv, q, k, v, scores, scaled, masked, weights, head_outputs,
                              merged, output, float(params.scale))
