"""analysis.run.tokenize.tokenize: a long text is tokenised only as far as the token cap needs, and the tokens it
gives are the first tokens of the whole text's tokenization, whatever the text (many words, one long word, runs of
whitespace, multi-byte characters, an added token far longer than the first prefix tokenised, characters a
normaliser deletes)."""
from __future__ import annotations

import copy
import dataclasses
import os
import tempfile
from pathlib import Path

import pytest

# hypothesis caches Unicode tables on disk: keep them out of the checkout (as tests/cli/test_fuzz.py does)
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "attnscope-hypothesis"))

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from analysis.run.inference import run_text  # noqa: E402
from analysis.run.tokenize import tokenize  # noqa: E402
from analysis.model.loading import load_model  # noqa: E402

LONG = "W" * 3000  # one added token, far longer than the first prefix tokenised (8 characters per token of cap)
TEXT = f"The {LONG} end"


# ----------------------------------------------------------------------------- the session's tiny model
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


# ----------------------------------------------------------------------------- added tokens
@pytest.fixture(scope="module")
def added(tmp_path_factory, tokenizer):
    """The tiny GPT-2 whose tokenizer was given two added tokens: 3,000 W's and "hello world" (it holds a space)."""
    from analysis.model.synthetic import save_random_gpt2

    tok = copy.deepcopy(tokenizer)  # the session's tokenizer stays as it is
    tok.add_tokens([LONG, "hello world"])
    folder = save_random_gpt2(tmp_path_factory.mktemp("added"), n_layer=1, n_head=2, d_model=16, n_positions=64,
                              tokenizer=tok)
    return load_model(str(folder), device="cpu")


def whole(loaded, text: str) -> list[int]:
    """The whole text's tokens, as the model's own tokenizer makes them."""
    return loaded.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]


def test_tokenize_keeps_a_long_added_token_whole_and_gives_no_truncation_warning(added):
    result = run_text(added, TEXT, bos=False)
    assert list(result.token_ids) == whole(added, TEXT) and len(result.token_ids) < 64
    assert result.raw_tokens.count(LONG) == 1 and not result.truncated and result.warnings == ()


@pytest.mark.parametrize("cap", [3, 10, 64])
@pytest.mark.parametrize("bos", [False, True])
def test_tokenize_cut_after_a_long_added_token_gives_the_whole_text_first_tokens(added, cap, bos):
    text = TEXT + " the cat sat on the mat" * 60
    ids, n_text, truncated = tokenize(added, text, bos=bos, max_tokens=cap)
    limit = cap - bos
    assert ids == added.special_ids(whole(added, text)[:limit], special=bos)
    assert truncated and n_text > limit


def test_tokenize_with_a_python_tokenizer_keeps_a_long_added_token_whole(added):
    """A tokenizer without offsets (transformers' Python backend, here ByT5's: one token per byte) is searched
    for the added tokens' text instead."""
    from transformers import ByT5Tokenizer

    long, tok = "W" * 300, ByT5Tokenizer()  # its Python matcher takes 0.3 s over 3,000 W's
    tok.add_tokens([long])
    assert not tok.is_fast
    loaded, text = dataclasses.replace(added, tokenizer=tok), f"The {long} end"
    ids, n_text, truncated = tokenize(loaded, text, bos=False, max_tokens=16)  # the first prefix: 128 characters
    assert ids == whole(loaded, text) and n_text == len("The  end") + 1 and not truncated


PIECES = ("the", "cat", "hello", "world", "hello world", LONG, "W", "WW", "x" * 150, "<|endoftext|>", "é", "\u2028")
texts = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(("", " ", "  ", "\n", " \n"))),
                 min_size=1, max_size=40).map(lambda parts: "".join(p + s for p, s in parts)).filter(str.strip)


@pytest.mark.slow
@settings(max_examples=80, deadline=None, derandomize=True, database=None, print_blob=True)
@given(text=texts, cap=st.integers(2, 64), bos=st.booleans())
def test_tokenize_gives_the_whole_text_first_tokens_and_says_truncated_only_when_it_is(added, text, cap, bos):
    """Words, spaces, newlines, long words and both added tokens in any order, under any cap."""
    ids, n_text, truncated = tokenize(added, text, bos=bos, max_tokens=cap)
    tokens, limit = whole(added, text), cap - bos
    assert ids == added.special_ids(tokens[:limit], special=bos)
    assert truncated == (len(tokens) > limit) and (n_text == len(tokens) if not truncated else n_text > limit)


