"""analysis.inference.tokenize: a long text is tokenised only as far as the token cap needs, and the tokens it
gives are the first tokens of the whole text's tokenization (issue 17, item 8: an added token of 3,000 W's was
cut into 64 pieces of one W and the text called longer than 64 tokens; the tokenizer makes 6 tokens of it)."""
from __future__ import annotations

import copy
import dataclasses
import os
import tempfile
from pathlib import Path

import pytest

# hypothesis caches Unicode tables on disk: keep them out of the checkout (as tests/test_fuzz.py does)
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "attnscope-hypothesis"))

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from analysis.inference import run_text, tokenize  # noqa: E402
from analysis.loading import load_model  # noqa: E402

LONG = "W" * 3000  # one added token, far longer than the first prefix tokenised (8 characters per token of cap)
TEXT = f"The {LONG} end"


@pytest.fixture(scope="module")
def added(tmp_path_factory, tokenizer):
    """The tiny GPT-2 whose tokenizer was given two added tokens: 3,000 W's and "hello world" (it holds a space)."""
    from analysis.synthetic import save_random_gpt2

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
