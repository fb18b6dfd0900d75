"""What the From-scratch tab shows for one (result, layer, head, precision), computed on the worker."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.inference import AttentionResult
from analysis.manual_attention import recompute_layer
from analysis.parity import ParityReport, parity_report


@dataclass(frozen=True)
class ScratchData:
    """The selected layer recomputed step by step, and the parity of every head."""

    result: AttentionResult
    head: int
    recomputation: object  # LayerRecomputation of the selected layer
    report: ParityReport  # every layer and head
    params_counted: int  # parameters of the layer's attention, read off its weights


def scratch_data(loaded, result: AttentionResult, layer: int, head: int, manual_dtype: str = "float32",
                 report: ParityReport | None = None) -> ScratchData:
    """Recompute ``layer`` step by step and (unless given) the parity of every head. Runs on the worker."""
    from analysis.lab import counted_parameters

    dtype = {"float32": np.float32, "float64": np.float64}[manual_dtype]
    params = loaded.attention_parameters(layer)
    rec = recompute_layer(params, result.layer_inputs[layer], layer, dtype)
    if report is None or report.manual_dtype != manual_dtype:
        report = parity_report(result, [loaded.attention_parameters(l) for l in range(result.n_layer)], manual_dtype)
    return ScratchData(result, head, rec, report, counted_parameters(params))
