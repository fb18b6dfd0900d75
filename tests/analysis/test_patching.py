"""Activation patching against hooks written here: one activation of the clean run put into a whole forward of the
corrupted one (or the reverse), on GPT-2, Llama (GQA) and NeoX; the metrics against the model's own logits."""
import threading

import numpy as np
import pytest
import torch

from analysis.errors import AnalysisCancelled, InputError
from analysis.measures.patching import Metric, patch, pair_ids
from analysis.run.capture import _fast_kernel

CLEAN = [3, 17, 5, 9, 3, 17, 5, 22, 8, 1, 14]
CORRUPTED = [3, 17, 5, 9, 3, 30, 5, 22, 8, 1, 14]  # one token differs, as IOI's second name
ANSWER, WRONG = 17, 30
# where each family keeps W_O and the MLP, spelled out here rather than read from AttnScope's adapters
MODULES = {"gpt2": (lambda m: m.transformer.h, lambda b: b.attn.c_proj),
           "llama": (lambda m: m.model.layers, lambda b: b.self_attn.o_proj),
           "gpt_neox": (lambda m: m.gpt_neox.layers, lambda b: b.attention.dense)}


@pytest.fixture(scope="module")
def decoders(family_folder):
    from analysis.model.loading import load_model

    return {t: load_model(str(family_folder(t)), device="cpu") for t in MODULES}


def run(loaded, ids, pre=None, post=None, block_pre=None, mlp_post=None):
    """A whole forward of ``ids`` (the kernel AttnScope's cached runs use) with hooks {layer: fn} on W_O's input (pre),
    W_O's output (post), the block's input (block_pre) and the MLP's output (mlp_post); returns the logits (n, V)."""
    model = loaded.model
    blocks_of, wo_of = MODULES[loaded.family.name if loaded.family.name in MODULES else "llama"]
    blocks = blocks_of(model)
    handles = []
    for layer, fn in (pre or {}).items():
        handles.append(wo_of(blocks[layer]).register_forward_pre_hook(lambda mod, args, fn=fn: (fn(args[0]),)))
    for layer, fn in (post or {}).items():
        handles.append(wo_of(blocks[layer]).register_forward_hook(lambda mod, args, out, fn=fn: fn(out)))
    for layer, fn in (block_pre or {}).items():
        handles.append(blocks[layer].register_forward_pre_hook(
            lambda mod, args, kwargs, fn=fn: ((fn(args[0]), *args[1:]), kwargs) if args
            else (args, {**kwargs, "hidden_states": fn(kwargs["hidden_states"])}), with_kwargs=True))
    for layer, fn in (mlp_post or {}).items():
        handles.append(blocks[layer].mlp.register_forward_hook(lambda mod, args, out, fn=fn: fn(out)))
    try:
        with torch.no_grad(), _fast_kernel(model, True):
            return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    finally:
        for h in handles:
            h.remove()


def recorded(loaded, ids):
    """The clean run's W_O inputs and outputs, block inputs and MLP outputs, by hooks."""
    keep = {"z": {}, "attn": {}, "x": {}, "mlp": {}}
    L = loaded.n_layer

    def saver(kind, layer):
        def fn(t):
            keep[kind][layer] = t.clone()
            return t
        return fn

    run(loaded, ids, pre={l: saver("z", l) for l in range(L)}, post={l: saver("attn", l) for l in range(L)},
        block_pre={l: saver("x", l) for l in range(L)}, mlp_post={l: saver("mlp", l) for l in range(L)})
    return keep


def logit_diff(logits):
    return float(logits[-1, ANSWER] - logits[-1, WRONG])


METRIC = Metric("logit_diff", "logit(17) − logit(30)", ANSWER, WRONG)


@pytest.mark.parametrize("model_type", list(MODULES))
def test_clean_and_corrupted_are_the_models_own_logit_differences(decoders, model_type):
    loaded = decoders[model_type]
    result = patch(loaded, CLEAN, CORRUPTED, METRIC, "layers")
    assert result.clean == pytest.approx(logit_diff(run(loaded, CLEAN)), abs=1e-5)
    assert result.corrupted == pytest.approx(logit_diff(run(loaded, CORRUPTED)), abs=1e-5)
    assert abs(result.clean - result.corrupted) > 1e-3  # the prompts differ: the maps below can tell a wrong patch


@pytest.mark.parametrize("model_type", list(MODULES))
@pytest.mark.parametrize("denoising", [True, False])
def test_patching_each_head_equals_a_hook_on_its_slice_of_wo(decoders, model_type, denoising):
    loaded = decoders[model_type]
    base, source = (CORRUPTED, CLEAN) if denoising else (CLEAN, CORRUPTED)
    src = recorded(loaded, source)["z"]
    result = patch(loaded, CLEAN, CORRUPTED, METRIC, "heads", denoising=denoising)
    dk = loaded.d_head
    for layer in range(loaded.n_layer):
        for head in range(loaded.n_head):
            def put(z, layer=layer, head=head):
                z = z.clone()
                z[..., head * dk:(head + 1) * dk] = src[layer][..., head * dk:(head + 1) * dk]
                return z
            expected = logit_diff(run(loaded, base, pre={layer: put}))
            assert result.patched[layer, head] == pytest.approx(expected, abs=1e-5), (layer, head)
    effect = (result.patched - result.corrupted) / (result.clean - result.corrupted)
    np.testing.assert_allclose(result.effect, effect)
    assert np.ptp(result.patched) > 1e-4  # the heads differ: a patch of the wrong head would be seen


