"""The headless command line: export writes every file or none; calc prints the steps."""
import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

TEXT = "The server rejected the request because it was overloaded. The server"


def attnscope(*args, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_export_writes_everything(tiny_model_dir, tmp_path):
    out = attnscope("export", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "x", "--bos")
    assert out.returncode == 0, out.stderr
    x = tmp_path / "x"
    with np.load(x / "attention.npz") as data:
        data = dict(data)
    n = len(data["tokens"])
    assert data["attentions"].dtype == np.float32 and data["attentions"].shape == (3, 4, n, n)
    assert data["tokens"][0] == "<|endoftext|>" and data["token_ids"].dtype == np.int64
    with (x / "scores.csv").open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["layer", "head", "previous_token", "sink", "self", "duplicate_token", "induction",
                       "induction_probe", "entropy"]
    assert len(rows) == 1 + 12
    parity = json.loads((x / "parity.json").read_text())
    assert parity["passed"] is True and parity["max_abs_diff_weights"] < parity["tolerance"]["weights"]
    assert {"max_abs_diff_output", "layers"} <= set(parity) and len(parity["layers"]) == 3
    summary = json.loads((x / "summary.json").read_text())
    assert summary["n_tokens"] == n and summary["truncated"] is False and summary["device"] == "cpu"
    assert {"forward_s", "load_s", "parity_s"} <= set(summary["timings"])
    assert (x / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    heads = sorted(p.name for p in (x / "heads").iterdir())
    assert len(heads) == 12 and "L2H3.png" in heads
    assert not [p for p in x.iterdir() if p.name.startswith(".attnscope")]


@pytest.mark.parametrize("fmt,magic", [("svg", b"<?xml"), ("pdf", b"%PDF")])
def test_export_vector_formats(tiny_model_dir, tmp_path, fmt, magic):
    out = attnscope("export", "--model", tiny_model_dir, "--text", "A cat.", "--out", tmp_path, "--format", fmt,
                    "--no-head-images")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / f"grid.{fmt}").read_bytes()[: len(magic)] == magic


def test_text_file_and_truncation_warning(tiny_model_dir, tmp_path):
    (tmp_path / "t.txt").write_text("many words here " * 40)
    out = attnscope("export", "--model", tiny_model_dir, "--text-file", tmp_path / "t.txt", "--out", tmp_path / "o",
                    "--no-head-images")
    assert out.returncode == 0, out.stderr
    assert "warning" in out.stderr and "only the first 64 tokens" in out.stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["truncated"] is True


@pytest.mark.parametrize("case", ["bad_model", "empty_text", "unwritable", "corrupt"])
def test_errors_exit_nonzero_with_one_line_and_no_claim_of_success(tiny_model_dir, tmp_path, case):
    out_dir = tmp_path / "out"
    model, text = str(tiny_model_dir), TEXT
    if case == "bad_model":
        model = str(tmp_path / "no-such-model")
    elif case == "empty_text":
        text = "  "
    elif case == "unwritable":
        (tmp_path / "a-file").write_text("")
        out_dir = tmp_path / "a-file" / "out"
    elif case == "corrupt":
        import shutil

        model = str(shutil.copytree(tiny_model_dir, tmp_path / "m"))
        (tmp_path / "m" / "model.safetensors").write_bytes(b"garbage")
    out = attnscope("export", "--model", model, "--text", text, "--out", out_dir)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnscope: error:"), out.stderr
    assert "Traceback" not in out.stderr
    assert not (out_dir / "summary.json").exists()


def test_calc_prints_the_worked_example():
    out = attnscope("calc", "--q", "[1, 0, 0.5, 1]", "--k", "[[1,0,0.8,1],[0,1,0.2,0],[0.2,0.2,0.4,0.1]]",
                    "--v", "[[0.9,0.1,0.7,0.8],[0.1,0.9,0.2,0.1],[0.3,0.3,0.5,0.2]]")
    assert out.returncode == 0, out.stderr
    steps = json.loads(out.stdout)
    assert [round(x, 4) for x in steps["weights"][0]] == [0.5871, 0.1859, 0.2270]
    assert [round(x, 4) for x in steps["output"][0]] == [0.6151, 0.2941, 0.5616, 0.5337]
    assert steps["scaled"][0] == pytest.approx([1.2, 0.05, 0.25])


def test_calc_bad_json():
    out = attnscope("calc", "--q", "[1,", "--k", "[[1]]", "--v", "[[1]]")
    assert out.returncode != 0 and "JSON" in out.stderr


def test_help_is_fast():
    import time

    t = time.time()
    out = attnscope("--help")
    assert out.returncode == 0 and "export" in out.stdout
    assert time.time() - t < 10
