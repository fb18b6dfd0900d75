"""The lessons' experiments and accounting, as plain functions: why √d_k, what attention costs,
and how one attention weight is made."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..display import format_bytes
from .manual_attention import LayerRecomputation, softmax


# ----------------------------------------------------------------------------- why √d_k
@dataclass(frozen=True)
class ScalingExperiment:
    """Dot products of standard-normal q and k, with and without the 1/√d_k scale."""

    d_k: int
    seed: int
    unscaled: np.ndarray  # (n_pairs,) q·k
    scaled: np.ndarray  # (n_pairs,) q·k/√d_k
    std_unscaled: float  # ≈ √d_k
    std_scaled: float  # ≈ 1
    row_length: int
    entropy_unscaled: float  # mean softmax entropy (nats) of rows of unscaled scores
    entropy_scaled: float
    max_entropy: float  # log(row_length): a uniform row
    max_weight_unscaled: float  # mean of each row's largest weight (≈ 1: nearly one-hot)
    max_weight_scaled: float


def row_entropy(weights: np.ndarray) -> np.ndarray:
    """Entropy in nats of each row of a weight matrix (0·log 0 = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(weights > 0, weights * np.log(weights), 0.0)
    return -plogp.sum(axis=-1)


def scaling_experiment(d_k: int, n_pairs: int = 10_000, row_length: int = 64, n_rows: int = 200,
                       seed: int = 0) -> ScalingExperiment:
    """Sample q, k ~ N(0, I_{d_k}); report the spread of q·k and the softmax entropy with and without scaling."""
    if d_k < 1:
        raise ValueError("d_k must be at least 1")
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_pairs, d_k))
    k = rng.standard_normal((n_pairs, d_k))
    unscaled = np.einsum("pd,pd->p", q, k)
    scaled = unscaled / np.sqrt(d_k)
    rows_q = rng.standard_normal((n_rows, 1, d_k))
    rows_k = rng.standard_normal((n_rows, row_length, d_k))
    row_scores = (rows_q * rows_k).sum(-1)  # (n_rows, row_length)
    w_unscaled, w_scaled = softmax(row_scores), softmax(row_scores / np.sqrt(d_k))
    return ScalingExperiment(
        d_k, seed, unscaled, scaled, float(unscaled.std()), float(scaled.std()), row_length,
        float(row_entropy(w_unscaled).mean()), float(row_entropy(w_scaled).mean()), float(np.log(row_length)),
        float(w_unscaled.max(-1).mean()), float(w_scaled.max(-1).mean()))


# ----------------------------------------------------------------------------- cost
@dataclass(frozen=True)
class AttentionCost:
    """What one forward pass of attention costs for a model shape and a sequence length n.

    Letters: n tokens, d d_model, h query heads, g key/value heads (g < h with grouped-query attention,
    g = h without), dk d_head, L layers, b bytes per value. Counts are of one layer unless named "total".
    """

    n_tokens: int
    d_model: int
    n_head: int
    n_layer: int
    params_per_layer_counted: int | None  # read off the model's weights: W_Q, W_K, W_V, W_O and their biases
    params_per_layer_formula: int  # d·h·dk + 2·d·g·dk + h·dk·d  (= 4·d² when g = h and h·dk = d)
    params_per_layer_formula_with_bias: int  # + h·dk + 2·g·dk + d
    score_entries_per_layer: int  # h·n²
    score_bytes_per_layer: int  # h·n²·b
    score_bytes_total: int  # L·h·n²·b
    flops_qk_per_layer: int  # 2·n²·h·dk  (h heads × n² dot products of length dk, multiply + add)
    flops_av_per_layer: int  # 2·n²·h·dk
    flops_projections_per_layer: int  # 2·n·d·(2·h·dk + 2·g·dk)  (= 8·n·d² when g = h and h·dk = d)
    n_kv_head: int = 0  # g (0: not given, = h)
    d_head: int = 0  # dk (0: not given, = d / h)
    kv_cache_bytes_per_layer: int = 0  # 2·n·g·dk·b: the keys and values a decoder keeps for n tokens
    kv_cache_bytes_total: int = 0  # L·2·n·g·dk·b
    kv_cache_bytes_total_without_gqa: int = 0  # L·2·n·h·dk·b: what it would hold with one key/value head per query head
    params_per_layer_formula_without_gqa: int = 0  # d·h·dk·4: the projections with g = h
    bytes_per_value: int = 4

    @property
    def grouped(self) -> bool:
        """True with grouped-query attention (fewer key/value heads than query heads)."""
        return self.n_kv_head < self.n_head

    def as_rows(self) -> list[tuple[str, str]]:
        mb = format_bytes

        h, g = self.n_head, self.n_kv_head
        rows = [("tokens n", f"{self.n_tokens:,}"),
                ("d_model, query heads, key/value heads, d_head, layers",
                 f"{self.d_model}, {h}, {g}, {self.d_head}, {self.n_layer}")]
        if self.params_per_layer_counted is not None:
            rows.append(("parameters of one attention layer (from the weights)", f"{self.params_per_layer_counted:,}"))
        if self.grouped:
            rows += [("d·h·dk + 2·d·g·dk + h·dk·d (formula, no biases)", f"{self.params_per_layer_formula:,}"),
                     ("… with biases (+ h·dk + 2·g·dk + d)", f"{self.params_per_layer_formula_with_bias:,}"),
                     ("… if every query head had its own K and V (g = h)",
                      f"{self.params_per_layer_formula_without_gqa:,}")]
        else:
            rows += [("4·d² (formula)" if h * self.d_head == self.d_model else "4·d·h·dk (formula)",
                      f"{self.params_per_layer_formula:,}"),
                     ("… with biases (+ 3·h·dk + d)", f"{self.params_per_layer_formula_with_bias:,}")]
        rows += [("score entries h·n² per layer", f"{self.score_entries_per_layer:,}"),
                 ("score memory per layer (float32)", mb(self.score_bytes_per_layer)),
                 ("score memory, all layers", mb(self.score_bytes_total)),
                 ("KV cache per layer (2·n·g·dk values)", mb(self.kv_cache_bytes_per_layer)),
                 ("KV cache, all layers", mb(self.kv_cache_bytes_total))]
        if self.grouped:
            rows.append((f"KV cache, all layers, without grouped-query attention (g = h = {h})",
                         mb(self.kv_cache_bytes_total_without_gqa)))
        rows += [("FLOPs of QKᵀ per layer (2·n²·h·dk)", f"{self.flops_qk_per_layer:,}"),
                 ("FLOPs of weights·V per layer (2·n²·h·dk)", f"{self.flops_av_per_layer:,}"),
                 ("FLOPs of the projections per layer (2·n·d·(2·h·dk + 2·g·dk))",
                  f"{self.flops_projections_per_layer:,}")]
        return rows


