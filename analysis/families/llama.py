"""Llama-style decoders: llama (SmolLM2, TinyLlama, Llama 3.x), qwen2 (Qwen2.5), mistral.

Block: x → input_layernorm (RMSNorm) → self_attn → + x → post_attention_layernorm → MLP → + x.
self_attn: separate q_proj, k_proj, v_proj (nn.Linear, stored (out, in)); q and k rotated by position
(rotary, HF's rotate-half pairing); grouped-query attention: ``num_key_value_heads`` g ≤ h, and query
head i uses key/value head i // (h/g); causal mask (plus a sliding window where the config asks: Mistral's
``sliding_window``, Qwen2's "sliding_attention" layers); o_proj. Qwen2 has q/k/v biases and no o_proj bias;
Llama has biases only with ``attention_bias``. No position embeddings: rotary is the only position signal.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import ModelLoadError
from .family import Family, config_get
from .rope import check_rope, rotary_from_config
from .weights import AttentionWeights, ModelShape, Norm, linear_in_out, to_numpy


class LlamaFamily(Family):
    name = "llama"
    title = "Llama-style decoder"
    models = "Llama, Qwen2, Mistral"
    model_types = ("llama", "qwen2", "mistral")
    causal = True
    token_style = "sentencepiece"  # Llama 2 / TinyLlama / Mistral; SmolLM2 and Qwen2 say byte-level themselves
    steps = ("rms_norm", "project_q_k_v", "split_heads", "rotate", "repeat_kv", "scores", "scale", "causal_mask",
             "softmax", "mix_values", "merge_heads", "output_projection")
    output_projection = "o_proj"

    def check(self, config: Any) -> None:
        """A rotary scaling the recompute follows, and key/value heads the query heads share evenly. Run on
        config.json as read (before transformers, which answers a 2.0 with Python's type names and a 0 with a
        division by zero while it builds the model) and again on the transformers config (defaults filled in)."""
        check_rope(config)
        h = config_get(config, "num_attention_heads")
        h = h if isinstance(h, int) and not isinstance(h, bool) and h > 0 else None  # else check_config says so
        g = config_get(config, "num_key_value_heads", None)
        if g is None:  # absent: every query head has its own keys and values
            return
        if isinstance(g, bool) or not isinstance(g, int) or g < 1 or (h is not None and h % g):
            of = f"the {h} query heads" if h is not None else "the query heads"
            raise ModelLoadError(f"This model's config gives num_key_value_heads = {g!r}; the key/value heads must "
                                 f"be a whole number of at least 1 that divides {of} evenly.")

    def shape(self, config: Any) -> ModelShape:
        """Grouped-query attention: ``num_key_value_heads`` key/value heads; ``head_dim`` may differ from d/h."""
        shape = super().shape(config)
        return replace(shape, n_kv_head=int(config_get(config, "num_key_value_heads", None) or shape.n_head),
                       d_head=int(config_get(config, "head_dim", None) or shape.d_head))

    def model_class(self, config: Any, weight_names=None):
        import transformers
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        return getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config_get(config, "model_type")])

    def blocks(self, model):
        return model.base_model.layers

    def attention_module(self, block):
        return block.self_attn

    def final_norm(self, model):
        return model.base_model.norm

    def output_module(self, block):
        return block.self_attn.o_proj

    def sliding_window(self, config: Any, layer: int) -> int | None:
        """The window of ``layer`` (None: plain causal), as transformers builds its mask."""
        window = config_get(config, "sliding_window", None)
        layer_types = config_get(config, "layer_types", None)
        if layer_types is not None:
            return window if layer_types[layer] == "sliding_attention" else None
        return window if config_get(config, "model_type") == "mistral" else None

    def attention_weights(self, model, layer: int) -> AttentionWeights:
        block = self.blocks(model)[layer]
        attn = block.self_attn
        shape = self.shape(model.config)
        norm = block.input_layernorm
        eps = float(norm.variance_epsilon)  # Llama's, Qwen2's and Mistral's RMSNorm
        wq, bq = linear_in_out(attn.q_proj)
        wk, bk = linear_in_out(attn.k_proj)
        wv, bv = linear_in_out(attn.v_proj)
        wo, bo = linear_in_out(attn.o_proj)
        return AttentionWeights(
            family=self.name, layer=layer, norm=Norm("rmsnorm", to_numpy(norm.weight), None, eps),
            q_weight=wq, q_bias=bq, k_weight=wk, k_bias=bk, v_weight=wv, v_bias=bv, out_weight=wo, out_bias=bo,
            n_head=shape.n_head, n_kv_head=shape.n_kv_head, d_head=shape.d_head, scale=shape.d_head ** -0.5,
            causal=True, rotary=rotary_from_config(model.config, shape.d_head),
            sliding_window=self.sliding_window(model.config, layer),
        )


FAMILY = LlamaFamily()
