"""Each numpy step on its own, and the whole layer against the model (parity) on small configs."""
import dataclasses

import numpy as np
import pytest

from analysis.lessons.manual_attention import (
    causal_mask, layer_norm, merge_heads, recompute_layer, softmax, split_heads)
from analysis.measures.parity import parity_report


def test_softmax_is_stable_for_huge_scores():
    w = softmax(np.array([[1000.0, 1001.0, -np.inf]]))
    np.testing.assert_allclose(w, [[1 / (1 + np.e), np.e / (1 + np.e), 0.0]])


def test_causal_mask_hides_only_future_keys():
    masked = causal_mask(np.zeros((2, 3, 3)))
    assert np.isneginf(masked[:, 0, 1:]).all() and np.isfinite(masked[:, 1, :2]).all()
    assert np.isfinite(np.diag(masked[0])).all()


def test_split_and_merge_heads_are_inverse():
    rng = np.random.default_rng(0)
    qkv = rng.normal(size=(5, 3 * 12))
    q, k, v = split_heads(qkv, 3)
    assert q.shape == (3, 5, 4)
    np.testing.assert_array_equal(merge_heads(q), qkv[:, :12])
    np.testing.assert_array_equal(merge_heads(v), qkv[:, 24:])


def test_layer_norm_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, g, b = rng.normal(size=(4, 16)), rng.normal(size=16), rng.normal(size=16)
    ref = torch.nn.functional.layer_norm(torch.tensor(x), (16,), torch.tensor(g), torch.tensor(b), 1e-5)
    np.testing.assert_allclose(layer_norm(x, g, b, 1e-5), ref.numpy(), atol=1e-12)


@pytest.mark.parametrize("manual_dtype", ["float32", "float64"])
def test_parity_on_the_tiny_model(tiny_model, tiny_result, manual_dtype):
    params = [tiny_model.attention_weights(layer) for layer in range(tiny_model.n_layer)]
    report = parity_report(tiny_result, params, manual_dtype)
    assert report.weights_max_abs_diff.shape == (3, 4)
    assert report.passed, report.to_dict()
    assert report.max_abs_diff_weights <= 1e-5  # a short text: within the fixed tolerance parity once had
    assert report.to_dict()["layers"][2]["passed"]


def test_parity_notices_a_wrong_step(tiny_model, tiny_result):
    """The report must be able to fail: scaling by 1/d_k instead of 1/√d_k (a lesson pitfall) is caught."""
    params = [tiny_model.attention_weights(layer) for layer in range(tiny_model.n_layer)]
    wrong = [dataclasses.replace(p, scale=p.scale**2) for p in params]
    report = parity_report(tiny_result, wrong)
    assert not report.passed
    assert report.max_abs_diff_weights > 1e-3


def test_every_intermediate_has_its_shape(tiny_model, tiny_result):
    r = recompute_layer(tiny_model.attention_weights(1), tiny_result.layer_inputs[1], layer=1)
    n, d, h = tiny_result.n_tokens, tiny_model.d_model, tiny_model.n_head
    assert r.x_ln.shape == (n, d) and r.qkv.shape == (n, 3 * d)
    assert r.q.shape == r.k.shape == r.v.shape == (h, n, d // h)
    assert r.scores.shape == r.scaled.shape == r.masked.shape == r.weights.shape == (h, n, n)
    assert r.head_outputs.shape == (h, n, d // h) and r.merged.shape == r.output.shape == (n, d)
    np.testing.assert_allclose(r.scaled, r.scores * (d // h) ** -0.5, rtol=1e-6)
    np.testing.assert_allclose(r.weights.sum(-1), 1, atol=1e-6)


@pytest.mark.parametrize("config", [
    dict(n_layer=1, n_head=1, d_model=16),
    dict(n_layer=2, n_head=8, d_model=64),
    dict(n_layer=3, n_head=2, d_model=32, scale_attn_by_inverse_layer_idx=True),
])
def test_parity_across_configs(tmp_path, tokenizer, config):
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_gpt2

    extra = config.pop("scale_attn_by_inverse_layer_idx", False)
    folder = save_random_gpt2(tmp_path / "m", tokenizer=tokenizer, n_positions=48, **config)
    if extra:
        import json

        cfg = json.loads((folder / "config.json").read_text())
        cfg["scale_attn_by_inverse_layer_idx"] = True
        (folder / "config.json").write_text(json.dumps(cfg))
    model = load_model(str(folder), device="cpu")
    result = run_text(model, "Attention is a budget being spent.")
    report = parity_report(result, [model.attention_weights(layer) for layer in range(model.n_layer)])
    assert report.passed, report.to_dict()


@pytest.mark.slow
def test_parity_on_a_gpt2_small_shaped_model(tmp_path_factory, tokenizer):
    """12 layers × 12 heads × 768, random init, saved and loaded like any folder."""
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model
    from analysis.model.synthetic import SMALL, save_random_gpt2

    folder = save_random_gpt2(tmp_path_factory.mktemp("small"), tokenizer=tokenizer, vocab_size=50257, **SMALL)
    model = load_model(str(folder), device="cpu")
    text = "The server rejected the request because it was overloaded. " * 6
    result = run_text(model, text, bos=True)
    assert result.attentions.shape == (12, 12, result.n_tokens, result.n_tokens)
    params = [model.attention_weights(layer) for layer in range(12)]
    for dtype in ("float32", "float64"):
        report = parity_report(result, params, dtype)
        assert report.passed, report.to_dict()
        assert report.max_abs_diff_weights < 1e-5
