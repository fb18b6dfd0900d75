"""GPT-NeoX (Pythia): pre-LN with LayerNorm, one fused QKV laid out per head, partial rotary, parallel residual.

Block (``use_parallel_residual``): x + attention(input_layernorm(x)) + MLP(post_attention_layernorm(x));
both branches read the same x, so the attention input is still input_layernorm(block input).
query_key_value is one nn.Linear (d → 3d) whose output, viewed as (n, h, 3·dk), holds for each head its
[q_h | k_h | v_h] side by side (GPT-2 instead puts all of Q, then all of K, then all of V). Rotary turns
only the first r = rotary_pct · dk dims of each head (Pythia: a quarter); the rest carry no position.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .family import Family
from .rope import check_rope, rotary_from_config
from .weights import AttentionWeights, Norm, _frozen, linear_in_out, to_numpy


def split_fused_per_head(weight: np.ndarray, bias: np.ndarray, n_head: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """query_key_value's W (d, 3·h·dk) and b → [(W_Q, b_Q), (W_K, b_K), (W_V, b_V)], each (d, h·dk) and (h·dk,).

    Column block i·3dk … (i+1)·3dk belongs to head i and holds [q_i | k_i | v_i]."""
    d, width = weight.shape
    dk = width // (3 * n_head)
    w = weight.reshape(d, n_head, 3, dk)  # (d, h, [q|k|v], dk)
    b = bias.reshape(n_head, 3, dk)  # (h, [q|k|v], dk)
    return [(_frozen(w[:, :, i, :].reshape(d, n_head * dk)), _frozen(b[:, i, :].reshape(n_head * dk)))
            for i in range(3)]


class NeoXFamily(Family):
    name = "gpt_neox"
    title = "GPT-NeoX"
    models = "GPT-NeoX, Pythia"
    model_types = ("gpt_neox",)
    causal = True
    token_style = "byte_level"
    steps = ("layer_norm", "project_qkv_per_head", "split_heads", "rotate_partial", "scores", "scale",
             "causal_mask", "softmax", "mix_values", "merge_heads", "output_projection")
    output_projection = "dense"

    def check(self, config: Any) -> None:
        check_rope(config)

    def model_class(self, config: Any, weight_names=None):
        from transformers import GPTNeoXForCausalLM

        return GPTNeoXForCausalLM

    def blocks(self, model):
        return model.base_model.layers

    def attention_module(self, block):
        return block.attention

    def final_norm(self, model):
        return model.base_model.final_layer_norm

    def output_module(self, block):
        return block.attention.dense

    def prepend_bos_default(self, config: Any, tokenizer) -> bool:
        """Pythia was trained on documents joined by <|endoftext|>, with no BOS in front of each."""
        return False

    def attention_weights(self, model, layer: int) -> AttentionWeights:
        block = self.blocks(model)[layer]
        attn = block.attention
        shape = self.shape(model.config)
        fused_w, fused_b = linear_in_out(attn.query_key_value)  # (d, 3·h·dk), (3·h·dk,)
        (wq, bq), (wk, bk), (wv, bv) = split_fused_per_head(fused_w, fused_b, shape.n_head)
        wo, bo = linear_in_out(attn.dense)
        ln = block.input_layernorm
        return AttentionWeights(
            family=self.name, layer=layer,
            norm=Norm("layernorm", to_numpy(ln.weight), to_numpy(ln.bias), float(ln.eps)),
            q_weight=wq, q_bias=bq, k_weight=wk, k_bias=bk, v_weight=wv, v_bias=bv, out_weight=wo, out_bias=bo,
            n_head=shape.n_head, n_kv_head=shape.n_head, d_head=shape.d_head, scale=shape.d_head ** -0.5,
            causal=True, rotary=rotary_from_config(model.config, shape.d_head), qkv_layout="fused per head",
        )


FAMILY = NeoXFamily()
