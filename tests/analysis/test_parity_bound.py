"""Parity's tolerance, derived per weight from float32 rounding (analysis/measures/parity.py): it holds the
difference between two float32 computations of the same layer on thousands of random layers, it is not absurdly
loose, it grows with what makes rounding grow, a correct model passes at every length up to its context and every
deliberate mistake fails at every length; long texts are checked on a stated sample of query rows.

The independent computation is :func:`torch_attention`: the layer in PyTorch's float32, the way transformers
computes it (its rotary frequencies, ``F.linear``, ``matmul * scaling``, a mask of float32's lowest, softmax)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from analysis.families.rope import default_inv_freq  # noqa: E402
from analysis.families.steps import WEIGHT_TOLERANCE, Mistakes, recompute  # noqa: E402
from analysis.families.weights import AttentionWeights, Norm, Rotary  # noqa: E402
from analysis.measures import parity  # noqa: E402
from analysis.measures.parity import (  # noqa: E402
    head_check, parity_report, sample_rows, score_rounding, weight_bound)

#: the bound at the weight that differs most, over that difference: the median head and nine heads in ten (up to 256
#: tokens); on 1,024–2,048 tokens the median head, where the rotary frequencies' assumed gap adds with distance
MEDIAN_LOOSENESS, P90_LOOSENESS, LONG_MEDIAN_LOOSENESS = 100.0, 400.0, 300.0


# ----------------------------------------------------------------------------- random layers, two computations
def random_layer(rng: np.random.Generator, n: int | None = None):
    """One attention layer with random weights and input: any norm, full, partial or no rotary, grouped-query
    heads, biases or none, a sliding window sometimes, a massive activation dimension sometimes, and weights and
    inputs scaled so the scores range from a fraction of one to tens (softmax rows from flat to one-hot)."""
    f32 = np.float32
    dk = int(rng.choice([8, 16, 32, 64]))
    g = int(rng.choice([1, 2, 3]))
    h = g * int(rng.choice([1, 2, 3]))
    d = int(rng.choice([32, 64, 128, 256, 576]))
    n = n or int(rng.choice([4, 16, 64, 128, 256]))
    spread = float(np.exp(rng.uniform(np.log(0.3), np.log(3.0)))) / np.sqrt(d)

    def matrix(m):
        return (rng.standard_normal((d, m)) * spread).astype(f32)

    def bias(m):
        return (rng.standard_normal(m) * 0.3 if rng.random() < 0.5 else np.zeros(m)).astype(f32)

    kind = rng.choice(["rmsnorm", "layernorm", "none"])
    gain = (1 + 0.3 * rng.standard_normal(d)).astype(f32)
    norm = (None if kind == "none" else Norm("rmsnorm", gain, None, 1e-5) if kind == "rmsnorm"
            else Norm("layernorm", gain, (0.1 * rng.standard_normal(d)).astype(f32), 1e-5))
    rotary = None
    turn = rng.choice(["none", "full", "partial"])
    if turn != "none":
        r = dk if turn == "full" else max(2, dk // 4)
        theta = float(rng.choice([1e4, 1e5, 5e5]))
        rotary = Rotary(default_inv_freq(theta, r), r, theta, "default")
    weights = AttentionWeights(
        family="llama", layer=0, norm=norm, q_weight=matrix(h * dk), q_bias=bias(h * dk), k_weight=matrix(g * dk),
        k_bias=bias(g * dk), v_weight=matrix(g * dk), v_bias=bias(g * dk),
        out_weight=(rng.standard_normal((h * dk, d)) / np.sqrt(h * dk)).astype(f32), out_bias=np.zeros(d, f32),
        n_head=h, n_kv_head=g, d_head=dk, scale=dk ** -0.5, causal=bool(rng.random() < 0.8), rotary=rotary,
        sliding_window=int(rng.choice([3, 10])) if rng.random() < 0.15 else None)
    x = (rng.standard_normal((n, d)) * np.exp(rng.uniform(np.log(0.3), np.log(30)))).astype(f32)
    if rng.random() < 0.3:
        x[:, rng.integers(d)] *= 30  # a massive activation: one residual dimension far larger than the rest
    return weights, x


def torch_attention(weights: AttentionWeights, x: np.ndarray) -> np.ndarray:
    """(h, n, n) the layer's softmax weights in PyTorch float32, by transformers' own arithmetic."""
    w = weights
    t = lambda a: torch.from_numpy(np.array(a))  # noqa: E731 (a writable copy)
    xt = t(x)
    if w.norm is None:
        x_ln = xt
    elif w.norm.kind == "rmsnorm":  # LlamaRMSNorm
        x_ln = t(w.norm.weight) * (xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + w.norm.eps))
    else:
        x_ln = torch.nn.functional.layer_norm(xt, (x.shape[1],), t(w.norm.weight), t(w.norm.bias), w.norm.eps)
    n, dk = x.shape[0], w.d_head
    q = torch.nn.functional.linear(x_ln, t(w.q_weight.T), t(w.q_bias)).view(n, w.n_head, dk).transpose(0, 1)
    k = torch.nn.functional.linear(x_ln, t(w.k_weight.T), t(w.k_bias)).view(n, w.n_kv_head, dk).transpose(0, 1)
    if w.rotary is not None:  # _compute_default_rope_parameters and apply_rotary_pos_emb
        r = w.rotary.rotary_dim
        inv_freq = 1.0 / (w.rotary.theta ** (torch.arange(0, r, 2, dtype=torch.int64).to(dtype=torch.float) / r))
        freqs = (inv_freq[:, None] @ torch.arange(n, dtype=torch.float)[None, :]).T
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()

        def rotate(z):
            turned, passed = z[..., :r], z[..., r:]
            half = torch.cat([-turned[..., r // 2:], turned[..., :r // 2]], dim=-1)
            return torch.cat([turned * cos + half * sin, passed], dim=-1)

        q, k = rotate(q), rotate(k)
    k = k[torch.from_numpy(w.kv_head_of())]
    scores = torch.matmul(q, k.transpose(-1, -2)) * w.scale
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    hidden = (j > i) if w.causal else torch.zeros(n, n, dtype=torch.bool)
    if w.sliding_window is not None:
        hidden = hidden | (j <= i - w.sliding_window)
    scores = scores.masked_fill(hidden, torch.finfo(torch.float32).min)
    return torch.softmax(scores, dim=-1, dtype=torch.float32).numpy()


def check_random_layers(seed: int, cases: int, manual_dtype: str = "float32", n: int | None = None,
                        small: bool = False):
    """For ``cases`` random layers: the largest |diff| / bound, and per head the bound at the weight that differs
    most over that difference (heads whose two sides agree to 1e-30 left out). ``small``: n ≤ 64, d ≤ 128."""
    rng = np.random.default_rng(seed)
    dtype = {"float32": np.float32, "float64": np.float64}[manual_dtype]
    worst, looseness = 0.0, []
    for _ in range(cases):
        weights, x = random_layer(rng, n or (int(rng.choice([4, 16, 64])) if small else None))
        if small and x.shape[1] > 128:
            continue
        diff, bound = head_check(recompute(weights, x, dtype=dtype), weights, torch_attention(weights, x),
                                 "float32", manual_dtype)
        worst = max(worst, float((diff / np.maximum(bound, parity.UNDERFLOW)).max()))
        diff, bound = diff.reshape(len(diff), -1), bound.reshape(len(bound), -1)
        at = diff.argmax(axis=-1)
        largest, its_bound = diff[np.arange(len(diff)), at], bound[np.arange(len(diff)), at]
        looseness += list(its_bound[largest > 1e-30] / largest[largest > 1e-30])
    return worst, np.array(looseness)


def test_the_bound_holds_on_random_layers_and_is_not_absurdly_loose():
    worst, looseness = check_random_layers(seed=0, cases=80, small=True)
    assert len(looseness) > 50 and worst <= 1.0, worst
    assert np.median(looseness) <= MEDIAN_LOOSENESS and np.percentile(looseness, 90) <= P90_LOOSENESS, (
        np.median(looseness), np.percentile(looseness, 90))


@pytest.mark.slow
@pytest.mark.parametrize("manual_dtype", ["float32", "float64"])
def test_the_bound_holds_on_thousands_of_random_layers(manual_dtype):
    """float64 on the manual side: the bound of torch's float32 error alone, against a float64 reference."""
    worst, looseness = check_random_layers(seed=1 if manual_dtype == "float32" else 2,
                                           cases=1200 if manual_dtype == "float32" else 600, manual_dtype=manual_dtype)
    assert worst <= 1.0, worst
    assert np.median(looseness) <= MEDIAN_LOOSENESS and np.percentile(looseness, 90) <= P90_LOOSENESS


