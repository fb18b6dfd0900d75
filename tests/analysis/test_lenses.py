"""Value norms, rollout and the sink rate against independent computations."""
import numpy as np
import pytest

from analysis.measures import lenses
from analysis.measures.head_scores import sink


# ----------------------------------------------------------------------------- value norms
def _reference_value_norms(loaded, text):
    """‖f_h(x_j)‖ and A from transformers' own modules: ln_1's output caught by a forward hook, the
    head's value slice through c_attn, then *c_proj itself* on an input holding only that head's slice
    (minus c_proj's bias). Attention weights from output_attentions."""
    import torch

    model = loaded.model
    ids = torch.tensor([loaded.tokenizer(text)["input_ids"]])
    ln_out = {}
    hooks = [block.ln_1.register_forward_hook(lambda m, a, o, l=l: ln_out.__setitem__(l, o[0].detach()))
             for l, block in enumerate(model.transformer.h)]
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    d, H = loaded.d_model, loaded.n_head
    dk = d // H
    norms, weights = [], []
    with torch.no_grad():
        for l, block in enumerate(model.transformer.h):
            v = block.attn.c_attn(ln_out[l])[:, 2 * d :]  # (n, d) values, all heads
            per_head = []
            for h in range(H):
                z = torch.zeros_like(v)
                z[:, h * dk : (h + 1) * dk] = v[:, h * dk : (h + 1) * dk]
                f = block.attn.c_proj(z) - block.attn.c_proj.bias  # (n, d): f_h(x_j)
                per_head.append(f.norm(dim=-1))
            norms.append(torch.stack(per_head))
            weights.append(out.attentions[l][0])
    return ids[0].numpy(), torch.stack(weights).double().numpy(), torch.stack(norms).double().numpy()


