"""``attnscope export``: every file or none, the lenses and the sink rate in it, one line for every error, and
a clean exit when interrupted.

Most tests call ``main.main([...])`` in the test process (no interpreter start-up per test); the
interruption runs the real ``python main.py``, where the process itself is the point.
"""
import csv
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from analysis.measures import lenses
from conftest import ROOT
from helpers import one_error_line, run_main as run

TEXT = "The server rejected the request because it was overloaded. The server"


# ----------------------------------------------------------------------------- what an export holds
@pytest.mark.slow
def test_export_writes_everything(tiny_model_dir, tmp_path, capsys):
    """Every file of an export checked (a fresh process runs it in the interruption test below)."""
    code, out, err = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "x", "--bos")
    assert code == 0, err
    x = tmp_path / "x"
    with np.load(x / "attention.npz") as data:
        data = dict(data)
    n = len(data["tokens"])
    assert data["attentions"].dtype == np.float32 and data["attentions"].shape == (3, 4, n, n)
    assert data["tokens"][0] == "<|endoftext|>" and data["token_ids"].dtype == np.int64
    with (x / "scores.csv").open() as f:
        rows = list(csv.reader(f))
    assert rows[0][:2] == ["layer", "head"] and "previous_token" in rows[0] and "induction" in rows[0]
    assert len(rows) == 1 + 12
    parity = json.loads((x / "parity.json").read_text())
    assert parity["passed"] is True and parity["max_abs_diff_weights"] < parity["tolerance"]["weights"]
    assert {"max_abs_diff_output", "layers"} <= set(parity) and len(parity["layers"]) == 3
    assert (f"parity max |Δw| {parity['max_abs_diff_weights']:.2e} passed: its bound {parity['tolerance']['weights']:.1e}, "
            f"worst |Δw|/bound {parity['max_bound_ratio']:.2g})") in out  # every query row: no count said
    summary = json.loads((x / "summary.json").read_text())
    assert summary["n_tokens"] == n and summary["truncated"] is False and summary["device"] == "cpu"
    assert {"forward_s", "load_s", "parity_s"} <= set(summary["timings"])
    assert (x / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    heads = sorted(p.name for p in (x / "heads").iterdir())
    assert len(heads) == 24 and "L2H3.png" in heads and "L2H3.json" in heads  # each figure with its options
    options = json.loads((x / "heads" / "L2H3.json").read_text())
    assert options["options"]["heads"] == [[2, 3]] and options["options"]["text"] == TEXT and options["head"] == "L2H3"
    assert [p.name for p in tmp_path.iterdir()] == ["x"]  # no staging folder left beside it


@pytest.mark.slow
def test_a_long_export_says_on_which_query_rows_parity_checked(tokenizer, tmp_path, capsys):
    from analysis.measures.parity import SAMPLE_EDGE, SAMPLE_RANDOM
    from analysis.model.synthetic import save_random_gpt2

    model = save_random_gpt2(tmp_path / "m", n_layer=1, tokenizer=tokenizer, n_positions=600)
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    code, out, err = run(capsys, "export", "--model", model, "--text", text, "--max-tokens", "600",
                         "--no-head-images", "--out", tmp_path / "x")
    assert code == 0, err
    parity = json.loads((tmp_path / "x" / "parity.json").read_text())
    checked = 2 * SAMPLE_EDGE + SAMPLE_RANDOM
    assert parity["rows"]["all"] is False and len(parity["rows"]["checked"]) == checked
    assert f"worst |Δw|/bound {parity['max_bound_ratio']:.2g}, on {checked} of 600 query rows)" in out


@pytest.mark.slow
@pytest.mark.parametrize("fmt,magic", [("svg", b"<?xml"), ("pdf", b"%PDF")])
def test_export_vector_formats(tiny_model_dir, tmp_path, capsys, fmt, magic):
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", "A cat.", "--out", tmp_path / "o",
                       "--format", fmt, "--no-head-images")
    assert code == 0, err
    assert (tmp_path / "o" / f"grid.{fmt}").read_bytes()[: len(magic)] == magic


