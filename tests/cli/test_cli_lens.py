"""``attnscope lens``: the logit lens as the documented JSON, each number checked against
``analysis.measures.logit_lens`` called directly; bad input is one sentence and writes no file."""
import json

import numpy as np
import pytest

from analysis.measures.logit_lens import logit_lens
from helpers import one_error_line, run_main as run

TEXT = "The cat sat on the mat because it was tired. The cat sat on the"


@pytest.mark.slow
def test_lens_prints_the_documented_json(tiny_model_dir, tiny_model, tmp_path, capsys):
    target = tmp_path / "sub" / "lens.json"
    code, stdout, err = run(capsys, "lens", "--model", tiny_model_dir, "--text", TEXT, "--no-bos", "--json", target)
    assert code == 0, err
    data = json.loads(stdout)
    ids = tiny_model.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    direct = logit_lens(tiny_model, ids)
    L, n = tiny_model.n_layer, len(ids)
    assert data["n_tokens"] == n and len(data["tokens"]) == n
    assert np.array(data["top_ids"]).shape == (L, n) and data["top_ids"] == direct.top.tolist()
    assert data["top"][-1][-1] == tiny_model.tokenizer.decode([int(direct.top[-1, -1])])
    np.testing.assert_allclose(data["prob"], direct.prob, atol=1e-12)
    assert data["final_rank"] == direct.final_rank.tolist()
    np.testing.assert_allclose(data["surprisal"][:-1], direct.surprisal[:-1], atol=1e-12)
    assert data["surprisal"][-1] is None  # no next token after the last: NaN, written as null
    assert json.loads(target.read_text(encoding="utf-8")) == data


@pytest.mark.slow
def test_lens_empty_text_is_one_sentence_and_no_file(tiny_model_dir, tmp_path, capsys):
    target = tmp_path / "l.json"
    code, _, err = run(capsys, "lens", "--model", tiny_model_dir, "--text", "   ", "--json", target)
    assert code == 2 and "empty" in one_error_line(err)
    assert not target.exists()
