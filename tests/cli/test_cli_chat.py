"""``--chat`` on export, scan, ablate and the app: the text runs as one user turn of the model's chat template (the
ids ``apply_chat_template(..., add_generation_prompt=True, tokenize=True)`` gives), the outputs say so, and a model
without a template, or --chat beside --bos/--no-bos, is one line and exit 2."""
import json

import numpy as np
import pytest

from cli.parser import parse_args
from helpers import one_error_line, run_main as run

TEXT = "The cat sat on the mat because it was tired."


def template_ids(loaded, text):
    return loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False)


def test_export_chat_writes_the_template_tokens_and_says_so(chat_model_dir, chat_model, tmp_path, capsys):
    out = tmp_path / "x"
    code, _, err = run(capsys, "export", "--model", chat_model_dir, "--text", TEXT, "--out", out, "--chat",
                       "--no-head-images")
    assert code == 0, err
    with np.load(out / "attention.npz") as data:
        ids, tokens = data["token_ids"].tolist(), data["tokens"].tolist()
    assert ids == template_ids(chat_model, TEXT)
    assert tokens[0] == "<|im_start|>" and tokens.count("<|im_start|>") == 2 and "<|im_end|>" in tokens
    summary = json.loads((out / "summary.json").read_text())
    assert summary["chat"] is True and summary["bos"] is False and summary["n_tokens"] == len(ids)
    code, _, err = run(capsys, "export", "--model", chat_model_dir, "--text", TEXT, "--out", out, "--no-head-images")
    assert code == 0, err
    assert json.loads((out / "summary.json").read_text())["chat"] is False


def test_chat_on_a_model_without_a_template_is_one_line(tiny_model_dir, tmp_path, capsys):
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "x", "--chat")
    assert code == 2
    assert one_error_line(err) == (f"attnscope: error: The model {tiny_model_dir} has no chat template; run "
                                   "without --chat (untick Chat format).")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("command", [["export", "--text", "x", "--out", "o"], ["scan", "--out", "o"],
                                     ["ablate", "--text", "x", "--importance"]])
@pytest.mark.parametrize("bos", ["--bos", "--no-bos"])
def test_chat_beside_bos_is_refused_before_anything_loads(command, bos, capsys):
    code, _, err = run(capsys, *command, "--chat", bos)
    assert code == 2
    assert one_error_line(err) == (f"attnscope: error: --chat takes the special tokens from the model's chat "
                                   f"template: drop {bos} (see 'attnscope {command[0]} --help')")


def test_chat_is_the_same_before_or_after_the_command():
    assert parse_args(["--chat", "export", "--text", "x", "--out", "o"]).chat is True
    assert parse_args(["export", "--chat", "--text", "x", "--out", "o"]).chat is True
    assert parse_args(["export", "--text", "x", "--out", "o"]).chat is False
    assert parse_args(["--chat"]).chat is True and parse_args([]).chat is False  # the app


def test_scan_chat_wraps_each_text(chat_model_dir, chat_model, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("The cat sat on the mat\nHello world\n", encoding="utf-8")
    code, _, err = run(capsys, "scan", "--model", chat_model_dir, "--texts", texts, "--out", tmp_path / "s", "--chat")
    assert code == 0, err
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["chat"] is True
    expected = sum(len(template_ids(chat_model, t)) for t in ("The cat sat on the mat", "Hello world"))
    assert summary["tokens"] == expected


def test_ablate_chat_runs_the_chat_ids(chat_model_dir, chat_model, capsys):
    code, stdout, err = run(capsys, "ablate", "--model", chat_model_dir, "--text", TEXT, "--heads", "1.0", "--chat")
    assert code == 0, err
    data = json.loads(stdout)
    assert data["chat"] is True and data["n_tokens"] == len(template_ids(chat_model, TEXT))
    from analysis.measures import ablation

    direct = ablation.ablate(chat_model, TEXT, [(1, 0)], chat=True)
    assert data["baseline"]["loss"] == pytest.approx(direct.baseline.loss, abs=1e-9)
    assert data["baseline"]["loss"] != pytest.approx(ablation.ablate(chat_model, TEXT, [(1, 0)]).baseline.loss,
                                                     abs=1e-9)
