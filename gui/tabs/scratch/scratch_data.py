"""What the From-scratch tab shows for one (result, layer, head, precision), computed on the worker.

Every family the same way: the layer is recomputed by the family's own numpy steps
(``loaded.recompute``) and compared with the model through ``loaded.attention_weights`` of every layer (the model's weights read through ``result.maps``: kept, or computed
from the run's queries and keys);
the selected head on every query row, against each weight's float32 rounding bound (``parity.head_check``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.families.steps import FamilyRecomputation
from analysis.families.weights import AttentionWeights
from analysis.measures.parity import ParityReport, head_check, parity_report
from analysis.run.inference import AttentionResult


@dataclass(frozen=True)
class ScratchData:
    """The selected layer recomputed step by step, and the parity of every head."""

    result: AttentionResult
    head: int
    recomputation: FamilyRecomputation  # the selected layer, by its family's steps
    report: ParityReport | None  # every layer and head; None: filled in the background (ScratchTab), layer by layer
    params_counted: int  # parameters of the layer's attention projections (and their biases), read off the model
    weights: AttentionWeights | None = None  # the selected layer's attention in the common shape (rotary, heads)
    head_bound: np.ndarray | None = None  # (n, n) the selected head's tolerance per weight, every query row
    model_head: np.ndarray | None = None  # (n, n) float32 the model's weights of the selected head (result.maps)
    output_diff: float | None = None  # max |manual − model| of the layer's attention output, every row
    output_scale: float | None = None  # max(1, max |model output|) of the layer: its tolerance is relative to it
    manual_dtype: str = "float32"

    @property
    def kv_head(self) -> int:
        """The key/value head the selected query head reads (= the head without grouped-query attention)."""
        return int(self.recomputation.kv_head_of[self.head])


def scratch_data(loaded, result: AttentionResult, layer: int, head: int, manual_dtype: str = "float32",
                 report: ParityReport | None = None, with_report: bool = True) -> ScratchData:
    """Recompute ``layer`` step by step keeping the selected head's n² steps only (``recompute(heads=[head])``: the
    others are computed one at a time for the layer's output, never held), the head's tolerance for every weight,
    the layer output's |diff| and (unless given, or ``with_report`` False) the parity of every head. Runs on the
    worker."""
    from analysis.lessons.lab import projection_parameter_count

    dtype = {"float32": np.float32, "float64": np.float64}[manual_dtype]
    weights = loaded.attention_weights(layer)
    rec = loaded.recompute(layer, result.layer_inputs[layer], dtype, heads=[head])
    if with_report and (report is None or report.manual_dtype != manual_dtype):
        report = parity_report(result, [loaded.attention_weights(l) for l in range(result.n_layer)], manual_dtype)
    model = result.maps.weights(layer, [head])  # (1, n, n): kept, or computed from the queries and keys
    _, bound = head_check(rec, weights, model, result.dtype, manual_dtype, [head])
    block = loaded.family.blocks(loaded.model)[layer]
    params = projection_parameter_count([loaded.family.attention_module(block), loaded.family.output_module(block)])
    model_output = np.asarray(result.attention_outputs[layer])
    return ScratchData(result, head, rec, report if with_report else None, params, weights, bound[0], model[0],
                       float(np.abs(rec.output - model_output).max()), max(1.0, float(np.abs(model_output).max())),
                       manual_dtype)
