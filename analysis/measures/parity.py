"""How far the numpy reimplementation is from the model's own numbers, for every layer and head."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..families.steps import OUTPUT_RELATIVE_TOLERANCE, WEIGHT_TOLERANCE, Mistakes
from ..families.weights import AttentionWeights
from ..run.inference import AttentionResult


@dataclass(frozen=True)
class ParityReport:
    """max |manual − model| per (layer, head) for the weights and per layer for the sub-layer output."""

    weights_max_abs_diff: np.ndarray  # (layer, head)
    output_max_abs_diff: np.ndarray  # (layer,)
    output_scale: np.ndarray  # (layer,) max(1, max |model output|): the output tolerance is relative to it
    weight_tolerance: float
    output_relative_tolerance: float
    manual_dtype: str  # float32 or float64: the precision of the numpy recomputation
    model_dtype: str
    seconds: float

    @property
    def max_abs_diff_weights(self) -> float:
        return float(self.weights_max_abs_diff.max())

    @property
    def max_abs_diff_output(self) -> float:
        return float(self.output_max_abs_diff.max())

    @property
    def heads_passed(self) -> np.ndarray:
        return self.weights_max_abs_diff <= self.weight_tolerance

    @property
    def layers_output_passed(self) -> np.ndarray:
        return self.output_max_abs_diff <= self.output_relative_tolerance * self.output_scale

    @property
    def passed(self) -> bool:
        return bool(self.heads_passed.all() and self.layers_output_passed.all())

    def to_dict(self) -> dict:
        return {
            "max_abs_diff_weights": self.max_abs_diff_weights,
            "max_abs_diff_output": self.max_abs_diff_output,
            "tolerance": {"weights": self.weight_tolerance, "output_relative": self.output_relative_tolerance},
            "passed": self.passed,
            "manual_dtype": self.manual_dtype,
            "model_dtype": self.model_dtype,
            "seconds": self.seconds,
            "layers": [
                {"layer": layer, "max_abs_diff_weights": float(self.weights_max_abs_diff[layer].max()),
                 "max_abs_diff_weights_per_head": [float(x) for x in self.weights_max_abs_diff[layer]],
                 "max_abs_diff_output": float(self.output_max_abs_diff[layer]),
                 "output_tolerance": float(self.output_relative_tolerance * self.output_scale[layer]),
                 "passed": bool(self.heads_passed[layer].all() and self.layers_output_passed[layer])}
                for layer in range(len(self.output_max_abs_diff))
            ],
        }


def parity_report(result: AttentionResult, parameters: Sequence[AttentionWeights],
                  manual_dtype: str = "float32", mistakes: Mistakes | None = None) -> ParityReport:
    """Recompute every layer from ``result.layer_inputs`` with its family's numpy steps and compare with
    the model's numbers: max |manual − model| per (layer, head) of the attention weights, and per layer of
    the attention output before the residual (after W_O).

    ``parameters``: one per layer, ``loaded.attention_weights(l)``. ``mistakes``: a deliberately wrong recompute (tests prove the
    comparison can fail). Tolerances: ``WEIGHT_TOLERANCE[dtype]`` and ``OUTPUT_RELATIVE_TOLERANCE[dtype]``
    × max(1, max |model output|) of the layer, by the model's dtype."""
    from ..families import family_named

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
