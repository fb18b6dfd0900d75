"""What an ablation reads (``analysis.measures.ablation``): the tokens of a text (cut to the context with a
warning, a byte-order mark dropped as a run drops it, a token cap honoured), the tokens run carried by its results,
a head list, and an encoder refused in plain English."""
import pytest

from analysis.errors import InputError
from analysis.measures import ablation

SHORT = "The cat sat on the mat because it was tired. The cat sat on the mat."
LONG = "The cat sat on the mat because it was tired. " * 40  # far more than the tiny model's 64 positions


# ----------------------------------------------------------------------------- the tokens of a text
def test_ablate_tokens_say_when_the_text_was_cut(tiny_model):
    from analysis.run.tokenize import tokenize

    long = ablation.text_tokens(tiny_model, LONG, bos=True)
    assert long.truncated and long.n_tokens == tiny_model.context_length == 64
    (warning,) = long.warnings
    assert "more than 63 tokens" in warning and "context holds 64 with BOS" in warning
    ids = tiny_model.tokenizer(LONG, add_special_tokens=False)["input_ids"]
    assert list(long.ids[1:]) == ids[:63]  # the first 63 tokens of the text, behind BOS
    short = ablation.text_tokens(tiny_model, SHORT, bos=False)
    assert not short.truncated and short.warnings == ()
    assert list(short.ids) == tiny_model.tokenizer(SHORT, add_special_tokens=False)["input_ids"]
    assert tokenize(tiny_model, SHORT, False)[0] == list(short.ids)


@pytest.mark.slow
def test_ablate_drops_a_byte_order_mark_as_a_run_does_and_honours_the_token_cap(tiny_model):
    """A byte-order mark is dropped (not run as 3 extra tokens), as a run drops it; a token cap runs the same
    prefix as a run with that cap, and the importance map runs those tokens."""
    from analysis.run.inference import run_text

    plain, marked = ablation.text_tokens(tiny_model, SHORT, bos=True), ablation.text_tokens(tiny_model, "\ufeff" + SHORT,
                                                                                          bos=True)
    assert marked.ids == plain.ids and "byte-order mark" in marked.warnings[0] and plain.warnings == ()
    assert ablation.ablate(tiny_model, "\ufeff" + SHORT, [(1, 0)], bos=True).baseline == \
        ablation.ablate(tiny_model, SHORT, [(1, 0)], bos=True).baseline
    capped = ablation.text_tokens(tiny_model, LONG, bos=True, max_tokens=10)
    assert capped.n_tokens == 10 and capped.truncated and "token cap" in capped.warnings[0]
    assert list(capped.ids) == list(run_text(tiny_model, LONG, bos=True, max_tokens=10).token_ids)
    assert ablation.importance_map(tiny_model, capped).n_tokens == 10


@pytest.mark.slow
def test_ablate_results_carry_the_tokens_run(tiny_model):
    result = ablation.ablate(tiny_model, LONG, [(1, 0)], bos=True)
    assert result.truncated and result.n_tokens == 64
    cut = tiny_model.tokenizer.decode(tiny_model.tokenizer(LONG, add_special_tokens=False)["input_ids"][:63])
    same = ablation.ablate(tiny_model, cut, [(1, 0)], bos=True)  # the part that was run, given alone
    assert not same.truncated and same.n_tokens == 64
    assert result.baseline.loss == pytest.approx(same.baseline.loss, abs=1e-6)
    assert result.to_dict()["n_tokens"] == 64 and result.to_dict()["truncated"] is True


# ----------------------------------------------------------------------------- the heads and the model
def test_parse_head_list_reads_what_it_should():
    assert ablation.parse_head_list(" 1.0, 10.3 ,0.11") == [(1, 0), (10, 3), (0, 11)]
    assert ablation.parse_heads("1.0,2.3", 3, 4) == [(1, 0), (2, 3)]
    with pytest.raises(InputError, match="does not exist"):
        ablation.parse_heads("3.0", 3, 4)
    with pytest.raises(InputError, match="named twice"):
        ablation.parse_heads("01.0,1.00", 3, 4)  # the same head, written twice
    # as the app names heads everywhere (L1H0), mixed with LAYER.HEAD
    assert ablation.parse_head_list("L1H0, l10h3,0.11") == [(1, 0), (10, 3), (0, 11)]
    with pytest.raises(InputError, match="named twice"):
        ablation.parse_heads("L1H0,1.0", 3, 4)
    for bad in ("L1", "H0", "L1H", "L1.H0", "LL1H0", "L1H0x"):
        with pytest.raises(InputError, match="is not a head"):
            ablation.parse_head_list(bad)


def test_the_encoder_refusal_reads_as_english(family_run):
    loaded, _ = family_run("bert")
    with pytest.raises(InputError) as caught:
        ablation.heads_site(loaded)
    message = str(caught.value)
    assert f"this model ({loaded.family.title}) is an encoder" in message
    assert "encoder, an encoder" not in message
