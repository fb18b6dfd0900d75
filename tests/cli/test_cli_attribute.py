"""``attnscope attribute``: direct logit attribution as the documented JSON; its value is the model's own logit
difference (computed here with transformers directly), its parts sum to it; bad input is one sentence and
writes no file."""
import json

import numpy as np
import pytest
import torch

from helpers import one_error_line, run_main as run

TEXT = "The cat sat on the mat because it was tired. The cat sat on the"


def one_token(tokenizer, words):
    """The first of ``words`` that is one token for this tokenizer (the test's own choice, checked)."""
    for word in words:
        if len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1:
            return word
    pytest.skip("no single-token word for this tokenizer")


@pytest.mark.slow
def test_attribute_prints_the_documented_json(tiny_model_dir, tiny_model, tmp_path, capsys):
    tok = tiny_model.tokenizer
    answer = one_token(tok, [" mat", " the", " cat"])
    wrong = one_token(tok, [w for w in [" cat", " sat", " on"] if w != answer])
    target = tmp_path / "sub" / "attribution.json"
    code, stdout, err = run(capsys, "attribute", "--model", tiny_model_dir, "--text", TEXT, "--answer", answer,
                            "--wrong", wrong, "--no-bos", "--json", target)
    assert code == 0, err
    data = json.loads(stdout)
    assert {"metric", "value", "heads", "mlps", "embeddings", "biases", "residual_error"} <= set(data)
    heads = np.array(data["heads"])
    assert heads.shape == (tiny_model.n_layer, tiny_model.n_head) and len(data["mlps"]) == tiny_model.n_layer
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    with torch.no_grad():  # the model's own logits, independent of AttnScope's hooks
        logits = tiny_model.model(torch.tensor([ids])).logits[0, -1].double()
    a, w = (tok(t, add_special_tokens=False)["input_ids"][0] for t in (answer, wrong))
    assert data["value"] == pytest.approx(float(logits[a] - logits[w]), abs=1e-4)
    total = heads.sum() + sum(data["mlps"]) + data["embeddings"] + data["biases"] + data["residual_error"]
    assert total == pytest.approx(data["value"], abs=1e-5)
    assert abs(data["residual_error"]) < 1e-4 * max(1.0, abs(data["value"]))
    assert json.loads(target.read_text(encoding="utf-8")) == data


@pytest.mark.slow
@pytest.mark.parametrize("extra, words", [
    (["--answer", " catastrophically-long"], "single token"),
    (["--position", "999"], "outside the text"),
])
def test_attribute_bad_input_is_one_sentence_and_no_file(extra, words, tiny_model_dir, tiny_model, tmp_path, capsys):
    target = tmp_path / "a.json"
    if "--answer" not in extra:
        extra = ["--answer", one_token(tiny_model.tokenizer, [" the", " cat", " on"]), *extra]
    code, _, err = run(capsys, "attribute", "--model", tiny_model_dir, "--text", TEXT, *extra, "--json", target)
    assert code == 2 and words in one_error_line(err)
    assert not target.exists()


@pytest.mark.parametrize("position", [4, -3])
def test_attribute_at_a_chosen_position_is_that_positions_logit_difference(tiny_model_dir, tiny_model, capsys,
                                                                           position):
    """--position p reads row p: its value is the model's own logit difference after token p (transformers here),
    and the sum rule holds there, a different value from the last position's."""
    tok = tiny_model.tokenizer
    answer = one_token(tok, [" mat", " the", " cat"])
    wrong = one_token(tok, [w for w in [" cat", " sat", " on"] if w != answer])
    code, stdout, err = run(capsys, "attribute", "--model", tiny_model_dir, "--text", TEXT, "--answer", answer,
                            "--wrong", wrong, "--no-bos", "--position", str(position))
    assert code == 0, err
    data = json.loads(stdout)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert data["position"] == position % len(ids)
    with torch.no_grad():
        logits = tiny_model.model(torch.tensor([ids])).logits[0].double()
    a, w = (tok(t, add_special_tokens=False)["input_ids"][0] for t in (answer, wrong))
    assert data["value"] == pytest.approx(float(logits[position, a] - logits[position, w]), abs=1e-4)
    assert data["value"] != pytest.approx(float(logits[-1, a] - logits[-1, w]), abs=1e-3)
    total = np.sum(data["heads"]) + sum(data["mlps"]) + data["embeddings"] + data["biases"]
    assert total + data["residual_error"] == pytest.approx(data["value"], abs=1e-5)
    assert abs(data["residual_error"]) < 1e-4 * max(1.0, abs(data["value"]))
