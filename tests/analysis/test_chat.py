"""The chat format (analysis/run/chat.py, ``run_text(chat=True)``): a text runs as one user turn of the model's chat
template, exactly ``apply_chat_template(..., add_generation_prompt=True, tokenize=True)``; the template decides the
special tokens (one BOS where it writes one, the BOS switch unused); a text too long for the cap loses the end of
its own text, never the template's closing tokens; a model without a template, or with one that does not render,
is refused in one sentence; scans, ablations and summary.json follow."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analysis.errors import ChatFormatError, InputError
from analysis.export.writers import summary
from analysis.measures.ablation import text_tokens
from analysis.measures.head_scores import all_scores
from analysis.measures.scan import scan_texts
from analysis.run.chat import chat_frame, chat_problem
from analysis.run.inference import run_text
from analysis.run.tokenize import tokenize

HEAD = "<|im_start|>user\n"  # ChatML around a user's text, written out by hand
TAIL = "<|im_end|>\n<|im_start|>assistant\n"
TEXTS = ["The cat sat on the mat", " a leading space, and a trailing one ", "\nit starts with a newline",
         "Ünïcödé and 漢字 😀"]


def template_ids(loaded, text):
    return loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False)


def plain_ids(loaded, text):
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"]


def with_template(loaded, template):
    """``loaded`` with its tokenizer's chat template replaced (a copy: the session's model is left as it was)."""
    import copy

    tokenizer = copy.deepcopy(loaded.tokenizer)
    tokenizer.chat_template = template
    return dataclasses.replace(loaded, tokenizer=tokenizer, _weights={}, _probe=None)


# ----------------------------------------------------------------------------- the ids
@pytest.mark.parametrize("text", TEXTS)
def test_the_chat_ids_are_apply_chat_template_with_the_generation_prompt(chat_model, text):
    result = run_text(chat_model, text, chat=True)
    assert result.token_ids.tolist() == template_ids(chat_model, text)
    # and ChatML written out by hand, tokenised with the template's special tokens only
    assert result.token_ids.tolist() == plain_ids(chat_model, HEAD + text + TAIL)
    assert result.chat and not result.truncated and result.n_tokens_text == len(plain_ids(chat_model, text))


def test_the_template_tokens_show_in_the_strip_and_the_predictions_follow_the_assistant_header(chat_model):
    result = run_text(chat_model, "The cat sat", chat=True)
    n_tail = len(plain_ids(chat_model, TAIL))
    head, tail = result.tokens[:4], result.tokens[-n_tail:]
    assert head[0] == "<|im_start|>" and "".join(head[1:]) == "user\u21b5"  # ↵: the newline after the role
    assert tail[:3] == ("<|im_end|>", "\u21b5", "<|im_start|>") and "".join(tail[3:]) == "assistant\u21b5"
    assert result.predictions  # after the assistant's header: the reply's first token
    off = run_text(chat_model, "The cat sat", chat=False, bos=False)
    assert not off.chat and off.token_ids.tolist() == plain_ids(chat_model, "The cat sat")


def test_chat_ignores_the_bos_switch_and_says_whether_the_template_wrote_bos(chat_model):
    ids = {bos: run_text(chat_model, "The cat sat", bos=bos, chat=True).token_ids.tolist() for bos in (None, True, False)}
    assert ids[None] == ids[True] == ids[False] == template_ids(chat_model, "The cat sat")
    assert run_text(chat_model, "The cat sat", bos=True, chat=True).bos is False  # ChatML writes no <|endoftext|>
    assert not any("BOS" in w for w in run_text(chat_model, "The cat sat", bos=True, chat=True).warnings)


def test_a_template_that_writes_bos_gets_it_once(family_folder):
    from analysis.model.loading import load_model

    llama = load_model(str(family_folder("llama")), device="cpu")  # a SentencePiece tokenizer that adds <s> itself
    assert llama.prepend_bos_default and llama.bos_token == "<s>"
    model = with_template(llama, "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]"
                                 "{% endfor %}")
    bos_id = model.tokenizer.convert_tokens_to_ids("<s>")
    for bos in (None, True, False):
        result = run_text(model, "the cat sat", bos=bos, chat=True)
        ids = result.token_ids.tolist()
        assert ids == template_ids(model, "the cat sat") and ids.count(bos_id) == 1 and ids[0] == bos_id
        assert result.bos is True
    assert run_text(llama, "the cat sat", bos=True).token_ids.tolist().count(bos_id) == 1  # as without chat


def test_a_template_that_trims_the_text_runs_it_trimmed(chat_model):
    model = with_template(chat_model, "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}"
                                      "<|im_end|>\n{% endfor %}{{ '<|im_start|>assistant\n' }}")
    text = "   the cat sat   "
    result = run_text(model, text, chat=True)
    assert result.token_ids.tolist() == template_ids(model, text) == plain_ids(model, HEAD + text.strip() + TAIL)
    cut = run_text(model, "   " + "the cat sat " * 40, chat=True)
    frame = chat_frame(model)
    assert cut.token_ids.tolist()[len(frame.head_ids):-len(frame.tail_ids)] == \
        plain_ids(model, ("the cat sat " * 40).strip())[:64 - frame.n_ids]


# ----------------------------------------------------------------------------- the cap
def test_a_long_text_keeps_the_template_whole_and_loses_the_end_of_its_own_text(chat_model):
    text = "The server rejected the request because it was overloaded. " * 30
    frame = chat_frame(chat_model)
    head, tail = plain_ids(chat_model, HEAD), plain_ids(chat_model, TAIL)
    assert list(frame.head_ids) == head and list(frame.tail_ids) == tail
    for cap in (None, 40, len(head) + len(tail) + 1):
        result = run_text(chat_model, text, chat=True, max_tokens=cap)
        total = 64 if cap is None else cap  # the context, or the cap
        ids = result.token_ids.tolist()
        kept = total - len(head) - len(tail)
        assert len(ids) == total and result.truncated
        assert ids[:len(head)] == head and ids[len(ids) - len(tail):] == tail  # the closing tokens are there
        assert ids[len(head):len(ids) - len(tail)] == plain_ids(chat_model, text)[:kept]  # the text's first tokens
        assert result.n_tokens_text > kept
        first = "only its first token was" if kept == 1 else f"only the first {kept} tokens of the text were"
        holds = (f"the model's context holds 64 with the chat template's {len(head) + len(tail)} tokens"
                 if cap is None else f"AttnScope analyses at most {cap} tokens with the chat template's "
                                     f"{len(head) + len(tail)} tokens (the token cap; the model's context holds 64)")
        assert result.warnings == (f"The text has more than {kept} token{'s' if kept != 1 else ''}; {holds}, so "
                                   f"{first} analysed.",)


def test_a_text_that_fills_the_cap_exactly_is_not_cut(chat_model):
    frame = chat_frame(chat_model)
    words = "the cat sat on the mat and then it slept for a long while in the sun"
    n = len(template_ids(chat_model, words))
    ids, n_text, truncated = tokenize(chat_model, words, False, max_tokens=n, chat=True)
    assert ids == template_ids(chat_model, words) and not truncated and n_text == n - frame.n_ids
    ids, _, truncated = tokenize(chat_model, words, False, max_tokens=n - 1, chat=True)
    assert truncated and len(ids) == n - 1 and ids[-len(frame.tail_ids):] == list(frame.tail_ids)


def test_a_cap_with_no_room_beside_the_template_is_refused(chat_model):
    n = chat_frame(chat_model).n_ids
    with pytest.raises(InputError) as caught:
        run_text(chat_model, "The cat sat", chat=True, max_tokens=n)
    assert str(caught.value) == (f"A cap of {n} tokens leaves no room for text beside the model's chat template "
                                 f"({n} tokens); raise the cap.")


def test_a_template_that_reads_the_text_runs_whole_when_it_fits_and_is_refused_when_cut(chat_model):
    model = with_template(chat_model, "{% if 'secret' in messages[0]['content'] %}<|im_start|>system\nBe discreet."
                                      "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                                      "{{ m['content'] }}<|im_end|>\n{% endfor %}{{ '<|im_start|>assistant\n' }}")
    short = "a secret word"
    assert run_text(model, short, chat=True).token_ids.tolist() == template_ids(model, short)
    with pytest.raises(InputError, match="writes something else around this text than around others"):
        run_text(model, "a secret word " * 40, chat=True)
    assert run_text(model, "a plain word " * 40, chat=True).truncated  # the frame holds: cut as any text


# ----------------------------------------------------------------------------- refusals
def test_a_model_without_a_chat_template_is_refused_naming_it(tiny_model):
    assert tiny_model.tokenizer.chat_template is None
    label = tiny_model.source.label
    with pytest.raises(ChatFormatError) as caught:
        run_text(tiny_model, "The cat sat", chat=True)
    assert str(caught.value) == f"The model {label} has no chat template; run without --chat (untick Chat format)."
    assert chat_problem(tiny_model) == f"The model {label} has no chat template."
    assert run_text(tiny_model, "The cat sat").chat is False  # without chat it runs as ever


@pytest.mark.parametrize("template, says", [
    ("{% for m in messages %}{{ m['content'] }", "TemplateSyntaxError"),
    ("{{ raise_exception('Only system and assistant turns') }}", "Only system and assistant turns"),
    ("{{ messages[0]['content'].nothing() }}", "could not be rendered"),
])
def test_a_template_that_fails_to_render_is_refused_in_one_sentence(chat_model, template, says):
    model = with_template(chat_model, template)
    with pytest.raises(ChatFormatError) as caught:
        run_text(model, "The cat sat", chat=True)
    message = str(caught.value)
    assert message.startswith(f"The chat template of {model.source.label} could not be rendered (")
    assert says in message and "\n" not in message and message.endswith("; run without --chat (untick Chat format).")
    assert chat_problem(model).endswith(").") and says in chat_problem(model)


def test_a_template_without_the_users_text_is_refused(chat_model):
    model = with_template(chat_model, "<|im_start|>assistant\n")
    with pytest.raises(ChatFormatError, match="does not hold the user's text once in its turn"):
        run_text(model, "The cat sat", chat=True)
    assert chat_problem(chat_model) is None


# ----------------------------------------------------------------------------- what follows a chat run
def test_summary_json_says_whether_the_run_was_in_the_chat_format(chat_model):
    on, off = run_text(chat_model, "The cat sat", chat=True), run_text(chat_model, "The cat sat")
    assert summary(on)["chat"] is True and summary(off)["chat"] is False
    assert list(summary(off)).index("chat") == list(summary(off)).index("bos") + 1


def test_a_scan_in_the_chat_format_scores_what_run_text_runs(chat_model):
    texts = ["The cat sat on the mat", "Ünïcödé and 漢字", "The server rejected the request. " * 20]
    scan = scan_texts(chat_model, texts, batch_size=2, chat=True, max_tokens=40)
    results = [run_text(chat_model, t, chat=True, max_tokens=40) for t in texts]
    assert scan.n_tokens == tuple(r.n_tokens for r in results)
    assert scan.n_tokens[:2] == tuple(len(template_ids(chat_model, t)) for t in texts[:2])
    assert scan.truncated == (False, False, True) and scan.chat and scan.summary()["chat"] is True
    assert scan.summary()["bos"] is False  # ChatML writes no BOS
    for k, r in enumerate(results):
        scores = all_scores(r)
        prev = scan.score_names.index("previous_token")
        assert np.allclose(scan.per_text[k, prev], scores["previous_token"], atol=1e-5)
    kept = 40 - chat_frame(chat_model).n_ids
    part = scan.texts[2]  # the cut text up to its last analysed token
    assert plain_ids(chat_model, part) == plain_ids(chat_model, texts[2])[:kept] and texts[2].startswith(part)
    assert "the chat template's tokens included" in scan.truncation_warning()
    assert scan_texts(chat_model, texts[:1], chat=False).summary()["chat"] is False


def test_ablation_runs_the_ids_the_chat_run_ran(chat_model):
    text = "The server rejected the request because it was overloaded. " * 10
    run = run_text(chat_model, text, chat=True)
    tokens = text_tokens(chat_model, text, chat=True)
    assert list(tokens.ids) == run.token_ids.tolist() and tokens.truncated
    assert "with the chat template's" in tokens.warnings[0] and "losses and the top-5" in tokens.warnings[0]
