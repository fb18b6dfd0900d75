"""The common shape every model family converts its attention into, in numpy.

A *family* (GPT-2, Llama-style, GPT-NeoX, BERT-style) is one small module that converts its
model's attention into one common shape, :class:`AttentionWeights`; everything after that is
family-blind (the way TransformerLens converts weights per family). What differs between
families is data in that shape: the norm in front of attention (LayerNorm, RMSNorm, none for
post-LN encoders), the rotary embedding (none, full, partial), how many key/value heads the
query heads share (grouped-query attention), and the mask (causal, sliding window, none).

Shape letters as in ``steps.py``; a projection is ``x @ W + b`` with W stored (in, out).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

import numpy as np

NormKind = Literal["layernorm", "rmsnorm"]


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return array


def _freeze_fields(obj) -> None:
    for f in fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, np.ndarray):
            object.__setattr__(obj, f.name, _frozen(value))


# ----------------------------------------------------------------------------- the common shape
@dataclass(frozen=True)
class Norm:
    """The normalisation in front of attention (pre-LN models). Arrays (d,)."""

    kind: NormKind
    weight: np.ndarray  # (d,) γ
    bias: np.ndarray | None  # (d,) β; LayerNorm only (RMSNorm has none)
    eps: float

    def __post_init__(self):
        _freeze_fields(self)


@dataclass(frozen=True)
class Rotary:
    """Rotary position embedding: pair dimension i with i + r/2 and turn the pair by position · inv_freq[i]."""

    inv_freq: np.ndarray  # (r/2,) float32, radians per position of each pair, from the config (rope_theta, scaling)
    rotary_dim: int  # r: the first r dims of each head's q and k are rotated; the rest pass through (NeoX rotary_pct)
    theta: float  # rope_theta, the base of the frequencies
    rope_type: str  # "default", "linear", "llama3" or "dynamic" (see llama.py for what each means)
    max_positions: int | None = None  # dynamic NTK only: positions ≥ this are rescaled at run time; refused here

    def __post_init__(self):
        _freeze_fields(self)


@dataclass(frozen=True)
class AttentionWeights:
    """One layer's attention as float32 numpy, in one shape for every family. Projections are ``x @ W + b``."""

    family: str
    layer: int
    norm: Norm | None  # what turns the block input into attention's input; None: post-LN, the block input enters as is
    q_weight: np.ndarray  # (d, h·dk)
    q_bias: np.ndarray  # (h·dk,) zeros when the model has no bias
    k_weight: np.ndarray  # (d, g·dk)
    k_bias: np.ndarray  # (g·dk,)
    v_weight: np.ndarray  # (d, g·dk)
    v_bias: np.ndarray  # (g·dk,)
    out_weight: np.ndarray  # (h·dk, d) W_O
    out_bias: np.ndarray  # (d,) zeros when the model has no bias
    n_head: int  # h
    n_kv_head: int  # g
    d_head: int  # dk
    scale: float  # multiplies QKᵀ: 1/√dk (GPT-2 may also divide by layer + 1)
    causal: bool  # decoders hide future keys; encoders see every key
    rotary: Rotary | None = None
    sliding_window: int | None = None  # a query sees only the last ``sliding_window`` keys (itself included)
    qkv_layout: str = "separate"  # how the model stores q, k, v: "separate", "fused [Q|K|V]" (GPT-2), "fused per head" (NeoX)

    def __post_init__(self):
        _freeze_fields(self)

    @property
    def d_model(self) -> int:
        return int(self.q_weight.shape[0])

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.n_head // self.n_kv_head

    def kv_head_of(self) -> np.ndarray:
        """(h,) the key/value head each query head reads: query head i uses key/value head i // (h/g)."""
        return np.arange(self.n_head) // self.group_size

    @property
    def parameter_count(self) -> int:
        arrays = [self.q_weight, self.q_bias, self.k_weight, self.k_bias, self.v_weight, self.v_bias,
                  self.out_weight, self.out_bias]
        if self.norm is not None:
            arrays += [self.norm.weight] + ([self.norm.bias] if self.norm.bias is not None else [])
        return int(sum(a.size for a in arrays))


@dataclass(frozen=True)
class ModelShape:
    """A model's sizes, read from its config."""

    n_layer: int
    n_head: int
    n_kv_head: int
    d_model: int
    d_head: int
    context_length: int
    vocab_size: int


# ----------------------------------------------------------------------------- torch → numpy
def to_numpy(t) -> np.ndarray:
    """A torch tensor as a read-only float32 numpy copy on the CPU."""
    import torch

    return _frozen(t.detach().to("cpu", dtype=torch.float32).numpy().copy())


def linear_in_out(linear) -> tuple[np.ndarray, np.ndarray]:
    """A torch ``nn.Linear`` (stored (out, in)) as W (in, out) and b (out,), so the projection is x @ W + b."""
    weight = to_numpy(linear.weight).T  # (in, out)
    bias = to_numpy(linear.bias) if linear.bias is not None else np.zeros(weight.shape[1], dtype=np.float32)
    return _frozen(weight), _frozen(bias)


__all__ = ["AttentionWeights", "ModelShape", "Norm", "NormKind", "Rotary", "linear_in_out", "to_numpy"]
