"""Turning GPT-2's byte-level BPE tokens into strings a person can read.

GPT-2 maps every byte to a printable character before merging (``Ġ`` is a space, ``Ċ`` a
newline). For display we undo that mapping and then make invisible characters visible, so that
``"Ġcat"`` is shown as ``"␣cat"`` and ``"Ċ"`` as ``"↵"``. The same strings go into labels and
into exported data (a NUL token is ``"␀"``, never ``""``, which numpy's string arrays would drop).

Invisible characters, and what is shown instead:
    space ␣, newline ↵, tab ⇥, carriage return ␍  (as before)
    other C0 controls U+0000–U+001F → their control pictures ␀ … ␟ (U+2400 + code), DEL → ␡
    no-break space → ⍽
    every other control, format, separator or unassigned character (C1 controls, zero-width
    space/joiners, bidi controls, U+2028/U+2029, …) → ⟨U+XXXX⟩
"""
from __future__ import annotations

import unicodedata
from functools import lru_cache

VISIBLE_SPACE = "\u2423"  # ␣
VISIBLE = {" ": VISIBLE_SPACE, "\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"}
VISIBLE.update({chr(c): chr(0x2400 + c) for c in range(0x20) if chr(c) not in VISIBLE})  # ␀ … ␟
VISIBLE.update({"\x7f": "\u2421", "\u00a0": "\u237d"})  # DEL ␡, no-break space ⍽


def visible_char(ch: str) -> str:
    """One character as it is shown: itself when it is visible, otherwise a visible stand-in."""
    shown = VISIBLE.get(ch)
    if shown is not None:
        return shown
    if ch.isprintable() and unicodedata.category(ch) not in ("Cf", "Co", "Cn"):
        return ch
    return f"\u27e8U+{ord(ch):04X}\u27e9"  # ⟨U+200B⟩


def visible(text: str) -> str:
    """``text`` with every invisible character replaced by its visible stand-in (see the module docstring)."""
    return "".join(visible_char(ch) for ch in text)


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
    """Readable form of one token: invisible characters made visible, special tokens kept as they are.
    Never empty (an empty token is shown as ``⟨empty⟩``)."""
    if raw_token in special_tokens:
        return raw_token or "\u27e8empty\u27e9"
    return visible(token_text(raw_token)) or visible(raw_token) or "\u27e8empty\u27e9"
