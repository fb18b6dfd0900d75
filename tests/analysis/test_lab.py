"""The lessons' experiment and accounting, as numbers."""
import math

import numpy as np
import pytest

from analysis.lessons.lab import attention_cost, explain_weight, row_entropy, scaling_experiment
from analysis.lessons.manual_attention import recompute_layer


@pytest.mark.slow
@pytest.mark.parametrize("d_k", [4, 64, 512])
def test_dot_products_have_std_sqrt_dk_and_scaling_restores_one(d_k):
    e = scaling_experiment(d_k, seed=3)
    assert e.std_unscaled == pytest.approx(math.sqrt(d_k), rel=0.05)
    assert e.std_scaled == pytest.approx(1.0, rel=0.05)
    assert scaling_experiment(d_k, seed=3).std_unscaled == e.std_unscaled  # seeded


@pytest.mark.slow
def test_unscaled_softmax_is_nearly_one_hot_at_large_dk():
    e = scaling_experiment(512)
    assert e.entropy_unscaled < 0.2 and e.max_weight_unscaled > 0.9
    assert e.entropy_scaled > 2.5


def test_row_entropy():
    np.testing.assert_allclose(row_entropy(np.array([[1.0, 0, 0], [1 / 3, 1 / 3, 1 / 3]])), [0, math.log(3)])


def test_cost_of_gpt2_small():
    c = attention_cost(1024, 768, 12, 12, params_counted=2_362_368)
    assert c.params_per_layer_formula == 4 * 768**2 == 2_359_296
    assert c.params_per_layer_formula_with_bias == 2_362_368
    assert c.score_bytes_per_layer == 12 * 1024 * 1024 * 4
    assert c.score_bytes_total == 12 * c.score_bytes_per_layer  # 604 MB at 1024 tokens
    doubled = attention_cost(2048, 768, 12, 12)
    assert doubled.flops_qk_per_layer == 4 * c.flops_qk_per_layer
    assert doubled.flops_projections_per_layer == 2 * c.flops_projections_per_layer


def test_explain_weight_reassembles_the_softmax(tiny_model, tiny_result):
    rec = recompute_layer(tiny_model.attention_weights(0), tiny_result.layer_inputs[0], 0, np.float64)
    e = explain_weight(rec, 1, 6, 3)
    assert e["exp"] / e["row_sum"] == pytest.approx(e["weight"])
    assert e["scaled"] == pytest.approx(e["score"] * e["scale"])
    assert explain_weight(rec, 1, 3, 6)["masked"] and explain_weight(rec, 1, 3, 6)["weight"] == 0


def test_cost_with_grouped_query_attention_by_hand():
    # a SmolLM2-135M-shaped layer: d 576, 9 query heads, 3 key/value heads, dk 64, 30 layers, at 1000 tokens
    c = attention_cost(1000, 576, 9, 30, n_kv_head=3, d_head=64)
    assert c.grouped and (c.n_kv_head, c.d_head) == (3, 64)
    assert c.params_per_layer_formula == 576 * 576 + 2 * 576 * 192 + 576 * 576 == 884_736
    assert c.params_per_layer_formula_without_gqa == 4 * 576 * 576 == 1_327_104
    assert c.params_per_layer_formula_with_bias == 884_736 + 576 + 2 * 192 + 576
    assert c.kv_cache_bytes_per_layer == 2 * 1000 * 3 * 64 * 4 == 1_536_000  # K and V, 3 heads of 64, float32
    assert c.kv_cache_bytes_total == 30 * 1_536_000
    assert c.kv_cache_bytes_total_without_gqa == 3 * c.kv_cache_bytes_total  # 9 heads instead of 3
    assert c.score_entries_per_layer == 9 * 1000 * 1000
    assert c.flops_qk_per_layer == 2 * 1000 * 1000 * 576
    assert c.flops_projections_per_layer == 2 * 1000 * 576 * (2 * 576 + 2 * 192)
    labels = [label for label, _ in c.as_rows()]
    assert "KV cache, all layers, without grouped-query attention (g = h = 9)" in labels
    # without GQA the formulas are GPT-2's
    g = attention_cost(1000, 576, 9, 30)
    assert g.params_per_layer_formula == 4 * 576 * 576 and g.kv_cache_bytes_total == g.kv_cache_bytes_total_without_gqa
    assert g.flops_projections_per_layer == 8 * 1000 * 576 * 576
    with pytest.raises(ValueError):
        attention_cost(10, 64, 4, 2, n_kv_head=0)


def test_format_bytes():
    from analysis.display import format_bytes

    assert format_bytes(16384) == "16.0 KiB" and format_bytes(3 * 2**20) == "3.00 MiB"
    assert format_bytes(1000) == "1,000 bytes" and format_bytes(1024) == "1.0 KiB"  # never "1.0 KiB" for 1,000


def test_projection_parameters_count_only_the_biases_a_model_has(tiny_model):
    from analysis.lessons.lab import projection_parameter_count

    block = tiny_model.family.blocks(tiny_model.model)[0]
    modules = [tiny_model.family.attention_module(block), tiny_model.family.output_module(block)]
    d = 64
    assert projection_parameter_count(modules) == 4 * d * d + 4 * d  # c_attn and c_proj, counted once each
    w = tiny_model.attention_weights(0)  # GPT-2 has every bias: the same count read off the numpy weights
    assert projection_parameter_count(modules) == sum(a.size for a in (w.q_weight, w.q_bias, w.k_weight, w.k_bias,
                                                                     w.v_weight, w.v_bias, w.out_weight, w.out_bias))
    import torch

    no_bias = torch.nn.Linear(8, 4, bias=False)
    norm = torch.nn.LayerNorm(8)
    assert projection_parameter_count([no_bias, norm, no_bias]) == 32  # no bias, no norm, no double count
