"""BERT-style encoders: bert (all-MiniLM-L6-v2, bert-base-uncased), roberta, distilbert.

Post-LN block: x → attention (q, k, v; softmax over *every* key, no mask; W_O) → LayerNorm(x + ·) → MLP →
LayerNorm(· + ·). Nothing normalises x on its way *into* attention: the block input itself enters (it
was normed at the end of the previous block, or by the embedding LayerNorm). Every query sees every key
in both directions. A text is wrapped as [CLS] … [SEP] (RoBERTa: <s> … </s>), as the model was trained.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .family import Family, config_get
from .weights import AttentionWeights, ModelShape, linear_in_out


class BertFamily(Family):
    name = "bert"
    title = "BERT-style encoder"
    models = "BERT, RoBERTa"
    model_types = ("bert", "roberta")
    causal = False
    token_style = "wordpiece"  # RoBERTa's byte-level tokenizer says so itself
    steps = ("project_q_k_v", "split_heads", "scores", "scale", "softmax", "mix_values", "merge_heads",
             "output_projection")
    output_projection = "output.dense"

    def model_class(self, config: Any, weight_names=None):
        """The class whose tensors are exactly the file's, so nothing is left out or made up: BERT's
        pre-training heads when the weights have both (bert-base-uncased: masked LM and next sentence),
        the masked-LM head when they have that one, else the bare encoder (MiniLM)."""
        import transformers

        kind = config_get(config, "model_type")
        prefix = {"bert": "Bert", "roberta": "Roberta", "distilbert": "DistilBert"}[kind]
        names = weight_names or frozenset()
        mlm_keys = ("cls.predictions.", "lm_head.", "vocab_projector.")
        has_mlm_head = any(k.startswith(mlm_keys) for k in names)
        if kind == "bert" and has_mlm_head and any(k.startswith("cls.seq_relationship.") for k in names):
            return transformers.BertForPreTraining
        return getattr(transformers, f"{prefix}ForMaskedLM" if has_mlm_head else f"{prefix}Model")

    def shape(self, config: Any) -> ModelShape:
        """BERT's sizes; RoBERTa numbers its positions from its padding id + 1, so it holds ``pad_token_id + 1``
        fewer tokens than ``max_position_embeddings`` (514 → 512): one more is an index past its position table."""
        shape = super().shape(config)
        if config_get(config, "model_type") == "roberta":
            offset = int(config_get(config, "pad_token_id", 1) or 0) + 1
            shape = replace(shape, context_length=max(1, shape.context_length - offset))
        return shape

    def blocks(self, model):
        return model.base_model.encoder.layer

    def attention_module(self, block):
        return block.attention.self

    def output_module(self, block):
        return block.attention.output.dense

    def _projections(self, block):
        s = block.attention.self
        return s.query, s.key, s.value, block.attention.output.dense

    # --- tokens: [CLS] text [SEP]
    def bos_token(self, tokenizer) -> str | None:
        return tokenizer.cls_token

    def prepend_bos_default(self, config: Any, tokenizer) -> bool:
        """An encoder always sees [CLS] … [SEP]: it was trained that way."""
        return True

    def wrap(self, tokenizer, text_ids, special: bool) -> list[int]:
        if not special:
            return list(text_ids)
        return [tokenizer.cls_token_id] + list(text_ids) + [tokenizer.sep_token_id]

    def attention_weights(self, model, layer: int) -> AttentionWeights:
        block = self.blocks(model)[layer]
        shape = self.shape(model.config)
        (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (linear_in_out(m) for m in self._projections(block))
        return AttentionWeights(
            family=self.name, layer=layer, norm=None,
            q_weight=wq, q_bias=bq, k_weight=wk, k_bias=bk, v_weight=wv, v_bias=bv, out_weight=wo, out_bias=bo,
            n_head=shape.n_head, n_kv_head=shape.n_head, d_head=shape.d_head, scale=shape.d_head ** -0.5,
            causal=False,
        )


class DistilBertFamily(BertFamily):
    """DistilBERT: BERT's attention under other names (q_lin, k_lin, v_lin, out_lin; transformer.layer)."""

    name = "distilbert"
    title = "DistilBERT encoder"
    models = "DistilBERT"
    model_types = ("distilbert",)
    output_projection = "out_lin"

    CONFIG_NAMES = ("n_layers", "n_heads", "dim", "max_position_embeddings")

    def blocks(self, model):
        return model.base_model.transformer.layer

    def attention_module(self, block):
        return block.attention

    def output_module(self, block):
        return block.attention.out_lin

    def _projections(self, block):
        a = block.attention
        return a.q_lin, a.k_lin, a.v_lin, a.out_lin


FAMILY = BertFamily()
DISTILBERT = DistilBertFamily()
