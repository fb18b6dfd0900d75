"""Text in, frozen attention result out.

``run_text`` tokenises, runs the model once with hooks that copy what AttnScope needs as the
forward pass goes (each layer's attention weights, the residual stream entering the layer,
and the attention sub-layer's output), and returns an :class:`AttentionResult` whose arrays
are read-only numpy in the order ``(layer, head, query, key)``.

Every model family is run the same way: the family adapter (``loaded.family``) says where the
blocks, the attention modules and the output projections are, and which special tokens wrap a
text. Before a run, the memory the attention will take is computed
(:func:`attention_memory_bytes`) and a run that would not fit is refused with a sentence.
"""
from __future__ import annotations

import math
import os
import time
import unicodedata
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..display import pooled
from ..errors import InputError
from ..families.tokens import display_token as family_display_token
from ..model.loading import LoadedModel

TOP_K = 5
#: The most tokens a run analyses unless the caller says otherwise (``max_tokens``, ``--max-tokens``):
#: the attention of every layer and head is held in memory, L·H·n²·4 bytes.
DEFAULT_MAX_TOKENS = 2048
#: Set to a number of megabytes to fix the memory a run's attention may take (else: from /proc/meminfo).
MEMORY_BUDGET_ENV = "ATTNSCOPE_ATTENTION_BUDGET_MB"
#: Share of the memory the system says is available (MemAvailable) that a run's attention may take: the
#: rest is for the copies on the way (a layer's torch tensor, thumbnails, an export's buffers) and the app.
MEMORY_SHARE = 0.5
#: The budget when the available memory cannot be read (not Linux).
FALLBACK_BUDGET_BYTES = 8 * 2**30
THUMBNAIL_PX = 96  # the grid shows each head at most this many pixels a side
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
    bos: bool  # whether the special tokens were added: BOS in front (decoders), [CLS] … [SEP] (encoders)
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

    @property
    def n_layer(self) -> int:
        return int(self.attentions.shape[0])

    @property
    def n_head(self) -> int:
        return int(self.attentions.shape[1])

    @property
    def n_tokens(self) -> int:
        return int(self.attentions.shape[-1])


