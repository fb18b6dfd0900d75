"""The per-family adapters on tiny random-weight models built from transformers' own config classes, saved and
loaded as the app loads them (load_model) and run as it runs them (run_text).

For every family (that the captured attention is transformers' own: test_families_engine.py): the numpy
recomputation matches it (weights and the attention output before the residual), and a wrong
recomputation (no rotation, the wrong pairing, the wrong key/value head, a mask on an encoder) fails.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from analysis.errors import InputError, ModelLoadError  # noqa: E402
from analysis.families import FAMILIES, family_for  # noqa: E402
from analysis.families.steps import Mistakes  # noqa: E402
from analysis.families import steps as fb  # noqa: E402
from analysis.families.steps import OUTPUT_RELATIVE_TOLERANCE  # noqa: E402
from analysis.measures.parity import parity_report  # noqa: E402
from analysis.model.loading import load_model  # noqa: E402
from analysis.model.synthetic import save_random_family, tiny_family_config  # noqa: E402
from analysis.run.inference import run_text  # noqa: E402

MODEL_TYPES = ("gpt2", "llama", "qwen2", "mistral", "gpt_neox", "bert", "roberta", "distilbert")
#: More tokens than any tiny model's context (64): a run of it holds as many as ``max_tokens`` says.
LONG = " ".join(["the cat sat on the mat"] * 40)


def weights_of(loaded):
    return [loaded.attention_weights(layer) for layer in range(loaded.n_layer)]


@pytest.fixture(scope="module")
def built(family_run, tmp_path_factory):
    """``built(model_type)``: (loaded, result of run_text on helpers.TEXT, its attention weights): conftest's
    family_run, and roberta, which the engine's own tests leave out, saved here."""
    from helpers import TEXT

    cache = {}

    def get(model_type):
        if model_type not in cache:
            if model_type == "roberta":
                loaded = load_model(str(save_random_family(tmp_path_factory.mktemp("roberta"), "roberta", seed=3)),
                                    device="cpu")
                result = run_text(loaded, TEXT)
            else:
                loaded, result = family_run(model_type)
            cache[model_type] = (loaded, result, weights_of(loaded))
        return cache[model_type]

    return get


def attention_inputs(loaded, token_ids) -> np.ndarray:
    """(layer, n, d): what entered each layer's attention module, recorded by hooks of this test's own."""
    blocks = list(loaded.family.blocks(loaded.model))
    seen = [None] * len(blocks)

    def record(layer):
        def hook(module, args, kwargs):
            seen[layer] = (args[0] if args else kwargs["hidden_states"])[0].detach().float().numpy()
        return hook

    handles = [loaded.family.attention_module(block).register_forward_pre_hook(record(layer), with_kwargs=True)
               for layer, block in enumerate(blocks)]
    try:
        with torch.inference_mode():
            loaded.model.base_model(input_ids=torch.tensor([token_ids.tolist()]), **loaded.family.forward_kwargs())
    finally:
        for handle in handles:
            handle.remove()
    return np.stack(seen)


# ----------------------------------------------------------------------------- capture
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_causal_families_hide_future_keys_and_encoders_do_not(built, model_type):
    loaded, result, _ = built(model_type)
    upper = np.triu(np.ones((result.n_tokens, result.n_tokens), dtype=bool), k=1)
    future = result.attentions[..., upper]
    if loaded.family.causal:
        assert (future == 0).all()
    else:
        assert (future > 0).all()


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_what_enters_attention_is_the_family_norm_of_the_block_input(built, model_type):
    """The recompute's x_ln (ln_1 / RMSNorm / LayerNorm / nothing for post-LN) is what the model fed attention."""
    loaded, result, weights = built(model_type)
    entered = attention_inputs(loaded, result.token_ids)
    for layer in range(2):
        rec = loaded.family.recompute(weights[layer], result.layer_inputs[layer])
        np.testing.assert_allclose(rec.x_ln, entered[layer], atol=2e-5, rtol=0)
    if loaded.family.name in ("bert", "distilbert"):
        np.testing.assert_array_equal(entered, result.layer_inputs)


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("manual_dtype", ["float32", "float64"])
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_numpy_recompute_matches_the_model(built, model_type, manual_dtype):
    _, result, weights = built(model_type)
    report = parity_report(result, weights, manual_dtype)
    assert report.passed, report.to_dict()
    assert report.max_abs_diff_weights <= 1e-5  # a short text: within the fixed tolerance parity once had
    scale = np.maximum(1, np.abs(result.attention_outputs).max(axis=(1, 2)))
    assert (report.output_max_abs_diff <= OUTPUT_RELATIVE_TOLERANCE["float32"] * scale).all()


