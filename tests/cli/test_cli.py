"""The headless command line: export writes every file or none; calc prints the steps.

Most tests call ``main.main([...])`` in the test process (no interpreter start-up per test); a few
run the real ``python main.py`` where the process itself is the point (start-up time, signals).
"""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import main as cli
from conftest import ROOT
from helpers import one_error_line, run_main as run

TEXT = "The server rejected the request because it was overloaded. The server"


def attnscope(*args, timeout=300, env=None):
    """The real command in a fresh interpreter."""
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.slow
def test_export_writes_everything(tiny_model_dir, tmp_path, capsys):
    """Every file of an export checked (a fresh process runs it in the interruption test below)."""
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "x", "--bos")
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
    summary = json.loads((x / "summary.json").read_text())
    assert summary["n_tokens"] == n and summary["truncated"] is False and summary["device"] == "cpu"
    assert {"forward_s", "load_s", "parity_s"} <= set(summary["timings"])
    assert (x / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    heads = sorted(p.name for p in (x / "heads").iterdir())
    assert len(heads) == 12 and "L2H3.png" in heads
    assert [p.name for p in tmp_path.iterdir()] == ["x"]  # no staging folder left beside it


@pytest.mark.parametrize("fmt,magic", [("svg", b"<?xml"), ("pdf", b"%PDF")])
def test_export_vector_formats(tiny_model_dir, tmp_path, capsys, fmt, magic):
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", "A cat.", "--out", tmp_path / "o",
                       "--format", fmt, "--no-head-images")
    assert code == 0, err
    assert (tmp_path / "o" / f"grid.{fmt}").read_bytes()[: len(magic)] == magic


def test_text_file_and_truncation_warning(tiny_model_dir, tmp_path, capsys):
    (tmp_path / "t.txt").write_text("many words here " * 40)
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text-file", tmp_path / "t.txt",
                       "--out", tmp_path / "o", "--no-head-images")
    assert code == 0, err
    assert "warning" in err and "more than 64 tokens" in err and "only the first 64 tokens" in err
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["truncated"] is True


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


def test_out_must_name_a_folder(capsys):
    code, _, err = run(capsys, "export", "--text", "a", "--out", "")
    assert code == 2 and "needs a folder name" in err


