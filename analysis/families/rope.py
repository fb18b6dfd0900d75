"""Rotary position embedding frequencies, from the config alone (the way transformers 5 derives them).

Pair i of a head's first r dims turns by position · inv_freq[i] with
    inv_freq[i] = 1 / θ^(2i / r),   i = 0 … r/2 − 1,   θ = rope_theta
and the ``rope_type`` in ``rope_parameters`` (``rope_scaling`` in older configs) changes them:
- "default": as above.
- "linear": inv_freq / factor (positions squeezed by ``factor``).
- "llama3" (Llama 3.1/3.2): long wavelengths (> original_context / low_freq_factor) divided by ``factor``,
  short ones (< original_context / high_freq_factor) kept, the band between interpolated smoothly.
- "dynamic" (NTK): transformers rescales θ at run time once a text reaches max_position_embeddings and keeps
  the rescaled θ for later runs; below that the frequencies are the default ones. The recompute covers
  texts shorter than max_position_embeddings and refuses longer ones.
Anything else (yarn, longrope, per-layer-type parameters …) is refused with a ModelLoadError.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelLoadError
from .family import config_get
from .weights import Rotary

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "dynamic")


def rope_parameters(config: Any) -> dict:
    """The rope parameters as one flat dict with ``rope_type`` and ``rope_theta`` (old or new config style)."""
    params = config_get(config, "rope_parameters")
    if isinstance(params, dict) and params:
        if any(isinstance(v, dict) for v in params.values()):
            raise ModelLoadError("This model uses different rotary settings per layer type, which the from-scratch "
                                 "recomputation does not follow.")
        out = dict(params)
    else:
        out = dict(config_get(config, "rope_scaling") or {})
        out.setdefault("rope_theta", config_get(config, "rope_theta", 10000.0))
    out["rope_type"] = out.get("rope_type", out.get("type", "default")) or "default"
    partial = config_get(config, "rotary_pct", None) if "partial_rotary_factor" not in out else None
    if partial is not None:
        out["partial_rotary_factor"] = partial
    return out


def check_rope(config: Any) -> None:
    """Refuse (ModelLoadError, one sentence) a rope_type the recompute does not implement."""
    rope_type = rope_parameters(config)["rope_type"]
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ModelLoadError(
            f"This model's rotary scaling '{rope_type}' is not supported yet: AttnScope recomputes "
            f"{', '.join(SUPPORTED_ROPE_TYPES)} rotary embeddings.")


def default_inv_freq(theta: float, rotary_dim: int) -> np.ndarray:
    """1 / θ^(2i / r) for i = 0 … r/2 − 1, in float32 as transformers computes it. (r/2,)"""
    exponent = np.arange(0, rotary_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(rotary_dim)
    return (np.float32(1.0) / (np.float32(theta) ** exponent)).astype(np.float32)


def llama3_inv_freq(inv_freq: np.ndarray, factor: float, low_freq_factor: float, high_freq_factor: float,
                    original_context: int) -> np.ndarray:
    """Llama 3's frequency-dependent scaling of the default frequencies. (r/2,) → (r/2,)"""
    low_freq_wavelen = original_context / low_freq_factor
    high_freq_wavelen = original_context / high_freq_factor
    wavelen = (2 * math.pi / inv_freq).astype(np.float32)  # (r/2,) positions per full turn
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / np.float32(factor), inv_freq)  # long: slowed by factor
    smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled  # the band between: interpolated
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def rotary_from_config(config: Any, d_head: int) -> Rotary:
    """The :class:`Rotary` a layer of this model applies (every layer shares it)."""
    check_rope(config)
    params = rope_parameters(config)
    rope_type = params["rope_type"]
    theta = float(params["rope_theta"])
    rotary_dim = int(d_head * float(params.get("partial_rotary_factor", 1.0) or 1.0))
    inv_freq = default_inv_freq(theta, rotary_dim)
    max_positions = None
    if rope_type == "linear":
        inv_freq = (inv_freq / np.float32(params["factor"])).astype(np.float32)
    elif rope_type == "llama3":
        inv_freq = llama3_inv_freq(inv_freq, float(params["factor"]), float(params["low_freq_factor"]),
                                   float(params["high_freq_factor"]), int(params["original_max_position_embeddings"]))
    elif rope_type == "dynamic":
        max_positions = int(config_get(config, "max_position_embeddings"))
    return Rotary(inv_freq=inv_freq, rotary_dim=rotary_dim, theta=theta, rope_type=rope_type,
                  max_positions=max_positions)
