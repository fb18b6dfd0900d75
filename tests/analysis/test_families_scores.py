"""Head scores on each family's own attention (tiny random models): what applies follows the adapter's
``causal``, a decoder's next-token score really is 0 by construction, and an encoder's entropy is
normalised over every key (conftest's family_run: load_model, run_text)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from analysis.measures import head_scores as hs  # noqa: E402


@pytest.fixture(scope="module", params=["gpt2", "llama", "gpt_neox", "bert"])
def captured(request, family_run):
    """(family, token ids, attention) of helpers.TEXT, which repeats a phrase, so duplicate/induction are defined
    where they apply."""
    loaded, result = family_run(request.param)
    return loaded.family, result.token_ids, result.attentions


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
