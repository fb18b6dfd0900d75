"""A folder that is not exactly a model AttnScope can run is refused in one sentence (analysis.model.checks):
missing or corrupt files, a config that describes no model or another family's, weights that are not the
config's (missing, extra, the wrong shape, an untied head left out), NaN weights, a tokenizer that does not fit
the embedding, pickle weights unless allowed (and hostile ones even then). Each folder is a tiny model with one
thing wrong."""
import json
import os
import shutil
import time

import pytest

from analysis.errors import ModelCheckError, ModelLoadError, PickleWeightsError, WeightsMismatchError
from analysis.model.checks import weights_mismatch
from analysis.model.loading import load_model
from helpers import edit_config, save, tensors


@pytest.fixture()
def model_copy(tiny_model_dir, tmp_path):
    return shutil.copytree(tiny_model_dir, tmp_path / "m")


def refused(folder, error=ModelLoadError) -> str:
    with pytest.raises(error) as caught:
        load_model(str(folder), device="cpu")
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message and "unexpected" not in message.lower()
    return message


# ----------------------------------------------------------------------------- files
def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json is missing"):
        load_model(str(tmp_path), device="cpu")


def test_corrupt_weights_give_a_message(model_copy):
    (model_copy / "model.safetensors").write_bytes(b"this is not a safetensors file")
    with pytest.raises(ModelLoadError, match="could not be loaded"):
        load_model(str(model_copy), device="cpu")


def test_truncated_weights_give_a_message(model_copy):
    data = (model_copy / "model.safetensors").read_bytes()
    (model_copy / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="could not be loaded"):
        load_model(str(model_copy), device="cpu")


def test_missing_tokenizer(model_copy):
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        (model_copy / name).unlink(missing_ok=True)
    with pytest.raises(ModelLoadError, match="no tokenizer"):
        load_model(str(model_copy), device="cpu")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_tokenizer_json_as_a_named_pipe_is_refused_without_blocking(model_copy):
    (model_copy / "tokenizer.json").unlink()
    os.mkfifo(model_copy / "tokenizer.json")
    assert "is a named pipe" in refused(model_copy, ModelCheckError)


def test_pickle_weights_need_an_explicit_opt_in(tmp_path, tokenizer):
    from analysis.model.synthetic import save_random_gpt2

    folder = save_random_gpt2(tmp_path / "m", tokenizer=tokenizer, safetensors=False)
    assert not (folder / "model.safetensors").exists() and (folder / "pytorch_model.bin").exists()
    with pytest.raises(PickleWeightsError, match="pickle files can run code") as refused:
        load_model(str(folder), device="cpu")
    assert refused.value.source == str(folder)
    message = str(refused.value)
    # the core's sentence names no GUI checkbox and no CLI flag: each front end adds its own way to opt in
    assert "--allow-pickle" not in message and "in the app" not in message and message.endswith("safetensors.")
    assert load_model(str(folder), device="cpu", allow_pickle=True).n_layer == 2


class _Hostile:
    def __reduce__(self):
        return (print, ("this would have run",))


