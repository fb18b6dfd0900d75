"""Text → frozen result: tokens (invisible characters shown visibly, never as ''), shapes, read-only arrays, BOS,
truncation (a text of any size costs what the context costs), a byte-order mark removed, invalid UTF-8 refused,
predictions."""
import dataclasses

import numpy as np
import pytest

from analysis.errors import InputError
from analysis.families.bert import FAMILY as BERT
from analysis.families.gpt2 import FAMILY as GPT2
from analysis.families.llama import FAMILY as LLAMA
from analysis.run.inference import bos_used, run_text
from analysis.tokens import display_token, visible


def test_display_tokens_make_whitespace_visible():
    assert display_token("Ġcat") == "␣cat"
    assert display_token("Ċ") == "↵"
    assert display_token("ĠĠ") == "␣␣"
    assert display_token("<|endoftext|>", frozenset({"<|endoftext|>"})) == "<|endoftext|>"
    assert display_token("Ã©") == "é"
    assert display_token("Ã") == "\\xc3"  # half a UTF-8 character stays visible as a byte


def test_result_is_frozen_and_read_only(tiny_result):
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny_result.text = "changed"
    for array in (tiny_result.attentions, tiny_result.token_ids, tiny_result.layer_inputs,
                  tiny_result.attention_outputs):
        assert not array.flags.writeable
        with pytest.raises(ValueError):
            array[..., 0] = 0


def test_shapes_dtypes_and_rows(tiny_result):
    r = tiny_result
    n = len(r.tokens)
    assert r.attentions.shape == (3, 4, n, n) and r.attentions.dtype == np.float32
    assert r.layer_inputs.shape == r.attention_outputs.shape == (3, n, 64)
    np.testing.assert_allclose(r.attentions.sum(-1), 1, atol=1e-5)
    assert np.triu(r.attentions[0, 0], k=1).max() == 0  # causal
    assert r.tokens[0] == "<|endoftext|>" and r.bos
    assert "␣the" in r.tokens and r.token_ids.dtype == np.int64
    assert len(r.predictions) == 5
    probs = [p.probability for p in r.predictions]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1


def test_capture_matches_transformers_own_attentions(tiny_model, tiny_result):
    import torch

    ids = torch.tensor([tiny_result.token_ids.tolist()])
    with torch.inference_mode():
        out = tiny_model.model(ids, output_attentions=True, output_hidden_states=True)
    assert len(out.attentions) == tiny_model.n_layer  # eager: the weights really come back
    reference = torch.stack(out.attentions)[:, 0].numpy()
    np.testing.assert_array_equal(tiny_result.attentions, reference)
    np.testing.assert_array_equal(tiny_result.layer_inputs[1], out.hidden_states[1][0].numpy())
    top = int(out.logits[0, -1].argmax())
    assert tiny_result.predictions[0].token_id == top


def test_bos_switch(tiny_model):
    without = run_text(tiny_model, "Hello there", bos=False)
    with_bos = run_text(tiny_model, "Hello there", bos=True)
    assert with_bos.n_tokens == without.n_tokens + 1 and not without.bos
    assert with_bos.token_ids[0] == tiny_model.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert run_text(tiny_model, "Hello there").bos is tiny_model.prepend_bos_default


class _Tokenizer:
    """Just what the families' ``wrap`` reads: a BOS token (or none), [CLS] and [SEP]."""

    def __init__(self, bos_token):
        self.bos_token, self.cls_token_id, self.sep_token_id = bos_token, 101, 102

    def convert_tokens_to_ids(self, token):
        return 0


class _Loaded:
    def __init__(self, family, bos_token, prepend_bos_default):
        self.family, self.tokenizer, self.prepend_bos_default = family, _Tokenizer(bos_token), prepend_bos_default

    def special_ids(self, text_ids, special):
        return self.family.wrap(self.tokenizer, text_ids, special)


# (family, the tokenizer's BOS token, the model's default) → what bos=None, True, False each use
BOS_RULE = [
    (GPT2, "<|endoftext|>", False, (False, True, False)),  # GPT-2: a BOS token, not prepended unless asked
    (LLAMA, "<s>", True, (True, True, False)),  # a decoder whose tokenizer prepends BOS itself
    (LLAMA, None, False, (False, False, False)),  # a decoder with no BOS token: never, even when asked
    (BERT, None, True, (True, True, False)),  # an encoder: [CLS] … [SEP] unless switched off
]


@pytest.mark.parametrize("family, bos_token, default, expected", BOS_RULE)
def test_bos_used_follows_the_default_the_switch_and_the_tokenizer(family, bos_token, default, expected):
    loaded = _Loaded(family, bos_token, default)
    assert tuple(bos_used(loaded, bos) for bos in (None, True, False)) == expected


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text_is_refused(tiny_model, text):
    with pytest.raises(InputError, match="empty"):
        run_text(tiny_model, text)


