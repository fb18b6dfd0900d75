"""How far the numpy reimplementation is from the model's own numbers, for every layer and head."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from .families import AttentionWeights, Mistakes
from .families.base import OUTPUT_RELATIVE_TOLERANCE, WEIGHT_TOLERANCE, ParityReport  # noqa: F401
from .inference import AttentionResult
from .loading import AttentionParameters


def as_attention_weights(params: AttentionParameters | AttentionWeights, layer: int) -> AttentionWeights:
    """The common shape of every family; GPT-2's fused :class:`AttentionParameters` split into its thirds."""
    if isinstance(params, AttentionWeights):
        return params
    from .families.base import Norm
    from .families.gpt2 import split_fused_thirds

    (wq, bq), (wk, bk), (wv, bv) = split_fused_thirds(params.qkv_weight, params.qkv_bias)
    return AttentionWeights(
        family="gpt2", layer=layer, norm=Norm("layernorm", params.ln_weight, params.ln_bias, float(params.ln_eps)),
        q_weight=wq, q_bias=bq, k_weight=wk, k_bias=bk, v_weight=wv, v_bias=bv, out_weight=params.out_weight,
        out_bias=params.out_bias, n_head=params.n_head, n_kv_head=params.n_head, d_head=params.d_head,
        scale=float(params.scale), causal=True, qkv_layout="fused [Q|K|V]")


def parity_report(result: AttentionResult, parameters: Sequence[AttentionWeights | AttentionParameters],
                  manual_dtype: str = "float32", mistakes: Mistakes | None = None) -> ParityReport:
    """Recompute every layer from ``result.layer_inputs`` with its family's numpy steps and compare with
    the model's numbers: max |manual − model| per (layer, head) of the attention weights, and per layer of
    the attention output before the residual (after W_O).

    ``parameters``: one per layer, ``loaded.attention_weights(l)`` (every family) or GPT-2's
    ``loaded.attention_parameters(l)``. ``mistakes``: a deliberately wrong recompute (tests prove the
    comparison can fail). Tolerances: ``WEIGHT_TOLERANCE[dtype]`` and ``OUTPUT_RELATIVE_TOLERANCE[dtype]``
    × max(1, max |model output|) of the layer, by the model's dtype."""
    from .families import family_named

    started = time.perf_counter()
    dtype = {"float32": np.float32, "float64": np.float64}[manual_dtype]
    L, H = result.n_layer, result.n_head
    weights_diff = np.zeros((L, H))
    output_diff = np.zeros(L)
    output_scale = np.zeros(L)
    for layer in range(L):
        weights = as_attention_weights(parameters[layer], layer)
        family = family_named(weights.family)
        manual = family.recompute(weights, result.layer_inputs[layer], dtype=dtype, mistakes=mistakes)
        model_weights = result.attentions[layer]  # (h, n, n)
        weights_diff[layer] = np.abs(manual.weights - model_weights).max(axis=(-2, -1))
        model_output = result.attention_outputs[layer]  # (n, d)
        output_diff[layer] = np.abs(manual.output - model_output).max()
        output_scale[layer] = max(1.0, float(np.abs(model_output).max()))
    return ParityReport(weights_diff, output_diff, output_scale, WEIGHT_TOLERANCE[result.dtype],
                        OUTPUT_RELATIVE_TOLERANCE[result.dtype], manual_dtype, result.dtype,
                        time.perf_counter() - started)