@pytest.mark.slow
def test_the_bound_holds_on_long_random_layers():
    """1,024 and 2,048 tokens: distant keys, where the rotary frequencies' gap between the sides counts."""
    for n in (1024, 2048):
        worst, looseness = check_random_layers(seed=n, cases=12, n=n)
        assert worst <= 1.0, (n, worst)
        assert np.median(looseness) <= LONG_MEDIAN_LOOSENESS, (n, np.median(looseness))


def test_the_bound_grows_with_the_scores_magnitude_the_distance_and_the_number_of_keys():
    rng = np.random.default_rng(5)
    weights, x = random_layer(rng, n=64)
    theta = 1e5
    weights = dataclasses.replace(weights, norm=None, sliding_window=None, causal=True,
                                  rotary=Rotary(default_inv_freq(theta, weights.d_head), weights.d_head, theta, "default"))
    rec = recompute(weights, x)
    sigma = score_rounding(rec, weights)  # (h, n, n) the scores' rounding scale
    larger = dataclasses.replace(weights, q_weight=weights.q_weight * 4, k_weight=weights.k_weight * 4)
    ratio = score_rounding(recompute(larger, x), larger)[:, ~rec.hidden] / sigma[:, ~rec.hidden]
    assert ratio.min() > 8  # 16× the scores: each side's rounding 16× larger too (the angles' part 16×, the rest 16×)
    # the frequency gap turns a distant key more: on average over keys, σ grows with the distance i − j
    last = sigma[:, -1, :]  # (h, n) the last query row against every key, distance 63 … 0
    assert (last[:, :16].mean(axis=-1) > last[:, -16:].mean(axis=-1)).all()
    # a uniform row over i + 1 keys: the softmax's sum has i + 1 terms, so its bound grows faster than 1 / (i + 1)
    flat = dataclasses.replace(weights, q_weight=weights.q_weight * 0, q_bias=weights.q_bias * 0)
    rec = recompute(flat, x)
    uniform = weight_bound(rec, flat, rec.weights)[0]  # (n, n), row i uniform over keys 0 … i
    assert (np.diff([uniform[i, 0] * (i + 1) for i in range(1, 64)]) > 0).all()