def attention_cost(n_tokens: int, d_model: int, n_head: int, n_layer: int, params_counted: int | None = None,
                   bytes_per_value: int = 4, *, n_kv_head: int | None = None,
                   d_head: int | None = None) -> AttentionCost:
    """The cost of attention at ``n_tokens`` (see :class:`AttentionCost` for each formula).

    ``n_kv_head`` (g) defaults to ``n_head`` (no grouped-query attention), ``d_head`` (dk) to d / h."""
    n, d, h = n_tokens, d_model, n_head
    g = n_head if n_kv_head is None else n_kv_head
    dk = d // h if d_head is None else d_head
    if not (n >= 0 and d > 0 and h > 0 and g > 0 and dk > 0 and n_layer > 0):
        raise ValueError("attention_cost needs positive sizes")
    b = bytes_per_value
    entries = h * n * n
    params = d * h * dk + 2 * d * g * dk + h * dk * d
    kv_layer = 2 * n * g * dk * b
    return AttentionCost(
        n_tokens=n, d_model=d, n_head=h, n_layer=n_layer, params_per_layer_counted=params_counted,
        params_per_layer_formula=params, params_per_layer_formula_with_bias=params + h * dk + 2 * g * dk + d,
        score_entries_per_layer=entries, score_bytes_per_layer=entries * b, score_bytes_total=entries * b * n_layer,
        flops_qk_per_layer=2 * n * n * h * dk, flops_av_per_layer=2 * n * n * h * dk,
        flops_projections_per_layer=2 * n * d * (2 * h * dk + 2 * g * dk), n_kv_head=g, d_head=dk,
        kv_cache_bytes_per_layer=kv_layer, kv_cache_bytes_total=kv_layer * n_layer,
        kv_cache_bytes_total_without_gqa=2 * n * h * dk * b * n_layer,
        params_per_layer_formula_without_gqa=4 * d * h * dk, bytes_per_value=b)


def projection_parameter_count(modules) -> int:
    """Parameters of the linear layers inside ``modules`` (torch modules; e.g. a family's attention module
    and its output projection), each layer counted once: its 2-D weight, and its bias when it has one.
    For an attention layer these are W_Q, W_K, W_V, W_O and the biases the model really has (a model
    without biases has none to count); norms (1-D weights) are not counted."""
    seen, total = set(), 0
    for module in modules:
        for sub in module.modules():
            weight = getattr(sub, "weight", None)
            if weight is None or getattr(weight, "ndim", 0) != 2 or id(sub) in seen:
                continue
            seen.add(id(sub))
            bias = getattr(sub, "bias", None)
            total += int(weight.numel()) + (int(bias.numel()) if bias is not None else 0)
    return total


# ----------------------------------------------------------------------------- one weight, explained
def explain_weight(rec: LayerRecomputation, head: int, query: int, key: int) -> dict:
    """How weight[head, query, key] was made: scaled score, row max, exp, row sum, weight.

    ``rec``: a ``LayerRecomputation`` or a family's ``FamilyRecomputation`` (the same field names)."""
    def of(field: str) -> np.ndarray:  # the head's (n, n) step; a FamilyRecomputation may keep only some heads
        return rec.of_head(field, head) if hasattr(rec, "of_head") else getattr(rec, field)[head]

    row = of("masked")[query].astype(np.float64)
    row_max = float(row.max())
    exps = np.exp(row - row_max)
    return {"score": float(of("scores")[query, key]), "scale": rec.scale, "scaled": float(of("scaled")[query, key]),
            "masked": bool(np.isneginf(of("masked")[query, key])), "row_max": row_max,
            "exp": float(exps[key]), "row_sum": float(exps.sum()), "weight": float(of("weights")[query, key])}