def test_value_norms_match_a_computation_from_the_model_modules(tiny_model):
    from analysis.run.inference import run_text

    text = "The cat sat on the mat because it was tired."
    ids, weights, key_norms = _reference_value_norms(tiny_model, text)
    result = run_text(tiny_model, text, bos=False, with_probe=False)
    assert list(result.token_ids) == list(ids)
    vn = lenses.value_norms(tiny_model, result)
    L, H, n = result.n_layer, result.n_head, result.n_tokens
    assert vn.value_norms.shape == (L, H, n, n) and vn.key_norms.shape == (L, H, n)
    np.testing.assert_allclose(vn.key_norms, key_norms, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(vn.value_norms, weights * key_norms[:, :, None, :], rtol=1e-4, atol=1e-6)
    assert not vn.value_norms.flags.writeable and not vn.key_norms.flags.writeable
    shown = vn.row_normalised()
    np.testing.assert_allclose(shown.sum(axis=-1), 1.0, atol=1e-5)


def test_value_norms_core_by_hand():
    # one head, d = 2, dk = 1: W_V picks the first coordinate, b_V = 1, W_O writes it as (3, 4)·v
    x = np.array([[1.0, 5.0], [-1.0, 2.0], [0.0, 0.0]])
    w_v = np.array([[[1.0], [0.0]]])  # (1, 2, 1)
    b_v = np.array([[1.0]])
    w_o = np.array([[[3.0, 4.0]]])  # (1, 1, 2): ‖(3, 4)‖ = 5
    a = np.array([[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]])
    before = [t.copy() for t in (x, w_v, b_v, w_o, a)]
    n, keys = lenses.value_norms_layer(x, w_v, b_v, w_o, a)
    # v = x[:, 0] + 1 = (2, 0, 1) → ‖f‖ = 5·|v| = (10, 0, 5)
    np.testing.assert_allclose(keys, [[10, 0, 5]])
    np.testing.assert_allclose(n, [[[10, 0, 0], [5, 0, 0], [2, 0, 2.5]]])
    for old, new in zip(before, (x, w_v, b_v, w_o, a)):
        np.testing.assert_array_equal(old, new)


def test_per_head_parameters_with_grouped_query_attention():
    d, dk = 3, 2
    v_weight = np.arange(d * 2 * dk, dtype=float).reshape(d, 2 * dk)  # 2 value heads
    v_bias = np.array([1.0, 2.0, 3.0, 4.0])
    out_weight = np.arange(4 * dk * d, dtype=float).reshape(4 * dk, d)  # 4 query heads
    w_v, b_v, w_o = lenses.per_head_value_parameters(v_weight, v_bias, out_weight, n_head=4, n_kv_head=2)
    assert w_v.shape == (4, d, dk) and b_v.shape == (4, dk) and w_o.shape == (4, dk, d)
    # query heads 0, 1 read value head 0 (columns 0-1); heads 2, 3 read value head 1 (columns 2-3)
    for h, cols in enumerate([slice(0, 2), slice(0, 2), slice(2, 4), slice(2, 4)]):
        np.testing.assert_array_equal(w_v[h], v_weight[:, cols])
        np.testing.assert_array_equal(b_v[h], v_bias[cols])
        np.testing.assert_array_equal(w_o[h], out_weight[h * dk : (h + 1) * dk])


def test_row_normalise_and_first_token_shares():
    n = np.array([[[[3.0, 0, 0], [1.0, 3.0, 0], [0.0, 0.0, 0.0]]]])  # a zero row stays zero
    np.testing.assert_allclose(lenses.row_normalise(n)[0, 0], [[1, 0, 0], [0.25, 0.75, 0], [0, 0, 0]])
    a = np.array([[[[1.0, 0, 0], [0.8, 0.2, 0], [0.6, 0.2, 0.2]]]])
    norms = a * np.array([0.1, 1.0, 1.0])  # the first token's value vector is tiny
    raw, weighted = lenses.first_token_shares(a, norms)
    np.testing.assert_allclose(raw, [[0.7]])
    expected = np.mean([0.08 / (0.08 + 0.2), 0.06 / (0.06 + 0.2 + 0.2)])
    np.testing.assert_allclose(weighted, [[expected]])


# ----------------------------------------------------------------------------- rollout
def _uniform(n):
    u = np.tril(np.ones((n, n)))
    return u / u.sum(axis=1, keepdims=True)


def test_rollout_of_identity_layers_is_identity():
    a = np.broadcast_to(np.eye(4), (3, 2, 4, 4)).copy()
    r = lenses.rollout(a)
    np.testing.assert_allclose(r, np.broadcast_to(np.eye(4), (3, 4, 4)), atol=1e-7)
    assert not r.flags.writeable


def test_rollout_matches_the_formula_on_hand_made_layers():
    n = 3
    u = _uniform(n)
    # layer 0: both heads uniform → Â(0) = 0.5·U + 0.5·I
    # layer 1: one head identity, one head previous-token-ish → mean, then 0.5/0.5 with I
    prev = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=float)
    a = np.stack([np.stack([u, u]), np.stack([np.eye(n), prev])])
    a0 = 0.5 * u + 0.5 * np.eye(n)
    a1 = 0.5 * (0.5 * np.eye(n) + 0.5 * prev) + 0.5 * np.eye(n)
    r = lenses.rollout(a)
    # written out by hand: row 1 of Â(0) is (0.25, 0.75, 0)
    np.testing.assert_allclose(a0[1], [0.25, 0.75, 0])
    np.testing.assert_allclose(r[0], a0, atol=1e-7)
    np.testing.assert_allclose(r[1], a1 @ a0, atol=1e-7)
    # row 2 of R(1): Â(1)[2] = (0, 0.25, 0.75); times Â(0)
    np.testing.assert_allclose(r[1][2], 0.25 * a0[1] + 0.75 * a0[2], atol=1e-7)


