"""GGUF files: read from the header, every refusal in one sentence, opened with transformers' own numbers, converted
once into the cache and never served stale. Tiny files written by analysis.model.synthetic_gguf (no download)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from analysis.errors import ModelLoadError, WeightsMismatchError
from analysis.model import gguf_convert
from analysis.model.catalogue import resolve_source
from analysis.model.gguf_file import (FILE_TYPES, GGML_TYPES, GgufFileError, dequantizable_types, inspect_gguf,
                                      read_header)
from analysis.model.loading import load_model
from analysis.model.synthetic_gguf import tiny_model, write_gguf, write_tiny_gguf
from analysis.run.inference import run_text

TEXT = "The cat sat on the mat, and then the cat sat on the mat again."


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh conversion cache for the test."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("ATTNSCOPE_CACHE", str(folder))
    return folder


def transformers_attention(path: Path, ids: list[int]) -> np.ndarray:
    """(layer, head, n, n): transformers' own load of the GGUF file, eager attention — the independent reference."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
    finally:
        logging.enable_progress_bar()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return np.stack([a[0].numpy() for a in out.attentions])


def test_the_type_tables_are_the_gguf_packages():
    import gguf

    for t in gguf.GGMLQuantizationType:
        block, size = gguf.GGML_QUANT_SIZES[t]
        assert GGML_TYPES[int(t)] == (t.name, block, size)
    assert FILE_TYPES == {int(t): t.name.removeprefix("MOSTLY_").removeprefix("ALL_")
                          for t in gguf.LlamaFileType if t.name != "GUESSED"}


def test_the_header_is_what_the_gguf_package_reads(tmp_path):
    import gguf

    path = write_tiny_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    header, theirs = read_header(path), gguf.GGUFReader(path)
    assert [t.name for t in header.tensors] == [t.name for t in theirs.tensors]
    assert [t.shape for t in header.tensors] == [tuple(int(d) for d in reversed(t.shape)) for t in theirs.tensors]
    assert [t.type_id for t in header.tensors] == [int(t.tensor_type) for t in theirs.tensors]
    assert [header.data_start + t.offset for t in header.tensors] == [int(t.data_offset) for t in theirs.tensors]
    assert [t.n_bytes for t in header.tensors] == [int(t.n_bytes) for t in theirs.tensors]
    assert header.data_end == path.stat().st_size
    assert header.metadata["llama.block_count"] == 2
    assert header.metadata["tokenizer.ggml.tokens"].length == len(theirs.fields["tokenizer.ggml.tokens"].data)


@pytest.mark.parametrize("quant", ["F32", "F16", "Q8_0", "Q4_1", "Q4_0"])
def test_inspect_names_the_quantization(tmp_path, quant):
    info = inspect_gguf(write_tiny_gguf(tmp_path / "m.gguf", "llama", quant, name="Tiny thing"))
    assert (info.name, info.architecture, info.model_type, info.n_layer, info.n_head, info.context_length) == \
        ("Tiny thing", "llama", "llama", 2, 4, 64)
    assert info.quantization == quant and info.ok


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "gpt2"])
def test_a_float_gguf_is_the_model_it_was_written_from(tmp_path, cache, arch):
    """F32: the GGUF path (writer, transformers' reader, the converted folder) gives the source model's attention."""
    import torch

    model, tokenizer = tiny_model(arch, seed=3)
    path = write_gguf(tmp_path / f"{arch}.gguf", model, tokenizer, arch, "F32")
    loaded = load_model(str(path), device="cpu")
    result = run_text(loaded, TEXT, bos=False)
    with torch.no_grad():
        theirs = model(torch.tensor([result.token_ids.tolist()]), output_attentions=True).attentions
    np.testing.assert_allclose(result.attentions, np.stack([a[0].numpy() for a in theirs]), atol=1e-6)
    assert loaded.source.kind == "gguf" and loaded.family.name == ("gpt2" if arch == "gpt2" else "llama")


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
@pytest.mark.parametrize("arch,quant", [("llama", "Q8_0"), ("llama", "Q4_1"), ("llama", "F16"), ("mistral", "Q4_0"),
                                        ("qwen2", "Q8_0"), ("qwen2", "Q4_1"), ("gpt2", "Q8_0"), ("gpt2", "Q4_1")])
def test_a_quantized_gguf_has_transformers_own_attention(tmp_path, cache, arch, quant):
    path = write_tiny_gguf(tmp_path / f"{arch}-{quant}.gguf", arch, quant, seed=1)
    loaded = load_model(str(path), device="cpu")
    result = run_text(loaded, TEXT, bos=False)
    np.testing.assert_allclose(result.attentions, transformers_attention(path, result.token_ids.tolist()), atol=1e-6)
    assert f"{quant} weights dequantized to float32" in loaded.weights or quant == "F32"
    assert result.weights == loaded.weights == loaded.info.weights


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
def test_the_weights_are_said_in_the_summary(tmp_path, cache):
    from analysis.export.writers import summary

    loaded = load_model(str(write_tiny_gguf(tmp_path / "m.gguf", "llama", "Q4_1")), device="cpu")
    said = summary(run_text(loaded, TEXT))["weights"]
    assert said.startswith("the GGUF file's Q4_1 weights dequantized to float32")
    # the converted folder opened as a folder still says where its numbers come from
    assert load_model(str(loaded.folder), device="cpu").weights == said


