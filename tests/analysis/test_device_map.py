"""--device-map auto: a model split across the CPU and the disk (accelerate's offload) gives the same attention,
layer inputs, outputs and recomputation as an unsplit one; memory limits are read and refused in one sentence."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.errors import DeviceError
from analysis.model.device_map import parse_max_memory, placement
from analysis.model.loading import load_model
from analysis.run.inference import run_text

TEXT = "The cat sat on the mat, and then the cat sat on the mat again."


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from analysis.model.synthetic import save_random_family

    return save_random_family(tmp_path_factory.mktemp("llama"), "llama")


@pytest.mark.slow
@pytest.mark.parametrize("limit", [60_000, 400_000])  # everything on the disk; part in memory, the rest on the disk
def test_a_model_split_onto_the_disk_gives_the_same_numbers(llama_dir, limit):
    from analysis.measures.parity import parity_report

    whole = load_model(str(llama_dir), device="cpu")
    split = load_model(str(llama_dir), device="cpu", device_map="auto", max_memory={"cpu": limit})
    where = placement(split.model)
    assert where.get("disk", 0) >= 1 and split.device == "cpu", where
    if limit == 400_000:
        assert where.get("cpu", 0) >= 1, where
    a, b = run_text(whole, TEXT), run_text(split, TEXT)
    for part in ("attentions", "layer_inputs", "attention_outputs"):
        np.testing.assert_allclose(getattr(b, part), getattr(a, part), atol=1e-6, err_msg=part)
    assert [p.token for p in b.predictions] == [p.token for p in a.predictions]
    for layer in range(whole.n_layer):  # the weights of an offloaded block are read back for the recomputation
        mine, theirs = split.attention_weights(layer), whole.attention_weights(layer)
        np.testing.assert_array_equal(mine.q_weight, theirs.q_weight)
        np.testing.assert_array_equal(mine.out_weight, theirs.out_weight)
    assert parity_report(b, [split.attention_weights(l) for l in range(split.n_layer)]).passed
    # attention on demand: the queries, keys and value norms are captured inside each offloaded block's forward
    from analysis.measures.head_scores import all_scores
    from analysis.measures.measured import run_measured

    lazy = run_measured(split, TEXT, keep_maps=False)
    for layer in range(whole.n_layer):
        for head in range(whole.n_head):
            np.testing.assert_allclose(lazy.head_map(layer, head), a.attentions[layer, head], rtol=0, atol=1e-5)
        np.testing.assert_allclose(lazy.maps.key_norms(layer), run_measured(whole, TEXT, keep_maps=False
                                                                               ).maps.key_norms(layer), atol=1e-5)
    for name, values in all_scores(a).values.items():
        np.testing.assert_allclose(all_scores(lazy)[name], values, atol=2e-5, equal_nan=True, err_msg=name)
    assert parity_report(lazy, [split.attention_weights(l) for l in range(split.n_layer)]).passed
    # the blocks really are on the disk: their parameters are placeholders outside a forward
    assert all(p.device.type == "meta" for p in split.family.blocks(split.model)[0].parameters())


def test_memory_limits_are_read_with_units():
    assert parse_max_memory("0=10GiB, cpu=1.5GB,disk=20") == {0: 10 * 2**30, "cpu": 1_500_000_000, "disk": 20}
    assert parse_max_memory("") is None and parse_max_memory(None) is None
    with pytest.raises(DeviceError, match="'gpu=3GB' is not a memory limit; write DEVICE=SIZE"):
        parse_max_memory("gpu=3GB")


def test_an_unknown_device_map_is_one_sentence(llama_dir):
    with pytest.raises(DeviceError, match="--device-map takes auto, balanced"):
        load_model(str(llama_dir), device="cpu", device_map="everywhere")
