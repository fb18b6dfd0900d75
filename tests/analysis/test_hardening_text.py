"""Issue 10: texts of any size and content — tokenised only as far as the context reaches, BOM removed,
invalid UTF-8 refused with a sentence, invisible characters shown visibly and never as ''."""
import numpy as np
import pytest

from analysis.errors import InputError
from analysis.run.inference import run_text
from analysis.run.tokenize import tokenize
from analysis.tokens import display_token, visible


def full_ids(model, text):
    return model.tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("text", [
    "word " * 5000,  # many short words
    "x" * 30_000,  # one long word: no whitespace to cut at
    "a b\n\n\t  c  " * 3000,  # runs of whitespace at every possible cut
    "漢字とかな😀 " * 3000,  # multi-byte characters
])
def test_a_prefix_gives_exactly_the_first_tokens_of_the_whole_text(tiny_model, text):
    """Independent check: the whole text tokenised in one go, then cut."""
    expected = full_ids(tiny_model, text)
    for bos in (False, True):
        ids, n_text, truncated = tokenize(tiny_model, text, bos)
        body = ids[1:] if bos else ids
        assert truncated and len(ids) == tiny_model.context_length
        assert body == expected[: len(body)]
        assert len(body) < n_text <= len(expected)  # a lower bound, honestly "more than"


def test_a_text_that_fits_is_counted_exactly(tiny_model):
    text = "The cat sat on the mat."
    ids, n_text, truncated = tokenize(tiny_model, text, False)
    assert ids == full_ids(tiny_model, text) and n_text == len(ids) and not truncated


def test_tokenising_a_huge_text_costs_what_the_context_costs(tiny_model):
    """20 MB of text: only a few kB are tokenised (before: the whole text, 3.5 GB and 25 s)."""
    import time

    text = "The cat sat on the mat because it was tired. " * 450_000  # ≈ 20 MB
    started = time.perf_counter()
    r = run_text(tiny_model, text, with_probe=False)
    assert time.perf_counter() - started < 2
    assert r.truncated and r.n_tokens == tiny_model.context_length
    assert "more than 64 tokens" in r.warnings[-1]


def test_a_leading_byte_order_mark_is_removed_with_a_warning(tiny_model):
    plain = run_text(tiny_model, "Hello there", bos=False, with_probe=False)
    with_bom = run_text(tiny_model, "\ufeffHello there", bos=False, with_probe=False)
    assert with_bom.token_ids.tolist() == plain.token_ids.tolist()
    assert with_bom.text == "Hello there" and "byte-order mark" in with_bom.warnings[0]


def test_invalid_utf8_from_the_command_line_is_a_sentence(tiny_model):
    text = b"caf\xe9 au lait".decode("utf-8", "surrogateescape")  # how Python hands over such argv bytes
    with pytest.raises(InputError, match=r"not valid UTF-8 \(byte 0xe9 at character 3\)"):
        run_text(tiny_model, text)


def test_invisible_characters_are_visible_and_never_empty(tiny_model):
    r = run_text(tiny_model, "a\x00b\x1bc\x7fd\u200be\u00a0f", bos=False, with_probe=False)
    joined = "".join(r.tokens)
    assert "\u2400" in joined and "\u241b" in joined and "\u2421" in joined  # ␀ ␛ ␡
    assert all(r.tokens) and not any(ch in joined for ch in "\x00\x1b\x7f\u200b\u00a0")


def byte_level(text: str) -> str:
    """GPT-2's byte-level form of a text (the inverse of tokens.byte_decoder)."""
    from analysis.tokens import byte_decoder

    encoder = {b: ch for ch, b in byte_decoder().items()}
    return "".join(encoder[b] for b in text.encode("utf-8"))


def test_display_rules():
    assert display_token(byte_level("\u200b")) == "⟨U+200B⟩" and display_token(byte_level("a\u00a0")) == "a⍽"
    assert display_token(byte_level("\x00")) == "␀" == display_token("Ā")  # GPT-2's byte 0 (NUL); was '' once saved in attention.npz
    assert visible(" \n\t\r") == "␣↵⇥␍"
    assert visible("\x01\x1f") == "\u2401\u241f"
    assert visible("\u2028\u202e\x85") == "⟨U+2028⟩⟨U+202E⟩⟨U+0085⟩"
    assert visible("é漢😀<b>") == "é漢😀<b>"  # visible characters stay as they are (escaping is the GUI's)


def test_attention_npz_keeps_nul_tokens(tiny_model, tmp_path):
    from analysis.export.writers import write_attention_npz

    r = run_text(tiny_model, "a\x00\x00b", bos=False, with_probe=False)
    with np.load(write_attention_npz(r, tmp_path / "a.npz")) as data:
        assert list(data["tokens"]) == list(r.tokens) and all(data["tokens"])