WRONG = [
    ("llama", Mistakes(skip_rotation=True)),
    ("llama", Mistakes(rotary_pairing="interleaved")),  # the original paper's pairing on an HF checkpoint
    ("llama", Mistakes(kv_tiled=True)),  # query head i on key/value head i % g
    ("llama", Mistakes(causal=False)),
    ("qwen2", Mistakes(skip_rotation=True)),
    ("mistral", Mistakes(skip_rotation=True)),
    ("mistral", Mistakes(kv_tiled=True)),
    ("gpt_neox", Mistakes(skip_rotation=True)),
    ("gpt_neox", Mistakes(rotary_pairing="interleaved")),
    ("gpt_neox", Mistakes(rotate_trailing_dims=True)),  # the wrong quarter of each head
    ("gpt2", Mistakes(causal=False)),
    ("bert", Mistakes(causal=True)),
    ("roberta", Mistakes(causal=True)),
    ("distilbert", Mistakes(causal=True)),
]


@pytest.mark.parametrize("model_type, mistake", WRONG, ids=[f"{t}-{m}" for t, m in WRONG])
def test_a_wrong_recompute_fails_parity(built, model_type, mistake):
    _, result, weights = built(model_type)
    report = parity_report(result, weights, mistakes=mistake)
    assert not report.passed
    assert report.max_abs_diff_weights > 1e-2


def test_mistral_needs_its_sliding_window(built):
    _, result, weights = built("mistral")
    assert weights[0].sliding_window == 5 and result.n_tokens > 8
    assert (result.attentions[0, :, 7, :3] == 0).all()  # query 7 no longer sees keys 0..2
    no_window = [dataclasses.replace(w, sliding_window=None) for w in weights]
    assert not parity_report(result, no_window).passed


def test_wrong_scale_fails_for_every_family(built):
    for model_type in MODEL_TYPES:
        _, result, weights = built(model_type)
        wrong = [dataclasses.replace(w, scale=w.scale ** 2) for w in weights]  # 1/dk instead of 1/√dk
        assert not parity_report(result, wrong).passed, model_type


def test_gpt2_adapter_agrees_with_the_existing_gpt2_recompute(built):
    """Two implementations of GPT-2's layer (manual_attention's fused one, the lesson, and the family-blind
    one) agree, and the lesson's is GPT-2's only."""
    from analysis.lessons.manual_attention import recompute_layer

    loaded, result, weights = built("gpt2")
    block = loaded.model.transformer.h[1]
    np.testing.assert_array_equal(  # c_attn put back together from the thirds is the model's own
        np.concatenate([weights[1].q_weight, weights[1].k_weight, weights[1].v_weight], axis=1),
        block.attn.c_attn.weight.detach().numpy())
    old = recompute_layer(weights[1], result.layer_inputs[1], 1, np.float64)
    new = loaded.family.recompute(weights[1], result.layer_inputs[1], dtype=np.float64)
    for name in ("x_ln", "qkv", "q", "k", "v", "scores", "scaled", "weights", "head_outputs", "merged", "output"):
        np.testing.assert_allclose(getattr(new, name), getattr(old, name), atol=1e-6, err_msg=name)
    llama = built("llama")
    with pytest.raises(ValueError, match="family"):
        recompute_layer(llama[2][0], llama[1].layer_inputs[0])


