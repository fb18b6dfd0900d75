"""Token display and special tokens per tokenizer style, on tiny tokenizers trained here (no download)."""
from __future__ import annotations

import pytest

pytest.importorskip("tokenizers")

from analysis.families import family_for  # noqa: E402
from analysis.families.tokens import display_token, sentencepiece_display, token_style  # noqa: E402


@pytest.fixture(scope="module")
def sentencepiece_tokenizer():
    """Llama-2-style: BPE over ▁-marked words, bytes outside the vocabulary as <0xNN>, BOS added by the tokenizer."""
    from analysis.model.synthetic import tiny_sentencepiece_tokenizer

    return tiny_sentencepiece_tokenizer(vocab_size=600)


@pytest.fixture(scope="module")
def wordpiece_tokenizer():
    """BERT-style WordPiece: lower-cased, ## continuations, [CLS] … [SEP]."""
    from analysis.model.synthetic import tiny_wordpiece_tokenizer

    return tiny_wordpiece_tokenizer(vocab_size=300)


def test_styles_are_read_from_the_tokenizer(tokenizer, sentencepiece_tokenizer, wordpiece_tokenizer):
    assert token_style(tokenizer) == "byte_level"
    assert token_style(sentencepiece_tokenizer, default="byte_level") == "sentencepiece"
    assert token_style(wordpiece_tokenizer) == "wordpiece"
    assert token_style(object(), default="wordpiece") == "wordpiece"  # a tokenizer that cannot say: the family's


def test_byte_level_tokens_show_spaces_and_newlines(tokenizer):
    family = family_for({"model_type": "gpt_neox"})
    raw = tokenizer.convert_ids_to_tokens(tokenizer(" the class\nis")["input_ids"])
    assert raw[0].startswith("\u0120")  # Ġ
    shown = family.display_tokens(tokenizer, raw)
    assert shown[0].startswith("\u2423") and "\u21b5" in "".join(shown) and "\u0120" not in "".join(shown)


def test_sentencepiece_tokens_show_word_starts_and_byte_fallback(sentencepiece_tokenizer):
    tok = sentencepiece_tokenizer
    family = family_for({"model_type": "llama"})
    ids = tok("the class\nis")["input_ids"]
    raw = tok.convert_ids_to_tokens(ids)
    assert raw[0] == "<s>" and raw[1].startswith("\u2581") and "<0x0A>" in raw
    shown = family.display_tokens(tok, raw)
    assert shown[0] == "<s>"  # special tokens stay as they are
    assert shown[1] == "\u2423" + raw[1][1:]
    assert shown[raw.index("<0x0A>")] == "\u21b5"
    assert "\u2581" not in "".join(shown[1:])
    assert sentencepiece_display("<0x41>") == "A" and sentencepiece_display("<0xE2>") == "\u27e80xE2\u27e9"
    assert sentencepiece_display("<0x03>") == "\u2403"


def test_wordpiece_continuations_keep_their_marks(wordpiece_tokenizer):
    tok = wordpiece_tokenizer
    family = family_for({"model_type": "bert"})
    text = "Tokenization of extraordinarily unusual words"
    ids = family.wrap(tok, tok(text, add_special_tokens=False)["input_ids"], special=True)
    raw = tok.convert_ids_to_tokens(ids)
    shown = family.display_tokens(tok, raw)
    assert shown[0] == "[CLS]" and shown[-1] == "[SEP]"
    continuation = [s for s in shown if s.startswith("##")]
    assert continuation, shown  # a 300-piece vocabulary must split some of these words
    assert shown == tuple(raw)  # WordPiece pieces are readable as they are
    assert not any(s.startswith("\u2423") for s in shown)
    assert display_token("##ing", "wordpiece") == "##ing"


def test_bos_defaults_follow_the_family_and_the_tokenizer(tokenizer, sentencepiece_tokenizer, wordpiece_tokenizer):
    llama, gpt2 = family_for({"model_type": "llama"}), family_for({"model_type": "gpt2"})
    bert, neox = family_for({"model_type": "bert"}), family_for({"model_type": "gpt_neox"})
    assert llama.prepend_bos_default({}, sentencepiece_tokenizer)  # its tokenizer adds <s> itself
    assert not neox.prepend_bos_default({}, tokenizer)
    assert not gpt2.prepend_bos_default({"model_type": "gpt2"}, tokenizer)
    assert gpt2.prepend_bos_default({"model_type": "gpt2", "attnscope_prepend_bos": True}, tokenizer)
    assert bert.prepend_bos_default({}, wordpiece_tokenizer)
    bos = sentencepiece_tokenizer.convert_tokens_to_ids("<s>")
    assert llama.wrap(sentencepiece_tokenizer, [7, 8], special=True) == [bos, 7, 8]
    assert llama.wrap(sentencepiece_tokenizer, [7, 8], special=False) == [7, 8]
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert gpt2.wrap(tokenizer, [5], special=True) == [eot, 5]
    cls, sep = wordpiece_tokenizer.cls_token_id, wordpiece_tokenizer.sep_token_id
    assert bert.wrap(wordpiece_tokenizer, [9, 10], special=True) == [cls, 9, 10, sep]


def test_a_tokenizer_without_bos_never_gets_one(tokenizer):
    """Qwen2's tokenizer has no BOS: the default is off and ``wrap`` adds nothing."""
    from transformers import PreTrainedTokenizerFast

    no_bos = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer)
    llama = family_for({"model_type": "qwen2"})
    assert no_bos.bos_token is None
    assert not llama.prepend_bos_default({}, no_bos)
    assert llama.wrap(no_bos, [3, 4], special=True) == [3, 4]
