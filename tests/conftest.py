"""Shared fixtures: small GPT-2-config models saved with save_pretrained (no network anywhere)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["HF_HUB_OFFLINE"] = "1"  # no test may reach for the network
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
    from analysis.synthetic import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """3 layers × 4 heads × d 64, context 64, random weights."""
    from analysis.synthetic import save_random_gpt2

    return save_random_gpt2(tmp_path_factory.mktemp("tiny"), n_layer=3, n_head=4, d_model=64, n_positions=64,
                            tokenizer=tokenizer, seed=1)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from analysis.loading import load_model

    return load_model(str(tiny_model_dir), device="cpu")


@pytest.fixture(scope="session")
def tiny_result(tiny_model):
    from analysis.inference import run_text

    return run_text(tiny_model, "The cat sat on the mat because it was tired. The cat sat on the mat.", bos=True)