# ----------------------------------------------------------------------------- the recompute's record
def test_recomputation_keeps_every_step_with_its_shape(built):
    loaded, result, weights = built("llama")
    family, w = loaded.family, weights[0]
    rec = family.recompute(w, result.layer_inputs[0])
    n, d, h, g, dk = result.n_tokens, 64, 4, 2, 16
    assert rec.steps == family.steps and "rotate" in rec.steps and "repeat_kv" in rec.steps
    assert rec.x.shape == rec.x_ln.shape == rec.output.shape == (n, d)
    assert rec.qkv.shape == (n, (h + 2 * g) * dk)
    assert rec.q_before_rotation.shape == rec.q.shape == rec.k.shape == rec.v.shape == (h, n, dk)
    assert rec.k_before_rotation.shape == rec.k_per_kv_head.shape == rec.v_per_kv_head.shape == (g, n, dk)
    assert rec.angles.shape == (n, dk // 2) and rec.rotary_dim == dk
    assert rec.scores.shape == rec.weights.shape == (h, n, n) and rec.merged.shape == (n, h * dk)
    np.testing.assert_array_equal(rec.kv_head_of, [0, 0, 1, 1])
    np.testing.assert_array_equal(rec.k[1], rec.k_per_kv_head[0])  # query head 1 uses key/value head 0
    np.testing.assert_array_equal(rec.v[3], rec.v_per_kv_head[1])
    # position 0 is not turned at all; later positions are
    np.testing.assert_allclose(rec.q[:, 0], rec.q_before_rotation[:, 0], atol=1e-6)
    assert np.abs(rec.q[:, 3] - rec.q_before_rotation[:, 3]).max() > 1e-2
    for array in (rec.x, rec.q, rec.weights, rec.output, rec.hidden, w.q_weight, w.rotary.inv_freq):
        assert not array.flags.writeable


def test_neox_rotates_only_the_first_quarter_of_each_head(built):
    loaded, result, weights = built("gpt_neox")
    rec = loaded.family.recompute(weights[0], result.layer_inputs[0])
    assert rec.rotary_dim == 4 and weights[0].qkv_layout == "fused per head"
    np.testing.assert_array_equal(rec.q[..., 4:], rec.q_before_rotation[..., 4:])
    assert np.abs(rec.q[:, 1:, :4] - rec.q_before_rotation[:, 1:, :4]).max() > 1e-3


def test_encoder_recompute_has_no_mask_and_no_norm(built):
    loaded, result, weights = built("bert")
    rec = loaded.family.recompute(weights[0], result.layer_inputs[0])
    assert not rec.hidden.any() and np.isfinite(rec.masked).all()
    assert weights[0].norm is None and "causal_mask" not in loaded.family.steps
    np.testing.assert_array_equal(rec.x_ln, rec.x)


def test_recompute_does_not_modify_its_input(built):
    loaded, result, weights = built("qwen2")
    x = np.array(result.layer_inputs[0])
    before = x.copy()
    loaded.family.recompute(weights[0], x)
    np.testing.assert_array_equal(x, before)
    assert x.flags.writeable  # not even frozen behind the caller's back


# ----------------------------------------------------------------------------- steps against transformers
def test_rms_norm_matches_transformers():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    rng = np.random.default_rng(0)
    x, gamma = rng.normal(size=(5, 16)).astype(np.float32), rng.normal(size=16).astype(np.float32)
    norm = LlamaRMSNorm(16, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor(gamma))
        ref = norm(torch.tensor(x)).numpy()
    np.testing.assert_allclose(fb.rms_norm(x, gamma, 1e-5), ref, atol=1e-6)
    assert np.abs(fb.layer_norm(x, gamma, 0 * gamma, 1e-5) - ref).max() > 1e-2  # the other norm is not the same


@pytest.mark.parametrize("rotary_dim", [16, 4])
def test_apply_rotary_matches_transformers(rotary_dim):
    """Full rotary against Llama's apply_rotary_pos_emb, partial against GPT-NeoX's (first r dims only)."""
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_apply

    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 7, 16)).astype(np.float32)  # (heads, n, dk)
    inv_freq = (1.0 / 10000 ** (np.arange(0, rotary_dim, 2) / rotary_dim)).astype(np.float32)  # (r/2,)
    angles = fb.rotary_angles(np.arange(7), inv_freq)  # (n, r/2)
    emb = torch.tensor(np.concatenate([angles, angles], -1))[None]  # (1, n, r)
    apply = llama_apply if rotary_dim == 16 else neox_apply
    ref, _ = apply(torch.tensor(q)[None], torch.tensor(q)[None], emb.cos(), emb.sin())
    np.testing.assert_allclose(fb.apply_rotary(q, angles, rotary_dim), ref[0].numpy(), atol=1e-5)


def test_rotation_keeps_length_and_scores_depend_only_on_the_offset():
    """What rotary is for: |q| is unchanged and q_m·k_n depends on m − n, not on m and n."""
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(1, 1, 8)), rng.normal(size=(1, 1, 8))
    inv_freq = (1.0 / 10000 ** (np.arange(0, 8, 2) / 8)).astype(np.float32)

    def at(t, pos):
        return fb.apply_rotary(t, fb.rotary_angles(np.array([pos]), inv_freq), 8)[0, 0]

    assert np.linalg.norm(at(q, 5)) == pytest.approx(np.linalg.norm(q), rel=1e-6)
    assert at(q, 7) @ at(k, 3) == pytest.approx(at(q, 14) @ at(k, 10), rel=1e-4)
    assert abs(at(q, 7) @ at(k, 3) - at(q, 7) @ at(k, 5)) > 1e-3


