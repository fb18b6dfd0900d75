"""The shipped model: loads offline, is small, and has the heads users come to see.

Targets (the model card's), measured by the engine's own scores on held-out sentences
(resources/training/heldout.py) — a change that breaks the model fails here.
"""
import json

import numpy as np
import pytest

from analysis.model.catalogue import BUNDLED_MODEL_DIR
from analysis.model.loading import load_model
from resources.training.model_card import measure, targets

PREVIOUS_TOKEN_TARGET = 0.6
SINK_TARGET = 0.6
INDUCTION_PROBE_TARGET = 0.4
VAL_LOSS_TARGET = 4.4


@pytest.fixture(scope="module")
def measured():
    return measure(BUNDLED_MODEL_DIR)


def test_bundled_model_is_shipped_small_and_safe():
    files = {p.name: p.stat().st_size for p in BUNDLED_MODEL_DIR.iterdir() if p.is_file()}
    assert "model.safetensors" in files and not any(name.endswith(".bin") for name in files)
    assert sum(files.values()) <= 25 * 2**20
    assert {"config.json", "tokenizer.json", "README.md", "training_log.jsonl"} <= set(files)
    config = json.loads((BUNDLED_MODEL_DIR / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["attnscope_prepend_bos"] is True


def test_loads_as_bundled_and_prepends_bos(measured):
    m = load_model("bundled", device="cpu")
    assert m.source.kind == "bundled" and m.prepend_bos_default
    from analysis.run.inference import run_text

    r = run_text(m, "The cat sat on the mat because it was tired.")
    assert r.bos and r.tokens[0] == "<|endoftext|>" and "␣cat" in r.tokens


def test_previous_token_head(measured):
    value, layer, head = targets(measured["tables"])["previous_token"]
    assert value >= PREVIOUS_TOKEN_TARGET, f"best previous-token head L{layer}H{head}: {value:.3f}"


def test_sink_head(measured):
    value, layer, head = targets(measured["tables"])["sink"]
    assert value >= SINK_TARGET, f"best sink head L{layer}H{head}: {value:.3f}"


def test_induction_head_after_a_previous_token_head(measured):
    t = targets(measured["tables"])
    value, layer, head = t["induction_probe_after_previous_token"]
    assert t["first_previous_token_layer"] is not None
    assert layer > t["first_previous_token_layer"]
    assert value >= INDUCTION_PROBE_TARGET, f"best induction head L{layer}H{head}: {value:.3f}"


def test_validation_loss_recorded_in_the_training_log():
    log = [json.loads(line) for line in (BUNDLED_MODEL_DIR / "training_log.jsonl").read_text().splitlines()]
    done = [r for r in log if r["event"] == "done"][0]
    assert done["val_loss"] <= VAL_LOSS_TARGET
    assert np.isfinite(done["val_loss"])
