"""One interface for both ways a run holds its attention: a result whose maps are computed on demand (run_text's
keep_maps=False, completed by measures.measured) gives the numbers the result that kept every map gives, for every
family: scores, TL-style scores, sink rate, thumbnails, head maps, parity, predictions."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.errors import InputError
from analysis.measures.head_scores import all_scores
from analysis.measures.lenses import sink_rate_of_result
from analysis.measures.measured import run_measured, tl_scores_of_result
from analysis.measures.parity import parity_report
from analysis.model.synthetic import FAMILY_TINY_TYPES
from analysis.run import memory
from analysis.run.inference import run_text
from analysis.run.qk_capture import QKCapture, StoredMaps

from helpers import TEXT

LONG = (TEXT + " ") * 3  # about 60 tokens: the cat sentence four times over, so induction has copies to find


def both(loaded, text=LONG):
    kept = run_text(loaded, text, keep_maps=True)
    on_demand = run_measured(loaded, text, keep_maps=False)
    return kept, on_demand


@pytest.mark.parametrize("model_type", FAMILY_TINY_TYPES)
def test_on_demand_result_gives_the_kept_result_numbers(family_run, model_type):
    loaded, _ = family_run(model_type)
    kept, lazy = both(loaded)
    assert kept.maps_kept and isinstance(kept.maps, StoredMaps)
    assert not lazy.maps_kept and isinstance(lazy.maps, QKCapture) and lazy.attentions is None
    assert (lazy.n_layer, lazy.n_head, lazy.n_tokens) == (kept.n_layer, kept.n_head, kept.n_tokens)
    assert lazy.tokens == kept.tokens and np.array_equal(lazy.token_ids, kept.token_ids)
    for layer, head in ((0, 0), (kept.n_layer - 1, kept.n_head - 1)):
        np.testing.assert_allclose(lazy.head_map(layer, head), kept.head_map(layer, head), rtol=0, atol=1e-5)
        assert not lazy.head_map(layer, head).flags.writeable
    np.testing.assert_allclose(lazy.thumbnails, kept.thumbnails, rtol=0, atol=1e-5)
    a, b = all_scores(kept), all_scores(lazy)
    assert a.values.keys() == b.values.keys()
    for name in a.values:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=2e-5, equal_nan=True, err_msg=name)
    tl_kept, tl_lazy = tl_scores_of_result(kept), tl_scores_of_result(lazy)
    for name in tl_kept:
        np.testing.assert_allclose(tl_lazy[name], tl_kept[name], rtol=0, atol=2e-5, err_msg=name)
    options = dict(exclude_bos=True, exclude_current_token=True, error_measure="abs")  # streamed again
    tl_kept, tl_lazy = tl_scores_of_result(kept, **options), tl_scores_of_result(lazy, **options)
    for name in tl_kept:
        np.testing.assert_allclose(tl_lazy[name], tl_kept[name], rtol=0, atol=2e-5, err_msg=name)
    assert sink_rate_of_result(lazy, 0.3).rate == sink_rate_of_result(kept, 0.3).rate
    np.testing.assert_allclose(lazy.layer_inputs, kept.layer_inputs, rtol=0, atol=1e-4)
    assert [p.token_id for p in lazy.predictions] == [p.token_id for p in kept.predictions]
    weights = [loaded.attention_weights(l) for l in range(loaded.n_layer)]
    report = parity_report(lazy, weights)
    assert report.passed, report.max_bound_ratio
    assert "stream_s" in lazy.timings and "stream_s" not in kept.timings


def test_on_demand_parity_still_fails_on_a_mistake(family_run):
    """The parity of an on-demand result reads the capture's rows (maps.weights): a wrong recompute fails there."""
    from analysis.families.steps import Mistakes

    loaded, _ = family_run("llama")
    lazy = run_measured(loaded, LONG, keep_maps=False)
    weights = [loaded.attention_weights(l) for l in range(loaded.n_layer)]
    assert not parity_report(lazy, weights, mistakes=Mistakes(skip_rotation=True)).passed


def test_a_long_text_is_planned_on_demand(tiny_model, monkeypatch):
    """The plan by bytes: every map kept below maps_kept_bytes(), on demand above it (ATTNSCOPE_KEEP_MAPS_MB)."""
    n = 30
    maps = memory.attention_memory_bytes(tiny_model.n_layer, tiny_model.n_head, n)
    monkeypatch.setenv(memory.KEEP_MAPS_ENV, str(maps / 2**20))
    assert memory.plan_run_of(tiny_model, n).keeps_maps
    assert not memory.plan_run_of(tiny_model, n + 1).keeps_maps
    monkeypatch.setenv(memory.KEEP_MAPS_ENV, "0")
    result = run_measured(tiny_model, TEXT)
    assert not result.maps_kept and result.streamed is not None
    assert memory.plan_run_of(tiny_model, n).describe().startswith("attention on demand ")
    monkeypatch.setenv(memory.KEEP_MAPS_ENV, "lots")
    with pytest.raises(InputError, match="ATTNSCOPE_KEEP_MAPS_MB='lots' is not a number"):
        memory.plan_run_of(tiny_model, n)


def test_an_on_demand_run_that_does_not_fit_is_refused_with_its_longest_text(tiny_model):
    s = tiny_model.shape
    shape = (s.n_layer, s.n_head, s.n_kv_head, s.d_head, s.d_model)
    budget = memory.on_demand_bytes(*shape, 500)
    plan = memory.plan_run_of(tiny_model, 500, keep_maps=False, budget=budget)
    assert plan.need_bytes == budget and not plan.keeps_maps
    with pytest.raises(InputError, match=r"^A run of 501 tokens would take .* token cap of at most 500 \(--max-tokens\)\.$"):
        memory.plan_run_of(tiny_model, 501, keep_maps=False, budget=budget)
    with pytest.raises(InputError, match="too small for any text"):
        memory.plan_run_of(tiny_model, 5, keep_maps=False, budget=10)


def test_an_unmeasured_on_demand_result_has_no_scores_to_give(tiny_model):
    """run_text alone streams nothing: all_scores says what is missing instead of reading maps that are not there."""
    result = run_text(tiny_model, TEXT, keep_maps=False)
    assert result.thumbnails is None and result.streamed is None
    with pytest.raises(ValueError, match="measure it first"):
        all_scores(result)
