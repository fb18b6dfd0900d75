"""The lessons' experiments and accounting, as plain functions: why √d_k, what attention costs,
and how one attention weight is made."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    """What one forward pass of attention costs for a model shape and a sequence length n."""

    n_tokens: int
    d_model: int
    n_head: int
    n_layer: int
    params_per_layer_counted: int | None  # from the model's weights: c_attn + c_proj, weights and biases
    params_per_layer_formula: int  # 4·d²
    params_per_layer_formula_with_bias: int  # 4·d² + 4·d
    score_entries_per_layer: int  # h·n²
    score_bytes_per_layer: int
    score_bytes_total: int  # all layers
    flops_qk_per_layer: int  # 2·n²·d  (h heads × n² dot products of length d_k, multiply + add)
    flops_av_per_layer: int  # 2·n²·d
    flops_projections_per_layer: int  # 2·n·d·3d + 2·n·d·d = 8·n·d²

    def as_rows(self) -> list[tuple[str, str]]:
        def mb(b):
            return f"{b / 2**20:,.2f} MiB"

        rows = [("tokens n", f"{self.n_tokens:,}"), ("d_model, heads, layers", f"{self.d_model}, {self.n_head}, {self.n_layer}")]
        if self.params_per_layer_counted is not None:
            rows.append(("parameters of one attention layer (from the weights)", f"{self.params_per_layer_counted:,}"))
        rows += [("4·d² (formula)", f"{self.params_per_layer_formula:,}"),
                 ("4·d² + 4·d (with biases)", f"{self.params_per_layer_formula_with_bias:,}"),
                 ("score entries h·n² per layer", f"{self.score_entries_per_layer:,}"),
                 ("score memory per layer (float32)", mb(self.score_bytes_per_layer)),
                 ("score memory, all layers", mb(self.score_bytes_total)),
                 ("FLOPs of QKᵀ per layer (2·n²·d)", f"{self.flops_qk_per_layer:,}"),
                 ("FLOPs of weights·V per layer (2·n²·d)", f"{self.flops_av_per_layer:,}"),
                 ("FLOPs of the projections per layer (8·n·d²)", f"{self.flops_projections_per_layer:,}")]
        return rows


def attention_cost(n_tokens: int, d_model: int, n_head: int, n_layer: int, params_counted: int | None = None,
                   bytes_per_value: int = 4) -> AttentionCost:
    n, d, h = n_tokens, d_model, n_head
    entries = h * n * n
    return AttentionCost(n, d, h, n_layer, params_counted, 4 * d * d, 4 * d * d + 4 * d, entries,
                         entries * bytes_per_value, entries * bytes_per_value * n_layer, 2 * n * n * d, 2 * n * n * d,
                         8 * n * d * d)


def counted_parameters(params) -> int:
    """Parameters of one attention layer read off its weights: c_attn (W, b) and c_proj (W, b)."""
    return int(params.qkv_weight.size + params.qkv_bias.size + params.out_weight.size + params.out_bias.size)


# ----------------------------------------------------------------------------- one weight, explained
def explain_weight(rec: LayerRecomputation, head: int, query: int, key: int) -> dict:
    """How weight[head, query, key] was made: scaled score, row max, exp, row sum, weight."""
    row = rec.masked[head, query].astype(np.float64)
    row_max = float(row.max())
    exps = np.exp(row - row_max)
    return {"score": float(rec.scores[head, query, key]), "scale": rec.scale, "scaled": float(rec.scaled[head, query, key]),
            "masked": bool(np.isneginf(rec.masked[head, query, key])), "row_max": row_max,
            "exp": float(exps[key]), "row_sum": float(exps.sum()), "weight": float(rec.weights[head, query, key])}
