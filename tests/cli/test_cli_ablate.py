"""``attnscope ablate``: the next-token loss and top-5 with heads ablated, as the documented JSON, each number
checked against ``analysis.measures.ablation`` called directly; it says when it cut the text; bad input is
one sentence."""
import json

import numpy as np
import pytest

from analysis.measures import ablation
from helpers import one_error_line, run_main as run

SHORT = "The cat sat on the mat because it was tired. The cat sat on the mat."
LONG = "The cat sat on the mat because it was tired. " * 40  # far more than the tiny model's 64 positions


def direct_n_tokens(loaded, text: str) -> int:
    """The tokens of ``text`` with BOS in front, counted by the tokenizer itself."""
    return 1 + len(loaded.tokenizer(text, add_special_tokens=False)["input_ids"])


# ----------------------------------------------------------------------------- the JSON
@pytest.mark.slow
def test_ablate_prints_the_documented_json(tiny_model_dir, tiny_model, tmp_path, capsys):
    target = tmp_path / "sub" / "ablation.json"
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", SHORT,
                            "--heads", "1.0,2.3", "--mode", "mean", "--bos", "--json", target)
    assert code == 0, err
    data = json.loads(stdout)
    assert set(data) == {"mode", "n_tokens", "truncated", "chat", "heads", "head_names", "baseline", "ablated"}
    assert data["mode"] == "mean" and data["heads"] == [[1, 0], [2, 3]] and data["head_names"] == ["L1H0", "L2H3"]
    assert data["n_tokens"] == direct_n_tokens(tiny_model, SHORT) and data["truncated"] is False
    direct = ablation.ablate(tiny_model, SHORT, [(1, 0), (2, 3)], mode="mean", bos=True)
    for key, outcome in (("baseline", direct.baseline), ("ablated", direct.ablated)):
        assert set(data[key]) == {"loss", "top"}
        assert data[key]["loss"] == pytest.approx(outcome.loss, abs=1e-9)
        assert [tuple(t) for t in data[key]["top"]] == [(t, pytest.approx(p, abs=1e-12)) for t, p in outcome.top]
    assert json.loads(target.read_text(encoding="utf-8")) == data


@pytest.mark.slow
def test_ablate_importance_lists_the_heads_that_matter(tiny_model_dir, tiny_model, capsys):
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", SHORT, "--importance",
                            "--bos")
    assert code == 0, err
    data = json.loads(stdout)
    assert set(data) == {"mode", "n_tokens", "truncated", "chat", "importance"} and data["mode"] == "zero"
    assert data["n_tokens"] == direct_n_tokens(tiny_model, SHORT) and data["truncated"] is False
    direct = ablation.importance_map(tiny_model, SHORT, "zero", bos=True)
    assert data["importance"]["baseline_loss"] == pytest.approx(direct.baseline_loss, abs=1e-9)
    np.testing.assert_allclose(data["importance"]["loss_change"], direct.loss_change, atol=1e-9)
    assert [(l, h) for l, h, _ in data["importance"]["top"]] == [(l, h) for l, h, _ in direct.top(5)]
    assert data["importance"]["top_names"] == [f"L{l}H{h}" for l, h, _ in direct.top(5)]


# ----------------------------------------------------------------------------- ablate says when it cut the text
@pytest.mark.slow
def test_ablate_warns_and_records_the_cut_in_its_json(tiny_model_dir, tiny_model, tmp_path, capsys):
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", LONG, "--heads", "1.0", "--bos",
                            "--json", tmp_path / "a.json")
    assert code == 0, err
    assert err.startswith("attnscope: warning: The text has more than 63 tokens") and len(err.splitlines()) == 1
    data = json.loads(stdout)
    assert data["truncated"] is True and data["n_tokens"] == 64
    assert json.loads((tmp_path / "a.json").read_text(encoding="utf-8")) == data
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", SHORT, "--importance", "--no-bos")
    assert code == 0 and err == ""
    data = json.loads(stdout)
    n = len(ablation.text_tokens(tiny_model, SHORT, bos=False).ids)
    assert data["truncated"] is False and data["n_tokens"] == n


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args, words", [
    (("--heads", "3.0"), "L3H0 does not exist"),
    (("--heads", "L3H0"), "L3H0 does not exist"),
    (("--heads", "1"), "LAYER.HEAD"),
    ((), "--heads"),
    (("--heads", "0.0", "--text-file", "/nonexistent/t.txt"), "Cannot read"),
])
def test_ablate_bad_input_is_one_sentence(args, words, tiny_model_dir, capsys):
    source = () if "--text-file" in args else ("--text", SHORT)
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, *source, *args)
    assert code == 2 and words in one_error_line(err) and stdout == ""


def test_ablate_a_one_token_text_is_a_sentence(tiny_model_dir, capsys):
    code, _, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", "a", "--no-bos", "--heads", "0.0")
    assert code == 2 and "2 tokens" in one_error_line(err)
