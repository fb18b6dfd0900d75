"""Turning GPT-2's byte-level BPE tokens into strings a person can read.

GPT-2 maps every byte to a printable character before merging (``Ġ`` is a space, ``Ċ`` a
newline). For display we undo that mapping and then make whitespace visible, so that
``"Ġcat"`` is shown as ``"␣cat"`` and ``"Ċ"`` as ``"↵"``.
"""
from __future__ import annotations

from functools import lru_cache

VISIBLE_SPACE = "\u2423"  # ␣
VISIBLE = {" ": VISIBLE_SPACE, "\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"}


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode`` table (character → byte)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\u00a1"), ord("\u00ac") + 1))
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_text(raw_token: str) -> str:
    """The text a byte-level token stands for; bytes that are not whole UTF-8 are shown as ``\\xNN``."""
    decoder = byte_decoder()
    if not all(ch in decoder for ch in raw_token):
        return raw_token  # special token such as <|endoftext|>
    return bytes(decoder[ch] for ch in raw_token).decode("utf-8", errors="backslashreplace")


def display_token(raw_token: str, special_tokens: frozenset[str] = frozenset()) -> str:
    """Readable form of one token: whitespace made visible, special tokens kept as they are."""
    if raw_token in special_tokens:
        return raw_token
    text = token_text(raw_token)
    return "".join(VISIBLE.get(ch, ch) for ch in text) or raw_token
