"""Head scores over many texts: a score on one sentence is an anecdote.

``scan_texts`` runs texts through the model in batches (right padding and an attention mask, so each
text sees exactly what it would see alone), scores every head of every text with the pure functions
of ``analysis.measures.head_scores``, and returns per-head mean and standard deviation over the texts, the
per-text scores, and how fast it went. The texts come as a list, or as ``scan_inputs.read_texts`` reads them
from a file or a folder; how fast scans go is ``scan_speed``'s.

Batching: texts are sorted by length and cut into batches of at most ``batch_size`` texts, so short
texts are not padded to the longest one. With right padding no real token sees a pad (a decoder's pads
come after it; an encoder's are masked as keys), and position ids count from 0 as in a single run, so
the scores equal one-at-a-time runs up to float rounding.

Memory: the rule of every run (``run.memory.attention_memory_budget``). A text whose attention alone
takes more than the budget is refused with the sentence ``export`` gives
(``run.memory.check_attention_memory``), before any forward pass; every batch holds at most the budget
at once, counting what :func:`batch_bytes` counts (the attention copied, the model's tensors of one
layer, the scoring's copies). A long text is scored a few layers at a time, so scoring never copies
its whole attention.

Tokenising checks ``cancel`` between texts (100,000 lines take a minute). A cut text keeps only its
analysed part (the text up to its last analysed token) and its length in characters.

``induction_probe`` does not depend on the text: it is computed once on the model's seeded probe and
repeated for every text (its std is 0).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..errors import AnalysisCancelled, InputError
from . import head_scores as hs
from .scan_inputs import Texts

DEFAULT_BATCH = 16
#: Eager attention's (B, H, T, T) tensors alive at once inside one layer's forward (the scores, the masked
#: scores, the softmax), counted at 4 bytes a value: an upper bound for float16 and for a GPU's.
FORWARD_COPIES = 3
#: A text's scores are computed on at most this much of its attention at a time (at least one layer):
#: the scorers' gathers copy what they are given (``head_scores._gather_sum``, a chunk at a time).
SCORE_CHUNK_BYTES = 64 * 2**20
#: What scoring copies of a chunk of attention at most: the repeated-token pairs' gather in float32
#: and float64 (up to 1.5 × the chunk) …
SCORE_COPIES = 2
#: … and, per n², the pair masks and positions (``head_scores.repeat_pairs``: (n, n) bools, int64 indices).
SCORE_BYTES_PER_PAIR = 32
ProgressCallback = Callable[[int, int], None]  # (texts done, texts in all)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


# ----------------------------------------------------------------------------- result
@dataclass(frozen=True)
class ScanResult:
    """Scores over many texts. Arrays are read-only; scores use ``score_names`` order.

    ``mean``/``std`` are over the texts where a score is defined (duplicate_token and induction are
    undefined — NaN — for a text in which no token repeats); std is the population std (ddof 0).
    """

    score_names: tuple[str, ...]
    applicable: frozenset  # the score names that mean something for this model (the rest are n/a: all NaN)
    per_text: np.ndarray  # (text, score, layer, head) float64; NaN where a score is undefined for that text
    mean: np.ndarray  # (score, layer, head)
    std: np.ndarray  # (score, layer, head)
    defined: np.ndarray  # (score,) int: how many texts define each score
    n_tokens: tuple[int, ...]  # per text, tokens run (BOS included)
    truncated: tuple[bool, ...]  # per text, cut to the context
    bos: bool
    batch_size: int
    seconds: float  # wall time of the whole scan (tokenising, forwards, scoring)
    model_label: str = ""
    # per text, in order (what ``text`` numbers in the per-text table refer to): the part analysed — the
    # whole text, or a cut text up to the end of its last analysed token — and the whole text's length
    texts: tuple[str, ...] = ()
    chars: tuple[int, ...] = ()  # characters
    warnings: tuple[str, ...] = ()  # what reading the texts said (entries of a folder that were skipped)
    sources: tuple[str, ...] = ()  # per text, where it came from (``Texts.sources``); "" for texts given as a list
    chat: bool = False  # each text ran as one user turn of the model's chat template (its tokens in ``n_tokens``)
    weights: str = ""  # what the numbers are computed from (LoadedModel.weights: a GGUF's dequantized Q4_1, …)

    @property
    def n_texts(self) -> int:
        return len(self.n_tokens)

    @property
    def tokens(self) -> int:
        return int(sum(self.n_tokens))

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")

    def truncation_warning(self) -> str | None:
        """A sentence for the texts that were cut to the token limit (None when none was): how many, and
        the limit, which is every cut text's length (``n_tokens``, special tokens included)."""
        cut = [n for n, was_cut in zip(self.n_tokens, self.truncated) if was_cut]
        if not cut:
            return None
        limit = max(cut)
        tokens = f"{limit:,} token{'' if limit == 1 else 's'}"
        specials = (", the chat template's tokens included" if self.chat
                    else ", special tokens included" if self.bos else "")
        holds = f"the {tokens} a run holds here (the model's context or the token cap{specials})"
        if self.n_texts == 1:
            return f"The text was longer than {holds} and was cut; its scores describe only its first {tokens}."
        return (f"{len(cut)} of {self.n_texts} texts were longer than {holds} and were cut; their scores describe "
                f"only their first {tokens}.")

    def warning_lines(self) -> list[str]:
        """Every sentence to show with the scan: the entries of a folder that were skipped, the texts cut."""
        return [*self.warnings, *filter(None, [self.truncation_warning()])]

    def mean_scores(self) -> hs.HeadScores:
        """Per-head means over the texts, as the Head scores table takes them."""
        return hs.HeadScores({name: self.mean[k] for k, name in enumerate(self.score_names)}, self.applicable)

    def std_scores(self) -> hs.HeadScores:
        return hs.HeadScores({name: self.std[k] for k, name in enumerate(self.score_names)}, self.applicable)

    def text_scores(self, text: int) -> hs.HeadScores:
        """One text's scores."""
        return hs.HeadScores({name: self.per_text[text, k] for k, name in enumerate(self.score_names)},
                             self.applicable)

    def sink_rate(self, epsilon: float | None = None):
        """``lenses.SinkRate`` of the per-head *mean* first-token score over the texts (ε default 0.3)."""
        from .lenses import SINK_EPSILON, sink_rate_of_scores

        return sink_rate_of_scores(self.mean[self.score_names.index("sink")],
                                   SINK_EPSILON if epsilon is None else epsilon)

    def summary(self, sink_epsilon: float | None = None) -> dict:
        """What ``summary.json`` holds: texts, tokens (BOS included), seconds, tokens per second, and
        ``sink_rate``: the share of heads whose mean first-token score over the texts exceeds ``sink_epsilon``,
        and ``warnings``: the entries of a folder that were skipped, the texts that were cut."""
        sinks = self.sink_rate(sink_epsilon)
        return {"generator": "attnscope", "kind": "scan", "model": self.model_label, "weights": self.weights,
                "texts": self.n_texts,
                "tokens": self.tokens, "seconds": self.seconds, "tokens_per_second": self.tokens_per_second,
                "batch_size": self.batch_size, "bos": self.bos, "chat": self.chat,
                "truncated_texts": int(sum(self.truncated)),
                "sink_rate": sinks.rate, "sink_epsilon": sinks.epsilon,
                "warnings": self.warning_lines(),
                "texts_defining": {name: int(self.defined[k]) for k, name in enumerate(self.score_names)
                                   if name in self.applicable}}