# ----------------------------------------------------------------------------- WordPiece: what is a word
@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny BERT (WordPiece, BERT's normaliser) whose tokenizer was given the added word "New York City"."""
    from analysis.model.synthetic import save_random_family, tiny_wordpiece_tokenizer

    tok = tiny_wordpiece_tokenizer()
    tok.add_tokens(["New York City"])  # normalised, as a user's added word is by default
    return load_model(str(save_random_family(tmp_path_factory.mktemp("bert"), "bert", tokenizer=tok)), device="cpu")


@pytest.mark.parametrize("char", ["\x0c", "\x0b", "\x1c", "\x85"], ids=["ff", "vt", "fs", "nel"])  # Cc: str.isspace() says a space, BERT deletes it
@pytest.mark.parametrize("head, tail", [("", ""), ("x " * 4, ""), ("x " * 4, " tail" * 50)],
                         ids=["alone", "after-words", "before-words"])
def test_tokenize_a_control_character_bert_deletes_is_no_word_boundary(bert, char, head, tail):
    """'abc\\x0c' × 300 is one word of 900 letters once BERT's normaliser deletes the \\x0c: one [UNK]. Cut at a
    \\x0c, or confirmed by two prefixes of under 100 letters, it was pieces of its first letters, "truncated"."""
    text = head + f"abc{char}" * (300 if not tail else 40) + tail
    ids, n_text, truncated = tokenize(bert, text, bos=False, max_tokens=8)
    tokens = whole(bert, text)
    assert ids == tokens[:8] and bert.tokenizer.unk_token_id in ids
    assert truncated == (len(tokens) > 8) and (n_text == len(tokens) if not truncated else 8 < n_text <= len(tokens))


@pytest.mark.parametrize("deleted", ["\u0301" * 30, "\u0301" * 300, "\x0c" * 200], ids=["accents", "300", "ff"])
@pytest.mark.parametrize("cap", [1, 8])
def test_tokenize_keeps_a_normalised_added_token_whole_across_characters_the_normaliser_deletes(bert, deleted, cap):
    """A normalised added token is matched in the normalised text: "New York Ci" + 30 combining accents + "ty" is
    "new york city" to BERT's normaliser (it strips accents), 43 characters for a 13-character token; a look-ahead of
    13 characters split it (['ne'], "truncated")."""
    text = " " * 40 + "New York Ci" + deleted + "ty and more words here " * 5
    ids, n_text, truncated = tokenize(bert, text, bos=False, max_tokens=cap)
    tokens = whole(bert, text)
    assert bert.tokenizer.convert_ids_to_tokens(ids)[0] == "new york city"
    assert ids == tokens[:cap] and truncated and cap < n_text <= len(tokens)


BERT_PIECES = ("abc", "x" * 60, "New York City", "New York", "City", "\u0301", "\x0c", "\x0b", "\x85", "\u2028", "é",
               "日", ".", "[UNK]")


@pytest.mark.slow
@settings(max_examples=80, deadline=None, derandomize=True, database=None, print_blob=True)
@given(text=st.lists(st.tuples(st.sampled_from(BERT_PIECES), st.sampled_from(("", "", " ", "\n", "\t"))), min_size=1,
                     max_size=60).map(lambda parts: "".join(p + s for p, s in parts)),
       cap=st.integers(1, 40))
def test_tokenize_under_wordpiece_gives_the_whole_text_first_tokens(bert, text, cap):
    """Words joined by the control characters BERT deletes, words past 100 characters, accents it strips, the added
    word with accents inside it, under any cap."""
    tokens = whole(bert, text)
    if not tokens:
        return  # refused: no tokens
    ids, n_text, truncated = tokenize(bert, text, bos=False, max_tokens=cap)
    assert ids == tokens[:cap]
    assert truncated == (len(tokens) > cap) and (n_text == len(tokens) if not truncated else cap < n_text <= len(tokens))


def test_the_truncation_warning_of_a_cap_of_1_says_1_token(added):
    result = run_text(added, "the cat sat on the mat", bos=False, max_tokens=1)
    assert result.warnings == ("The text has more than 1 token; AttnScope analyses at most 1 token (the token cap; "
                               "the model's context holds 64), so only its first token was analysed.",)
