"""``attnscope scan``: every head score over many texts, as CSV, checked against the analysis called
directly (one text at a time: an independent run); bad texts are one sentence; Ctrl+C leaves nothing."""
import csv
import json
import signal

import numpy as np
import pytest

from analysis.measures import scan, scan_inputs
from helpers import one_error_line, run_main as run

SHORT = "The cat sat on the mat because it was tired. The cat sat on the mat."
LONG = "The cat sat on the mat because it was tired. " * 40  # far more than the tiny model's 64 positions
TEXTS = ["The cat sat on the mat because it was tired. The cat sat on the mat.", "Hello world",
         "one two three one two three", "The server rejected the request.", "x = [1, 2]; y = [1, 2]"]


@pytest.fixture()
def texts_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS) + "\n\n", encoding="utf-8")
    return path


def read_table(path):
    with open(path, encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


# ----------------------------------------------------------------------------- the scores over the texts
@pytest.mark.slow
def test_scan_writes_the_scores_over_the_texts(tiny_model_dir, tiny_model, texts_file, tmp_path, capsys):
    from analysis.export.names import MARKER
    from analysis.export.contents import SCAN_FILES
    from analysis.measures.head_scores import SCORE_NAMES

    out = tmp_path / "scan"
    code, stdout, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", texts_file, "--out", out,
                            "--batch", "2", "--max-texts", "4", "--sink-epsilon", "0.2")
    assert code == 0, err
    assert err == ""  # no progress bar when stderr is not a terminal
    assert "scanned 4 texts" in stdout and "tokens/s" in stdout
    assert sorted(p.name for p in out.iterdir()) == sorted([*SCAN_FILES, MARKER])
    alone = scan.scan_texts(tiny_model, TEXTS[:4], batch_size=1)  # one at a time: an independent run
    header, rows = read_table(out / "scores_mean.csv")
    assert header == ["layer", "head", *SCORE_NAMES] and len(rows) == tiny_model.n_layer * tiny_model.n_head
    k = SCORE_NAMES.index("sink")
    for row in rows:
        layer, head = int(row[0]), int(row[1])
        assert float(row[2 + k]) == pytest.approx(alone.mean[k, layer, head], rel=1e-4, abs=1e-6)
    _, std_rows = read_table(out / "scores_std.csv")
    assert float(std_rows[5][2 + k]) == pytest.approx(alone.std[k, 1, 1], rel=1e-3, abs=1e-6)
    _, per_text = read_table(out / "scores_per_text.csv")
    assert len(per_text) == 4 * tiny_model.n_layer * tiny_model.n_head
    header, texts = read_table(out / "texts.csv")  # what each per-text number is
    assert header == ["text", "n_tokens", "truncated", "chars", "source", "content"]
    assert [row[5] for row in texts] == TEXTS[:4] and [int(row[1]) for row in texts] == list(alone.n_tokens)
    assert [int(row[3]) for row in texts] == [len(t) for t in TEXTS[:4]]
    probe = SCORE_NAMES.index("induction_probe")  # the same for every text: its std is exactly 0
    assert all(float(row[2 + probe]) == 0.0 for row in std_rows)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["texts"] == 4 and summary["tokens"] == alone.tokens and summary["batch_size"] == 2
    assert summary["tokens_per_second"] == pytest.approx(summary["tokens"] / summary["seconds"])
    mean_sink = np.array([[float(r[2 + k]) for r in rows if int(r[0]) == layer] for layer in range(3)])
    assert summary["sink_epsilon"] == 0.2
    assert summary["sink_rate"] == pytest.approx(float((mean_sink > 0.2).mean()))


