"""How far the numpy reimplementation is from the model's own numbers, for every layer and head."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from .families import AttentionWeights, Mistakes
from .families.base import OUTPUT_RELATIVE_TOLERANCE, WEIGHT_TOLERANCE, ParityReport  # noqa: F401
from .inference import AttentionResult


def parity_report(result: AttentionResult, parameters: Sequence[AttentionWeights],
                  manual_dtype: str = "float32", mistakes: Mistakes | None = None) -> ParityReport:
    """Recompute every layer from ``result.layer_inputs`` with its family's numpy steps and compare with
    the model's numbers: max |manual − model| per (layer, head) of the attention weights, and per layer of
    the attention output before the residual (after W_O).

    ``parameters``: one per layer, ``loaded.attention_weights(l)``. ``mistakes``: a deliberately wrong recompute (tests prove the
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
        weights = parameters[layer]
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
