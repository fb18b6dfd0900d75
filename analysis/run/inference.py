"""Text in, frozen attention result out.

``run_text`` tokenises (``tokenize``), checks the memory the attention will take (``memory``), runs the
model once through the one capture (``capture.forward_with_capture``: hooks that copy each layer's
attention weights, the residual stream entering the layer and the attention sub-layer's output as the
forward pass goes), and returns an :class:`AttentionResult` whose arrays are read-only numpy in the
order ``(layer, head, query, key)``.

Every model family is run the same way: the family adapter (``loaded.family``) says where the
blocks, the attention modules and the output projections are, and which special tokens wrap a
text; with ``chat`` the model's chat template wraps it instead (analysis/run/chat.py). A run that would
not fit in memory is refused with a sentence before the forward.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..families.tokens import display_token as family_display_token
from ..model.loaded import LoadedModel
from .capture import forward_with_capture
from .chat import starts_with_bos
from .memory import check_attention_memory
from .tokenize import DEFAULT_MAX_TOKENS, token_limit, tokenize, truncation_warning, without_bom

TOP_K = 5
PROBE_SPAN = 50  # random tokens in each copy of the induction probe
PROBE_SEED = 0


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class Prediction:
    token: str  # display form
    token_id: int
    probability: float


@dataclass(frozen=True)
class ProbeResult:
    """Attention on the induction probe: BOS, then ``span`` random tokens, then the same tokens again."""

    token_ids: np.ndarray  # (n,)
    attentions: np.ndarray  # (layer, head, n, n)
    span: int
    seed: int


@dataclass(frozen=True)
class AttentionResult:
    """Everything one run of a text produced. Arrays are read-only; axis order (layer, head, query, key)."""

    text: str  # the text as given
    tokens: tuple[str, ...]  # display strings (␣ for a leading space, ↵ for a newline; WordPiece's ##ing as is)
    raw_tokens: tuple[str, ...]  # the tokenizer's own strings (Ġcat, ▁cat, ##ing)
    token_ids: np.ndarray  # (n,) int64
    attentions: np.ndarray  # (layer, head, n, n) float32
    layer_inputs: np.ndarray  # (layer, n, d_model) float32: residual stream entering each block (before its norm)
    attention_outputs: np.ndarray  # (layer, n, d_model) float32: the attention sub-layer output, after W_O
    predictions: tuple[Prediction, ...]  # top-5 next tokens after the last position; () for an encoder
    # whether the special tokens were added: BOS in front (decoders), [CLS] … [SEP] (encoders); with ``chat``,
    # whether the chat template put the tokenizer's BOS first (the template decides the special tokens)
    bos: bool
    truncated: bool  # the text was longer than the context and was cut
    n_tokens_text: int  # the text's tokens (without BOS); when truncated, a lower bound: only a prefix is tokenised
    context_length: int
    model_label: str
    device: str
    dtype: str
    timings: dict = field(default_factory=dict)  # seconds: tokenize, forward, total
    warnings: tuple[str, ...] = ()
    probe: ProbeResult | None = None
    request_id: int = 0
    thumbnails: np.ndarray | None = None  # (layer, head, c, c) max-pooled to c = min(n, THUMBNAIL_PX) for the grid
    causal: bool = True  # decoders: query i sees keys j ≤ i; encoders (False): every key, no mask
    family: str = "gpt2"  # the adapter's name (analysis.families): gpt2, llama, gpt_neox, bert, distilbert
    prediction_note: str = ""  # why there are no predictions (an encoder predicts no next token), else ""
    max_tokens: int = DEFAULT_MAX_TOKENS  # the cap this run was analysed under (beside the model's context)
    sliding_windows: tuple = ()  # per layer: keys a query sees (itself included) under a sliding window, or None; () none
    weights: str = ""  # what the numbers are computed from (LoadedModel.weights): a GGUF's dequantized Q4_1, …
    chat: bool = False  # the text ran as one user turn of the model's chat template (its tokens are in ``tokens``)

    @property
    def n_layer(self) -> int:
        return int(self.attentions.shape[0])

    @property
    def n_head(self) -> int:
        return int(self.attentions.shape[1])

    @property
    def n_tokens(self) -> int:
        return int(self.attentions.shape[-1])


def _top_predictions(logits: np.ndarray | None, loaded: LoadedModel,
                     specials: frozenset[str]) -> tuple[Prediction, ...]:
    """The TOP_K most likely next tokens (softmax of the last position's logits); () without logits.

    The probabilities are the model's own: the softmax runs over every logit, then the rows past the
    tokenizer (a padded vocabulary, Pythia's and Qwen's) are left out of the ranking, not renormalised away."""
    if logits is None:
        return ()
    logits = logits.astype(np.float64)
    probs = np.exp(logits - logits.max())
    probs = probs[: len(loaded.tokenizer)] / probs.sum()  # padded vocab rows are not tokens
    top = np.argsort(-probs)[:TOP_K]
    raw = loaded.tokenizer.convert_ids_to_tokens([int(i) for i in top])
    return tuple(Prediction(family_display_token(r, loaded.token_style, specials) or r, int(i), float(probs[i]))
                 for r, i in zip(raw, top))


def probe_token_ids(loaded: LoadedModel, span: int = PROBE_SPAN, seed: int = PROBE_SEED) -> list[int]:
    """BOS (when the tokenizer has one), then ``span`` distinct random ordinary tokens, then the same
    tokens again (seeded)."""
    front = loaded.special_ids([], special=True)[:1]  # BOS, or nothing (a decoder without one)
    span = min(span, (loaded.context_length - len(front)) // 2)
    specials = set(loaded.tokenizer.all_special_ids)
    pool = np.array([i for i in range(len(loaded.tokenizer)) if i not in specials])
    rng = np.random.default_rng(seed)
    random_tokens = rng.choice(pool, size=span, replace=False).tolist()
    return front + random_tokens + random_tokens


def run_probe(loaded: LoadedModel) -> ProbeResult:
    """Attention on the seeded induction probe (computed once per loaded model, then cached)."""
    if loaded._probe is None:
        ids = probe_token_ids(loaded)
        capture, _ = forward_with_capture(loaded, ids, want_logits=False)
        loaded._probe = ProbeResult(_frozen(np.array(ids, dtype=np.int64)), _frozen(capture.attentions),
                                    span=len(ids) // 2, seed=PROBE_SEED)
    return loaded._probe


def bos_used(loaded: LoadedModel, bos: bool | None) -> bool:
    """Whether a run puts the family's special tokens around the text (BOS in front for a decoder,
    [CLS] … [SEP] for an encoder).

    The rule: ``bos=None`` takes the model's default (``loaded.prepend_bos_default``), True or False
    asks for them or not; either way none are used when the family has none to add (a decoder whose
    tokenizer has no BOS token)."""
    wanted = loaded.prepend_bos_default if bos is None else bool(bos)
    return wanted and bool(loaded.special_ids([], special=True))


def run_text(loaded: LoadedModel, text: str, bos: bool | None = None, with_probe: bool = True,
             request_id: int = 0, max_tokens: int | None = None,
             on_sized: Callable[[int], None] | None = None, chat: bool = False) -> AttentionResult:
    """Run ``text`` through the model and return the frozen result.

    ``bos=None`` uses the model's default (the bundled model and encoders add their special tokens;
    GPT-2 does not). Text longer than the model's context, or than ``max_tokens`` (default
    :data:`DEFAULT_MAX_TOKENS`), is cut; ``result.truncated`` says so and ``result.warnings`` carries
    the sentence to show the user. Before the forward the attention's memory is checked
    (:func:`check_attention_memory`): a run that would not fit is refused with InputError. A leading
    byte-order mark is removed (with a warning); ``result.text`` is the text analysed, without it.
    Encoders get no predictions (``result.prediction_note`` says why) and no induction probe.
    ``on_sized(n_tokens)`` is called once the text is tokenized, before the memory check and the forward
    (the window says what a long run will take while it runs).

    ``chat``: the text runs as one user turn of the model's chat template, the assistant's header after it
    (``apply_chat_template(..., add_generation_prompt=True, tokenize=True)``; analysis/run/chat.py), so the
    predictions are the reply's first token. The template decides the special tokens: ``bos`` is not used, and
    ``result.bos`` says whether the template put BOS first. A model without a chat template, or one whose
    template fails to render, is refused (ChatFormatError, one sentence). A text too long is cut inside the
    template, which is kept whole (``tokenize._chat_tokens``).
    """
    started = time.perf_counter()
    use_bos = False if chat else bos_used(loaded, bos)
    text, warnings = without_bom(text)
    if bos and not use_bos and not chat:
        warnings.append("This model's tokenizer has no BOS token, so none was put in front of the text.")
    cap = token_limit(loaded, max_tokens)
    ids, n_text, truncated = tokenize(loaded, text, use_bos, max_tokens, chat=chat)
    if on_sized is not None:
        on_sized(len(ids))
    check_attention_memory(loaded.n_layer, loaded.n_head, len(ids))
    tokenized = time.perf_counter()
    capture, last_logits = forward_with_capture(loaded, ids)
    forwarded = time.perf_counter()
    specials = frozenset(loaded.tokenizer.all_special_tokens)
    raw = tuple(loaded.tokenizer.convert_ids_to_tokens(ids))
    if truncated:
        warnings.append(truncation_warning(loaded, ids, use_bos, cap, chat=chat))
    probe = run_probe(loaded) if with_probe and loaded.causal else None
    note = "" if loaded.predicts_next_token else (
        "An encoder predicts no next token: it reads the whole text at once." if not loaded.causal
        else "This model has no language-model head, so it predicts no next token.")
    tokens = tuple(family_display_token(r, loaded.token_style, specials) or "\u27e8empty\u27e9" for r in raw)
    return AttentionResult(
        text=text, tokens=tokens, raw_tokens=raw,
        token_ids=_frozen(np.array(ids, dtype=np.int64)), attentions=_frozen(capture.attentions),
        layer_inputs=_frozen(capture.layer_inputs), attention_outputs=_frozen(capture.attention_outputs),
        predictions=_top_predictions(last_logits, loaded, specials),
        bos=starts_with_bos(loaded, ids) if chat else use_bos, truncated=truncated,
        n_tokens_text=n_text, context_length=loaded.context_length, model_label=loaded.source.label,
        device=loaded.device, dtype=loaded.dtype, weights=loaded.weights,
        timings={"tokenize_s": tokenized - started, "forward_s": forwarded - tokenized,
                 "total_s": time.perf_counter() - started},
        warnings=tuple(warnings), probe=probe, request_id=request_id, thumbnails=_frozen(capture.thumbnails),
        causal=loaded.causal, family=loaded.family.name, prediction_note=note, max_tokens=cap,
        sliding_windows=loaded.sliding_windows if any(loaded.sliding_windows) else (), chat=bool(chat),
    )


def same_model(loaded: LoadedModel, result: AttentionResult) -> bool:
    """Whether ``result`` can have come from ``loaded``: the same model label (``loaded.source.label``, which
    ``run_text`` wrote into ``result.model_label``) and the same layers, heads and d_model. What reads the weights
    for a result computed earlier (its value norms, its parity) asks this first: after another model was loaded
    the result belongs to the old one until the text is run again."""
    return (loaded.source.label == result.model_label and loaded.n_layer == result.n_layer
            and loaded.n_head == result.n_head and loaded.d_model == result.layer_inputs.shape[-1])