@pytest.mark.slow
def test_scan_defaults_to_the_bundled_sample_set(tiny_model_dir, tmp_path, capsys):
    code, stdout, err = run(capsys, "scan", "--model", tiny_model_dir, "--out", tmp_path / "s", "--max-texts", "6")
    assert code == 0, err
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["texts"] == 6 and summary["sink_epsilon"] == 0.3
    sample = scan_inputs.read_texts(scan_inputs.SAMPLE_TEXTS)
    assert len(sample) >= 200
    code, _, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", "sample", "--out", tmp_path / "s",
                       "--max-texts", "3")
    assert code == 0, err
    assert json.loads((tmp_path / "s" / "summary.json").read_text())["texts"] == 3


# ----------------------------------------------------------------------------- scan says when it cut texts
@pytest.mark.slow
def test_scan_warns_on_stderr_when_it_cut_texts(tiny_model_dir, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{SHORT}\n{LONG}\n", encoding="utf-8")
    code, _, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", texts, "--out", tmp_path / "o")
    assert code == 0, err
    assert "attnscope: warning: 1 of 2 texts were longer than" in err and "were cut" in err
    summary = json.loads((tmp_path / "o" / "summary.json").read_text(encoding="utf-8"))
    assert summary["truncated_texts"] == 1


# ----------------------------------------------------------------------------- bad texts
def bad_texts(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (tmp_path / "blank.txt").write_text("\n  \n", encoding="utf-8")
    (tmp_path / "nofiles").mkdir()
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02")
    return {"missing": (tmp_path / "missing.txt", "not found"), "latin1": (tmp_path / "latin1.txt", "UTF-8"),
            "blank": (tmp_path / "blank.txt", "no text"), "folder": (tmp_path / "nofiles", "no .txt"),
            "binary": (tmp_path / "binary.txt", "binary"), "empty name": ("", "No texts given")}


@pytest.mark.parametrize("case", ["missing", "latin1", "blank", "folder", "binary", "empty name"])
def test_a_bad_texts_file_is_one_sentence_and_writes_nothing(case, tiny_model_dir, tmp_path, capsys):
    path, words = bad_texts(tmp_path)[case]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, stdout, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", path, "--out", tmp_path / "o")
    assert code == 2 and words in one_error_line(err) and stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_scan_refuses_a_folder_of_other_files(tiny_model_dir, texts_file, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, _, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", texts_file, "--out", out)
    assert code == 2 and "not an AttnScope export" in one_error_line(err)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# ----------------------------------------------------------------------------- Ctrl+C
@pytest.mark.slow
def test_ctrl_c_during_the_scan_exits_130_and_leaves_nothing(tiny_model_dir, texts_file, tmp_path, capsys,
                                                             monkeypatch):
    forward = scan._forward_batch
    calls = []

    def interrupted_forward(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the second batch: mid-scan
            signal.raise_signal(signal.SIGINT)
        return forward(*args, **kwargs)

    monkeypatch.setattr(scan, "_forward_batch", interrupted_forward)
    out = tmp_path / "deep" / "scan"
    code, stdout, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", texts_file, "--out", out,
                            "--batch", "1")
    assert code == 130 and "interrupted (Ctrl+C)" in one_error_line(err) and stdout == ""
    assert len(calls) == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt"]


@pytest.mark.slow
def test_ctrl_c_while_writing_keeps_the_earlier_scan(tiny_model_dir, texts_file, tmp_path, capsys, monkeypatch):
    from analysis.export import writers as export

    out = tmp_path / "scan"
    assert run(capsys, "scan", "--model", tiny_model_dir, "--texts", texts_file, "--out", out, "--max-texts", "2")[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    write = export.write_scan_per_text_csv

    def interrupted_write(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)  # arrives while files are written: deferred to the next check
        return write(*args, **kwargs)

    monkeypatch.setattr(export, "write_scan_per_text_csv", interrupted_write)
    code, _, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", texts_file, "--out", out)
    assert code == 130 and "is as it was" in one_error_line(err)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan", "texts.txt"]  # no staging folder left
    code, _, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", texts_file, "--out", tmp_path / "new")
    assert code == 130 and f"{tmp_path / 'new'} was not created" in one_error_line(err)  # not "as it was"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan", "texts.txt"]
