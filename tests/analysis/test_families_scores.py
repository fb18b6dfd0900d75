"""Head scores on each family's own attention (tiny random models): what applies follows the adapter's
``causal``, a decoder's next-token score really is 0 by construction, and an encoder's entropy is
normalised over every key."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from analysis.measures import head_scores as hs  # noqa: E402
from analysis.families import capture_attention, family_for  # noqa: E402

VOCAB = 64
N_TOKENS = 10


def _config(model_type: str):
    from transformers import BertConfig, GPT2Config, GPTNeoXConfig, LlamaConfig

    decoder = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=32, vocab_size=VOCAB,
                   max_position_embeddings=32, initializer_range=0.3)
    return {
        "gpt2": GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=32, vocab_size=VOCAB, initializer_range=0.3),
        "llama": LlamaConfig(num_attention_heads=4, num_key_value_heads=2, **decoder),
        "gpt_neox": GPTNeoXConfig(num_attention_heads=4, rotary_pct=0.25, **decoder),
        "bert": BertConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=32, intermediate_size=32,
                           vocab_size=VOCAB, max_position_embeddings=32, initializer_range=0.3),
    }[model_type]


@pytest.fixture(scope="module", params=["gpt2", "llama", "gpt_neox", "bert"])
def captured(request):
    config = _config(request.param)
    family = family_for(config)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = family.model_class(config)._from_config(config, attn_implementation="eager").eval()
    ids = [int(i) for i in np.random.default_rng(0).integers(3, VOCAB, size=N_TOKENS)]
    ids[6:9] = ids[1:4]  # a repeat, so duplicate/induction are defined where they apply
    return family, np.asarray(ids), capture_attention(model, family, ids).attentions


def test_what_applies_follows_the_family(captured):
    family, ids, a = captured
    scores = hs.all_scores(SimpleNamespace(attentions=a, token_ids=ids, probe=None, causal=family.causal,
                                           sliding_windows=()))
    assert scores.causal == family.causal
    for name in hs.SCORE_NAMES:
        assert scores.applies(name) == (name in hs.applicable_scores(family.causal))
        assert np.isfinite(scores[name]).all() == (scores.applies(name) and name != "induction_probe")
    assert scores.applies("next_token") != family.causal
    assert scores.applies("induction") == family.causal


def test_a_decoders_next_token_score_is_zero_by_construction(captured):
    family, _, a = captured
    raw = hs.next_token(a)
    if family.causal:
        np.testing.assert_array_equal(raw, 0.0)  # why the score is marked not applicable for decoders
    else:
        assert (raw > 0).all()


def test_entropy_is_normalised_over_the_keys_each_query_sees(captured):
    family, _, a = captured
    got = hs.entropy(a, causal=family.causal)
    n = a.shape[-1]
    rows = range(1, n) if family.causal else range(n)
    for layer, head in np.ndindex(*a.shape[:2]):
        total = 0.0
        for i in rows:
            keys = range(i + 1) if family.causal else range(n)
            p = [float(a[layer, head, i, j]) for j in keys]
            total += -sum(x * math.log(x) for x in p if x > 0) / math.log(len(keys))
        assert got[layer, head] == pytest.approx(total / len(rows), abs=1e-5)
    assert ((got > 0) & (got <= 1 + 1e-6)).all()