def test_long_text_is_truncated_with_a_warning(tiny_model):
    r = run_text(tiny_model, "one two three four " * 40, bos=True)
    assert r.truncated and r.n_tokens == tiny_model.context_length == 64
    assert r.n_tokens_text > 63  # a lower bound: only a prefix of a long text is tokenised
    assert "more than 63 tokens" in r.warnings[0] and "only the first 63 tokens of the text" in r.warnings[0]
    short = run_text(tiny_model, "one two")
    assert not short.truncated and short.warnings == ()


def test_thumbnails_are_max_pooled_heads(tiny_model):
    """Over the same bins as every other pooled view (``display.pool_edges``): no bin overlaps another."""
    from analysis.display import pool_edges
    from analysis.run import capture

    short = run_text(tiny_model, "a b c")
    assert short.thumbnails is short.attentions or np.shares_memory(short.thumbnails, short.attentions)
    old = capture.THUMBNAIL_PX
    try:
        capture.THUMBNAIL_PX = 8
        r = run_text(tiny_model, "one two three four five six seven eight nine ten eleven twelve", bos=True)
    finally:
        capture.THUMBNAIL_PX = old
    assert r.thumbnails.shape == (3, 4, 8, 8)
    n = r.n_tokens
    bounds = [*pool_edges(n, 8), n]
    assert len(bounds) == 9 and all(b - a >= 1 for a, b in zip(bounds, bounds[1:]))
    expected = np.array([[[r.attentions[1, h, bounds[y]:bounds[y + 1], bounds[x]:bounds[x + 1]].max()
                           for x in range(8)] for y in range(8)] for h in range(4)])
    np.testing.assert_array_equal(r.thumbnails[1], expected)
    assert r.thumbnails.max() == r.attentions.max()  # max-pooling keeps the strongest weight visible


def test_predictions_are_the_models_own_probabilities_with_a_padded_vocabulary(tmp_path, tokenizer):
    """Rows past the tokenizer (Pythia's, Qwen's padding) hold probability too: it is not renormalised away."""
    import torch

    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_gpt2

    folder = save_random_gpt2(tmp_path / "padded", vocab_size=len(tokenizer) + 64, tokenizer=tokenizer, seed=4)
    loaded = load_model(str(folder), device="cpu")
    result = run_text(loaded, "the cat sat on the mat")
    with torch.no_grad():
        logits = loaded.model(input_ids=torch.tensor([list(result.token_ids)])).logits[0, -1].double()
    p = torch.softmax(logits, -1)
    assert float(p[len(tokenizer):].sum()) > 0.01  # the padded rows hold real mass here
    for prediction in result.predictions:
        assert prediction.token_id < len(tokenizer)
        assert prediction.probability == pytest.approx(float(p[prediction.token_id]), rel=1e-5)  # renormalised: ~1e-2 off


def test_tokenising_a_huge_text_costs_what_the_context_costs(tiny_model):
    """20 MB of text: only a few kB are tokenised."""
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
    assert display_token(byte_level("\x00")) == "␀" == display_token("Ā")  # GPT-2's byte 0 (NUL), never ''
    assert visible(" \n\t\r") == "␣↵⇥␍"
    assert visible("\x01\x1f") == "\u2401\u241f"
    assert visible("\u2028\u202e\x85") == "⟨U+2028⟩⟨U+202E⟩⟨U+0085⟩"
    assert visible("é漢😀<b>") == "é漢😀<b>"  # visible characters stay as they are (escaping is the GUI's)


def test_attention_npz_keeps_nul_tokens(tiny_model, tmp_path):
    from analysis.export.writers import write_attention_npz

    r = run_text(tiny_model, "a\x00\x00b", bos=False, with_probe=False)
    with np.load(write_attention_npz(r, tmp_path / "a.npz")) as data:
        assert list(data["tokens"]) == list(r.tokens) and all(data["tokens"])


def test_on_sized_gets_the_runs_token_count_before_the_forward(tiny_model, monkeypatch):
    """``on_sized(n)`` is called once, with the n the result holds (a byte-order mark removed, the cap applied),
    after tokenizing and before the forward pass: the window shows what a long run costs while it runs."""
    from analysis.run import inference

    calls, real = [], inference.forward_with_capture
    monkeypatch.setattr(inference, "forward_with_capture", lambda *a, **k: calls.append("forward") or real(*a, **k))
    result = run_text(tiny_model, "\ufeffone two three four five six", bos=False, max_tokens=4, with_probe=False,
                      on_sized=lambda n: calls.append(n))
    assert calls == [result.n_tokens, "forward"] and result.n_tokens == 4