def test_rollout_rows_sum_to_one_and_are_causal(tiny_result):
    before = tiny_result.attentions.copy()
    r = lenses.rollout(tiny_result.attentions)
    np.testing.assert_array_equal(tiny_result.attentions, before)
    assert r.shape == (tiny_result.n_layer, tiny_result.n_tokens, tiny_result.n_tokens)
    np.testing.assert_allclose(r.sum(axis=-1), 1.0, atol=1e-5)
    assert np.allclose(np.triu(r, k=1), 0)


def test_rollout_renormalises_rows_that_do_not_sum_to_one():
    a = np.full((1, 1, 2, 2), 0.0)
    a[0, 0] = [[2.0, 0.0], [1.0, 1.0]]  # rows sum to 2: Â rows are (1.5, 0)/1.5 and (0.5, 1.0)/1.5
    np.testing.assert_allclose(lenses.rollout(a)[0], [[1, 0], [1 / 3, 2 / 3]], rtol=1e-6)


# ----------------------------------------------------------------------------- rollout, first input hidden
def _skip_first_by_the_formula(r):
    """The definition, one row at a time: R̃[i, j] = R[i, j] / (1 − R[i, 0]) for j ≥ 1, R̃[i, 0] NaN, and the whole
    row NaN where 1 − R[i, 0] is (within rounding) 0."""
    r = np.asarray(r, dtype=np.float64)
    out = np.full(r.shape, np.nan)
    for index in np.ndindex(*r.shape[:-1]):  # every (…, i): one query row
        row = r[index]
        rest = 1.0 - row[0]
        if rest > 1e-12:
            out[index][1:] = row[1:] / rest
    return out


def _random_maps(rng, causal, L=3, H=2, n=7, sink=0.0):
    """Softmax-like maps (L, H, n, n): random rows, causal or not, with ``sink`` of each row's weight on key 0."""
    a = rng.random((L, H, n, n))
    if causal:
        a = np.tril(a)
    a /= a.sum(axis=-1, keepdims=True)
    a = (1 - sink) * a
    a[..., 0] += sink
    return a


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("sink", [0.0, 0.9])
def test_rollout_skip_first_is_the_formula_row_by_row(causal, sink):
    rng = np.random.default_rng(7)
    r = lenses.rollout(_random_maps(rng, causal, sink=sink))  # (L, n, n) float32
    got = lenses.rollout_skip_first(r)
    assert got.dtype == np.float32 and got.shape == r.shape
    assert np.isnan(got[..., 0]).all()  # the first input hidden, in every row of every layer
    expected = _skip_first_by_the_formula(r)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7, equal_nan=True)
    shown = ~np.isnan(got[..., 1])
    np.testing.assert_allclose(np.nansum(got, axis=-1)[shown], 1.0, atol=1e-5)  # each row renormalised
    if sink:  # by the last layer the sink holds most of each row of R; past it the other inputs' shares sum to 1
        assert (r[-1, 1:, 0] > 0.8).all() and (r[-1, 1:, 1:].sum(axis=-1) < 0.2).all()


def test_rollout_skip_first_hides_a_row_that_draws_on_the_first_token_alone():
    r = np.array([[1.0, 0.0, 0.0],  # all on token 0: nothing to renormalise, the row is hidden
                  [0.5, 0.25, 0.25],
                  [0.2, 0.0, 0.8]])
    before = r.copy()
    with np.errstate(all="raise"):  # no division by zero, no invalid value
        got = lenses.rollout_skip_first(r)
    np.testing.assert_array_equal(r, before)  # the input is not modified
    assert np.isnan(got[0]).all() and not np.isinf(got).any()
    np.testing.assert_allclose(got[1:], [[np.nan, 0.5, 0.5], [np.nan, 0.0, 1.0]], equal_nan=True)
    np.testing.assert_allclose(got, _skip_first_by_the_formula(r), equal_nan=True)


