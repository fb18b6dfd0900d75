"""A model ready to run (:class:`LoadedModel`), and what the UI may know of it (:class:`ModelInfo`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..families.family import Family
from ..families.steps import FamilyRecomputation
from ..families.weights import AttentionWeights, ModelShape
from .catalogue import ModelSource


@dataclass
class LoadedModel:
    """A model ready to run. Owned by one thread (the worker); only ``info`` is shared with the UI.

    ``family`` is the adapter that knows this model's layout; ``shape`` its sizes from the config."""

    model: Any
    tokenizer: Any
    source: ModelSource
    folder: Path
    device: str
    dtype: str
    prepend_bos_default: bool
    load_seconds: float
    family: Family
    token_style: str = ""  # byte_level, sentencepiece or wordpiece: how tokens are shown (read once from the tokenizer)
    _weights: dict[int, AttentionWeights] = field(default_factory=dict, repr=False)
    _probe: Any = field(default=None, repr=False)

    def __post_init__(self):
        if not self.token_style:
            from ..families.tokens import token_style

            self.token_style = token_style(self.tokenizer, self.family.token_style)

    @property
    def config(self):
        return self.model.config

    @property
    def shape(self) -> ModelShape:
        return self.family.shape(self.config)

    @property
    def n_layer(self) -> int:
        return self.shape.n_layer

    @property
    def n_head(self) -> int:
        return self.shape.n_head

    @property
    def n_kv_head(self) -> int:
        """Key/value heads (fewer than ``n_head`` with grouped-query attention)."""
        return self.shape.n_kv_head

    @property
    def d_model(self) -> int:
        return self.shape.d_model

    @property
    def d_head(self) -> int:
        return self.shape.d_head

    @property
    def context_length(self) -> int:
        return self.shape.context_length

    @property
    def causal(self) -> bool:
        """Decoders (GPT-2, Llama, NeoX) hide future keys; encoders (BERT) let every query see every key."""
        return bool(self.family.causal)

    @property
    def weights(self) -> str:
        """What the numbers are computed from, in words: a GGUF's quantized weights dequantized to float32 (the
        converted folder's config says so: ``attnscope_weights``), or the model files' weights run as ``dtype``."""
        said = getattr(self.config, "attnscope_weights", None)
        return said if isinstance(said, str) and said else f"the model files' weights, run as {self.dtype}"

    @property
    def quantization(self) -> str:
        """The GGUF file's quantization the weights were dequantized from (``Q4_1``), or "" for any other model."""
        said = getattr(self.config, "attnscope_gguf_quantization", None)
        return said if isinstance(said, str) else ""

    @property
    def sliding_windows(self) -> tuple[int | None, ...]:
        """Per layer, the sliding window of its causal mask (Mistral, Qwen2's sliding layers), or None."""
        return tuple(self.family.sliding_window(self.model.config, layer) for layer in range(self.n_layer))

    @property
    def predicts_next_token(self) -> bool:
        """Decoders predict the next token; an encoder predicts none (AttnScope shows no masked-LM guesses)."""
        return bool(self.family.causal) and self.model.get_output_embeddings() is not None

    @property
    def bos_token(self) -> str | None:
        """The token put in front of a text when BOS is on (GPT-2: <|endoftext|>; BERT: [CLS]); None if the
        tokenizer has none (Qwen2.5)."""
        return self.family.bos_token(self.tokenizer)

    def special_ids(self, text_ids: list[int], special: bool) -> list[int]:
        """The ids to run: ``text_ids`` wrapped in the family's special tokens when ``special``
        (BOS in front for decoders, [CLS] … [SEP] for encoders)."""
        return self.family.wrap(self.tokenizer, text_ids, special)

    @property
    def info(self) -> "ModelInfo":
        shape = self.shape
        return ModelInfo(
            label=self.source.label, kind=self.source.kind, folder=str(self.folder), device=self.device,
            dtype=self.dtype, n_layer=shape.n_layer, n_head=shape.n_head, d_model=shape.d_model,
            context_length=shape.context_length, vocab_size=shape.vocab_size,
            parameters=int(sum(p.numel() for p in self.model.parameters())),
            prepend_bos_default=self.prepend_bos_default, load_seconds=self.load_seconds,
            family=self.family.name, family_title=self.family.title, causal=self.causal,
            n_kv_head=shape.n_kv_head, d_head=shape.d_head, token_style=self.token_style,
            bos_token=self.bos_token, predicts_next_token=self.predicts_next_token,
            steps=tuple(self.family.steps), model_type=str(self.config.model_type),
            n_special=len(self.special_ids([], special=True)), weights=self.weights,
            quantization=self.quantization, file=str(self.source.path) if self.source.is_gguf else "",
        )

    def attention_weights(self, layer: int) -> AttentionWeights:
        """Layer ``layer``'s attention in the common shape of every family (float32 numpy, copied once, cached):
        norm, W_Q/W_K/W_V/W_O as ``x @ W + b``, heads, key/value heads, scale, causal, rotary."""
        if not 0 <= layer < self.n_layer:
            raise IndexError(f"layer {layer} out of range 0..{self.n_layer - 1}")
        if layer not in self._weights:
            from .device_map import onloaded

            with onloaded(self.family.blocks(self.model)[layer]):  # a split model's block may be on the disk
                self._weights[layer] = self.family.attention_weights(self.model, layer)
        return self._weights[layer]

    def recompute(self, layer: int, layer_input: np.ndarray, dtype: type = np.float32,
                  heads=None) -> FamilyRecomputation:
        """Layer ``layer`` recomputed in numpy from its block input (n, d) by the family's steps (``heads``: keep
        only those query heads' n² steps, ``steps.recompute``)."""
        return self.family.recompute(self.attention_weights(layer), layer_input, dtype=dtype, heads=heads)



@dataclass(frozen=True)
class ModelInfo:
    """What the UI may know about the loaded model (plain values, safe to pass between threads)."""

    label: str
    kind: str
    folder: str
    device: str
    dtype: str
    n_layer: int
    n_head: int
    d_model: int
    context_length: int
    vocab_size: int
    parameters: int
    prepend_bos_default: bool
    load_seconds: float
    family: str = "gpt2"  # the adapter's name: gpt2, llama, gpt_neox, bert, distilbert
    family_title: str = "GPT-2"  # for people: "Llama-style decoder", "BERT-style encoder", …
    causal: bool = True  # False for encoders: no mask is drawn, scores follow head_scores' table
    n_kv_head: int = 0  # key/value heads (< n_head with grouped-query attention); 0: not given, = n_head
    d_head: int = 0  # 0: not given, = d_model // n_head
    token_style: str = "byte_level"  # byte_level (Ġ), sentencepiece (▁) or wordpiece (##)
    bos_token: str | None = "<|endoftext|>"  # what BOS on puts in front ([CLS] for encoders); None: none
    predicts_next_token: bool = True  # False for encoders: there are no predictions to show
    steps: tuple[str, ...] = ()  # the family's recompute steps, in order (see analysis.families.steps)
    model_type: str = "gpt2"  # config.model_type: gpt2, llama, qwen2, mistral, gpt_neox, bert, roberta, distilbert
    n_special: int = 1  # special tokens BOS on puts around a text (special_ids): 0 without a BOS, 2 for [CLS] … [SEP]
    weights: str = ""  # what the numbers are computed from (LoadedModel.weights)
    quantization: str = ""  # a GGUF's quantization (Q4_1) its float32 weights were dequantized from; "" otherwise
    file: str = ""  # the GGUF file it was read from ("" for a folder; ``folder`` is then the converted copy)

