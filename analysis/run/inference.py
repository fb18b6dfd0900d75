"""Text in, frozen attention result out.

``run_text`` tokenises (``tokenize``), plans the run and checks its memory (``memory.plan_run``), runs the
model once and returns an :class:`AttentionResult` whose arrays are read-only numpy in the order
``(layer, head, query, key)``. The plan takes one of two ways, behind one interface (``result.maps``, an
``qk_capture.AttentionMaps``; ``result.head_map(layer, head)``):

- every map kept (short texts): the one capture (``capture.forward_with_capture``: hooks that copy each layer's
  attention weights, the residual stream entering the layer and the attention sub-layer's output as the forward
  pass goes); ``result.attentions`` holds every map and ``result.maps`` is a ``StoredMaps`` over it;
- attention on demand (long texts): a fast (sdpa) forward that keeps each layer's queries and keys
  (``qk_capture.forward_qk``); the residual stream and the attention output are computed by a second forward when
  first read (analysis/run/residual.py: only parity and From scratch read them); ``result.attentions`` is None and
  ``result.maps`` is the ``QKCapture`` that computes any head's weights when asked. What the views read of every
  head at once (scores, thumbnails) is streamed from it in blocks of query rows by ``measures.measured``.

Every model family is run the same way: the family adapter (``loaded.family``) says where the
blocks, the attention modules and the output projections are, and which special tokens wrap a
text; with ``chat`` the model's chat template wraps it instead (analysis/run/chat.py). A run that would
not fit in memory is refused with a sentence before the forward.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..families.tokens import display_token as family_display_token
from ..model.loaded import LoadedModel
from .capture import forward_with_capture
from .chat import starts_with_bos
from .memory import plan_run_of
from .qk_capture import AttentionMaps, StoredMaps, forward_qk, head_weights
from .residual import ResidualArray, residual_arrays
from .tokenize import DEFAULT_MAX_TOKENS, token_limit, tokenize, truncation_warning, without_bom

TOP_K = 5
HEAD_MAPS_KEPT = 2  # maps head_map keeps of an on-demand run (8,192 tokens: 256 MiB each)
PROBE_SPAN = 50  # random tokens in each copy of the induction probe
PROBE_SEED = 0


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _kept(array):
    """A captured array, frozen; a ResidualArray (computed when first read, read-only then) as it is."""
    return array if isinstance(array, ResidualArray) else _frozen(array)


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
    # (layer, head, n, n) float32 when every map is kept (a short text, ``maps_kept``); None when the maps are
    # computed on demand from ``maps`` (read them with ``head_map`` or ``maps.weights``, whichever way they are held)
    attentions: np.ndarray | None
    # (layer, n, d_model) float32: the residual stream entering each block (before its norm), and the attention
    # sub-layer output, after W_O. An on-demand run holds them as residual.ResidualArray: read like the arrays
    # (shape without computing; indexing or np.asarray runs one forward of token_ids first, on the reader's thread)
    layer_inputs: np.ndarray | ResidualArray
    attention_outputs: np.ndarray | ResidualArray
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
    # what every head's weights are read from (qk_capture.AttentionMaps): a StoredMaps over ``attentions``, or the
    # QKCapture of an on-demand run; None given: a StoredMaps over ``attentions``
    maps: AttentionMaps | None = None
    # what measures.measured streamed from ``maps`` during the run (measures.streamed.Streamed: every head score, the
    # TL-style scores, the thumbnails) on an on-demand run; None: nothing streamed (read the maps)
    streamed: Any = None
    _heads: dict = field(default_factory=dict, init=False, compare=False, repr=False)  # head_map's last few maps
    _heads_lock: Any = field(default_factory=threading.Lock, init=False, compare=False, repr=False)  # the app's
    # worker and its GUI thread may both ask

    def __post_init__(self):
        if self.attentions is not None:  # kept maps are read through a StoredMaps over them (also after replace)
            if not (isinstance(self.maps, StoredMaps) and self.maps.attentions is self.attentions):
                object.__setattr__(self, "maps", StoredMaps(self.attentions))
        elif self.maps is None:
            raise ValueError("an AttentionResult needs its attention maps or what they are computed from")

    @property
    def maps_kept(self) -> bool:
        """Whether every map is in memory (``attentions``); False: computed on demand from ``maps``."""
        return self.attentions is not None

    @property
    def n_layer(self) -> int:
        return int(self.maps.n_layer)

    @property
    def n_head(self) -> int:
        return int(self.maps.n_head)

    @property
    def n_tokens(self) -> int:
        return int(self.maps.n_tokens)

    def head_map(self, layer: int, head: int) -> np.ndarray:
        """(n, n) float32, read-only: head ``head`` of ``layer``'s weights A[query, key]: the kept map, or computed
        from the queries and keys (qk_capture.head_weights: the model's own arithmetic, equal to its eager weights
        ≤ 1e-5). The last :data:`HEAD_MAPS_KEPT` computed maps are kept (the Head tab asks again as it repaints)."""
        if self.attentions is not None:
            return self.attentions[layer, head]
        key = (int(layer), int(head))
        with self._heads_lock:
            kept = self._heads.get(key)
        if kept is not None:
            return kept
        computed = _frozen(head_weights(self.maps, *key))  # outside the lock: another head may be asked meanwhile
        with self._heads_lock:
            while len(self._heads) >= HEAD_MAPS_KEPT:
                self._heads.pop(next(iter(self._heads)))
            self._heads[key] = computed
        return computed


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
             on_sized: Callable[[int], None] | None = None, chat: bool = False,
             keep_maps: bool | None = None) -> AttentionResult:
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

    ``keep_maps``: None plans the way by the text's length (``memory.plan_run``: every map kept when they take at
    most ``memory.MAPS_KEPT_BYTES``, else computed on demand); True or False asks for one. On an on-demand run
    ``result.attentions`` and ``result.thumbnails`` are None: ``measures.measured.run_measured`` streams the
    thumbnails and scores (what the app and the commands call).

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
    plan = plan_run_of(loaded, len(ids), keep_maps)
    tokenized = time.perf_counter()
    if plan.keeps_maps:
        capture, last_logits = forward_with_capture(loaded, ids)
        attentions, maps, thumbnails = _frozen(capture.attentions), None, _frozen(capture.thumbnails)
    else:
        capture, last_logits = _forward_on_demand(loaded, ids)
        attentions, maps, thumbnails = None, capture.maps, None
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
        token_ids=_frozen(np.array(ids, dtype=np.int64)), attentions=attentions, maps=maps,
        layer_inputs=_kept(capture.layer_inputs), attention_outputs=_kept(capture.attention_outputs),
        predictions=_top_predictions(last_logits, loaded, specials),
        bos=starts_with_bos(loaded, ids) if chat else use_bos, truncated=truncated,
        n_tokens_text=n_text, context_length=loaded.context_length, model_label=loaded.source.label,
        device=loaded.device, dtype=loaded.dtype, weights=loaded.weights,
        timings={"tokenize_s": tokenized - started, "forward_s": forwarded - tokenized,
                 "total_s": time.perf_counter() - started},
        warnings=tuple(warnings), probe=probe, request_id=request_id, thumbnails=thumbnails,
        causal=loaded.causal, family=loaded.family.name, prediction_note=note, max_tokens=cap,
        sliding_windows=loaded.sliding_windows if any(loaded.sliding_windows) else (), chat=bool(chat),
    )


@dataclass(frozen=True)
class _OnDemand:
    """What an on-demand forward kept of one sequence (the eager capture's ``Captured``, with the maps' source)."""

    maps: AttentionMaps  # the QKCapture
    layer_inputs: ResidualArray  # (layer, n, d), computed when first read
    attention_outputs: ResidualArray  # (layer, n, d), from the same forward


def _forward_on_demand(loaded: LoadedModel, ids: list[int]) -> tuple[_OnDemand, np.ndarray | None]:
    """The sdpa forward under a qk_capture.QKRecorder: (the capture, with the residual stream and the attention
    output of every layer as residual.ResidualArray — computed by a second forward when first read —, the logits
    after the last position or None)."""
    from .capture import require_finite

    last = "last" if loaded.predicts_next_token else None
    (qk,), _, logits = forward_qk(loaded, [ids], logits=last)
    last_logits = None if logits is None else logits[0, -1].float().cpu().numpy()
    require_finite({}, last_logits, loaded.dtype)
    return _OnDemand(qk, *residual_arrays(loaded, ids, loaded.n_layer, loaded.d_model)), last_logits


def same_model(loaded: LoadedModel, result: AttentionResult) -> bool:
    """Whether ``result`` can have come from ``loaded``: the same model label (``loaded.source.label``, which
    ``run_text`` wrote into ``result.model_label``) and the same layers, heads and d_model. What reads the weights
    for a result computed earlier (its value norms, its parity) asks this first: after another model was loaded
    the result belongs to the old one until the text is run again."""
    return (loaded.source.label == result.model_label and loaded.n_layer == result.n_layer
            and loaded.n_head == result.n_head and loaded.d_model == result.layer_inputs.shape[-1])