def test_a_hostile_pickle_is_refused_even_when_pickle_is_allowed(model_copy, capsys):
    import torch

    (model_copy / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": _Hostile()}, model_copy / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="hold more than tensors") as caught:
        load_model(str(model_copy), device="cpu", allow_pickle=True)
    assert "weights_only" not in str(caught.value) and "this would have run" not in capsys.readouterr().out


# ----------------------------------------------------------------------------- the config
def test_other_architectures_are_not_supported_yet(model_copy):
    edit_config(model_copy, model_type="t5")
    with pytest.raises(ModelLoadError, match="'t5' is not supported yet") as refused:
        load_model(str(model_copy), device="cpu")
    assert "gpt2" in str(refused.value) and "llama" in str(refused.value) and "bert" in str(refused.value)


def test_a_config_of_another_family_over_gpt2_weights_is_refused_before_allocating(tiny_model_dir, tmp_path):
    """model_type llama over a GPT-2 file: LlamaConfig's defaults describe a 6-billion-parameter model.
    Refused from the safetensors header and a meta-device skeleton, before a byte of it is allocated."""
    import resource

    folder = shutil.copytree(tiny_model_dir, tmp_path / "m")
    edit_config(folder, model_type="llama")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(WeightsMismatchError, match="describes a model of 6,4[0-9,]+ parameters") as refused:
        load_model(str(folder), device="cpu")
    assert "random" in str(refused.value) and time.perf_counter() - started < 20
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 2_000_000  # kB: far below 24 GB


@pytest.mark.parametrize("changes,needle", [
    ({"n_layer": 0}, "layers = 0"),
    ({"n_layer": -1}, "layers = -1"),
    ({"n_head": 0}, "heads = 0"),
    ({"n_embd": 0}, "width = 0"),
    ({"n_positions": 0}, "context = 0"),
    ({"n_head": 5}, "not divisible by the 5 heads"),
])
def test_a_config_that_describes_no_model_is_refused(model_copy, changes, needle):
    edit_config(model_copy, **changes)
    assert needle in refused(model_copy, ModelCheckError)


def test_a_config_field_of_the_wrong_type_says_what_the_field_needs(model_copy):
    """The whole reason on one line, not transformers' first line ("Validation error for field 'n_head':")."""
    from analysis.errors import one_line

    edit_config(model_copy, n_head="two")
    message = refused(model_copy)
    assert "n_head" in message and "expected int" in message and not message.endswith(":")
    assert one_line("Problem:\n   details here\nmore") == "Problem: details here"
    assert one_line("One line.\nSecond") == "One line."


# ----------------------------------------------------------------------------- the weights are the config's
def test_no_gpt2_tensor_at_all_is_refused(model_copy):
    import torch

    save(model_copy, {"foo": torch.zeros(3)})
    message = refused(model_copy, WeightsMismatchError)
    assert "missing" in message and "transformer.h.0.attn.c_attn.weight" in message
    assert "1 in the file does not belong" in message and "foo" in message and "random" in message


def test_bert_weights_under_a_gpt2_config_are_refused(model_copy):
    import torch

    bert = {"bert.embeddings.word_embeddings.weight": torch.zeros(512, 64),
            "bert.encoder.layer.0.attention.self.query.weight": torch.zeros(64, 64),
            "bert.encoder.layer.0.attention.self.query.bias": torch.zeros(64)}
    save(model_copy, bert)
    message = refused(model_copy, WeightsMismatchError)
    assert "3 in the file do not belong" in message and "bert.embeddings.word_embeddings.weight" in message


def test_one_layer_missing_is_refused(model_copy):
    state = {k: v for k, v in tensors(model_copy).items() if not k.startswith("transformer.h.1.")}
    save(model_copy, state)
    message = refused(model_copy, WeightsMismatchError)
    assert "12 tensors the config asks for are missing" in message and "transformer.h.1." in message
    assert "does not belong" not in message


def test_more_layers_in_the_config_than_in_the_file_is_refused(model_copy):
    edit_config(model_copy, n_layer=5)
    message = refused(model_copy, WeightsMismatchError)
    assert "transformer.h.3." in message and "missing" in message


def test_old_constant_buffers_and_a_tied_head_are_accepted(model_copy):
    """GPT-2 hub checkpoints carry attn.bias / attn.masked_bias buffers; lm_head.weight is wte."""
    import torch

    state = tensors(model_copy)
    state["transformer.h.0.attn.bias"] = torch.ones(1, 1, 64, 64)
    state["h.1.attn.masked_bias"] = torch.tensor(-1e4)
    state["lm_head.weight"] = state["transformer.wte.weight"].clone()
    save(model_copy, state)
    assert load_model(str(model_copy), device="cpu").n_layer == 3


def test_the_mismatch_rule_is_the_model_class_own_not_a_key_list():
    """Generic: ignores what the class declares, tied weights whose source loaded, and LEGACY_BUFFERS."""
    class Model:
        _keys_to_ignore_on_load_missing = [r"rotary\.cache$"]
        _keys_to_ignore_on_load_unexpected = [r"pooler\."]
        all_tied_weights_keys = {"head.weight": "embed.weight", "other.weight": "gone.weight"}

    info = {"missing_keys": {"head.weight", "layers.0.rotary.cache", "other.weight", "gone.weight", "layers.0.q"},
            "unexpected_keys": {"pooler.dense", "layers.0.attn.masked_bias", "layers.0.rotary_emb.inv_freq", "x"},
            "mismatched_keys": set()}
    missing, unexpected = weights_mismatch(Model(), info)
    assert missing == ["gone.weight", "layers.0.q", "other.weight"]  # tied to a missing source: still missing
    assert unexpected == ["x"]


def test_a_tensor_of_the_wrong_shape_is_named_with_both_shapes(model_copy):
    """transformers 5 raises "You set `ignore_mismatched_sizes` to `False` … look at the above report!" (no report
    shown); the message now names the tensor and both shapes."""
    state = tensors(model_copy)
    name = "transformer.h.1.mlp.c_fc.weight"
    rows, cols = state[name].shape
    state[name] = state[name][:, :10]
    save(model_copy, state)
    message = refused(model_copy, WeightsMismatchError)
    assert f"{name} is {rows}×10 in the file, {rows}×{cols} in the config" in message
    assert "ignore_mismatched_sizes" not in message and "\n" not in message


def test_only_extra_tensors_say_they_belong_elsewhere_not_random_gaps(model_copy):
    import torch

    state = tensors(model_copy)
    state["transformer.h.0.extra.weight"] = torch.zeros(2)
    save(model_copy, state)
    message = refused(model_copy, WeightsMismatchError)
    assert "does not belong to this model" in message and "random" not in message and ". They are" in message


def test_nan_weights_are_refused(model_copy):
    state = tensors(model_copy)
    state["transformer.h.1.attn.c_attn.weight"][:] = float("nan")
    save(model_copy, state)
    assert "NaN or infinite" in refused(model_copy, ModelCheckError)


def test_tokenizer_ids_past_the_embedding_are_refused(model_copy):
    """A vocabulary larger than the embedding: before, 'unexpected IndexError' on the first run."""
    state = tensors(model_copy)
    rows = 100
    state["transformer.wte.weight"] = state["transformer.wte.weight"][:rows].clone()
    save(model_copy, state)
    edit_config(model_copy, vocab_size=rows)
    message = refused(model_copy, ModelCheckError)
    assert "embedding has only 100 rows" in message


# ----------------------------------------------------------------------------- the output head
@pytest.fixture(scope="module")
def head_folders(tmp_path_factory, tokenizer):
    """A tiny GPT-2 and a tiny Llama as save_pretrained wrote them (GPT-2 ties its head, this Llama does not)."""
    import copy

    from analysis.model.synthetic import save_random_family

    root = tmp_path_factory.mktemp("heads")
    tok = copy.deepcopy(tokenizer)  # save_random_family sets the model_max_length of the tokenizer it is given
    return {t: save_random_family(root / t, t, seed=2, tokenizer=tok) for t in ("gpt2", "llama")}


def head_folder(src, dst, tie: bool, head: bool):
    """A copy of ``src`` whose config says ``tie_word_embeddings: tie`` and whose weights hold an
    ``lm_head.weight`` of their own (not the embedding's values) only when ``head``."""
    import torch

    folder = shutil.copytree(src, dst)
    edit_config(folder, tie_word_embeddings=tie)
    state = tensors(folder)
    state.pop("lm_head.weight", None)
    if head:
        embedding = next(v for k, v in state.items() if k.endswith(("wte.weight", "embed_tokens.weight")))
        state["lm_head.weight"] = torch.randn(embedding.shape, generator=torch.Generator().manual_seed(5))
    save(folder, state)
    return folder


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_an_untied_head_missing_from_the_file_is_refused_not_random(head_folders, tmp_path, model_type):
    """The class's _tied_weights_keys (what it *could* tie) does not excuse a head the config unties."""
    folder = head_folder(head_folders[model_type], tmp_path / "m", tie=False, head=False)
    message = refused(folder, WeightsMismatchError)
    assert "1 tensor the config asks for is missing (lm_head.weight)" in message and "random" in message


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_a_tied_head_missing_from_the_file_is_the_embedding(head_folders, tmp_path, model_type):
    tied = load_model(str(head_folder(head_folders[model_type], tmp_path / "m", tie=True, head=False)),
                      device="cpu").model
    assert tied.get_output_embeddings().weight.data_ptr() == tied.get_input_embeddings().weight.data_ptr()


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_an_untied_head_in_the_file_is_the_file_own(head_folders, tmp_path, model_type):
    import torch

    folder = head_folder(head_folders[model_type], tmp_path / "m", tie=False, head=True)
    untied = load_model(str(folder), device="cpu").model
    assert torch.equal(untied.get_output_embeddings().weight, tensors(folder)["lm_head.weight"])
    assert not torch.equal(untied.get_output_embeddings().weight, untied.get_input_embeddings().weight)


@pytest.mark.slow
def test_ablate_on_an_untied_head_missing_from_the_file_exits_2_with_one_line(head_folders, tmp_path, capsys):
    from helpers import one_error_line, run_main

    folder = head_folder(head_folders["gpt2"], tmp_path / "m", tie=False, head=False)
    code, out, err = run_main(capsys, "ablate", "--model", folder, "--device", "cpu", "--text", "the cat sat on",
                              "--heads", "0.0")
    assert code == 2 and out == "" and "lm_head.weight" in one_error_line(err)


# ----------------------------------------------------------------------------- heads
@pytest.mark.parametrize("kv_heads", [0, -2, 3, 8, 2.0, "2", True])
def test_key_value_heads_that_cannot_share_the_query_heads_are_refused_in_one_sentence(head_folders, tmp_path,
                                                                                         kv_heads):
    """Not a number of at least 1 (0, -2, 2.0, "2", True), or one that does not divide the 4 query heads (3, 8)."""
    folder = shutil.copytree(head_folders["llama"], tmp_path / "m")
    edit_config(folder, num_key_value_heads=kv_heads)
    assert refused(folder) == (f"This model's config gives num_key_value_heads = {kv_heads!r}; the key/value heads "
                               "must be a whole number of at least 1 that divides the 4 query heads evenly.")


@pytest.mark.parametrize("heads", [0, -4])
def test_query_heads_below_1_are_refused_before_transformers_divides_by_them(head_folders, tmp_path, heads):
    folder = shutil.copytree(head_folders["llama"], tmp_path / "m")
    edit_config(folder, num_attention_heads=heads)
    assert refused(folder, ModelCheckError) == (
        f"{folder / 'config.json'} does not describe a model (heads = {heads}): layers, heads, width, context and "
        "vocabulary must be positive integers.")


@pytest.mark.slow
def test_a_gpt_neox_config_with_0_heads_is_refused_in_one_sentence(tmp_path):
    from analysis.model.synthetic import save_random_family

    folder = save_random_family(tmp_path / "neox", "gpt_neox")
    edit_config(folder, num_attention_heads=0)
    assert "does not describe a model (heads = 0)" in refused(folder, ModelCheckError)
