"""Tokens a person can read, for the three ways tokenizers mark word boundaries.

- byte-level BPE (GPT-2, GPT-NeoX, Qwen2, SmolLM2, RoBERTa): every byte is a printable character, ``Ġ`` a
  space; shown as ``␣cat`` (analysis.tokens does the byte mapping).
- SentencePiece (Llama 2, TinyLlama, Mistral): ``▁`` marks a word start, bytes outside the vocabulary are
  ``<0x0A>``-style tokens; shown as ``␣cat`` and ``↵``.
- WordPiece (BERT): a word's first piece is bare and each continuation starts with ``##``; shown as they
  are (``play`` ``##ing``), since the text between words is not recorded in the tokens.

The style comes from the tokenizer (its decoder), not the model family: SmolLM2 is a Llama with a
byte-level tokenizer, TinyLlama one with SentencePiece.
"""
from __future__ import annotations

import json
import re
from typing import Literal

from ..tokens import VISIBLE, display_token as byte_level_display, visible_char

TokenStyle = Literal["byte_level", "sentencepiece", "wordpiece"]

SENTENCEPIECE_SPACE = "\u2581"  # ▁
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def token_style(tokenizer, default: TokenStyle = "byte_level") -> TokenStyle:
    """What the tokenizer's decoder says: ByteLevel, Metaspace / ``▁`` replacement, or WordPiece."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return default
    try:
        spec = json.loads(backend.to_str())
    except (ValueError, TypeError):
        return default
    decoder = json.dumps(spec.get("decoder") or {}, ensure_ascii=False)
    if '"WordPiece"' in decoder:
        return "wordpiece"
    if '"Metaspace"' in decoder or SENTENCEPIECE_SPACE in decoder:
        return "sentencepiece"
    if '"ByteLevel"' in decoder:
        return "byte_level"
    return default


def sentencepiece_display(raw_token: str) -> str:
    """``▁cat`` → ``␣cat``; a byte token ``<0x0A>`` → ``↵``; other ASCII bytes as the character or its visible
    stand-in (``<0x03>`` → ``␃``); a byte of a multi-byte character, which is no character alone, as ``⟨0xF7⟩``."""
    byte = _BYTE_TOKEN.match(raw_token)
    if byte:
        value = int(byte.group(1), 16)
        ch = chr(value)
        if ch in VISIBLE:
            return VISIBLE[ch]
        return visible_char(ch) if value < 0x80 else f"\u27e80x{value:02X}\u27e9"
    text = raw_token.replace(SENTENCEPIECE_SPACE, " ")
    return "".join(VISIBLE.get(ch, ch) for ch in text) or raw_token


def display_token(raw_token: str, style: TokenStyle, special_tokens: frozenset[str] = frozenset()) -> str:
    """Readable form of one token in ``style``; special tokens ([CLS], <s>, <|endoftext|>) kept as they are."""
    if raw_token in special_tokens:
        return raw_token
    if style == "sentencepiece":
        return sentencepiece_display(raw_token)
    if style == "wordpiece":
        return raw_token
    return byte_level_display(raw_token)