@pytest.mark.slow
def test_export_writes_value_norms_rollout_and_the_sink_rate(tiny_model_dir, tiny_model, tmp_path, capsys):
    from analysis.run.inference import run_text

    out = tmp_path / "x"
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--out", out, "--bos",
                       "--no-head-images", "--sink-epsilon", "0.25")
    assert code == 0, err
    with np.load(out / "attention.npz") as data:
        data = dict(data)
    result = run_text(tiny_model, TEXT, bos=True)
    L, H, n = result.n_layer, result.n_head, result.n_tokens
    np.testing.assert_array_equal(data["attentions"], result.attentions)
    assert data["value_norms"].dtype == np.float32 and data["value_norms"].shape == (L, H, n, n)
    np.testing.assert_allclose(data["value_norms"], lenses.value_norms(tiny_model, result).value_norms, rtol=1e-6)
    assert data["rollout"].dtype == np.float32 and data["rollout"].shape == (L, n, n)
    np.testing.assert_allclose(data["rollout"], lenses.rollout(result.attentions), rtol=1e-6, atol=1e-7)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    first_token = data["attentions"][..., 1:, 0].astype(np.float64).mean(axis=-1)  # (L, H), by hand
    assert summary["sink_epsilon"] == 0.25
    assert summary["sink_rate"] == pytest.approx(float((first_token > 0.25).mean()))
    assert summary["sink_rate"] == pytest.approx(lenses.sink_rate(result.attentions, 0.25).rate)
    code, _, _ = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--out", out, "--bos",
                     "--no-head-images")
    assert code == 0 and json.loads((out / "summary.json").read_text())["sink_epsilon"] == 0.3  # the default


def test_rollout_skip_first_writes_rollout_past_the_first_input_and_says_so(tiny_model_dir, tiny_model, tmp_path,
                                                                            capsys):
    """--rollout-skip-first: attention.npz's rollout is R[i, j] / (1 − R[i, 0]) for j ≥ 1 and NaN at j = 0, every
    other array as without it; summary.json's rollout_skip_first says which rollout is there."""
    from analysis.run.inference import run_text

    for name, flag in (("plain", []), ("skipped", ["--rollout-skip-first"])):
        code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--bos", "--no-head-images",
                           "--out", tmp_path / name, *flag)
        assert code == 0, err
    data = {}
    for name in ("plain", "skipped"):
        with np.load(tmp_path / name / "attention.npz") as npz:
            data[name] = dict(npz)
    summary = {name: json.loads((tmp_path / name / "summary.json").read_text(encoding="utf-8"))
               for name in ("plain", "skipped")}
    assert summary["plain"]["rollout_skip_first"] is False and summary["skipped"]["rollout_skip_first"] is True
    r = lenses.rollout(run_text(tiny_model, TEXT, bos=True).attentions).astype(np.float64)
    np.testing.assert_allclose(data["plain"]["rollout"], r, rtol=1e-6, atol=1e-7)
    skipped = data["skipped"]["rollout"]
    assert skipped.dtype == np.float32 and skipped.shape == r.shape
    assert np.isnan(skipped[..., 0]).all() and np.isnan(skipped[:, 0]).all()  # key 0; the causal first row
    expected = r[:, 1:, 1:] / (1 - r[:, 1:, :1])  # the formula, rows 1 … (a causal model's have 1 − R[i, 0] > 0)
    np.testing.assert_allclose(skipped[:, 1:, 1:], expected, rtol=1e-5, atol=1e-7)
    for array in ("attentions", "value_norms", "tokens", "token_ids"):
        np.testing.assert_array_equal(data["skipped"][array], data["plain"][array])


@pytest.mark.slow
def test_text_file_and_truncation_warning(tiny_model_dir, tmp_path, capsys):
    (tmp_path / "t.txt").write_text("many words here " * 40)
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text-file", tmp_path / "t.txt",
                       "--out", tmp_path / "o", "--no-head-images")
    assert code == 0, err
    assert "warning" in err and "more than 64 tokens" in err and "only the first 64 tokens" in err
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["truncated"] is True


@pytest.mark.slow
def test_a_model_given_before_the_command_is_the_model_exported(tiny_model_dir, tmp_path, capsys):
    code, _, err = run(capsys, "--model", tiny_model_dir, "export", "--text", TEXT, "--out", tmp_path / "x")
    assert code == 0, err
    summary = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert summary["model"] != "bundled" and summary["n_layer"] == 3


