"""GPT-2 (gpt2, distilgpt2, gpt2-medium/large/xl): pre-LN, learned positions, one fused c_attn.

Block: x → ln_1 (LayerNorm) → attn (c_attn → q, k, v; causal softmax; c_proj) → + x → ln_2 → MLP → + x.
``Conv1D`` stores weights as (in, out), so c_attn is already ``x @ W + b`` with W (d, 3d) laid out
[Q | K | V]; head i owns columns i·dk … (i+1)·dk of each third. No rotary: positions were added to
the embeddings before the first block.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .family import Family, config_get
from .weights import AttentionWeights, Norm, _frozen, to_numpy


def split_fused_thirds(weight: np.ndarray, bias: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """c_attn's (d, 3d) weight and (3d,) bias → [(W_Q, b_Q), (W_K, b_K), (W_V, b_V)], each (d, d) and (d,)."""
    d = weight.shape[1] // 3
    return [(_frozen(weight[:, i * d:(i + 1) * d]), _frozen(bias[i * d:(i + 1) * d])) for i in range(3)]


class GPT2Family(Family):
    name = "gpt2"
    title = "GPT-2"
    models = "GPT-2"
    model_types = ("gpt2",)
    causal = True
    token_style = "byte_level"
    steps = ("layer_norm", "project_qkv", "split_heads", "scores", "scale", "causal_mask", "softmax",
             "mix_values", "merge_heads", "output_projection")
    output_projection = "c_proj"
    attention_norm = "ln_1"

    CONFIG_NAMES = ("n_layer", "n_head", "n_embd", "n_positions")

    def model_class(self, config: Any, weight_names=None):
        from transformers import GPT2LMHeadModel

        return GPT2LMHeadModel

    def blocks(self, model):
        return model.base_model.h

    def attention_module(self, block):
        return block.attn

    def final_norm(self, model):
        return model.base_model.ln_f

    def output_module(self, block):
        return block.attn.c_proj

    def output_weight(self, block):
        """c_proj is a ``Conv1D``: its weight is already (in, out)."""
        return block.attn.c_proj.weight

    def bos_token(self, tokenizer) -> str | None:
        return tokenizer.bos_token or "<|endoftext|>"

    def prepend_bos_default(self, config: Any, tokenizer) -> bool:
        """GPT-2 was trained without a BOS in front; a folder may ask for one (``attnscope_prepend_bos``)."""
        return bool(config_get(config, "attnscope_prepend_bos", False))

    def attention_weights(self, model, layer: int) -> AttentionWeights:
        block = self.blocks(model)[layer]
        shape = self.shape(model.config)
        (wq, bq), (wk, bk), (wv, bv) = split_fused_thirds(to_numpy(block.attn.c_attn.weight),
                                                        to_numpy(block.attn.c_attn.bias))
        scale = shape.d_head ** -0.5 if model.config.scale_attn_weights else 1.0
        if model.config.scale_attn_by_inverse_layer_idx:
            scale /= float(layer + 1)
        return AttentionWeights(
            family=self.name, layer=layer,
            norm=Norm("layernorm", to_numpy(block.ln_1.weight), to_numpy(block.ln_1.bias), float(block.ln_1.eps)),
            q_weight=wq, q_bias=bq, k_weight=wk, k_bias=bk, v_weight=wv, v_bias=bv,
            out_weight=to_numpy(block.attn.c_proj.weight), out_bias=to_numpy(block.attn.c_proj.bias),
            n_head=shape.n_head, n_kv_head=shape.n_head, d_head=shape.d_head, scale=scale, causal=True,
            qkv_layout="fused [Q|K|V]",
        )


FAMILY = GPT2Family()
