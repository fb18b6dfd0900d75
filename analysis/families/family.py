"""What AttnScope asks of a model family: the ``Family`` base class each family module subclasses."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .steps import FamilyRecomputation, Mistakes, recompute
from .tokens import TokenStyle, display_token, token_style
from .weights import AttentionWeights, ModelShape


def config_get(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` for a dict (config.json as read), ``config.key`` for a transformers config."""
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


# ----------------------------------------------------------------------------- the adapter
class Family:
    """What AttnScope asks of a model family. A family module subclasses this and registers one instance.

    Subclasses set the class attributes and implement ``shape``, ``model_class``, ``blocks``,
    ``attention_module``, ``output_module`` and ``attention_weights``; the rest has defaults.
    """

    name: str = ""  # e.g. "llama"
    title: str = ""  # for people, e.g. "Llama-style decoder"
    models: str = ""  # the models it reads, for people (file dialogs), e.g. "Llama, Qwen2, Mistral"
    model_types: tuple[str, ...] = ()  # config.model_type values this family reads
    causal: bool = True  # decoders hide future keys; encoders do not
    token_style: TokenStyle = "byte_level"  # when the tokenizer itself does not say
    steps: tuple[str, ...] = ()  # the recompute steps this family's models take, for the panel
    output_projection: str = ""  # the module that is W_O, as the From-scratch tab names it (e.g. "o_proj")
    attention_norm: str = ""  # the norm in front of attention by its module name ("ln_1"); "": named by its kind

    # --- config
    def check(self, config: Any) -> None:
        """Raise ModelLoadError (one sentence) when the config asks for something the recompute cannot follow."""

    #: the config's names for the number of layers, heads, the width and the context, which ``shape`` reads
    CONFIG_NAMES: tuple[str, str, str, str] = ("num_hidden_layers", "num_attention_heads", "hidden_size",
                                               "max_position_embeddings")

    def sliding_window(self, config: Any, layer: int) -> int | None:
        """How many keys back (itself included) a query of ``layer`` sees; None: every earlier key."""
        return None

    def shape(self, config: Any) -> ModelShape:
        """The model's sizes; every head has its own keys and values unless a family says otherwise (GQA)."""
        n_layer, n_head, d_model, context = (int(config_get(config, name)) for name in self.CONFIG_NAMES)
        return ModelShape(n_layer=n_layer, n_head=n_head, n_kv_head=n_head, d_model=d_model,
                          d_head=d_model // n_head, context_length=context,
                          vocab_size=int(config_get(config, "vocab_size")))

    # --- loading
    def model_class(self, config: Any, weight_names: frozenset[str] | None = None):
        """The transformers class to ``from_pretrained`` with (never trust_remote_code)."""
        raise NotImplementedError

    def forward_kwargs(self) -> dict:
        """Extra arguments for the base model's forward (decoders: no KV cache)."""
        return {"use_cache": False} if self.causal else {}

    # --- where things are
    def blocks(self, model) -> Sequence[Any]:
        """The transformer blocks, first to last (``model`` may be the base model or one with a head)."""
        raise NotImplementedError

    def attention_module(self, block):
        """The module whose input ``hidden_states`` is what enters attention and whose output is (…, weights)."""
        raise NotImplementedError

    def output_module(self, block):
        """The module whose output is the attention sub-layer's output before the residual (W_O)."""
        raise NotImplementedError

    def final_norm(self, model):
        """The norm between the last block and the unembedding (decoders), as a torch module."""
        raise NotImplementedError

    def output_weight(self, block):
        """W_O as the torch tensor the model holds, laid out ``x @ W`` (in = h·dk, out = d): rows h·dk … (h+1)·dk
        read head h. A view of the model's own parameter (no copy); an ``nn.Linear`` stores (out, in)."""
        return self.output_module(block).weight.T

    def attention_weights(self, model, layer: int) -> AttentionWeights:
        raise NotImplementedError

    # --- the recomputation
    def recompute(self, weights: AttentionWeights, layer_input: np.ndarray, positions: np.ndarray | None = None,
                  dtype: type = np.float32, mistakes: Mistakes | None = None,
                  rows: np.ndarray | None = None, heads=None) -> FamilyRecomputation:
        return recompute(weights, layer_input, self.steps, positions, dtype, mistakes, rows, heads)

    # --- tokens
    def bos_token(self, tokenizer) -> str | None:
        """The token prepended as BOS (None when the tokenizer has none)."""
        return tokenizer.bos_token

    def prepend_bos_default(self, config: Any, tokenizer) -> bool:
        """Whether a run prepends BOS unless the user says otherwise: when the tokenizer itself would."""
        bos = self.bos_token(tokenizer)
        if bos is None:
            return False
        ids = tokenizer("a", add_special_tokens=True, verbose=False)["input_ids"]  # no "longer than" note at context 1
        return bool(ids) and ids[0] == tokenizer.convert_tokens_to_ids(bos)

    def wrap(self, tokenizer, text_ids: Sequence[int], special: bool) -> list[int]:
        """The ids to run: the text's ids, with BOS in front when ``special`` (decoders)."""
        bos = self.bos_token(tokenizer) if special else None
        return ([tokenizer.convert_tokens_to_ids(bos)] if bos is not None else []) + list(text_ids)

    def display_tokens(self, tokenizer, raw_tokens: Sequence[str]) -> tuple[str, ...]:
        style = token_style(tokenizer, self.token_style)
        specials = frozenset(tokenizer.all_special_tokens)
        return tuple(display_token(raw, style, specials) for raw in raw_tokens)

    def __repr__(self) -> str:
        return f"<family {self.name}>"


__all__ = ["Family", "config_get"]
