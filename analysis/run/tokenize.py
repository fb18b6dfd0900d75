"""Text in, token ids out: the checks every text passes, the token cap, and tokenising only as far as the cap needs.

A text is refused when it is empty or not UTF-8 (:func:`check_text`); a leading byte-order mark is removed with a
warning (:func:`without_bom`); at most :func:`token_limit` ids come back, wrapped in the family's special tokens,
or, in the chat format, in the model's chat template (analysis/run/chat.py), and a cut text gets the sentence of
:func:`truncation_warning`.
"""
from __future__ import annotations

import unicodedata
from typing import Callable

import numpy as np

from ..errors import InputError
from ..model.loaded import LoadedModel
from .chat import chat_frame, chat_ids, render_turn

#: The most tokens a run analyses unless the caller says otherwise (``max_tokens``, ``--max-tokens``):
#: the attention of every layer and head is held in memory, L·H·n²·4 bytes.
DEFAULT_MAX_TOKENS = 2048
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


def tokenize(loaded: LoadedModel, text: str, bos: bool, max_tokens: int | None = None,
             chat: bool = False) -> tuple[list[int], int, bool]:
    """Token ids to run (wrapped in the family's special tokens if ``bos``: BOS in front for a decoder,
    [CLS] … [SEP] for an encoder; in the model's chat template if ``chat``, which decides the special tokens
    itself: ``bos`` is not used), the text's token count, and whether it was truncated.

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
    time thus depend on the limit, not on the length of the text. The chat format's rule is :func:`_chat_tokens`.
    """
    check_text(text)
    total = token_limit(loaded, max_tokens)
    if chat:
        return _chat_tokens(loaded, text, total)
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
    ids, n_text = _first_tokens(loaded.tokenizer, text, limit, total)
    truncated = n_text > limit
    return loaded.special_ids(list(ids[:limit]), special=bos), n_text, truncated


def _first_tokens(tokenizer, text: str, limit: int, total: int) -> tuple[list[int], int]:
    """The tokens of a prefix of ``text`` whose first ``limit`` are the whole text's (all of them when the prefix
    is the whole text), and the text's token count (a lower bound when it is more than ``limit``); the first
    prefix is sized from ``total``, the tokens of the whole run. See :func:`tokenize`."""
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
    return list(ids), n_text


def _chat_tokens(loaded: LoadedModel, text: str, total: int) -> tuple[list[int], int, bool]:
    """``text`` as one user turn of the model's chat template (analysis/run/chat.py), in at most ``total`` ids.

    A text that fits gets exactly ``apply_chat_template(..., add_generation_prompt=True, tokenize=True)``. A text
    that does not is cut, and the template kept whole: the ids are the template's opening tokens, the text's first
    ``total`` − (the template's tokens) tokens and the template's closing tokens (the end of the user's turn and
    the assistant's header), each part tokenised alone (:class:`~analysis.run.chat.ChatFrame`), so the model
    still reads a complete turn and the predictions are still the reply's first token. The count is the text's
    own tokens, without the template's (as the text as the template put it: a template may trim it). A template
    that writes something else around this text than around another (it reads the text) is run whole when it
    fits, and refused when it would have to be cut."""
    frame = chat_frame(loaded)
    rendered = render_turn(loaded, text)
    limit = total - frame.n_ids  # text tokens that fit inside the template
    if limit < 1:
        around = f"its chat template's {counted(frame.n_ids, 'token')}"
        if total == loaded.context_length:
            raise InputError(f"This model's context holds only {counted(total, 'position')}, no room for text "
                             f"beside {around}; run the text without --chat (untick Chat format).")
        raise InputError(f"A cap of {counted(total, 'token')} leaves no room for text beside the model's chat "
                         f"template ({counted(frame.n_ids, 'token')}); raise the cap.")
    content = frame.content_of(rendered)
    tokenizer = loaded.tokenizer
    if content is None:  # the template reads the text: the frame is not what surrounds it
        _, n_text = _first_tokens(tokenizer, text, limit, total)
        _, n_all = _first_tokens(tokenizer, rendered, total, total)
        if n_all > total:
            raise InputError(f"The chat template of {loaded.source.label} writes something else around this text "
                             f"than around others, so it cannot be cut to the {counted(total, 'token')} a run holds "
                             "keeping the template whole; shorten the text, or run it without --chat.")
        return chat_ids(loaded, text), n_text, False
    text_ids, n_text = _first_tokens(tokenizer, content, limit, total)
    if n_text <= limit:
        ids = chat_ids(loaded, text)
        if len(ids) <= total:
            return ids, n_text, False
        # tokenised whole, the seams between the template and the text made more tokens than apart: apart, it fits
    return frame.wrap(text_ids[:limit]), n_text, n_text > limit


def without_bom(text: str) -> tuple[str, list[str]]:
    """``text`` without a leading byte-order mark (not text: it would run as tokens), and the warning if one was removed."""
    if text and text.startswith(BOM):
        return text[1:], ["The text started with a UTF-8 byte-order mark (BOM); it was removed."]
    return text, []



def counted(n: int, noun: str) -> str:
    """``1 token``, ``2,048 tokens``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"



def truncation_warning(loaded: LoadedModel, ids: list[int], bos: bool, cap: int, done: str = "analysed",
                       chat: bool = False) -> str:
    """The sentence for a text cut to ``ids`` (special tokens, or the chat template's tokens, included) by ``cap``
    or the model's context."""
    if chat:
        n_around = chat_frame(loaded).n_ids
        with_specials = f" with the chat template's {counted(n_around, 'token')}"
    else:
        n_around = len(loaded.special_ids([], special=bos))
        with_specials = (" with BOS" if loaded.causal else " with [CLS] and [SEP]") if bos else ""
    n_kept = len(ids) - n_around
    if cap < loaded.context_length:
        holds = (f"AttnScope analyses at most {counted(cap, 'token')}{with_specials} (the token cap; the model's "
                 f"context holds {loaded.context_length:,})")
    else:
        holds = f"the model's context holds {loaded.context_length:,}{with_specials}"
    first = "only its first token was" if n_kept == 1 else f"only the first {n_kept:,} tokens of the text were"
    return f"The text has more than {n_kept:,} token{'s' if n_kept != 1 else ''}; {holds}, so {first} {done}."