def text_scores(attentions: np.ndarray, token_ids: np.ndarray, probe: np.ndarray | None,
                causal: bool = True, windows: hs.Windows = None) -> np.ndarray:
    """Every score of ``head_scores.score_values`` for one text, stacked in SCORE_NAMES order;
    a score that does not apply (``applicable_scores(causal)``) is all NaN. (score, layer, head)"""
    values = hs.score_values(attentions, token_ids, probe, causal=causal, windows=windows)
    return np.stack([values[name] for name in hs.SCORE_NAMES])


def _mean_std(per_text: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and population std over axis 0, skipping NaN texts; NaN where no text defines a value.
    Where every defined value is the same (the induction probe, the same for every text) the mean is
    that value and the std exactly 0, not a rounding residue (1.3e-17)."""
    ok = ~np.isnan(per_text)
    count = ok.sum(axis=0)  # (score, L, H)
    values = np.where(ok, per_text, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, values.sum(axis=0) / count, np.nan)
        var = np.where(count > 0, (np.where(ok, per_text - mean, 0.0) ** 2).sum(axis=0) / count, np.nan)
    low, high = np.where(ok, per_text, np.inf).min(axis=0), np.where(ok, per_text, -np.inf).max(axis=0)
    same = (count > 0) & (low == high)
    mean[same], var[same] = low[same], 0.0
    return mean, np.sqrt(var), count.reshape(count.shape[0], -1).max(axis=1)


# ----------------------------------------------------------------------------- running
def _score_layers(n_layer: int, n_head: int, n_tokens: int) -> int:
    """How many layers of a text of ``n_tokens`` are scored at once: as many as fit SCORE_CHUNK_BYTES, ≥ 1."""
    from ..run.memory import attention_memory_bytes

    return max(1, min(n_layer, SCORE_CHUNK_BYTES // attention_memory_bytes(1, n_head, n_tokens)))


def batch_bytes(n_layer: int, n_head: int, lengths: list[int]) -> int:
    """Bytes a batch of texts of ``lengths`` tokens holds at once while it is scanned (T = max(lengths), B texts):

        the attention copied, every text      Σ_b L·H·n_b²·4         (export's count for one text)
        the model's tensors of one layer      FORWARD_COPIES·B·H·T²·4  (the batch is padded to T)
        scoring the longest text, c layers    SCORE_COPIES·c·H·T²·4 + SCORE_BYTES_PER_PAIR·T²
    """
    from ..run.memory import attention_memory_bytes

    longest = max(lengths)
    copied = sum(attention_memory_bytes(n_layer, n_head, n) for n in lengths)
    forward = FORWARD_COPIES * attention_memory_bytes(1, n_head, longest) * len(lengths)
    scoring = (SCORE_COPIES * attention_memory_bytes(_score_layers(n_layer, n_head, longest), n_head, longest)
               + SCORE_BYTES_PER_PAIR * longest**2)
    return copied + forward + scoring


def _batches(lengths: list[int], batch_size: int, cost: Callable[[list[int]], int], budget: int) -> list[list[int]]:
    """Text indices, shortest first, in batches of ≤ batch_size whose ``cost`` (of their lengths) fits ``budget``;
    a text whose cost alone is over it runs alone."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current = [], []
    for i in order:
        if current and (len(current) >= batch_size or cost([lengths[j] for j in current] + [lengths[i]]) > budget):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def _forward_batch(loaded, batch_ids: list[list[int]], pad_id: int) -> list[np.ndarray]:
    """Attention (L, H, n, n) of each sequence, run together with right padding and a mask (the one capture)."""
    from ..run.capture import forward

    captured, _ = forward(loaded, batch_ids, parts=("attentions",), pad_id=pad_id)
    return [c.attentions for c in captured]


def _score_text(attentions: np.ndarray, token_ids: np.ndarray, probe: np.ndarray | None, causal: bool,
                windows: hs.Windows) -> np.ndarray:
    """:func:`text_scores` of one text, a chunk of layers at a time (:func:`_score_layers`): the scorers
    copy what they gather, so a long text's whole attention is never copied. (score, layer, head)"""
    L, H, n, _ = attentions.shape  # (layer, head, n, n)
    step = _score_layers(L, H, n)
    if step >= L:
        return text_scores(attentions, token_ids, probe, causal, windows)
    out = np.empty((len(hs.SCORE_NAMES), L, H))
    for start in range(0, L, step):
        part = slice(start, start + step)
        out[:, part] = text_scores(attentions[part], token_ids, None if probe is None else probe[part], causal,
                                   windows[part] if windows else windows)
    return out


def _cancelled(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise AnalysisCancelled("Scan cancelled.")


def _prefix_end(tokenizer, text: str, window: int, n_kept: int, ran: Callable[[list[int]], bool]) -> int | None:
    """Where the ``n_kept``-th token of ``text[:window]`` ends, when its first tokens are the run's (``ran``) and
    more follow (so the last of them is whole); else None. With offsets when the tokenizer has them, else the
    shortest prefix whose first tokens are the run's (a binary search).

    A character whose bytes the run's last token holds only some of (byte-level BPE and byte fallback split a
    character of several bytes into tokens, each token's offsets spanning the whole character) is left out: the
    part ends where the next token starts when that is earlier, so it holds no more than the tokens run."""
    def first(prefix: str, **kwargs):
        return tokenizer(prefix, add_special_tokens=False, verbose=False, **kwargs)

    if getattr(tokenizer, "is_fast", False):
        encoded = first(text[:window], return_offsets_mapping=True)
        ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
        if not (ran(list(ids[:n_kept])) and (len(ids) > n_kept or window >= len(text))):
            return None
        end = int(offsets[n_kept - 1][1])
        return min(end, int(offsets[n_kept][0])) if len(ids) > n_kept else end
    ids = first(text[:window])["input_ids"]
    if not (ran(list(ids[:n_kept])) and (len(ids) > n_kept or window >= len(text))):
        return None
    low, high = 1, min(window, len(text))  # text[:high] starts with the run's tokens
    while low < high:
        middle = (low + high) // 2
        if ran(list(first(text[:middle])["input_ids"][:n_kept])):
            high = middle
        else:
            low = middle + 1
    # the shortest prefix holding the run's tokens holds more when its last character's bytes go on in the next
    return high - 1 if len(first(text[:high])["input_ids"]) > n_kept else high


def _analysed_part(loaded, text: str, ids: list[int], bos: bool, chat: bool = False) -> str:
    """The start of ``text`` that a run of ``ids`` (its first tokens, in their special tokens) analysed: up to
    the end of its last token. Only a prefix is tokenised, doubled until it holds those tokens and more. With
    ``chat`` (``ids``: the text's first tokens inside the chat template, ``tokenize._chat_tokens``), the start of
    the text as the template put it (a template may trim it)."""
    from ..run.chat import chat_frame, render_turn
    from ..run.tokenize import CHARS_PER_TOKEN_FIRST

    if chat:
        frame = chat_frame(loaded)
        text = frame.content_of(render_turn(loaded, text)) or text  # None: never cut (tokenize refuses it)
        n_kept, wrap = len(ids) - frame.n_ids, frame.wrap
    else:
        n_kept = len(ids) - len(loaded.special_ids([], special=bos))

        def wrap(first: list[int]) -> list[int]:
            return loaded.special_ids(first, special=bos)
    window = max(64, n_kept * CHARS_PER_TOKEN_FIRST)
    while True:
        end = _prefix_end(loaded.tokenizer, text, window, n_kept, lambda first: wrap(first) == ids)
        if end is not None or window >= len(text):
            return text if end is None else text[:end]
        window *= 2


def scan_texts(loaded, texts: Iterable[str], batch_size: int = DEFAULT_BATCH, max_texts: int | None = None,
               progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
               bos: bool | None = None, max_tokens: int | None = None, chat: bool = False) -> ScanResult:
    """Score every head on every text; per-head mean and std over the texts.

    ``bos=None`` uses the model's default; ``max_tokens`` caps the tokens of a text as a run's cap does
    (default ``run.tokenize.DEFAULT_MAX_TOKENS``); ``chat`` runs each text as one user turn of the model's chat
    template, as ``run_text(chat=True)`` does (``bos`` is then not used). ``progress(done, total)`` after each
    batch; setting ``cancel`` stops between texts while tokenising and between batches, with AnalysisCancelled. An empty
    text is an InputError, and so is a text whose attention alone exceeds the memory budget (export's
    rule and sentence, naming the text). ``texts`` read by :func:`read_texts` lend their warnings and sources to
    the result.
    """
    from ..run.chat import starts_with_bos
    from ..run.inference import bos_used, run_probe
    from ..run.memory import attention_memory_budget, check_attention_memory
    from ..run.tokenize import tokenize

    started = time.perf_counter()
    if batch_size < 1:
        raise InputError(f"The batch size must be at least 1, got {batch_size}.")
    if max_texts is not None and max_texts < 1:
        raise InputError(f"The number of texts to scan must be at least 1, got {max_texts}.")
    warnings = texts.warnings if isinstance(texts, Texts) else ()
    sources = texts.sources if isinstance(texts, Texts) else ()
    texts = list(texts)[:max_texts] if max_texts is not None else list(texts)
    sources = (tuple(sources) + ("",) * len(texts))[:len(texts)]
    if not texts:
        raise InputError("No texts to scan.")
    budget = attention_memory_budget()  # before the slow part: a mistyped budget is said at once
    use_bos = False if chat else bos_used(loaded, bos)  # the run's rule: the summary's "bos" says what was used
    token_ids, truncated, parts, chars = [], [], [], []
    for k, text in enumerate(texts):
        _cancelled(cancel)
        if text is None or not text.strip():
            raise InputError(f"Text {k + 1} is empty; every text needs at least one token.")
        try:
            ids, _, cut = tokenize(loaded, text, use_bos, max_tokens, chat=chat)
        except InputError as exc:  # e.g. a text with no tokens: say which text
            raise InputError(f"Text {k + 1}: {exc}") from None
        token_ids.append(ids)
        truncated.append(cut)
        parts.append(_analysed_part(loaded, text, ids, use_bos, chat) if cut else text)
        chars.append(len(text))
    L, H = loaded.n_layer, loaded.n_head
    lengths = [len(ids) for ids in token_ids]
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    try:
        check_attention_memory(L, H, lengths[longest], budget)
    except InputError as exc:
        raise InputError(f"Text {longest + 1}: {exc}") from None
    causal = loaded.causal
    probe = None  # encoders: no induction probe
    if causal:
        probe_result = run_probe(loaded)
        probe = hs.induction_probe(probe_result.attentions, probe_result.token_ids,  # (L, H), the same for every text
                                   loaded.sliding_windows)

    per_text = np.empty((len(texts), len(hs.SCORE_NAMES), L, H))
    windows = loaded.sliding_windows  # per layer: hoisted out of the loop
    pad_id = next((i for i in (loaded.tokenizer.pad_token_id, loaded.tokenizer.eos_token_id) if i is not None),
                  token_ids[0][0])  # any real id: pads are masked and cut off
    done = 0
    for batch in _batches(lengths, batch_size, lambda batch_lengths: batch_bytes(L, H, batch_lengths), budget):
        _cancelled(cancel)
        attentions = _forward_batch(loaded, [token_ids[i] for i in batch], pad_id)
        for b, i in enumerate(batch):
            per_text[i] = _score_text(attentions[b], np.asarray(token_ids[i]), probe, causal, windows)
            attentions[b] = None  # scored: let it go before the next text's scoring copies
        del attentions  # before the next batch's forward: one batch held at a time
        done += len(batch)
        if progress:
            progress(done, len(texts))
    mean, std, defined = _mean_std(per_text)
    if chat:  # the template decides the special tokens: "bos" says whether it puts BOS first
        use_bos = starts_with_bos(loaded, token_ids[0])
    return ScanResult(tuple(hs.SCORE_NAMES), hs.applicable_scores(causal), _frozen(per_text), _frozen(mean),
                      _frozen(std), _frozen(defined),
                      tuple(lengths), tuple(truncated), use_bos, batch_size, time.perf_counter() - started,
                      loaded.source.label, tuple(parts), tuple(chars), tuple(warnings), sources, chat,
                      loaded.weights)
