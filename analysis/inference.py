"""Text in, frozen attention result out.

``run_text`` tokenises, runs the model once with hooks that copy what AttnScope needs as the
forward pass goes (each layer's attention weights, the residual stream entering the layer,
and the attention sub-layer's output), and returns an :class:`AttentionResult` whose arrays
are read-only numpy in the order ``(layer, head, query, key)``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError
from .loading import LoadedModel
from .tokens import display_token

TOP_K = 5
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
    tokens: tuple[str, ...]  # display strings (␣ for a leading space, ↵ for a newline)
    raw_tokens: tuple[str, ...]  # the tokenizer's own strings (Ġcat)
    token_ids: np.ndarray  # (n,) int64
    attentions: np.ndarray  # (layer, head, n, n) float32
    layer_inputs: np.ndarray  # (layer, n, d_model) float32: residual stream entering each block (before ln_1)
    attention_outputs: np.ndarray  # (layer, n, d_model) float32: the model's attention sub-layer output (after c_proj)
    predictions: tuple[Prediction, ...]  # top-5 next tokens after the last position
    bos: bool  # whether <|endoftext|> was prepended
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
    keeps only one layer's attention tensor alive at a time.
    """

    def __init__(self, model, n_tokens: int, thumbnail_px: int | None = None):
        thumbnail_px = THUMBNAIL_PX if thumbnail_px is None else thumbnail_px
        cfg = model.config
        L, H, d = cfg.n_layer, cfg.n_head, cfg.n_embd
        self.attentions = np.empty((L, H, n_tokens, n_tokens), dtype=np.float32)
        # thumbnails are pooled from the torch tensor in the hook: one fast pass while it is hot
        self.thumbnail_px = thumbnail_px if n_tokens > thumbnail_px else 0
        self.thumbnails = (np.empty((L, H, thumbnail_px, thumbnail_px), dtype=np.float32) if self.thumbnail_px
                           else self.attentions)
        self.layer_inputs = np.empty((L, n_tokens, d), dtype=np.float32)
        self.attention_outputs = np.empty((L, n_tokens, d), dtype=np.float32)
        self.seen = np.zeros(L, dtype=bool)
        self.handles = []
        for layer, block in enumerate(model.transformer.h):
            self.handles.append(block.register_forward_pre_hook(self._block_input(layer), with_kwargs=True))
            self.handles.append(block.attn.register_forward_hook(self._attention(layer)))

    def _block_input(self, layer: int):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            self.layer_inputs[layer] = hidden[0].detach().float().cpu().numpy()

        return hook

    def _attention(self, layer: int):
        def hook(module, args, output):
            attn_output, weights = output[0], output[1]
            if weights is None:
                raise RuntimeError("the model returned no attention weights (is attn_implementation 'eager'?)")
            self.attentions[layer] = weights[0].detach().float().cpu().numpy()
            if self.thumbnail_px:
                import torch.nn.functional as F

                pooled = F.adaptive_max_pool2d(weights[0].detach().float(), self.thumbnail_px)  # (h, c, c)
                self.thumbnails[layer] = pooled.cpu().numpy()
            self.attention_outputs[layer] = attn_output[0].detach().float().cpu().numpy()
            self.seen[layer] = True

        return hook

    def close(self):
        for handle in self.handles:
            handle.remove()


def forward_with_capture(loaded: LoadedModel, token_ids: list[int], want_logits: bool = True):
    """Run the model on one sequence; return the capture (attentions, thumbnails, layer_inputs,
    attention_outputs as numpy) and the logits after the last position."""
    import torch

    ids = torch.tensor([token_ids], dtype=torch.long, device=loaded.device)
    capture = _Capture(loaded.model, len(token_ids))
    try:
        with torch.inference_mode():
            if want_logits:
                out = loaded.model(input_ids=ids, logits_to_keep=1, use_cache=False)
                last_logits = out.logits[0, -1].float().cpu().numpy()
            else:
                loaded.model.transformer(input_ids=ids, use_cache=False)
                last_logits = None
    finally:
        capture.close()
    if not capture.seen.all():
        raise RuntimeError(f"attention weights were captured for {int(capture.seen.sum())} of {len(capture.seen)} layers")
    return capture, last_logits


def _top_predictions(logits: np.ndarray, loaded: LoadedModel, specials: frozenset[str]) -> tuple[Prediction, ...]:
    logits = logits.astype(np.float64)
    logits = logits[: len(loaded.tokenizer)]  # padded vocab rows are not tokens
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    top = np.argsort(-probs)[:TOP_K]
    raw = loaded.tokenizer.convert_ids_to_tokens([int(i) for i in top])
    return tuple(Prediction(display_token(r, specials), int(i), float(probs[i])) for r, i in zip(raw, top))