class _Capture:
    """Forward hooks that copy each layer's tensors into preallocated numpy arrays.

    Copying in the hook (instead of asking transformers to collect ``output_attentions``)
    keeps only one layer's attention tensor alive at a time. The family adapter says where to hook:
        block pre-hook            → layer_inputs       (layer, n, d)     the residual stream entering the block
        attention module hook     → attentions         (layer, h, n, n)  the model's own weights (+ thumbnails)
        output-projection hook    → attention_outputs  (layer, n, d)     after W_O, before the residual
    """

    def __init__(self, loaded: LoadedModel, n_tokens: int, thumbnail_px: int | None = None):
        thumbnail_px = THUMBNAIL_PX if thumbnail_px is None else thumbnail_px
        shape, family = loaded.shape, loaded.family
        L, H, d = shape.n_layer, shape.n_head, shape.d_model
        self.attentions = np.empty((L, H, n_tokens, n_tokens), dtype=np.float32)
        # thumbnails are pooled in the hook from each layer's copy (display.pooled), one layer at a time
        self.thumbnail_px = thumbnail_px if n_tokens > thumbnail_px else 0
        self.thumbnails = (np.empty((L, H, thumbnail_px, thumbnail_px), dtype=np.float32) if self.thumbnail_px
                           else self.attentions)
        self.layer_inputs = np.empty((L, n_tokens, d), dtype=np.float32)
        self.attention_outputs = np.empty((L, n_tokens, d), dtype=np.float32)
        self.seen = np.zeros((2, L), dtype=bool)  # (attention weights, attention output) per layer
        self.handles = []
        try:
            for layer, block in enumerate(family.blocks(loaded.model)):
                self.handles.append(block.register_forward_pre_hook(self._block_input(layer), with_kwargs=True))
                self.handles.append(family.attention_module(block).register_forward_hook(self._attention(layer)))
                self.handles.append(family.output_module(block).register_forward_hook(self._output(layer)))
        except BaseException:
            self.close()
            raise

    def _block_input(self, layer: int):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            self.layer_inputs[layer] = hidden[0].detach().float().cpu().numpy()

        return hook

    def _attention(self, layer: int):
        def hook(module, args, output):
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if weights is None:
                raise RuntimeError("the model returned no attention weights (is attn_implementation 'eager'?)")
            self.attentions[layer] = weights[0].detach().float().cpu().numpy()
            if self.thumbnail_px:
                # the same bins as every other pooled view (hide first token, larger cells): torch's
                # adaptive pool overlaps its bins, and took 2.5× as long on the CPU at 1024 tokens
                self.thumbnails[layer] = pooled(self.attentions[layer], self.thumbnail_px)  # (h, c, c)
            self.seen[0, layer] = True

        return hook

    def _output(self, layer: int):
        def hook(module, args, output):
            out = output[0] if isinstance(output, tuple) else output  # (1, n, d)
            self.attention_outputs[layer] = out[0].detach().float().cpu().numpy()
            self.seen[1, layer] = True

        return hook

    def close(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []


def forward_with_capture(loaded: LoadedModel, token_ids: list[int], want_logits: bool = True):
    """Run the model on one sequence; return the capture (attentions, thumbnails, layer_inputs,
    attention_outputs as numpy) and the logits after the last position (None for an encoder, or
    when ``want_logits`` is False)."""
    import torch

    ids = torch.tensor([token_ids], dtype=torch.long, device=loaded.device)
    capture = _Capture(loaded, len(token_ids))
    kwargs = loaded.family.forward_kwargs()
    try:
        with torch.inference_mode():
            if want_logits and loaded.predicts_next_token:
                out = loaded.model(input_ids=ids, logits_to_keep=1, **kwargs)
                last_logits = out.logits[0, -1].float().cpu().numpy()
            else:
                loaded.model.base_model(input_ids=ids, **kwargs)
                last_logits = None
    finally:
        capture.close()
    if not capture.seen.all():
        raise RuntimeError(f"attention weights were captured for {int(capture.seen[0].sum())} of "
                           f"{capture.seen.shape[1]} layers")
    require_finite({"attention weights": capture.attentions, "residual stream": capture.layer_inputs,
                    "attention output": capture.attention_outputs}, last_logits, loaded.dtype)
    return capture, last_logits


def require_finite(per_layer: dict[str, np.ndarray], logits=None, dtype: str = "float32") -> None:
    """ModelCheckError (one sentence) when any layer's array, or the logits, holds NaN or ±inf.

    The load-time test forward runs at most 4 tokens; a longer text can still overflow (a position
    embedding, float16 activations). What such a run would show is meaningless, so it is refused
    instead of drawn. Checked a layer at a time: no temporary as large as the whole attention."""
    for name, stack in per_layer.items():
        for layer, values in enumerate(stack):
            if not np.isfinite(values).all():
                raise not_finite(f"{name}, layer {layer}", dtype)
    if logits is not None and not np.isfinite(np.asarray(logits)).all():
        raise not_finite("next-token logits", dtype)


def not_finite(where: str, dtype: str = "float32"):
    """The ModelCheckError for a run whose ``where`` holds NaN or ±inf."""
    from ..errors import ModelCheckError

    hint = " (half precision overflows easily: try float32)" if dtype in ("float16", "bfloat16") else ""
    return ModelCheckError(f"The model gives NaN or infinite numbers on this text ({where}){hint}; "
                           "AttnScope will not show them.")


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


#: Characters of text tokenised per token of context at first: byte-level BPE tokens cover at least
#: one byte and usually 3-5 characters, so this almost always covers the context in one pass;
#: when it does not, the window doubles.
CHARS_PER_TOKEN_FIRST = 8
BOM = "\ufeff"


def check_text(text: str | None) -> str:
    """The text as it will be analysed, or InputError: empty, or not encodable as UTF-8 (lone
    surrogates, which is how Python carries bytes of a command line argument that are not UTF-8)."""
    if text is None or not text.strip():
        raise InputError("The text is empty: type a sentence to analyse.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"U+{ord(bad):04X}"
        raise InputError(f"The text is not valid UTF-8 ({byte} at character {exc.start}); "
                         "save or type it as UTF-8.") from None
    return text


def _is_separator(char: str) -> bool:
    """A space every tokenizer family keeps as a word boundary: " ", tab, newline, carriage return and the
    spaces of Unicode category Zs. Not the other characters ``str.isspace`` knows (\\x0b, \\x0c, \\x1c–\\x1f,
    NEL, U+2028, U+2029): BERT's normaliser deletes the control characters among them (Cc), joining the words
    on either side into one, and its Python tokenizer keeps U+2028 and U+2029 inside a word."""
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _whitespace_cut(text: str, end: int) -> int:
    """The last position ≤ ``end`` where a non-space character is followed by a separator
    (:func:`_is_separator`): where a word ends, so that the prefix ``text[:cut]`` holds whole words.
    ``end`` itself when there is none in the second half of the window."""
    for i in range(end - 1, end // 2, -1):
        if _is_separator(text[i]) and not text[i - 1].isspace():
            return i
    return end


def token_limit(loaded: LoadedModel, max_tokens: int | None = None) -> int:
    """The most tokens a run analyses: the model's context, or ``max_tokens`` (default
    :data:`DEFAULT_MAX_TOKENS`) when that is smaller."""
    cap = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1:
        raise InputError(f"The token cap must be a whole number of at least 1 (got {cap!r}).")
    return min(loaded.context_length, int(cap))


def _normalizer(tokenizer) -> Callable[[str], str]:
    """What the fast tokenizer's normaliser makes of a string (lower-casing, accents stripped, control characters
    deleted: BERT's), or the string itself when it has none."""
    normalizer = tokenizer.backend_tokenizer.normalizer
    return normalizer.normalize_str if normalizer is not None else (lambda s: s)


def _end_of_added_token_across(tokenizer, text: str, cut: int) -> int:
    """The end of the added token (one the tokenizer matches whole before anything else: ``<|endoftext|>``,
    a user's added word) that spans ``cut``, or ``cut`` when none does.

    Tokenising ``text[:cut]`` would split such a token into ordinary pieces. Added tokens are found left to
    right, so those that start at or before ``cut`` are the same in any prefix that reaches one longest added
    token past ``cut``: that prefix is tokenised with offsets and a token across ``cut`` is looked for. A
    normalised added token (``normalized=True``, a user's added word by default) is matched in the normalised
    text, where the normaliser may have deleted any number of characters (BERT's deletes combining accents and
    control characters): the prefix reaches one longest added token past ``cut`` *once normalised*. A model's
    own [UNK] is no added token, even where it spans ``cut``."""
    added = {i: t for i, t in tokenizer.added_tokens_decoder.items() if len(t.content) > 1}
    if not added or cut >= len(text):
        return cut
    if not getattr(tokenizer, "is_fast", False):  # a Python tokenizer gives no offsets: where the added tokens' text is
        spans = [(a, a + len(t.content)) for t in added.values()
                 for a in _occurrences(text, t.content, cut - len(t.content) + 1, cut)]
        return max((b for a, b in spans if a < cut < b), default=cut)
    normalize = _normalizer(tokenizer)
    reach = max(len(normalize(t.content)) if t.normalized else len(t.content) for t in added.values())
    ahead = reach
    if any(t.normalized for t in added.values()):
        while cut + ahead < len(text) and len(normalize(text[cut:cut + ahead])) < reach:
            ahead *= 2  # characters the normaliser deletes: look further
    encoded = tokenizer(text[:cut + ahead], add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    unknown = tokenizer.unk_token_id
    spans = [(a, b) for i, (a, b) in zip(encoded["input_ids"], encoded["offset_mapping"])
             if i in added and (i != unknown or added[i].content in text[a:b])]  # not the model's [UNK] of a word
    return max((b for a, b in spans if a < cut < b), default=cut)


def _occurrences(text: str, part: str, start: int, stop: int) -> list[int]:
    """Where ``part`` starts in ``text`` at positions ``start`` … ``stop - 1``."""
    found, i = [], text.find(part, max(0, start))
    while 0 <= i < stop:
        found.append(i)
        i = text.find(part, i + 1)
    return found


def _settled_tokens(tokenizer, prefix: str, encoded) -> int:
    """How many of the first tokens of ``prefix``'s encoding (a fast tokenizer's, with offsets) are the first tokens
    of any text that starts with ``prefix``: those of every word (pre-token) but the last, whose tokens can still
    change as it grows (a longer piece matches, WordPiece makes one [UNK] of a word over 100 characters, a
    punctuation mark takes the newlines after it into its pre-token); and the last's too when it is already longer
    than WordPiece's ``max_input_chars_per_word`` (an [UNK] however long it grows)."""
    words = encoded.word_ids()
    first = len(words)
    while first > 0 and words[first - 1] == words[-1]:
        first -= 1
    longest = getattr(tokenizer.backend_tokenizer.model, "max_input_chars_per_word", None)  # WordPiece's
    if longest is not None and first < len(words):
        start, end = encoded["offset_mapping"][first][0], encoded["offset_mapping"][-1][1]
        if len(_normalizer(tokenizer)(prefix[start:end])) > longest:
            return len(words)
    return first


def tokenize(loaded: LoadedModel, text: str, bos: bool, max_tokens: int | None = None) -> tuple[list[int], int, bool]:
    """Token ids to run (wrapped in the family's special tokens if ``bos``: BOS in front for a decoder,
    [CLS] … [SEP] for an encoder), the text's token count, and whether it was truncated.

    At most :func:`token_limit` ids come back. Only what that can hold is tokenised: a prefix of the
    text sized from the limit, doubled until its first ``limit`` tokens are known to be the whole text's
    and more follow (or it is the whole text). A prefix never ends inside an added token, which it would split
    into ordinary pieces (a 3,000-character added token is one token). With a fast tokenizer its tokens are
    known from their words (pre-tokens, :func:`_settled_tokens`): every word's but the last's, which can still
    change as the text goes on (WordPiece makes one [UNK] of a word over 100 characters, but many pieces of its
    first 90; BERT's normaliser deletes control characters such as \\x0c, joining the words around them). When
    the last word holds some of the first ``limit`` tokens, they are taken once the next, twice as long, prefix
    gives the same (a byte-level BPE word of 200,000 characters would take seconds to tokenise whole), except
    under WordPiece, whose long word becomes an [UNK] only at its end. A Python tokenizer (no words) stops at a
    prefix ending with a space after a word, or at the end of an added token, or when two prefixes agree.
    When the text is cut, the count is a lower bound: the text has *more than* that many tokens. Memory and
    time thus depend on the limit, not on the length of the text.
    """
    check_text(text)
    total = token_limit(loaded, max_tokens)
    n_special = len(loaded.special_ids([], special=bos))
    limit = total - n_special  # text tokens that fit beside the special tokens
    if limit < 1:
        specials = (f"its {n_special} special token{'' if n_special == 1 else 's'} "
                    f"({'BOS' if loaded.causal else '[CLS] and [SEP]'})")
        if total == loaded.context_length:  # the model's own context, not a cap the user can raise
            raise InputError(f"This model's context holds only {total} position{'' if total == 1 else 's'}, no "
                             f"room for text beside {specials}; run the text without them (--no-bos, or untick BOS).")
        raise InputError(f"A cap of {total} token{'' if total == 1 else 's'} leaves no room for text beside "
                         f"the model's {n_special} special token{'' if n_special == 1 else 's'}; raise the cap.")
    tokenizer = loaded.tokenizer
    fast = getattr(tokenizer, "is_fast", False)
    wordpiece = fast and hasattr(tokenizer.backend_tokenizer.model, "max_input_chars_per_word")
    window, shorter = max(64, total * CHARS_PER_TOKEN_FIRST), None
    while True:
        whole = window >= len(text)
        cut = len(text) if whole else _whitespace_cut(text, window)
        boundary = cut < window  # a space after a word
        if not whole:
            after = _end_of_added_token_across(tokenizer, text, cut)
            if after != cut:  # the end of an added token is a boundary too (the text after it is tokenised apart)
                cut, boundary, whole = after, True, after >= len(text)
        encoded = tokenizer(text[:cut], add_special_tokens=False, return_offsets_mapping=fast, verbose=False)
        ids = encoded["input_ids"]
        n_text = len(ids)
        if whole:
            break
        if n_text > limit:
            if fast:
                settled = _settled_tokens(tokenizer, text[:cut], encoded)
                if settled > limit:
                    n_text = settled  # the rest of the prefix's tokens may still change
                    break
            elif boundary:
                break
            if not wordpiece and shorter is not None and len(shorter) > limit and shorter[:limit] == ids[:limit]:
                break  # cut inside a word, twice: the first tokens no longer change
            shorter = ids
        window = max(window * 2, cut)
    if n_text == 0:  # a WordPiece tokenizer drops zero-width and control characters
        raise InputError("The text has no tokens once tokenised (this tokenizer drops all of its characters, "
                         "such as zero-width or control characters); type some words.")
    truncated = n_text > limit
    return loaded.special_ids(list(ids[:limit]), special=bos), n_text, truncated


# ----------------------------------------------------------------------------- memory
def attention_memory_bytes(n_layer: int, n_head: int, n_tokens: int) -> int:
    """Bytes the attention of one run takes: every layer's and head's (n, n) map in float32,
    n_layer × n_head × n_tokens² × 4 (GPT-2 small at 1024 tokens: 12 × 12 × 1024² × 4 = 604 MB)."""
    return int(n_layer) * int(n_head) * int(n_tokens) ** 2 * 4


def available_memory_bytes() -> int | None:
    """What the system says a new allocation can take without swapping (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def attention_memory_budget() -> int:
    """The most bytes a run's attention may take: ``ATTNSCOPE_ATTENTION_BUDGET_MB`` when set, else
    :data:`MEMORY_SHARE` of the available memory, else :data:`FALLBACK_BUDGET_BYTES`."""
    fixed = os.environ.get(MEMORY_BUDGET_ENV, "").strip()
    if fixed:
        try:
            megabytes = float(fixed)
        except ValueError:
            megabytes = math.nan
        if not math.isfinite(megabytes) or megabytes < 0:  # "abc", "nan", "inf", "1e400", "-1"
            raise InputError(f"{MEMORY_BUDGET_ENV}={fixed!r} is not a number of megabytes (0 or more).")
        return int(megabytes * 2**20)
    available = available_memory_bytes()
    return int(available * MEMORY_SHARE) if available is not None else FALLBACK_BUDGET_BYTES


def _size(n_bytes: float) -> str:
    from ..display import format_bytes  # one format for sizes

    return format_bytes(n_bytes)


def _count(n: int, noun: str) -> str:
    """``1 token``, ``2,048 tokens``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def max_tokens_for(n_layer: int, n_head: int, budget: int) -> int:
    """The longest run whose attention fits in ``budget`` bytes."""
    return int(np.sqrt(max(0, budget) / (4 * max(1, n_layer * n_head))))


def check_attention_memory(n_layer: int, n_head: int, n_tokens: int, budget: int | None = None) -> int:
    """The bytes the attention will take, or InputError (one sentence) when that is more than ``budget``
    (default :func:`attention_memory_budget`)."""
    need = attention_memory_bytes(n_layer, n_head, n_tokens)
    budget = attention_memory_budget() if budget is None else budget
    if need > budget:
        fits = max_tokens_for(n_layer, n_head, budget)
        if fits >= 1:
            advice = f"; use a shorter text or a token cap of at most {fits:,} (--max-tokens)"
        else:  # not even one token fits: no cap helps
            advice = (", too small for any text; " + (f"raise {MEMORY_BUDGET_ENV}" if os.environ.get(
                MEMORY_BUDGET_ENV, "").strip() else "free some memory"))
        raise InputError(
            f"The attention of {_count(n_tokens, 'token')} would take {_size(need)} ({_count(n_layer, 'layer')} × "
            f"{_count(n_head, 'head')} × {n_tokens:,}² × 4 bytes), more than the {_size(budget)} this run may "
            f"use{advice}.")
    return need


def without_bom(text: str) -> tuple[str, list[str]]:
    """``text`` without a leading byte-order mark (not text: it would run as tokens), and the warning if one was removed."""
    if text and text.startswith(BOM):
        return text[1:], ["The text started with a UTF-8 byte-order mark (BOM); it was removed."]
    return text, []


def truncation_warning(loaded: LoadedModel, ids: list[int], bos: bool, cap: int, done: str = "analysed") -> str:
    """The sentence for a text cut to ``ids`` (special tokens included) by ``cap`` or the model's context."""
    n_kept = len(ids) - len(loaded.special_ids([], special=bos))
    with_specials = (" with BOS" if loaded.causal else " with [CLS] and [SEP]") if bos else ""
    if cap < loaded.context_length:
        holds = (f"AttnScope analyses at most {_count(cap, 'token')}{with_specials} (the token cap; the model's "
                 f"context holds {loaded.context_length:,})")
    else:
        holds = f"the model's context holds {loaded.context_length:,}{with_specials}"
    first = "only its first token was" if n_kept == 1 else f"only the first {n_kept:,} tokens of the text were"
    return f"The text has more than {n_kept:,} token{'s' if n_kept != 1 else ''}; {holds}, so {first} {done}."


def run_text(loaded: LoadedModel, text: str, bos: bool | None = None, with_probe: bool = True,
             request_id: int = 0, max_tokens: int | None = None) -> AttentionResult:
    """Run ``text`` through the model and return the frozen result.

    ``bos=None`` uses the model's default (the bundled model and encoders add their special tokens;
    GPT-2 does not). Text longer than the model's context, or than ``max_tokens`` (default
    :data:`DEFAULT_MAX_TOKENS`), is cut; ``result.truncated`` says so and ``result.warnings`` carries
    the sentence to show the user. Before the forward the attention's memory is checked
    (:func:`check_attention_memory`): a run that would not fit is refused with InputError. A leading
    byte-order mark is removed (with a warning); ``result.text`` is the text analysed, without it.
    Encoders get no predictions (``result.prediction_note`` says why) and no induction probe.
    """
    started = time.perf_counter()
    use_bos = loaded.prepend_bos_default if bos is None else bool(bos)
    text, warnings = without_bom(text)
    if use_bos and not loaded.special_ids([], special=True):
        use_bos = False
        if bos:
            warnings.append("This model's tokenizer has no BOS token, so none was put in front of the text.")
    cap = token_limit(loaded, max_tokens)
    ids, n_text, truncated = tokenize(loaded, text, use_bos, max_tokens)
    check_attention_memory(loaded.n_layer, loaded.n_head, len(ids))
    tokenized = time.perf_counter()
    capture, last_logits = forward_with_capture(loaded, ids)
    forwarded = time.perf_counter()
    specials = frozenset(loaded.tokenizer.all_special_tokens)
    raw = tuple(loaded.tokenizer.convert_ids_to_tokens(ids))
    if truncated:
        warnings.append(truncation_warning(loaded, ids, use_bos, cap))
    probe = run_probe(loaded) if with_probe and loaded.causal else None
    note = "" if loaded.predicts_next_token else (
        "An encoder predicts no next token: it reads the whole text at once." if not loaded.causal
        else "This model has no language-model head, so it predicts no next token.")
    tokens = tuple(family_display_token(r, loaded.token_style, specials) or "\u27e8empty\u27e9" for r in raw)
    return AttentionResult(
        text=text, tokens=tokens, raw_tokens=raw,
        token_ids=_frozen(np.array(ids, dtype=np.int64)), attentions=_frozen(capture.attentions),
        layer_inputs=_frozen(capture.layer_inputs), attention_outputs=_frozen(capture.attention_outputs),
        predictions=_top_predictions(last_logits, loaded, specials), bos=use_bos, truncated=truncated,
        n_tokens_text=n_text, context_length=loaded.context_length, model_label=loaded.source.label,
        device=loaded.device, dtype=loaded.dtype,
        timings={"tokenize_s": tokenized - started, "forward_s": forwarded - tokenized,
                 "total_s": time.perf_counter() - started},
        warnings=tuple(warnings), probe=probe, request_id=request_id, thumbnails=_frozen(capture.thumbnails),
        causal=loaded.causal, family=loaded.family.name, prediction_note=note, max_tokens=cap,
        sliding_windows=loaded.sliding_windows if any(loaded.sliding_windows) else (),
    )
