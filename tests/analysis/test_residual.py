"""An on-demand run's residual stream (analysis/run/residual.py): not computed by the run, computed by one forward
when first read, equal to what a forward that kept it gives, and a sentence once its model is gone."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from analysis.model.loading import load_model
from analysis.model.synthetic import FAMILY_TINY_TYPES
from analysis.run import residual
from analysis.run.inference import run_text
from analysis.run.qk_capture import forward_qk

from helpers import TEXT


@pytest.mark.parametrize("model_type", FAMILY_TINY_TYPES)
def test_the_stream_is_computed_when_read_and_equals_a_kept_one(family_run, model_type, monkeypatch):
    loaded, _ = family_run(model_type)
    forwards = []
    real = residual.forward_qk
    monkeypatch.setattr(residual, "forward_qk", lambda *a, **k: forwards.append(1) or real(*a, **k))
    result = run_text(loaded, TEXT, keep_maps=False)
    ids = [int(i) for i in result.token_ids]
    L, n, d = loaded.n_layer, len(ids), loaded.d_model
    assert isinstance(result.layer_inputs, residual.ResidualArray)
    assert result.layer_inputs.shape == result.attention_outputs.shape == (L, n, d)  # known without a forward
    assert not result.layer_inputs.stream.computed and forwards == []
    # what the run used to keep: the same forward with the parts copied
    _, (kept,), _ = forward_qk(loaded, [ids], parts=residual.PARTS)
    np.testing.assert_array_equal(result.layer_inputs[1], kept.layer_inputs[1])  # bit for bit on the CPU
    np.testing.assert_array_equal(np.asarray(result.attention_outputs), kept.attention_outputs)
    np.testing.assert_array_equal(np.asarray(result.layer_inputs), kept.layer_inputs)
    assert forwards == [1]  # both arrays, every read: one forward
    assert not np.asarray(result.layer_inputs).flags.writeable
    assert not result.attention_outputs[0].flags.writeable


def test_a_kept_run_holds_plain_arrays(family_run):
    loaded, result = family_run("gpt2")
    assert result.maps_kept and isinstance(result.layer_inputs, np.ndarray)
    assert not result.layer_inputs.flags.writeable


def test_reading_after_the_model_is_gone_says_so(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), device="cpu")
    result = run_text(loaded, TEXT, keep_maps=False)
    shape = result.layer_inputs.shape
    del loaded
    gc.collect()
    assert result.layer_inputs.shape == shape
    with pytest.raises(residual.ModelGoneError, match="no longer loaded: run the text again"):
        result.layer_inputs[0]


def test_an_unknown_part_is_refused(family_run):
    loaded, _ = family_run("gpt2")
    stream = residual.ResidualStream(loaded, [1, 2, 3], (loaded.n_layer, 3, loaded.d_model))
    with pytest.raises(ValueError, match="not 'attentions'"):
        stream.array("attentions")