@pytest.mark.parametrize("model_type", list(MODULES))
def test_patching_one_heads_position_and_the_residual_stream_equal_hooks(decoders, model_type):
    loaded = decoders[model_type]
    rec = recorded(loaded, CLEAN)
    heads = patch(loaded, CLEAN, CORRUPTED, METRIC, "head_positions")
    resid = patch(loaded, CLEAN, CORRUPTED, METRIC, "resid")
    dk, n = loaded.d_head, len(CLEAN)
    assert heads.patched.shape == (loaded.n_layer, loaded.n_head, n) and resid.patched.shape == (loaded.n_layer, n)
    for layer, head, pos in [(0, 1, 5), (loaded.n_layer - 1, 0, n - 1), (1, loaded.n_head - 1, 7)]:
        def put(z, layer=layer, head=head, pos=pos):
            z = z.clone()
            z[0, pos, head * dk:(head + 1) * dk] = rec["z"][layer][0, pos, head * dk:(head + 1) * dk]
            return z
        assert heads.patched[layer, head, pos] == pytest.approx(logit_diff(run(loaded, CORRUPTED, pre={layer: put})),
                                                                abs=1e-5)
    for layer in range(loaded.n_layer):
        for pos in range(n):
            def swap(x, layer=layer, pos=pos):
                x = x.clone()
                x[0, pos] = rec["x"][layer][0, pos]
                return x
            expected = logit_diff(run(loaded, CORRUPTED, block_pre={layer: swap}))
            assert resid.patched[layer, pos] == pytest.approx(expected, abs=1e-5), (layer, pos)
    # positions before the first difference carry the same stream in both runs: no effect; the differing token's
    # embedding: all of it. Checked in logits, at the tolerance above: the effect divides by clean − corrupted,
    # which a small random model can make small enough to turn float32 rounding into 3e-5 of "effect"
    np.testing.assert_allclose(resid.patched[:, :5], resid.corrupted, atol=1e-5)
    assert resid.patched[0, 5] == pytest.approx(resid.clean, abs=1e-5)


@pytest.mark.parametrize("model_type", list(MODULES))
def test_patching_attention_and_mlp_outputs_equal_hooks(decoders, model_type):
    loaded = decoders[model_type]
    rec = recorded(loaded, CLEAN)
    result = patch(loaded, CLEAN, CORRUPTED, METRIC, "layers")
    for layer in range(loaded.n_layer):
        attn = logit_diff(run(loaded, CORRUPTED, post={layer: lambda out, l=layer: rec["attn"][l]}))
        mlp = logit_diff(run(loaded, CORRUPTED, mlp_post={layer: lambda out, l=layer: rec["mlp"][l]}))
        assert result.patched[layer, 0] == pytest.approx(attn, abs=1e-5)
        assert result.patched[layer, 1] == pytest.approx(mlp, abs=1e-5)


def test_logprob_and_loss_metrics_are_the_models(decoders):
    loaded = decoders["llama"]
    logits = run(loaded, CLEAN).double()
    logprob = patch(loaded, CLEAN, CORRUPTED, Metric("logprob", "log p", ANSWER), "layers")
    assert logprob.clean == pytest.approx(float(torch.log_softmax(logits[-1], -1)[ANSWER]), abs=1e-5)
    loss = patch(loaded, CLEAN, CORRUPTED, Metric("loss", "−loss"), "layers")
    nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(CLEAN[1:]))
    assert loss.clean == pytest.approx(-float(nll), abs=1e-5)


def test_prompts_of_different_lengths_are_refused_saying_where(decoders):
    loaded = decoders["gpt2"]
    with pytest.raises(InputError, match=r"11 tokens and the corrupted one 10.*first differ at token 5"):
        pair_ids(loaded, CLEAN, CORRUPTED[:5] + CORRUPTED[6:])
    with pytest.raises(InputError, match="same"):
        patch(loaded, CLEAN, CLEAN, METRIC, "heads")


def test_cancel_keeps_the_finished_layers(decoders):
    loaded = decoders["llama"]
    whole = patch(loaded, CLEAN, CORRUPTED, METRIC, "heads")
    cancel = threading.Event()
    with pytest.raises(AnalysisCancelled) as caught:
        patch(loaded, CLEAN, CORRUPTED, METRIC, "heads", progress=lambda d, t: cancel.set(), cancel=cancel)
    kept = caught.value.partial
    assert kept.partial and kept.done[0].all() and not kept.done[1:].any()
    np.testing.assert_array_equal(kept.patched[0], whole.patched[0])
    assert np.isnan(kept.patched[1:]).all()


def test_patching_only_the_first_layers_is_what_a_cancel_after_them_keeps(decoders):
    """``layers=k``: the map a run cancelled after k layers shows (a snippet reproduces it), the rest NaN."""
    loaded = decoders["gpt2"]
    whole = patch(loaded, CLEAN, CORRUPTED, METRIC, "resid")
    first = patch(loaded, CLEAN, CORRUPTED, METRIC, "resid", layers=1)
    assert first.partial and first.done[0].all() and not first.done[1:].any()
    np.testing.assert_allclose(first.effect[0], whole.effect[0], atol=1e-9)
    assert np.isnan(first.effect[1:]).all()
    assert not patch(loaded, CLEAN, CORRUPTED, METRIC, "resid", layers=loaded.n_layer).partial
    with pytest.raises(InputError, match="outside"):
        patch(loaded, CLEAN, CORRUPTED, METRIC, "resid", layers=0)