def test_repeat_kv_matches_transformers():
    from transformers.models.llama.modeling_llama import repeat_kv

    kv = np.random.default_rng(3).normal(size=(2, 5, 4))  # (g, n, dk)
    ref = repeat_kv(torch.tensor(kv)[None], 3)[0].numpy()  # (h = 6, n, dk)
    np.testing.assert_array_equal(fb.repeat_kv(kv, np.arange(6) // 3), ref)


def test_hidden_keys_by_hand():
    np.testing.assert_array_equal(fb.hidden_keys(3, 3, causal=False, sliding_window=None), np.zeros((3, 3), bool))
    np.testing.assert_array_equal(fb.hidden_keys(3, 3, causal=True, sliding_window=None),
                                  [[0, 1, 1], [0, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(fb.hidden_keys(4, 4, causal=True, sliding_window=2),
                                  [[0, 1, 1, 1], [0, 0, 1, 1], [1, 0, 0, 1], [1, 1, 0, 0]])


def test_hidden_keys_of_chosen_query_rows_are_those_rows_of_the_whole_mask():
    whole = fb.hidden_keys(9, 9, causal=True, sliding_window=3)
    np.testing.assert_array_equal(fb.hidden_keys(3, 9, True, 3, query_positions=np.array([0, 4, 8])), whole[[0, 4, 8]])


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_recomputing_some_query_rows_gives_those_rows_of_the_whole_recomputation(built, model_type):
    """``rows``: the scores, weights and output of those query rows against every key, as the whole layer has them."""
    from analysis.families import family_named

    _, result, weights = built(model_type)
    adapter = family_named(weights[1].family)
    whole = adapter.recompute(weights[1], result.layer_inputs[1])
    rows = np.array([0, 3, result.n_tokens - 1])
    some = adapter.recompute(weights[1], result.layer_inputs[1], rows=rows)
    np.testing.assert_array_equal(some.rows, rows)
    np.testing.assert_array_equal(some.q, whole.q)
    np.testing.assert_array_equal(some.hidden, whole.hidden[rows])
    for name in ("scores", "scaled", "masked", "weights", "head_outputs", "output"):
        mine, theirs = getattr(some, name), getattr(whole, name)
        theirs = theirs[rows] if name == "output" else theirs[:, rows]
        scale = max(1.0, float(np.abs(theirs[np.isfinite(theirs)]).max()))  # float32 rounding, by the magnitude
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-6 * scale, err_msg=name)
    assert whole.rows is None


def test_neox_fused_split_matches_the_models_own_chunking(built):
    from analysis.families.neox import split_fused_per_head

    loaded, result, _ = built("gpt_neox")
    attn = loaded.model.gpt_neox.layers[0].attention
    x = torch.tensor(attention_inputs(loaded, result.token_ids)[0])
    with torch.no_grad():
        qkv = attn.query_key_value(x).view(result.n_tokens, 4, 48).transpose(0, 1)  # (h, n, 3dk)
        q_ref, k_ref, v_ref = (t.numpy() for t in qkv.chunk(3, dim=-1))
    w = attn.query_key_value.weight.detach().numpy().T
    b = attn.query_key_value.bias.detach().numpy()
    for (wi, bi), ref in zip(split_fused_per_head(w, b, 4), (q_ref, k_ref, v_ref)):
        np.testing.assert_allclose(fb.split_heads(x.numpy() @ wi + bi, 4), ref, atol=1e-5)


# ----------------------------------------------------------------------------- rotary scaling
def _llama_with(folder, rope_parameters: dict, max_positions: int = 64):
    """The tiny Llama (loaded) with these rotary parameters and this context."""
    from transformers import LlamaConfig

    config = LlamaConfig(num_attention_heads=4, num_key_value_heads=2, rope_parameters=rope_parameters,
                         num_hidden_layers=2, hidden_size=64, intermediate_size=64, vocab_size=96,
                         max_position_embeddings=max_positions, initializer_range=0.3)
    return load_model(str(save_random_family(folder, "llama", config=config)), device="cpu")


ROPES = {
    "default": {"rope_type": "default", "rope_theta": 100000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(ROPES))
def test_rotary_frequencies_from_the_config_match_the_model(kind, tmp_path):
    from analysis.families.rope import default_inv_freq

    loaded = _llama_with(tmp_path, ROPES[kind])
    w = loaded.attention_weights(0)
    assert w.rotary.rope_type == kind
    np.testing.assert_allclose(w.rotary.inv_freq, loaded.model.model.rotary_emb.inv_freq.numpy(), rtol=1e-6)
    result = run_text(loaded, LONG, bos=True, max_tokens=20)
    weights = weights_of(loaded)
    assert result.n_tokens == 20 and parity_report(result, weights).passed
    if kind != "default":  # the scaling matters: the default frequencies would fail
        plain = [dataclasses.replace(x, rotary=dataclasses.replace(
            x.rotary, inv_freq=default_inv_freq(x.rotary.theta, x.rotary.rotary_dim))) for x in weights]
        assert not parity_report(result, plain).passed


@pytest.mark.slow
def test_dynamic_rope_is_recomputed_below_the_trained_length_and_refused_at_it(tmp_path):
    loaded = _llama_with(tmp_path, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, max_positions=16)
    weights = weights_of(loaded)
    assert parity_report(run_text(loaded, LONG, bos=True, max_tokens=15), weights).passed
    whole = run_text(loaded, LONG, bos=True)  # the whole context: transformers rescales θ from here on
    assert whole.n_tokens == 16
    with pytest.raises(InputError, match="dynamic RoPE"):
        parity_report(whole, weights)


@pytest.mark.parametrize("rope", [{"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                   "original_max_position_embeddings": 16},
                                  {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 8,
                                   "long_factor": [1.0] * 8, "original_max_position_embeddings": 16}])
def test_unsupported_rotary_scaling_is_refused_in_one_sentence(rope):
    config = {"model_type": "llama", "num_attention_heads": 4, "hidden_size": 64, "rope_parameters": rope}
    with pytest.raises(ModelLoadError) as err:
        family_for(config)
    message = str(err.value)
    assert rope["rope_type"] in message and "\n" not in message and "default, linear, llama3, dynamic" in message
    assert family_for(config, check=False).name == "llama"  # the attention itself can still be captured


def test_old_style_config_json_rope_fields_are_read():
    from analysis.families.rope import rope_parameters

    old = {"model_type": "llama", "rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert rope_parameters(old) == {"type": "linear", "factor": 2.0, "rope_theta": 500000.0, "rope_type": "linear"}
    assert rope_parameters({"model_type": "gpt_neox", "rotary_pct": 0.25})["partial_rotary_factor"] == 0.25


# ----------------------------------------------------------------------------- registry
def test_registry_knows_each_family_and_refuses_others():
    from transformers import T5Config

    assert family_for({"model_type": "gpt2"}).name == "gpt2"
    assert family_for({"model_type": "qwen2"}) is family_for({"model_type": "mistral"})
    assert family_for(tiny_family_config("gpt_neox", 96)).name == "gpt_neox"
    assert {f.name for f in FAMILIES} == {"gpt2", "llama", "gpt_neox", "bert", "distilbert"}
    for config in ({"model_type": "t5"}, {}, T5Config()):
        with pytest.raises(ModelLoadError, match="not supported yet") as err:
            family_for(config)
        assert "\n" not in str(err.value)


def test_uneven_grouped_query_heads_are_refused():
    with pytest.raises(ModelLoadError, match="evenly"):
        family_for({"model_type": "llama", "num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 48})


# ----------------------------------------------------------------------------- loading from a folder
@pytest.mark.slow
def test_bert_loads_its_masked_lm_head_when_the_weights_have_one(tmp_path):
    from transformers import BertForMaskedLM

    loaded = load_model(str(save_random_family(tmp_path, "bert", model_class=BertForMaskedLM)), device="cpu")
    assert type(loaded.model).__name__ == "BertForMaskedLM"
    assert loaded.family.model_class(loaded.config, frozenset({"embeddings.word_embeddings.weight"})).__name__ == \
        "BertModel"


def test_roberta_runs_a_text_as_long_as_its_context(tmp_path):
    """RoBERTa's positions start after its padding id: its context is max_position_embeddings − (pad id + 1), and a
    text that long runs (one more token was an index past the position table: a raw torch error)."""
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family
    from analysis.run.inference import run_text

    loaded = load_model(str(save_random_family(tmp_path / "r", "roberta")), device="cpu")
    pad = loaded.config.pad_token_id
    assert loaded.context_length == loaded.config.max_position_embeddings - (pad + 1)
    result = run_text(loaded, "the cat sat on the mat " * 40)
    assert result.n_tokens == loaded.context_length and result.truncated
