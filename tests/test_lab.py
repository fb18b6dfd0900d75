"""The lessons' experiment and accounting, as numbers."""
import math

import numpy as np
import pytest

from analysis.lab import attention_cost, explain_weight, row_entropy, scaling_experiment
from analysis.manual_attention import recompute_layer


@pytest.mark.parametrize("d_k", [4, 64, 512])
def test_dot_products_have_std_sqrt_dk_and_scaling_restores_one(d_k):
    e = scaling_experiment(d_k, seed=3)
    assert e.std_unscaled == pytest.approx(math.sqrt(d_k), rel=0.05)
    assert e.std_scaled == pytest.approx(1.0, rel=0.05)
    assert scaling_experiment(d_k, seed=3).std_unscaled == e.std_unscaled  # seeded


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
    rec = recompute_layer(tiny_model.attention_parameters(0), tiny_result.layer_inputs[0], 0, np.float64)
    e = explain_weight(rec, 1, 6, 3)
    assert e["exp"] / e["row_sum"] == pytest.approx(e["weight"])
    assert e["scaled"] == pytest.approx(e["score"] * e["scale"])
    assert explain_weight(rec, 1, 3, 6)["masked"] and explain_weight(rec, 1, 3, 6)["weight"] == 0
