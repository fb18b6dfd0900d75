"""Re-running from a cached residual stream (analysis/run/resume.py) and the importance map built on it: against the
model's own forward and against one whole edited forward per head, on every decoder family (GQA, a sliding window,
a parallel residual)."""
import threading

import numpy as np
import pytest
import torch

from analysis.errors import AnalysisCancelled
from analysis.measures import ablation
from analysis.run.resume import cache_stream, resume

DECODERS = ["gpt2", "llama", "mistral", "gpt_neox"]
TEXT = "The cat sat on the mat because it was tired. The cat sat on the mat and the dog sat too."


@pytest.fixture(scope="module")
def decoders(family_folder):
    from analysis.model.loading import load_model

    return {t: load_model(str(family_folder(t)), device="cpu") for t in DECODERS}


def _ids(loaded):
    return list(ablation.text_tokens(loaded, TEXT).ids)


@pytest.mark.parametrize("model_type", DECODERS)
def test_resuming_from_any_layer_is_the_models_own_forward(decoders, model_type):
    loaded = decoders[model_type]
    ids = _ids(loaded)
    assert len(ids) > 6  # longer than mistral's sliding window of 5: its per-layer mask matters
    from analysis.run.capture import _fast_kernel

    stream = cache_stream(loaded, ids)
    with torch.no_grad(), _fast_kernel(loaded.model, True):  # the kernel the cached run used (sdpa)
        own = loaded.model(input_ids=torch.tensor([ids]), use_cache=False).logits
    torch.testing.assert_close(stream.logits, own, atol=1e-6, rtol=0)
    for layer in range(loaded.n_layer):
        torch.testing.assert_close(resume(loaded, stream, layer), stream.logits, atol=1e-6, rtol=0)
    three = resume(loaded, stream, 1, stream.inputs[1].expand(3, -1, -1))  # a batch of three equal streams
    torch.testing.assert_close(three, stream.logits.expand(3, -1, -1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("model_type", DECODERS)
def test_a_resumed_edit_equals_the_whole_edited_forward(decoders, model_type):
    """Ablating head 1 of the last layer through resume equals capture.forward with the same edit from the start."""
    from analysis.run.capture import forward

    loaded = decoders[model_type]
    ids = _ids(loaded)
    site = ablation.heads_site(loaded)
    last = loaded.n_layer - 1
    edit = site.edit([1], "zero")
    _, whole = forward(loaded, [ids], parts=(), logits="all", edits={last: edit})
    stream = cache_stream(loaded, ids)
    resumed = resume(loaded, stream, last, edits={last: edit})
    torch.testing.assert_close(resumed, whole, atol=1e-5, rtol=0)
    assert float((resumed - stream.logits).abs().max()) > 1e-4  # the edit really changed the logits


@pytest.mark.parametrize("model_type", DECODERS)
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_importance_map_equals_one_forward_per_head(decoders, model_type, mode):
    loaded = decoders[model_type]
    plain = ablation.importance_map_by_forwards(loaded, TEXT, mode)
    assert np.abs(plain.loss_change).max() > 1e-4  # ablating a head changes the loss: the comparison can fail
    for group in (1, 2, loaded.n_layer):  # one layer's heads a batch; a staircase of two; every head at once
        fast = ablation.importance_map(loaded, TEXT, mode, group=group)
        assert fast.baseline_loss == pytest.approx(plain.baseline_loss, abs=1e-5)
        np.testing.assert_allclose(fast.ablated_loss, plain.ablated_loss, atol=1e-5, rtol=0)
        assert not fast.partial and fast.n_done == loaded.n_layer * loaded.n_head


def test_cancel_keeps_the_finished_heads_exactly(decoders):
    loaded = decoders["llama"]
    whole = ablation.importance_map(loaded, TEXT, "zero", group=1)
    cancel = threading.Event()

    def progress(done, total):
        if done > loaded.n_head:  # the baseline and the first layer are done
            cancel.set()

    with pytest.raises(AnalysisCancelled) as caught:
        ablation.importance_map(loaded, TEXT, "zero", progress=progress, cancel=cancel, group=1)
    partial = caught.value.partial
    assert partial.partial and partial.n_done == loaded.n_head
    assert partial.done[0].all() and not partial.done[1:].any()
    np.testing.assert_array_equal(partial.ablated_loss[0], whole.ablated_loss[0])
    assert np.isnan(partial.ablated_loss[1:]).all()
    assert all(layer == 0 for layer, _, _ in partial.top(10))  # unmeasured heads are never "top"
    assert "cancelled after" in str(caught.value)


def test_cancel_before_anything_finished_keeps_nothing(decoders):
    loaded = decoders["gpt2"]
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(AnalysisCancelled) as caught:
        ablation.importance_map(loaded, TEXT, "zero", cancel=cancel)
    assert caught.value.partial is None