def test_rollout_skip_first_renormalises_a_sink_row_whose_rest_float32_rounds_away():
    """R[i, 0] = 1 − 1e-9 is 1.0 in float32, where 1 − R[i, 0] is 0; the sum of the other inputs keeps 1e-9."""
    r = np.array([[1 - 1e-9, 2.5e-10, 7.5e-10]])
    assert np.float32(r[0, 0]) == 1.0
    np.testing.assert_allclose(lenses.rollout_skip_first(r), [[np.nan, 0.25, 0.75]], rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(lenses.rollout_skip_first(r), _skip_first_by_the_formula(r), rtol=1e-6,
                               equal_nan=True)


def test_a_causal_models_first_position_is_hidden_at_every_layer(tiny_result):
    got = lenses.rollout_of_result(tiny_result, skip_first=True)
    assert not got.flags.writeable and got.dtype == np.float32
    assert np.isnan(got[:, 0]).all()  # position 0 draws on token 0 alone
    np.testing.assert_allclose(got, _skip_first_by_the_formula(lenses.rollout(tiny_result.attentions)), rtol=1e-5,
                               atol=1e-7, equal_nan=True)
    np.testing.assert_array_equal(lenses.rollout_of_result(tiny_result), lenses.rollout(tiny_result.attentions))


def test_the_rollout_lens_hides_the_first_input_when_asked(tiny_model, tiny_result):
    rollout = lenses.lens_named("rollout")
    plain = lenses.compute_lenses(lenses.LensInputs(tiny_result, tiny_model), [rollout])["rollout"]
    skipped = lenses.compute_lenses(lenses.LensInputs(tiny_result, tiny_model, rollout_skip_first=True),
                                    [rollout])["rollout"]
    np.testing.assert_array_equal(plain, lenses.rollout(tiny_result.attentions))
    np.testing.assert_array_equal(skipped, lenses.rollout_skip_first(plain))
    assert np.isnan(skipped[..., 0]).all() and not np.isnan(plain).any()


# ----------------------------------------------------------------------------- sink rate
def test_sink_rate_counts_heads_above_epsilon():
    n = 5
    heads = []
    for first in (0.9, 0.3, 0.31, 0.0):
        m = np.zeros((n, n))
        m[:, 0] = first
        m[np.arange(n), np.arange(n)] += 1 - first
        m[0] = [1, 0, 0, 0, 0]
        heads.append(m)
    a = np.stack(heads).reshape(2, 2, n, n)
    before = a.copy()
    s = lenses.sink_rate(a)
    np.testing.assert_array_equal(s.mask, [[True, False], [True, False]])  # 0.3 does not *exceed* 0.3
    assert s.rate == 0.5 and s.epsilon == 0.3
    np.testing.assert_allclose(s.scores, sink(a))
    assert lenses.sink_rate(a, epsilon=0.95).rate == 0.0
    assert lenses.sink_rate(a, epsilon=0.0).rate == 0.75
    np.testing.assert_array_equal(a, before)
    assert not s.mask.flags.writeable
    with pytest.raises(ValueError):
        lenses.sink_rate(a, epsilon=1.5)


def test_sink_rate_of_one_token_is_undefined_not_zero(tmp_path):
    """Nothing to count is not "no sink heads": the rate is NaN, null in summary.json."""
    import json

    from analysis.export.writers import write_json

    s = lenses.sink_rate(np.ones((2, 3, 1, 1)))
    assert np.isnan(s.rate) and not s.mask.any()
    assert json.loads(write_json({"sink_rate": s.rate}, tmp_path / "s.json").read_text()) == {"sink_rate": None}
    partly = np.full((2, 3), np.nan)
    partly[0, 0] = 0.9
    assert lenses.sink_rate_of_scores(partly).rate == pytest.approx(1 / 6)


def test_bundled_sink_heads_move_less_than_their_weight():
    """The measurement the issue asks for, on the bundled model (trained weights)."""
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model

    loaded = load_model("bundled", device="cpu")
    result = run_text(loaded, "The cat sat on the mat because it was tired. The cat sat on the mat.",
                      with_probe=False)
    vn = lenses.value_norms(loaded, result)
    rate = lenses.sink_rate(result.attentions)
    raw, weighted = lenses.first_token_shares(result.attentions, vn.value_norms)
    assert rate.mask.any()
    # measured: 12 sink heads, raw share 0.65, value-weighted 0.52 (the first token's value vectors
    # are about half the norm of the others'); per head the gap varies, on average it is clear
    assert weighted[rate.mask].mean() < raw[rate.mask].mean() - 0.05


# ----------------------------------------------------------------------------- value norms through a family adapter
def _tiny_llama(vocab: int = 512):
    """Llama-style with grouped-query attention (4 query heads on 2 key/value heads) and biases on."""
    import torch
    from transformers import LlamaConfig

    from analysis.families import family_for

    config = LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=64, num_attention_heads=4,
                         num_key_value_heads=2, attention_bias=True, vocab_size=vocab, max_position_embeddings=64,
                         initializer_range=0.3)
    family = family_for(config)
    torch.manual_seed(0)
    model = family.model_class(config)._from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return family, model