def test_a_folder_model_says_its_dtype(tiny_model):
    assert tiny_model.weights == "the model files' weights, run as float32"


# ----------------------------------------------------------------------------- refusals, one sentence each
def _clip(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("clip.projector_type", "mlp")
    w.add_tensor("mm.0.weight", np.zeros((32, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


def _other_arch(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_tensor("token_embd.weight", np.zeros((32, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


REFUSALS = {
    "lora": (lambda p: write_tiny_gguf(p, extra={"general.type": "adapter", "adapter.type": "lora"}),
             "is a LoRA adapter, not a model"),
    "mmproj": (_clip, "is a vision projector (mmproj)"),
    "architecture": (_other_arch, "is a 'qwen3' model; AttnScope opens GGUF files of llama"),
    "q5_0": (lambda p: write_tiny_gguf(p, quant="Q5_0"), "stores tensors as Q5_0, which transformers cannot"),
    "truncated data": (lambda p: write_tiny_gguf(p, truncate=5000), "is truncated: its tensors need"),
    "empty": (lambda p: write_tiny_gguf(p, truncate=10 ** 9), "is empty"),
    "cut in the header": (lambda p: (write_tiny_gguf(p), os.truncate(p, 2000))[0], "ends inside its header"),
    "split": (lambda p: write_tiny_gguf(p, extra={"split.count": 3, "split.no": 0}), "is part 1 of a GGUF split into 3"),
    "no tokenizer": (lambda p: write_tiny_gguf(p, tokenizer_too=False), "has no tokenizer"),
    "not gguf": (lambda p: (p.write_text("hello, this is a text file\n" * 20), p)[1], "is not a GGUF file"),
    "corrupt": (lambda p: (p.write_bytes(b"GGUF" + np.uint32(3).tobytes() + b"\xff" * 200), p)[1],
                "truncated or corrupt"),
    "old version": (lambda p: (p.write_bytes(b"GGUF" + np.uint32(1).tobytes() + b"\0" * 64), p)[1],
                    "is GGUF version 1"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_every_refusal_is_one_sentence_and_leaves_nothing(tmp_path, cache, case):
    make, words = REFUSALS[case]
    path = make(tmp_path / "model.gguf")
    with pytest.raises(ModelLoadError) as exc:
        load_model(str(path), device="cpu")
    message = str(exc.value)
    assert words in message and "\n" not in message and message.startswith("model.gguf"), message
    assert not any(p.is_dir() for p in (cache / "gguf").glob("*")), "nothing converted, nothing partial"


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
def test_a_missing_tensor_is_refused_not_filled_with_random_numbers(tmp_path, cache):
    model, tokenizer = tiny_model("llama")
    state = model.state_dict()
    del state["model.layers.1.mlp.down_proj.weight"]

    class Without:  # the model, minus one tensor, as write_gguf reads it
        config = model.config

        def state_dict(self):
            return state

    path = write_gguf(tmp_path / "m.gguf", Without(), tokenizer, "llama")
    with pytest.raises(WeightsMismatchError, match=r"m\.gguf lacks 1 tensor\(s\) the model needs"):
        load_model(str(path), device="cpu")


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
def test_an_ollama_blob_opens_by_its_magic_bytes(tmp_path, cache):
    """Ollama keeps a model as blobs/sha256-<hex>, no suffix: recognised by GGUF's magic, loaded as a GGUF."""
    blob = write_tiny_gguf(tmp_path / "m.gguf", "qwen2", "Q8_0").rename(tmp_path / "sha256-0123abcd")
    assert resolve_source(str(blob)).kind == "gguf"
    loaded = load_model(str(blob), device="cpu")
    result = run_text(loaded, TEXT, bos=False)
    np.testing.assert_allclose(result.attentions, transformers_attention(blob, result.token_ids.tolist()), atol=1e-6)
    other = tmp_path / "notes"
    other.write_text("not a model")
    with pytest.raises(ModelLoadError, match="is a file; a model is a folder"):
        resolve_source(str(other))


def test_a_gguf_is_only_a_file_source():
    with pytest.raises(ModelLoadError, match="GGUF file not found: /nowhere/x.gguf"):
        resolve_source("/nowhere/x.gguf")


def test_smollm2_says_how_to_install_it(monkeypatch):
    from analysis.model import catalogue

    monkeypatch.setattr(catalogue, "smollm2_file", lambda: None)
    with pytest.raises(ModelLoadError, match="run 'make smollm2'"):
        resolve_source("smollm2")


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
# ----------------------------------------------------------------------------- the conversion cache
def test_a_second_open_reads_the_cache_and_a_changed_file_is_converted_again(tmp_path, cache):
    path = write_tiny_gguf(tmp_path / "m.gguf", "llama", "Q8_0", seed=1)
    first, _, converted = gguf_convert.converted_folder(path)
    assert converted and (first / "model.safetensors").is_file()
    again, _, converted = gguf_convert.converted_folder(path)
    assert again == first and not converted
    before = run_text(load_model(str(path), device="cpu"), TEXT).attentions

    write_tiny_gguf(path, "llama", "Q8_0", seed=2)  # same size, other bytes: a new mtime
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    changed, _, converted = gguf_convert.converted_folder(path)
    assert converted and changed != first
    after = run_text(load_model(str(path), device="cpu"), TEXT).attentions
    assert not np.allclose(before, after)

    copy = tmp_path / "copy.gguf"
    copy.write_bytes(path.read_bytes())  # the same bytes elsewhere: the same conversion
    assert gguf_convert.converted_folder(copy)[0] == changed


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
def test_a_touched_file_keeps_its_digest_when_its_bytes_did_not_change(tmp_path, cache, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf")
    folder, _, _ = gguf_convert.converted_folder(path)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 5_000_000))
    hashed = []
    real = gguf_convert.file_digest
    monkeypatch.setattr(gguf_convert, "file_digest", lambda *a, **k: hashed.append(1) or real(*a, **k))
    assert gguf_convert.converted_folder(path) == (folder, gguf_convert.check_gguf(path), False)
    assert hashed == [1], "a new mtime is hashed again; the same digest finds the same folder"
    gguf_convert.converted_folder(path)
    assert hashed == [1], "an unchanged file is not hashed again"


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
def test_an_interrupted_conversion_leaves_nothing_a_later_open_would_take(tmp_path, cache, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf")

    from transformers import PreTrainedModel

    real = PreTrainedModel.save_pretrained
    full = [True]

    def half_written(self, folder, *a, **k):  # writes the weights, then the disk is full
        real(self, folder, *a, **k)
        if full[0]:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", half_written)
    with pytest.raises(ModelLoadError, match="could not be written to .*No space left on device"):
        gguf_convert.converted_folder(path)
    assert [p.name for p in (cache / "gguf").iterdir()] == ["index.json"]
    full[0] = False
    folder, _, converted = gguf_convert.converted_folder(path)
    assert converted and gguf_convert.is_complete(folder)


def test_cancel_while_checking_the_file_keeps_nothing(tmp_path, cache):
    import threading

    from analysis.model.hub import DownloadCancelled

    cancel = threading.Event()
    cancel.set()
    with pytest.raises(DownloadCancelled):
        gguf_convert.converted_folder(write_tiny_gguf(tmp_path / "m.gguf"), cancel=cancel)
    assert not (cache / "gguf").exists() or not any((cache / "gguf").iterdir())


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
def test_the_converted_folder_is_a_plain_float32_model(tmp_path, cache):
    import json

    folder, info, _ = gguf_convert.converted_folder(write_tiny_gguf(tmp_path / "m.gguf", quant="Q4_1"))
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["attnscope_weights"].startswith("the GGUF file's Q4_1")
    record = gguf_convert.source_record(folder)
    assert record["sha256"] == gguf_convert.file_digest(tmp_path / "m.gguf") and record["quantization"] == "Q4_1"
    assert not list(folder.glob("*.bin")), "safetensors only"


def test_the_types_transformers_dequantizes_include_the_common_ones():
    can = dequantizable_types()
    assert {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"} <= can and "Q5_0" not in can


def test_an_unreadable_header_is_a_gguf_file_error(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GG")
    with pytest.raises(GgufFileError, match="x.gguf is not a GGUF file"):
        inspect_gguf(path)


@pytest.mark.slow  # loads a model (a conversion, then the folder): ~1 s
def test_an_ollama_model_opens_by_its_name(tmp_path, cache, monkeypatch):
    """``--model tinyllama:q4`` as ``ollama list`` names it: the manifest's model layer → the blob, labelled by name."""
    import hashlib
    import json

    home = tmp_path / "home"
    models = home / ".ollama" / "models"
    blob = write_tiny_gguf(tmp_path / "t.gguf", "llama", "Q8_0")
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    (models / "blobs").mkdir(parents=True)
    blob = blob.rename(models / "blobs" / f"sha256-{digest}")
    manifest = models / "manifests" / "registry.ollama.ai" / "library" / "tinyllama" / "q4"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                "digest": f"sha256:{digest}", "size": blob.stat().st_size}]}))
    monkeypatch.setenv("ATTNSCOPE_SCAN_HOME", str(home))
    source = resolve_source("tinyllama:q4")
    assert (source.kind, source.path, source.label) == ("gguf", blob.resolve(), "tinyllama:q4")
    assert load_model("tinyllama:q4", device="cpu").source.label == "tinyllama:q4"
    with pytest.raises(ModelLoadError, match="No Ollama model named tinyllama:q8 here"):
        resolve_source("tinyllama:q8")
    with pytest.raises(ModelLoadError, match="'not a model!' is not a model: use bundled"):
        resolve_source("not a model!")