def test_a_failed_export_removes_the_folders_it_created(tmp_path, capsys):
    code, _, err = run(capsys, "export", "--model", tmp_path / "missing", "--text", "a",
                       "--out", tmp_path / "a" / "b" / "c")
    assert code == 2 and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_export_replaces_an_earlier_export_and_reports_pickle_with_the_flag(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "o"
    assert run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--out", out)[0] == 0
    assert len(list((out / "heads").iterdir())) == 12
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


def test_text_file_reads_are_bounded(tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "TEXT_FILE_LIMIT", 1000)
    big = tmp_path / "big.txt"
    big.write_bytes(b"\xef\xbb\xbf" + "word é ".encode() * 5000)  # a BOM, then more than the limit
    text, warnings = cli.read_text_file(big, 1000)
    assert len(text.encode()) <= 1000 and "only its first" in warnings[0]
    assert text.startswith("\ufeff")  # removed (with a warning) by run_text, for the GUI's pastes too
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text-file", big, "--out", tmp_path / "o",
                       "--no-head-images")
    assert code == 0 and "byte-order mark" in err and "longer than" in err
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text-file", bad, "--out", tmp_path / "p")
    assert code == 2 and "not UTF-8 text (byte 0xe9 at offset 3)" in one_error_line(err)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_is_refused_at_once():
    """A device is not a text file (it once gave a 4 MiB text of NUL characters): refused as scan refuses it."""
    from analysis.errors import InputError

    started = time.perf_counter()
    with pytest.raises(InputError, match="not a regular text file"):
        cli.read_text_file("/dev/zero")
    assert time.perf_counter() - started < 5


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_named_pipe_as_text_file_is_refused_without_blocking(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe")
    code, _, err = run(capsys, "export", "--text-file", tmp_path / "pipe", "--out", tmp_path / "o")
    assert code == 2 and "named pipe" in one_error_line(err)


def test_calc_prints_the_worked_example(capsys):
    code, out, err = run(capsys, "calc", "--q", "[1, 0, 0.5, 1]", "--k", "[[1,0,0.8,1],[0,1,0.2,0],[0.2,0.2,0.4,0.1]]",
                         "--v", "[[0.9,0.1,0.7,0.8],[0.1,0.9,0.2,0.1],[0.3,0.3,0.5,0.2]]")
    assert code == 0, err
    steps = json.loads(out)
    assert [round(x, 4) for x in steps["weights"][0]] == [0.5871, 0.1859, 0.2270]
    assert [round(x, 4) for x in steps["output"][0]] == [0.6151, 0.2941, 0.5616, 0.5337]
    assert steps["scaled"][0] == pytest.approx([1.2, 0.05, 0.25])


def test_calc_overflow_is_valid_json_with_a_note(capsys):
    code, out, err = run(capsys, "calc", "--q", "[1e308,1e308]", "--k", "[[1e308,1e308],[1,1]]", "--v", "[[1,2],[3,4]]")
    assert code == 0 and "beyond 64-bit floats" in err
    steps = json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert steps["weights"] == [[1.0, 0.0]] and steps["scores"] == [[None, None]]


@pytest.mark.parametrize("q,message", [
    ("[1,", "not JSON"),
    ("[" + "1" * 400 + "]", "too large"),
    ("[" * 50_000, "nested too deeply"),
    ("[[1],[1,2]]", "ragged"),
])
def test_calc_bad_input_is_a_sentence(capsys, q, message):
    code, _, err = run(capsys, "calc", "--q", q, "--k", "[[1]]", "--v", "[[1]]")
    assert code == 2 and message in one_error_line(err)


def test_calc_causal_with_more_queries_than_keys(capsys):
    code, _, err = run(capsys, "calc", "--q", "[[1],[2],[3]]", "--k", "[[1]]", "--v", "[[1]]", "--causal")
    assert code == 2 and "3 queries need at least 3 keys" in one_error_line(err)


@pytest.mark.parametrize("value,ok", [("3.1", True), ("99.99", True), ("-1.-1", False), ("1", False),
                                      ("a.b", False), ("1.2.3", False), ("1.-2", False)])
def test_select_takes_non_negative_layer_dot_head(value, ok):
    parser = cli.build_parser()
    if ok:
        assert parser.parse_args([f"--select={value}"]).select == value
    else:
        with pytest.raises(SystemExit):
            parser.parse_args([f"--select={value}"])


@pytest.mark.parametrize("argv,expected", [
    (["--model", "m", "--device", "cpu", "--dtype", "bfloat16", "--allow-pickle", "export", "--text", "a", "--out", "o"],
     ("m", "cpu", "bfloat16", True)),
    (["export", "--model", "m", "--device", "cpu", "--dtype", "bfloat16", "--allow-pickle", "--text", "a", "--out", "o"],
     ("m", "cpu", "bfloat16", True)),
    (["--model", "m", "scan", "--out", "o"], ("m", "auto", "float32", False)),
    (["--model", "m", "ablate", "--text", "a", "--model", "n"], ("n", "auto", "float32", False)),  # the later wins
    (["--device", "cpu", "ablate", "--text", "a"], ("bundled", "cpu", "float32", False)),
    (["scan", "--out", "o"], ("bundled", "auto", "float32", False)),
    ([], (None, "auto", "float32", False)),  # the app: the last model used, or the bundled one
])
def test_model_options_mean_the_same_before_and_after_the_command(argv, expected):
    """``--model X export`` once ran the bundled model: the subcommand's defaults overwrote what was given."""
    args = cli.parse_args(argv)
    assert (args.model, args.device, args.dtype, args.allow_pickle) == expected


@pytest.mark.slow
def test_a_model_given_before_the_command_is_the_model_exported(tiny_model_dir, tmp_path, capsys):
    code, _, err = run(capsys, "--model", tiny_model_dir, "export", "--text", TEXT, "--out", tmp_path / "x")
    assert code == 0, err
    summary = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert summary["model"] != "bundled" and summary["n_layer"] == 3


@pytest.mark.parametrize("env,problem", [
    ({}, "no display found"),
    ({"DISPLAY": ":99"}, "cannot connect to the X display :99"),
    ({"DISPLAY": "nonsense"}, "not a display name"),
    ({"QT_QPA_PLATFORM": "offscreen"}, None),
    ({"WAYLAND_DISPLAY": "wayland-0"}, None),
])
def test_display_problems_are_found_before_qt_starts(env, problem, monkeypatch, tmp_path):
    if "DISPLAY" in env and env["DISPLAY"] == ":99" and os.path.exists("/tmp/.X11-unix/X99"):
        pytest.skip("an X server runs on :99 here")
    found = cli.display_problem(env, "linux")
    assert (found is None) if problem is None else (problem in found)
    assert cli.display_problem({}, "darwin") is None


def test_gui_without_a_display_says_what_to_do(capsys, monkeypatch):
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    code, _, err = run(capsys)
    assert code == 2 and "xvfb-run" in one_error_line(err)


def test_help_is_fast():
    t = time.time()
    out = attnscope("--help")
    assert out.returncode == 0 and "export" in out.stdout
    assert time.time() - t < 10


@pytest.mark.slow
@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_export_exits_cleanly_and_keeps_the_earlier_one(tmp_path, tokenizer, capsys, signum, code):
    """A real process, signalled while it paints figures: exit 130/143 with one line, no staging folder,
    the earlier export byte-for-byte as it was (before: segfaults, and a hidden folder left behind)."""
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