# ----------------------------------------------------------------------------- real models, every length
@pytest.fixture(scope="module")
def llama_8k(tmp_path_factory):
    """A tiny random Llama with an 8,192-token context: 1 layer, 4 query heads on 2 key/value heads, biases."""
    import transformers

    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family, tiny_sentencepiece_tokenizer

    tokenizer = tiny_sentencepiece_tokenizer()
    config = transformers.LlamaConfig(
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, hidden_size=64, intermediate_size=64,
        vocab_size=len(tokenizer), max_position_embeddings=8192, initializer_range=0.3, attention_bias=True,
        rope_theta=10000.0, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    folder = save_random_family(tmp_path_factory.mktemp("llama8k"), "llama", config=config, tokenizer=tokenizer,
                                n_positions=8192)
    return load_model(str(folder), device="cpu")


def long_text() -> str:
    from pathlib import Path

    return Path(__file__).resolve().parents[2].joinpath("README.md").read_text(encoding="utf-8") * 4


#: every deliberate mistake, by family adapter, where it is one (kv_tiled needs h/g > 1 and g > 1; the trailing
#: dims differ from the leading ones only under partial rotary; the mask flipped either way). Mistral and Qwen2
#: are the llama adapter's.
MISTAKES = {
    "llama": [Mistakes(skip_rotation=True), Mistakes(rotary_pairing="interleaved"), Mistakes(kv_tiled=True),
              Mistakes(causal=False)],
    "gpt_neox": [Mistakes(rotate_trailing_dims=True), Mistakes(skip_rotation=True),
                 Mistakes(rotary_pairing="interleaved")],
    "gpt2": [Mistakes(causal=False)],
    "bert": [Mistakes(causal=True)],
}


def passes_and_every_mistake_fails(loaded, n: int, **run) -> None:
    from analysis.run.inference import run_text

    result = run_text(loaded, long_text(), max_tokens=n, **run)
    assert result.n_tokens == n
    weights = [loaded.attention_weights(layer) for layer in range(result.n_layer)]
    report = parity_report(result, weights)
    assert report.passed, report.to_dict()
    assert report.rows.complete == (n <= parity.FULL_CHECK_TOKENS)
    for mistake in MISTAKES[loaded.family.name]:
        wrong = parity_report(result, weights, mistakes=mistake)
        assert not wrong.passed and wrong.max_bound_ratio > 100, (n, mistake, wrong.max_bound_ratio)


@pytest.mark.parametrize("model_type", ["llama", "mistral", "gpt_neox", "gpt2", "bert"])
@pytest.mark.parametrize("n", [4, 64])
def test_short_texts_pass_and_every_mistake_fails(family_run, model_type, n):
    loaded, _ = family_run(model_type)
    passes_and_every_mistake_fails(loaded, n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [4, 64, 512, 2048, 8192])
def test_a_correct_llama_passes_and_every_mistake_fails_up_to_its_8k_context(llama_8k, n):
    passes_and_every_mistake_fails(llama_8k, n, bos=True)


@pytest.mark.slow
@pytest.mark.parametrize("model_type, n", [("gpt_neox", 1024), ("mistral", 1024), ("gpt2", 1024), ("bert", 512)])
def test_every_family_passes_and_its_mistakes_fail_at_its_context(tmp_path, model_type, n):
    """Partial rotary (the wrong quarter), a sliding window, GPT-2's causal mask, an encoder's absent one."""
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    loaded = load_model(str(save_random_family(tmp_path / "m", model_type, n_positions=n)), device="cpu")
    passes_and_every_mistake_fails(loaded, n)


# ----------------------------------------------------------------------------- the rows and the report
def test_short_texts_check_every_row_and_long_ones_a_stated_sample():
    assert sample_rows(parity.FULL_CHECK_TOKENS).complete
    assert sample_rows(parity.FULL_CHECK_TOKENS).rows.tolist() == list(range(parity.FULL_CHECK_TOKENS))
    sample = sample_rows(3000, requested=[1500, 7, 99999])
    assert not sample.complete
    assert sample.first.tolist() == list(range(parity.SAMPLE_EDGE))
    assert sample.last.tolist() == list(range(3000 - parity.SAMPLE_EDGE, 3000))
    assert sample.random.size == parity.SAMPLE_RANDOM and sample.requested.tolist() == [7, 1500]  # 99999: no row
    assert set(sample.rows.tolist()) == {*sample.first.tolist(), *sample.last.tolist(), *sample.random.tolist(),
                                         *sample.requested.tolist()}
    again = sample_rows(3000)
    np.testing.assert_array_equal(again.random, sample.random)  # the draw is seeded, whatever is asked for
    assert 1500 not in again.rows and 1500 in sample.rows
    written = json.loads(json.dumps(sample.to_dict()))
    assert written["all"] is False and written["checked"] == sample.rows.tolist() and written["seed"] == 0
    assert "first and last 16" in written["why"]


def test_a_long_report_says_which_rows_it_checked_and_checks_the_rows_asked_for(tmp_path, tokenizer):
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_gpt2
    from analysis.run.inference import run_text

    loaded = load_model(str(save_random_gpt2(tmp_path / "m", n_layer=1, tokenizer=tokenizer, n_positions=600)),
                        device="cpu")
    result = run_text(loaded, long_text(), max_tokens=600)
    weights = [loaded.attention_weights(0)]
    asked = next(row for row in range(parity.SAMPLE_EDGE, 600) if row not in sample_rows(600).rows)
    report = parity_report(result, weights, rows=[asked])
    assert asked in report.rows.rows and report.rows.rows.size == 2 * parity.SAMPLE_EDGE + parity.SAMPLE_RANDOM + 1
    # the comparison itself, on those rows, independently of the report
    rows = report.rows.rows
    manual = recompute(weights[0], result.layer_inputs[0], rows=rows)
    diff = np.abs(manual.weights.astype(np.float64) - result.attentions[0][:, rows])
    np.testing.assert_allclose(report.weights_max_abs_diff[0], diff.max(axis=(-2, -1)), rtol=1e-6)
    assert set(report.weights_worst[0, :, 0].tolist()) <= set(rows.tolist())
    d = json.loads(json.dumps(report.to_dict()))
    assert d["rows"]["count"] == rows.size and d["rows"]["requested"] == [asked]


def test_the_report_keeps_its_keys_and_says_each_heads_tolerance(tiny_model, tiny_result):
    weights = [tiny_model.attention_weights(layer) for layer in range(tiny_model.n_layer)]
    report = parity_report(tiny_result, weights)
    d = json.loads(json.dumps(report.to_dict()))  # strict JSON
    assert {"max_abs_diff_weights", "max_abs_diff_output", "tolerance", "passed", "manual_dtype", "model_dtype",
            "seconds", "layers"} <= set(d)  # what readers of parity.json had
    assert d["tolerance"]["weights_kind"] == "derived" and d["tolerance"]["safety_factor"] == parity.SAFETY
    assert d["passed"] and d["max_abs_diff_weights"] <= d["tolerance"]["weights"]
    assert d["rows"] == {"all": True, "count": tiny_result.n_tokens, "why": d["rows"]["why"]}
    for layer, row in enumerate(d["layers"]):
        assert len(row["weights_tolerance_per_head"]) == len(row["bound_ratio_per_head"]) == tiny_model.n_head
        assert all(diff <= tol for diff, tol in zip(row["max_abs_diff_weights_per_head"],
                                                    row["weights_tolerance_per_head"]))
        assert max(row["bound_ratio_per_head"]) == row["max_bound_ratio"] <= 1
    # each head's tolerance is the bound of its weight that differs most, the ratio its worst weight's
    manual = recompute(weights[1], tiny_result.layer_inputs[1])
    diff, bound = head_check(manual, weights[1], tiny_result.attentions[1], "float32", "float32")
    at = diff.reshape(tiny_model.n_head, -1).argmax(axis=-1)
    np.testing.assert_allclose(report.weights_tolerance[1], bound.reshape(tiny_model.n_head, -1)[
        np.arange(tiny_model.n_head), at], rtol=1e-6)
    np.testing.assert_allclose(report.weights_bound_ratio[1],
                               (diff / np.maximum(bound, parity.UNDERFLOW)).max(axis=(-2, -1)), rtol=1e-6)


def test_a_half_precision_model_keeps_its_fixed_tolerance(tiny_model, tiny_result):
    weights = [tiny_model.attention_weights(layer) for layer in range(tiny_model.n_layer)]
    report = parity_report(dataclasses.replace(tiny_result, dtype="float16"), weights)
    assert report.tolerance_kind == "fixed" and (report.weights_tolerance == WEIGHT_TOLERANCE["float16"]).all()
    assert report.passed
    with pytest.raises(ValueError):
        weight_bound(recompute(weights[0], tiny_result.layer_inputs[0]), weights[0], tiny_result.attentions[0],
                     "float16")


def test_a_hidden_key_has_no_tolerance_so_a_wrong_mask_fails(tiny_model, tiny_result):
    weights = [tiny_model.attention_weights(layer) for layer in range(tiny_model.n_layer)]
    manual = recompute(weights[0], tiny_result.layer_inputs[0])
    _, bound = head_check(manual, weights[0], tiny_result.attentions[0], "float32", "float32")
    assert (bound[:, manual.hidden] == 0).all() and (bound[:, ~manual.hidden] > 0).all()
    assert parity_report(tiny_result, weights, mistakes=Mistakes(causal=False)).max_bound_ratio > 1e3


def test_a_report_filled_layer_by_layer_equals_the_whole_report_and_says_what_is_missing(tiny_model, tiny_result):
    """check_layer per layer (the From-scratch tab fills its table so, in the background) gives the same numbers as
    parity_report; a report of some layers is NaN elsewhere, names its checked layers, is not complete and never
    passes, and its summary numbers are over the layers checked."""
    from analysis.measures.parity import check_layer, parity_report, report_of, sample_rows

    r = tiny_result
    params = [tiny_model.attention_weights(layer) for layer in range(r.n_layer)]
    whole = parity_report(r, params)
    sample = sample_rows(r.n_tokens)
    parts = [check_layer(r, params[layer], "float32", sample) for layer in range(r.n_layer)]
    again = report_of(r, parts, "float32", sample)
    for name in ("weights_max_abs_diff", "weights_tolerance", "weights_bound_ratio", "weights_worst",
                 "output_max_abs_diff", "output_scale"):
        np.testing.assert_array_equal(getattr(again, name), getattr(whole, name), err_msg=name)
    assert again.complete and again.passed == whole.passed
    partial = report_of(r, [parts[0], None, parts[2]] + [None] * (r.n_layer - 3), "float32", sample)
    assert partial.layers_checked.tolist() == [True, False, True] + [False] * (r.n_layer - 3)
    assert not partial.complete and not partial.passed
    assert np.isnan(partial.weights_max_abs_diff[1]).all() and np.isnan(partial.output_max_abs_diff[1])
    assert partial.max_abs_diff_weights == max(whole.weights_max_abs_diff[0].max(), whole.weights_max_abs_diff[2].max())
    assert [layer["layer"] for layer in partial.to_dict()["layers"]] == [0, 2]
    assert partial.to_dict()["complete"] is False