def probe_token_ids(loaded: LoadedModel, span: int = PROBE_SPAN, seed: int = PROBE_SEED) -> list[int]:
    """BOS, then ``span`` distinct random ordinary tokens, then the same tokens again (seeded)."""
    bos_id = loaded.tokenizer.convert_tokens_to_ids(loaded.bos_token)
    span = min(span, (loaded.context_length - 1) // 2)
    specials = set(loaded.tokenizer.all_special_ids)
    pool = np.array([i for i in range(len(loaded.tokenizer)) if i not in specials])
    rng = np.random.default_rng(seed)
    random_tokens = rng.choice(pool, size=span, replace=False).tolist()
    return [bos_id] + random_tokens + random_tokens


def run_probe(loaded: LoadedModel) -> ProbeResult:
    """Attention on the seeded induction probe (computed once per loaded model, then cached)."""
    if loaded._probe is None:
        ids = probe_token_ids(loaded)
        capture, _ = forward_with_capture(loaded, ids, want_logits=False)
        loaded._probe = ProbeResult(_frozen(np.array(ids, dtype=np.int64)), _frozen(capture.attentions),
                                    span=(len(ids) - 1) // 2, seed=PROBE_SEED)
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


def _whitespace_cut(text: str, end: int) -> int:
    """The last position ≤ ``end`` where a non-space character is followed by a space: a pre-token
    boundary for byte-level BPE, so tokenising ``text[:cut]`` gives exactly the first tokens of the
    whole text. ``end`` itself when there is none in the second half of the window."""
    for i in range(end - 1, end // 2, -1):
        if text[i].isspace() and not text[i - 1].isspace():
            return i
    return end


def tokenize(loaded: LoadedModel, text: str, bos: bool) -> tuple[list[int], int, bool]:
    """Token ids to run (BOS first if asked), the text's token count, and whether it was truncated.

    Only what the context can hold is tokenised: a prefix of the text sized from the context (and
    doubled until it holds more tokens than the context, or is the whole text). When the text is cut,
    the count is the prefix's, a lower bound: the text has *more than* that many tokens. Memory and
    time thus depend on the context, not on the length of the text.
    """
    check_text(text)
    limit = loaded.context_length - (1 if bos else 0)  # text tokens that fit beside BOS
    window = max(64, loaded.context_length * CHARS_PER_TOKEN_FIRST)
    while True:
        whole = window >= len(text)
        cut = len(text) if whole else _whitespace_cut(text, window)
        ids = loaded.tokenizer(text[:cut], add_special_tokens=False, verbose=False)["input_ids"]
        if whole or len(ids) > limit:
            break
        window *= 2
    n_text = len(ids)
    truncated = n_text > limit
    if bos:
        ids = [loaded.tokenizer.convert_tokens_to_ids(loaded.bos_token)] + ids
    return ids[: loaded.context_length], n_text, truncated


def run_text(loaded: LoadedModel, text: str, bos: bool | None = None, with_probe: bool = True,
             request_id: int = 0) -> AttentionResult:
    """Run ``text`` through the model and return the frozen result.

    ``bos=None`` uses the model's default (the bundled model asks for BOS; GPT-2 does not).
    Text longer than the context is cut to the context; ``result.truncated`` says so and
    ``result.warnings`` carries the sentence to show the user. A leading byte-order mark is
    removed (with a warning); ``result.text`` is the text analysed, without it.
    """
    started = time.perf_counter()
    use_bos = loaded.prepend_bos_default if bos is None else bool(bos)
    warnings = []
    if text and text.startswith(BOM):  # a byte-order mark is not text: it would be analysed as 3 tokens
        text = text[1:]
        warnings.append("The text started with a UTF-8 byte-order mark (BOM); it was removed.")
    ids, n_text, truncated = tokenize(loaded, text, use_bos)
    tokenized = time.perf_counter()
    capture, last_logits = forward_with_capture(loaded, ids)
    forwarded = time.perf_counter()
    specials = frozenset(loaded.tokenizer.all_special_tokens)
    raw = tuple(loaded.tokenizer.convert_ids_to_tokens(ids))
    if truncated:
        n_analysed = len(ids) - (1 if use_bos else 0)
        warnings.append(
            f"The text has more than {n_analysed} tokens; the model's context holds {loaded.context_length}"
            f"{' with BOS' if use_bos else ''}, so only the first {n_analysed} tokens of the text were analysed."
        )
    probe = run_probe(loaded) if with_probe else None
    return AttentionResult(
        text=text, tokens=tuple(display_token(r, specials) for r in raw), raw_tokens=raw,
        token_ids=_frozen(np.array(ids, dtype=np.int64)), attentions=_frozen(capture.attentions),
        layer_inputs=_frozen(capture.layer_inputs), attention_outputs=_frozen(capture.attention_outputs),
        predictions=_top_predictions(last_logits, loaded, specials), bos=use_bos, truncated=truncated,
        n_tokens_text=n_text, context_length=loaded.context_length, model_label=loaded.source.label,
        device=loaded.device, dtype=loaded.dtype,
        timings={"tokenize_s": tokenized - started, "forward_s": forwarded - tokenized,
                 "total_s": time.perf_counter() - started},
        warnings=tuple(warnings), probe=probe, request_id=request_id, thumbnails=_frozen(capture.thumbnails),
    )
