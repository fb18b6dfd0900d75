"""Head scores over many texts: a score on one sentence is an anecdote.

``scan_texts`` runs texts through the model in batches (right padding and an attention mask, so each
text sees exactly what it would see alone), scores every head of every text with the pure functions
of ``analysis.measures.head_scores``, and returns per-head mean and standard deviation over the texts, the
per-text scores, and how fast it went.

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

import errno
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from . import head_scores as hs
from ..errors import AnalysisCancelled, InputError  # AnalysisCancelled: also importable from here
from ..textfiles import read_text_file

DEFAULT_BATCH = 16
#: Eager attention's (B, H, T, T) tensors alive at once inside one layer's forward (the scores, the masked
#: scores, the softmax), counted at 4 bytes a value: an upper bound for float16 and for a GPU's.
FORWARD_COPIES = 3
#: A text's scores are computed on at most this much of its attention at a time (at least one layer):
#: the scorers' gathers copy what they are given (``head_scores._pattern_mean``).
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


# ----------------------------------------------------------------------------- reading texts
#: The bundled sample set: a few hundred varied sentences, one a line (``--texts sample``).
SAMPLE_TEXTS = Path(__file__).resolve().parents[2] / "resources" / "texts" / "scan_sample.txt"
#: At most this much text is read from a file or a folder, in all: far more than a scan on a CPU gets through.
TEXTS_LIMIT = 64 * 2**20


def _too_big(what: str, limit: int, hint: str) -> InputError:
    from ..display import format_bytes  # the one format for sizes

    return InputError(f"{what} more than {format_bytes(limit)} of text{hint}")


class Texts(list):
    """The texts read (a list of str), ``warnings``: a sentence for each kind of entry a folder held that was
    skipped, and ``sources``: where each text came from (a folder's file name, ``line N`` of a file, ``sample
    line N`` of the bundled sample). ``scan_texts`` carries both into its result."""

    def __init__(self, texts: Iterable[str] = (), warnings: Iterable[str] = (), sources: Iterable[str] = ()):
        super().__init__(texts)
        self.warnings: tuple[str, ...] = tuple(warnings)
        self.sources: tuple[str, ...] = tuple(sources)


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """The non-blank lines of ``text`` with their line numbers (from 1), one text each: split at a newline
    (``\\n`` or ``\\r\\n``) only, not at the other breaks ``str.splitlines`` knows (\\x0b, \\x0c, \\x1c–\\x1e,
    NEL, U+2028, U+2029, a lone \\r)."""
    return [(n, line.removesuffix("\r")) for n, line in enumerate(text.split("\n"), 1) if line.strip()]


def text_lines(text: str) -> list[str]:
    """The non-blank lines of ``text``, one text each (:func:`numbered_lines`)."""
    return [line for _, line in numbered_lines(text)]


#: How many names a skipped-entries warning lists before "and N more".
SKIPPED_NAMES = 3


def _not_a_file(entry: Path) -> tuple[str, str] | None:
    """None for a regular file (links followed); else what ``entry`` is, singular and plural."""
    try:
        mode = entry.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop", "symbolic link loops"
        if exc.errno == errno.ENOENT and entry.is_symlink():
            return "broken symbolic link", "broken symbolic links"
        return "entry that cannot be examined", "entries that cannot be examined"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "folder", "folders"
    if stat.S_ISFIFO(mode):
        return "named pipe", "named pipes"
    if stat.S_ISSOCK(mode):
        return "socket", "sockets"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device", "devices"
    return "special file", "special files"


def _shown_name(entry: Path) -> str:
    return entry.name if entry.name.isprintable() else ascii(entry.name)


def _skipped_kinds(skipped: dict[tuple[str, str], list[Path]]) -> list[tuple[str, str]]:
    """('5 named pipes', 'a.txt, b.txt, c.txt and 2 more') for each kind, in the order first met."""
    kinds = []
    for (one, many), entries in skipped.items():
        names = ", ".join(_shown_name(e) for e in entries[:SKIPPED_NAMES])
        more = f" and {len(entries) - SKIPPED_NAMES} more" if len(entries) > SKIPPED_NAMES else ""
        kinds.append((f"{len(entries)} {one if len(entries) == 1 else many}", names + more))
    return kinds


def _not_there(p: Path) -> InputError:
    """The sentence for a path that leads to nothing: a link in a loop, a link to nothing, or nothing at all."""
    kind = _not_a_file(p)
    if kind is not None and kind[0] == "symbolic link loop":
        return InputError(f"Cannot read texts: {p} is a symbolic link loop (following it never reaches a file).")
    if kind is not None and kind[0] == "broken symbolic link":
        try:
            target = f" to {os.readlink(p)}"
        except OSError:
            target = ""
        return InputError(f"Cannot read texts: {p} is a broken symbolic link{target}, which does not exist.")
    return InputError(f"Texts not found: {p} does not exist.")


def _case_of_txt(name: str) -> bool:
    """A name that ends in .txt in another case (B.TXT, c.Txt): not scanned, and said so."""
    return name.lower().endswith(".txt") and not name.endswith(".txt")


def read_texts(path: str | Path, limit: int = TEXTS_LIMIT) -> Texts:
    """A text file (one text per non-blank line, :func:`numbered_lines`) or a folder (each regular ``*.txt`` in
    it, by name, is one text; the other entries so named, the names ending in another case of .txt and the
    blank files are skipped, and ``warnings`` names them by kind). ``sources`` says where each text is: its
    file's name, or ``line N`` (``sample line N`` in the bundled sample).

    At most ``limit`` bytes in all (a folder's files together); a missing path, a pipe, a device, a
    binary or non-UTF-8 file, or nothing to scan is an InputError with one sentence. Files are read by
    :func:`analysis.textfiles.read_text_file`, as ``--text-file`` is; a leading byte-order mark is removed."""
    p = Path(path).expanduser()
    warnings: list[str] = []
    if p.is_dir():
        try:
            names = sorted(p.iterdir())
        except OSError as exc:
            raise InputError(f"Cannot read {p}: {exc.strerror or exc}.") from None
        files, skipped = [], {}
        for entry in (e for e in names if e.name.endswith(".txt")):
            kind = _not_a_file(entry)
            if kind is None:
                files.append(entry)
            else:
                skipped.setdefault(kind, []).append(entry)
        other_case = [e for e in names if _case_of_txt(e.name)]
        kinds = _skipped_kinds(skipped)
        cased = _skipped_kinds({("name in another case of .txt", "names in another case of .txt"): other_case}
                               if other_case else {})
        if not files:
            found = "; ".join(f"{what}: {names}" for what, names in kinds + cased)
            raise InputError(f"{p} has no regular .txt files to scan ({found})." if found
                             else f"{p} has no .txt files to scan.")
        warnings = [f"Skipped {what} in {p}: {names} (only regular .txt files are scanned)." for what, names in kinds]
        warnings += [f"Skipped {what} in {p}: {names} (only names ending in .txt, in lower case, are scanned)."
                     for what, names in cased]
        texts, sources, blank, left = [], [], [], limit
        for f in files:
            text, cut = read_text_file(f, left)
            if cut:
                raise _too_big(f"The .txt files in {p} hold", limit,
                               " in all (the limit is for the whole folder); scan a part of them (move some "
                               "files to another folder).")
            left -= len(text.encode("utf-8"))
            text = text.removeprefix("\ufeff")
            if text.strip():
                texts.append(text)
                sources.append(_shown_name(f))
            else:
                blank.append(f)
        for what, names in _skipped_kinds({("blank file", "blank files"): blank} if blank else {}):
            if not texts:
                raise InputError(f"{p} holds no text to scan: its .txt files are blank ({names}).")
            warnings.append(f"Skipped {what} in {p}: {names} (they hold no text).")
    elif p.exists():
        text, cut = read_text_file(p, limit)
        if cut:
            raise _too_big(f"{p} holds", limit, "; scan a part of it (split the file, or pass fewer lines).")
        lines = numbered_lines(text.removeprefix("\ufeff"))
        where = "sample line" if p.resolve() == SAMPLE_TEXTS else "line"
        texts, sources = [line for _, line in lines], [f"{where} {n}" for n, _ in lines]
    else:
        raise _not_there(p)
    if not texts:
        raise InputError(f"{p} holds no text to scan (every line is blank).")
    return Texts(texts, warnings, sources)


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
        specials = ", special tokens included" if self.bos else ""
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
        return {"generator": "attnscope", "kind": "scan", "model": self.model_label, "texts": self.n_texts,
                "tokens": self.tokens, "seconds": self.seconds, "tokens_per_second": self.tokens_per_second,
                "batch_size": self.batch_size, "bos": self.bos, "truncated_texts": int(sum(self.truncated)),
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


def _analysed_part(loaded, text: str, ids: list[int], bos: bool) -> str:
    """The start of ``text`` that a run of ``ids`` (its first tokens, in their special tokens) analysed: up to
    the end of its last token. Only a prefix is tokenised, doubled until it holds those tokens and more."""
    from ..run.tokenize import CHARS_PER_TOKEN_FIRST

    n_kept = len(ids) - len(loaded.special_ids([], special=bos))
    window = max(64, n_kept * CHARS_PER_TOKEN_FIRST)
    while True:
        end = _prefix_end(loaded.tokenizer, text, window, n_kept,
                          lambda first: loaded.special_ids(first, special=bos) == ids)
        if end is not None or window >= len(text):
            return text if end is None else text[:end]
        window *= 2


def scan_texts(loaded, texts: Iterable[str], batch_size: int = DEFAULT_BATCH, max_texts: int | None = None,
               progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
               bos: bool | None = None, max_tokens: int | None = None) -> ScanResult:
    """Score every head on every text; per-head mean and std over the texts.

    ``bos=None`` uses the model's default; ``max_tokens`` caps the tokens of a text as a run's cap does
    (default ``run.tokenize.DEFAULT_MAX_TOKENS``). ``progress(done, total)`` after each batch; setting
    ``cancel`` stops between texts while tokenising and between batches, with AnalysisCancelled. An empty
    text is an InputError, and so is a text whose attention alone exceeds the memory budget (export's
    rule and sentence, naming the text). ``texts`` read by :func:`read_texts` lend their warnings and sources to
    the result.
    """
    from ..run.inference import run_probe
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
    use_bos = loaded.prepend_bos_default if bos is None else bool(bos)
    token_ids, truncated, parts, chars = [], [], [], []
    for k, text in enumerate(texts):
        _cancelled(cancel)
        if text is None or not text.strip():
            raise InputError(f"Text {k + 1} is empty; every text needs at least one token.")
        try:
            ids, _, cut = tokenize(loaded, text, use_bos, max_tokens)
        except InputError as exc:  # e.g. a text with no tokens: say which text
            raise InputError(f"Text {k + 1}: {exc}") from None
        token_ids.append(ids)
        truncated.append(cut)
        parts.append(_analysed_part(loaded, text, ids, use_bos) if cut else text)
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
    return ScanResult(tuple(hs.SCORE_NAMES), hs.applicable_scores(causal), _frozen(per_text), _frozen(mean),
                      _frozen(std), _frozen(defined),
                      tuple(lengths), tuple(truncated), use_bos, batch_size, time.perf_counter() - started,
                      loaded.source.label, tuple(parts), tuple(chars), tuple(warnings), sources)


# ----------------------------------------------------------------------------- benchmark
def texts_of_length(loaded, lines: Iterable[str], n_tokens: int, count: int) -> list[str]:
    """Up to ``count`` texts of about ``n_tokens`` tokens each, cut from the running concatenation of
    ``lines`` (decoding then re-encoding may shift a boundary by a token or two)."""
    texts, buffer = [], []
    for line in lines:
        buffer += loaded.tokenizer(line + " ", add_special_tokens=False, verbose=False)["input_ids"]
        while len(buffer) >= n_tokens and len(texts) < count:
            texts.append(loaded.tokenizer.decode(buffer[:n_tokens]))
            buffer = buffer[n_tokens:]
    return texts


def scan_speeds(loaded, texts: list[str], batch_sizes: Iterable[int] = (1, DEFAULT_BATCH), repeats: int = 2
                ) -> dict[int, ScanResult]:
    """The fastest of ``repeats`` scans of ``texts`` at each batch size (interleaved, so every size sees
    the same machine load), after one small warm-up scan (the probe, the allocator, the kernels)."""
    sizes = list(dict.fromkeys(int(b) for b in batch_sizes))
    scan_texts(loaded, texts[:2], batch_size=2)
    best: dict[int, ScanResult] = {}
    for _ in range(max(1, repeats)):
        for size in sizes:
            run = scan_texts(loaded, texts, batch_size=size)
            if size not in best or run.seconds < best[size].seconds:
                best[size] = run
    return best


def compare_batched(loaded, texts: list[str], batch_size: int = DEFAULT_BATCH, repeats: int = 2) -> dict:
    """Tokens per second of the same scan one text at a time and in batches (best of ``repeats`` each),
    their ratio, and the largest score difference between the two."""
    best = scan_speeds(loaded, texts, (1, batch_size), repeats)
    one, many = best[1], best[batch_size]
    return {"texts": one.n_texts, "tokens": one.tokens, "batch_size": batch_size,
            "one_at_a_time_tokens_per_second": one.tokens_per_second,
            "batched_tokens_per_second": many.tokens_per_second,
            "ratio": many.tokens_per_second / one.tokens_per_second,
            "max_abs_diff": max_abs_diff(one, many)}


def max_abs_diff(a: ScanResult, b: ScanResult) -> float:
    """The largest |difference| between two scans' per-text scores; where both are undefined (NaN) they
    agree, where only one is the difference is infinite."""
    if (np.isnan(a.per_text) != np.isnan(b.per_text)).any():
        return float("inf")
    diff = np.abs(a.per_text - b.per_text)
    return float(np.nanmax(diff)) if np.isfinite(diff).any() else 0.0