def test_family_value_norms_match_the_model_modules_with_grouped_query_attention():
    """‖f_h(x_j)‖ from Llama's own v_proj and o_proj: head h reads value head h // 2; o_proj on an input
    holding only head h's slice (o_proj has a bias: taken off) moves it into the residual stream."""
    import torch

    family, model = _tiny_llama()
    ids = [int(i) for i in np.random.default_rng(0).integers(3, 500, size=10)]
    blocks = family.blocks(model)
    with torch.no_grad():  # the model's own: hidden_states[l] entered block l, its input_layernorm entered attention
        out = model(input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
        block_inputs = np.stack([out.hidden_states[layer][0].numpy() for layer in range(len(blocks))])  # (L, n, d)
        attention_inputs = np.stack([block.input_layernorm(out.hidden_states[layer][0]).numpy()
                                     for layer, block in enumerate(blocks)])  # (L, n, d)
    attentions = np.stack([a[0].numpy() for a in out.attentions])  # (L, H, n, n)
    H, g, dk = 4, 2, 16
    reference = []
    with torch.no_grad():
        for layer, block in enumerate(blocks):
            attn = family.attention_module(block)
            v = attn.v_proj(torch.from_numpy(attention_inputs[layer]))  # (n, g·dk)
            per_head = []
            for h in range(H):
                kv = h // (H // g)
                z = torch.zeros(len(ids), H * dk)
                z[:, h * dk : (h + 1) * dk] = v[:, kv * dk : (kv + 1) * dk]
                per_head.append((attn.o_proj(z) - attn.o_proj.bias).norm(dim=-1))
            reference.append(torch.stack(per_head))
    reference = torch.stack(reference).double().numpy()  # (L, H, n)

    def weights_of(layer):
        return family.attention_weights(model, layer)

    for inputs in (attention_inputs, None):  # given, or the family's RMSNorm of the block input
        vn = lenses.value_norms_of(weights_of, inputs, block_inputs, attentions)
        np.testing.assert_allclose(vn.key_norms, reference, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(vn.value_norms, attentions * reference[:, :, None, :], rtol=1e-4, atol=1e-6)
    assert not np.allclose(reference[:, 0], reference[:, 1])  # heads 0 and 1 share a value head, not W_O rows


def test_sink_rate_of_scores_does_not_touch_its_input():
    scores = np.array([[0.9, 0.3, np.nan], [0.31, 0.0, 0.5]])
    kept = scores.copy()
    rate = lenses.sink_rate_of_scores(scores, 0.3)
    assert rate.rate == pytest.approx(3 / 6) and rate.mask.tolist() == [[True, False, False], [True, False, True]]
    np.testing.assert_array_equal(scores, kept)
    assert scores.flags.writeable and not rate.mask.flags.writeable


# ----------------------------------------------------------------------------- the registry
def test_the_registry_computes_each_lens_with_its_function(tiny_model, tiny_result):
    values = lenses.compute_lenses(lenses.LensInputs(tiny_result, tiny_model, sink_epsilon=0.25))
    assert list(values) == [lens.name for lens in lenses.LENSES] == ["value_norms", "rollout", "sink_rate"]
    np.testing.assert_array_equal(values["value_norms"].value_norms,
                                  lenses.value_norms(tiny_model, tiny_result).value_norms)
    np.testing.assert_array_equal(values["rollout"], lenses.rollout(tiny_result.attentions))
    sinks = lenses.sink_rate(tiny_result.attentions, 0.25, tiny_result.sliding_windows)
    assert values["sink_rate"].rate == sinks.rate and values["sink_rate"].epsilon == 0.25
    assert [lens.name for lens in lenses.LENSES if lens.needs_model] == ["value_norms"]
    assert all(lens.definition for lens in lenses.LENSES)
    assert lenses.lens_named("rollout").name == "rollout"
    with pytest.raises(KeyError):
        lenses.lens_named("no such lens")


def test_what_an_export_writes_of_each_lens(tiny_model, tiny_result):
    values = lenses.compute_lenses(lenses.LensInputs(tiny_result, tiny_model, sink_epsilon=0.25))
    arrays = lenses.npz_arrays(values)
    assert list(arrays) == ["value_norms", "rollout"] and all(a.dtype == np.float32 for a in arrays.values())
    np.testing.assert_array_equal(arrays["value_norms"], values["value_norms"].value_norms)
    np.testing.assert_array_equal(arrays["rollout"], values["rollout"])
    assert lenses.summary_fields(values) == {"sink_rate": values["sink_rate"].rate, "sink_epsilon": 0.25}
    without_model = {k: v for k, v in values.items() if not lenses.lens_named(k).needs_model}
    assert list(lenses.npz_arrays(without_model)) == ["rollout"]


def test_the_registry_describes_the_export_folder(tiny_model, tiny_result, tmp_path):
    """attention.npz and summary.json of an export (``write_export``) hold exactly what the registry says, in its order."""
    import json

    from analysis.export.contents import export_contents, write_export
    from analysis.measures.head_scores import all_scores

    values = lenses.compute_lenses(lenses.LensInputs(tiny_result, tiny_model, sink_epsilon=0.25))
    write_export(tmp_path / "x", export_contents(tiny_model, tiny_result, all_scores(tiny_result), sink_epsilon=0.25))
    with np.load(tmp_path / "x" / "attention.npz") as data:
        assert data.files == ["attentions", *lenses.npz_arrays(values), "tokens", "token_ids"]
        for name, array in lenses.npz_arrays(values).items():
            np.testing.assert_array_equal(data[name], array)
    summary = json.loads((tmp_path / "x" / "summary.json").read_text(encoding="utf-8"))
    assert {k: summary[k] for k in lenses.summary_fields(values)} == lenses.summary_fields(values)


def test_the_first_inputs_share_is_the_mean_of_its_column_past_position_zero():
    r = np.array([[1.0, 0.0, 0.0],
                  [0.75, 0.25, 0.0],
                  [0.25, 0.25, 0.5]], dtype=np.float32)
    assert lenses.first_input_share(r) == pytest.approx((0.75 + 0.25) / 2)  # row 0 (1.0) left out
    assert np.isnan(lenses.first_input_share(np.ones((1, 1))))
    rng = np.random.default_rng(3)
    sunk = lenses.rollout(_random_maps(rng, True, sink=0.9))[-1]
    assert lenses.first_input_share(sunk) == pytest.approx(sum(sunk[i, 0] for i in range(1, len(sunk))) /
                                                           (len(sunk) - 1), rel=1e-6)
    assert lenses.first_input_share(sunk) >= lenses.FIRST_INPUT_DOMINATES
