"""The one capture (analysis.run.capture) refuses what is not finite: a run, a scan and an ablation whose text
overflows somewhere the load's test forward never reached are refused in one sentence, not drawn or averaged."""
import shutil

import numpy as np
import pytest

from analysis.errors import ModelCheckError
from analysis.model.loading import load_model
from helpers import save, tensors


@pytest.fixture()
def overflows_at_the_last_position(tiny_model_dir, tmp_path):
    """Finite on the 4-token load test and the induction probe (positions 0…62); infinite at position 63,
    the context's last (as float16 overflow hits only some texts)."""
    model_copy = shutil.copytree(tiny_model_dir, tmp_path / "m")
    state = tensors(model_copy)
    state["transformer.wpe.weight"][63] = float("inf")
    save(model_copy, state)
    return load_model(str(model_copy), device="cpu")


LONG = "the cat sat on the mat and then the dog sat on the cat again " * 8  # cut to the 64-token context


def test_a_run_that_overflows_is_refused_not_drawn(overflows_at_the_last_position):
    from analysis.run.inference import run_text

    loaded = overflows_at_the_last_position
    assert run_text(loaded, "the cat sat", bos=True).n_tokens < 64  # short texts never reach position 63
    with pytest.raises(ModelCheckError) as caught:
        run_text(loaded, LONG, bos=True)
    assert "NaN or infinite" in str(caught.value) and "\n" not in str(caught.value)


def test_a_scan_with_one_overflowing_text_is_refused_not_averaged_without_it(overflows_at_the_last_position):
    """Not averaged without the bad text: every batch size refuses the scan."""
    from analysis.measures.scan import scan_texts

    loaded = overflows_at_the_last_position
    scan_texts(loaded, ["the cat ran", "a dog sat"], batch_size=2)
    for batch in (1, 3):
        with pytest.raises(ModelCheckError, match="NaN or infinite"):
            scan_texts(loaded, ["the cat ran", LONG, "a dog sat"], batch_size=batch)


def test_an_ablation_that_overflows_is_refused(overflows_at_the_last_position):
    from analysis.measures.ablation import ablate

    loaded = overflows_at_the_last_position
    assert ablate(loaded, "the cat sat", [(0, 0)]).baseline.loss > 0
    with pytest.raises(ModelCheckError, match="NaN or infinite"):
        ablate(loaded, LONG, [(0, 0)], bos=True)


def test_a_forward_without_weights_runs_the_fast_kernel_and_gives_the_eager_numbers(family_run):
    """No "attentions" part: the model runs transformers' sdpa (no layer's weights computed), the same
    residual stream and logits as eager attention to float32 rounding, and is eager again afterwards."""
    from analysis.run.capture import forward

    loaded, result = family_run("llama")
    seen = []
    module = loaded.family.attention_module(loaded.family.blocks(loaded.model)[0])
    hook = module.register_forward_pre_hook(lambda m, a: seen.append(loaded.model.config._attn_implementation))
    try:
        (fast,), logits = forward(loaded, [list(result.token_ids)], parts=("layer_inputs",), logits="last")
        (eager,), eager_logits = forward(loaded, [list(result.token_ids)], parts=("attentions", "layer_inputs"),
                                         logits="last")
    finally:
        hook.remove()
    assert seen == ["sdpa", "eager"] and loaded.model.config._attn_implementation == "eager"
    np.testing.assert_allclose(fast.layer_inputs, eager.layer_inputs, rtol=1e-5, atol=1e-5)  # float32 rounding
    np.testing.assert_allclose(logits.numpy(), eager_logits.numpy(), rtol=0, atol=1e-4)
