"""``attnscope patch``: the documented JSON, equal to the core's result; bad input is one sentence and writes no file."""
import json

import numpy as np
import pytest

from helpers import one_error_line, run_main as run

CLEAN = "The cat sat on the mat because it was tired. The cat sat on the"


def corrupted_of(tokenizer) -> str:
    """CLEAN with ' cat' replaced by a word of as many tokens (this tokenizer's: checked, not assumed)."""
    n = len(tokenizer(CLEAN, add_special_tokens=False)["input_ids"])
    for word in (" dog", " mat", " sat", " on", " the", " it"):
        text = CLEAN.replace(" cat", word)
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) == n:
            return text
    pytest.skip("no same-length corruption for this tokenizer")


def one_token(tokenizer, words):
    for word in words:
        if len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1:
            return word
    pytest.skip("no single-token word for this tokenizer")


@pytest.mark.parametrize("what, shape", [("heads", "LH"), ("resid", "Ln"), ("layers", "L2")])
def test_patch_prints_the_documented_json(what, shape, tiny_model_dir, tiny_model, tmp_path, capsys):
    from analysis.measures.patching import make_metric, patch

    tok = tiny_model.tokenizer
    answer = one_token(tok, [" mat", " the", " cat"])
    wrong = one_token(tok, [w for w in [" cat", " sat", " on"] if w != answer])
    CORRUPTED = corrupted_of(tok)
    clean, corrupted = (tok(t, add_special_tokens=False)["input_ids"] for t in (CLEAN, CORRUPTED))
    target = tmp_path / "sub" / "patch.json"
    code, stdout, err = run(capsys, "patch", "--model", tiny_model_dir, "--clean", CLEAN, "--corrupted", CORRUPTED,
                            "--answer", answer, "--wrong", wrong, "--what", what, "--no-bos", "--json", target)
    assert code == 0, err
    data = json.loads(stdout)
    assert {"metric", "clean", "corrupted", "what", "denoising", "effect"} <= set(data)
    assert data["metric"] == "logit_diff" and data["what"] == what and data["denoising"] is True
    L, H, n = tiny_model.n_layer, tiny_model.n_head, len(clean)
    assert np.array(data["effect"]).shape == {"LH": (L, H), "Ln": (L, n), "L2": (L, 2)}[shape]
    core = patch(tiny_model, clean, corrupted, make_metric(tiny_model, "logit_diff", answer, wrong), what)
    np.testing.assert_allclose(np.array(data["effect"]), core.effect, atol=1e-9)
    effect = (np.array(data["patched"]) - data["corrupted"]) / (data["clean"] - data["corrupted"])
    np.testing.assert_allclose(np.array(data["effect"]), effect, atol=1e-9)  # the documented normalisation
    assert json.loads(target.read_text(encoding="utf-8")) == data


@pytest.mark.parametrize("extra, words", [
    (["--corrupted", "The cat sat on the big mat because it was tired. The cat sat on the"], "first differ at token"),
    (["--corrupted", "  "], "empty"),
    (["--answer", " catastrophically-long"], "single token"),
    (["--wrong", None], "needs a wrong answer"),
])
def test_patch_bad_input_is_one_sentence_and_no_file(extra, words, tiny_model_dir, tiny_model, tmp_path, capsys):
    tok = tiny_model.tokenizer
    args = {"--clean": CLEAN, "--corrupted": corrupted_of(tok), "--answer": one_token(tok, [" the", " cat", " on"]),
            "--wrong": one_token(tok, [" sat", " mat", " on"])}
    args.update(dict(zip(extra[::2], extra[1::2])))
    argv = [x for k, v in args.items() if v is not None for x in (k, v)]
    target = tmp_path / "p.json"
    code, _, err = run(capsys, "patch", "--model", tiny_model_dir, *argv, "--no-bos", "--json", target)
    assert code == 2 and words in one_error_line(err)
    assert not target.exists()