@pytest.mark.slow
def test_a_one_token_export_and_a_one_text_scan_say_so_in_the_singular(tiny_model_dir, tmp_path, capsys):
    (tmp_path / "one.txt").write_text("cat\n", encoding="utf-8")
    code, out, err = run(capsys, "export", "--model", tiny_model_dir, "--text", "cat", "--no-bos", "--max-tokens", 1,
                         "--no-head-images", "--out", tmp_path / "x")
    assert code == 0, err
    assert f"files to {tmp_path / 'x'} (1 token, 3×4 heads" in out
    code, out, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", tmp_path / "one.txt", "--no-bos",
                         "--max-tokens", 1, "--out", tmp_path / "s")
    assert code == 0, err
    assert out.startswith("scanned 1 text (1 token) in ")


# ----------------------------------------------------------------------------- every file or none
@pytest.mark.parametrize("case", ["bad_model", "empty_text", "unwritable", "corrupt", "not_an_export",
                                  "out_is_a_file", "invalid_utf8"])
def test_errors_exit_nonzero_with_one_line_and_no_claim_of_success(tiny_model_dir, tmp_path, capsys, case):
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
    elif case == "not_an_export":
        out_dir.mkdir()
        (out_dir / "notes.txt").write_text("mine")
    elif case == "out_is_a_file":
        out_dir = tmp_path / "summary.json"
        out_dir.write_text("{}")
    elif case == "invalid_utf8":
        text = b"caf\xe9".decode("utf-8", "surrogateescape")  # what Python makes of such argv bytes
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, _, err = run(capsys, "export", "--model", model, "--text", text, "--out", out_dir)
    assert code == 2
    one_error_line(err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written, nothing created


def test_a_failed_export_removes_the_folders_it_created(tmp_path, capsys):
    code, _, err = run(capsys, "export", "--model", tmp_path / "missing", "--text", "a",
                       "--out", tmp_path / "a" / "b" / "c")
    assert code == 2 and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_export_replaces_an_earlier_export_and_reports_pickle_with_the_flag(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "o"
    assert run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--out", out)[0] == 0
    assert len(list((out / "heads").iterdir())) == 24  # 12 figures and their options files
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", "A cat.", "--out", out,
                       "--no-head-images", "--format", "svg")
    assert code == 0, err
    assert not (out / "heads").exists() and not (out / "grid.png").exists() and (out / "grid.svg").exists()


def test_pickle_refusal_names_the_flag_on_the_command_line(tmp_path, tokenizer, capsys):
    from analysis.model.synthetic import save_random_gpt2

    folder = save_random_gpt2(tmp_path / "m", tokenizer=tokenizer, safetensors=False)
    capsys.readouterr()
    code, _, err = run(capsys, "export", "--model", folder, "--text", "a", "--out", tmp_path / "o")
    line = one_error_line(err)
    assert code == 2 and line.endswith("To load it anyway, pass --allow-pickle.") and "in the app" not in line


@pytest.mark.slow
@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_export_exits_cleanly_and_keeps_the_earlier_one(tmp_path, tokenizer, capsys, signum, code):
    """A real process, signalled while it paints figures: exit 130/143 with one line, no staging folder,
    the earlier export byte-for-byte as it was (no crash, no hidden folder left behind)."""
    from analysis.model.synthetic import save_random_gpt2

    model = save_random_gpt2(tmp_path / "m", n_layer=6, n_head=8, d_model=64, n_positions=128, tokenizer=tokenizer)
    out = tmp_path / "exports" / "run"
    assert run(capsys, "export", "--model", model, "--text", "A cat.", "--out", out, "--no-head-images")[0] == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    proc = subprocess.Popen([sys.executable, str(ROOT / "main.py"), "export", "--model", str(model),
                             "--text", TEXT * 3, "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list((tmp_path / "exports").glob(".attnscope-export-*")):  # the figures are being drawn
        assert proc.poll() is None and time.time() < deadline, "the export ended before it could be interrupted"
        time.sleep(0.01)
    time.sleep(0.3)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "interrupted" in one_error_line(err) and "is as it was" in err
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["run"]
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
