"""Scores over many texts: batched runs equal one-at-a-time runs; mean/std; writers; cancel."""
import csv
import json
import os
import threading
import warnings

import numpy as np
import pytest

from analysis import scan
from analysis.errors import InputError
from analysis.head_scores import SCORE_NAMES, all_scores

TEXTS = [
    "The cat sat on the mat because it was tired. The cat sat on the mat.",
    "Hello world",
    "def add(a, b):\n    return a + b",
    "one two three four five six one two three four five six one two",
    "A",
    "The server rejected the request because it was overloaded.",
    "x = [1, 2, 3]; y = [1, 2, 3]",
]


def all_scores_applies(loaded, name):
    from analysis.inference import run_text

    return all_scores(run_text(loaded, "Hello world")).applies(name)


def test_batched_scores_equal_one_text_at_a_time(tiny_model):
    from analysis.inference import run_text

    result = scan.scan_texts(tiny_model, TEXTS, batch_size=3, bos=True)
    assert result.per_text.shape == (len(TEXTS), len(SCORE_NAMES), tiny_model.n_layer, tiny_model.n_head)
    for k, text in enumerate(TEXTS):
        alone = run_text(tiny_model, text, bos=True)  # the ordinary path: inference's own capture
        expected = all_scores(alone)
        assert result.n_tokens[k] == alone.n_tokens
        for s, name in enumerate(SCORE_NAMES):
            np.testing.assert_allclose(result.per_text[k, s], expected[name], atol=1e-5, equal_nan=True,
                                       err_msg=f"text {k} score {name}")
    assert result.bos and result.tokens == sum(result.n_tokens) and result.tokens_per_second > 0
    assert not result.per_text.flags.writeable and not result.mean.flags.writeable


def test_mean_and_std_skip_texts_without_a_value(tiny_model):
    result = scan.scan_texts(tiny_model, TEXTS, batch_size=2, bos=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's all-NaN slices
        np.testing.assert_allclose(result.mean, np.nanmean(result.per_text, axis=0), rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(result.std, np.nanstd(result.per_text, axis=0), rtol=1e-9, atol=1e-12,
                                   equal_nan=True)
    dup = SCORE_NAMES.index("duplicate_token")
    has_repeat = [len(set(ids)) < len(ids) for ids in
                  (tiny_model.tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS)]
    assert 0 < result.defined[dup] == sum(has_repeat) < len(TEXTS)
    probe = SCORE_NAMES.index("induction_probe")
    np.testing.assert_allclose(result.std[probe], 0, atol=1e-12)  # the probe does not depend on the text
    assert result.mean_scores()["sink"].shape == (tiny_model.n_layer, tiny_model.n_head)
    for name in SCORE_NAMES:  # what the model kind rules out stays "not applicable" in the aggregate
        assert result.mean_scores().applies(name) == all_scores_applies(tiny_model, name)


def test_batch_size_does_not_change_the_numbers(tiny_model):
    one = scan.scan_texts(tiny_model, TEXTS, batch_size=1)
    many = scan.scan_texts(tiny_model, TEXTS, batch_size=16)
    np.testing.assert_allclose(one.per_text, many.per_text, atol=1e-5, equal_nan=True)


def test_batches_respect_size_and_memory():
    lengths = [5, 1, 3, 10, 2]
    assert scan._batches(lengths, 2, 1, 10**9) == [[1, 4], [2, 0], [3]]
    # 99 bytes at 1 byte per n²: lengths 1, 2, 3 pad to 3 (3·9 = 27); adding 5 would take 4·25 = 100;
    # 10 alone (100) exceeds the budget but must still run, alone
    assert scan._batches(lengths, 8, 1, 99) == [[1, 4, 2], [0], [3]]


def test_progress_max_texts_and_cancel(tiny_model):
    calls = []
    result = scan.scan_texts(tiny_model, TEXTS, batch_size=2, max_texts=5, progress=lambda d, t: calls.append((d, t)))
    assert result.n_texts == 5 and calls[-1] == (5, 5) and len(calls) == 3
    cancel = threading.Event()
    with pytest.raises(scan.AnalysisCancelled):
        scan.scan_texts(tiny_model, TEXTS, batch_size=2, progress=lambda d, t: cancel.set(), cancel=cancel)
    with pytest.raises(InputError, match="Text 2 is empty"):
        scan.scan_texts(tiny_model, ["ok", " "])
    with pytest.raises(InputError):
        scan.scan_texts(tiny_model, [])
    with pytest.raises(InputError):
        scan.scan_texts(tiny_model, TEXTS, batch_size=0)


def test_read_texts(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("first line\n\n   \nsecond line\n", encoding="utf-8")
    assert scan.read_texts(f) == ["first line", "second line"]
    folder = tmp_path / "many"
    folder.mkdir()
    (folder / "b.txt").write_text("text b\nstill b", encoding="utf-8")
    (folder / "a.txt").write_text("text a", encoding="utf-8")
    (folder / "c.md").write_text("ignored", encoding="utf-8")
    assert scan.read_texts(folder) == ["text a", "text b\nstill b"]
    with pytest.raises(InputError, match="not found"):
        scan.read_texts(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="no text"):
        scan.read_texts(tmp_path / "empty.txt")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputError, match="UTF-8"):
        scan.read_texts(tmp_path / "bin.txt")
    (tmp_path / "nul.txt").write_bytes(b"text\x00more")
    with pytest.raises(InputError, match="binary"):
        scan.read_texts(tmp_path / "nul.txt")
    (tmp_path / "big.txt").write_text("a line\n" * 100, encoding="utf-8")
    with pytest.raises(InputError, match="more than"):
        scan.read_texts(tmp_path / "big.txt", limit=200)
    os.mkfifo(tmp_path / "pipe")  # would block a plain open()
    with pytest.raises(InputError, match="named pipe"):
        scan.read_texts(tmp_path / "pipe")
    (tmp_path / "bom.txt").write_bytes("\ufefffirst\nsecond".encode("utf-8"))
    assert scan.read_texts(tmp_path / "bom.txt") == ["first", "second"]


def test_write_scan(tiny_model, tmp_path):
    from analysis.export import MARKER, SCAN_FILES, write_scan
    from analysis.lenses import sink_rate_of_scores

    result = scan.scan_texts(tiny_model, TEXTS[:4], batch_size=2)
    written = write_scan(result, tmp_path / "out", sink_epsilon=0.2)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([*SCAN_FILES, MARKER])
    assert sorted(p.name for p in written) == sorted(SCAN_FILES)
    assert [p.name for p in (tmp_path).iterdir()] == ["out"]  # no staging folder left beside it
    L, H = tiny_model.n_layer, tiny_model.n_head
    with open(tmp_path / "out" / "scores_mean.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["layer", "head", *SCORE_NAMES] and len(rows) == 1 + L * H
    assert float(rows[1 + 1 * H + 2][2 + SCORE_NAMES.index("sink")]) == pytest.approx(
        result.mean[SCORE_NAMES.index("sink"), 1, 2], rel=1e-5)
    mean_scores = result.mean_scores()
    assert rows[1][2:] == [mean_scores.text(name, 0, 0) for name in SCORE_NAMES]  # n/a where a score does not apply
    with open(tmp_path / "out" / "scores_per_text.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0][:4] == ["text", "n_tokens", "layer", "head"] and len(rows) == 1 + 4 * L * H
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["texts"] == 4 and summary["tokens"] == sum(result.n_tokens)
    assert summary["tokens_per_second"] == pytest.approx(summary["tokens"] / summary["seconds"])
    sink_means = result.mean[SCORE_NAMES.index("sink")]
    by_hand = float(np.mean([[m > 0.2 for m in row] for row in sink_means]))
    assert summary["sink_epsilon"] == 0.2 and summary["sink_rate"] == pytest.approx(by_hand)
    assert summary["sink_rate"] == sink_rate_of_scores(sink_means, 0.2).rate


def test_the_bundled_sample_set_reads_and_scans(tiny_model):
    from analysis.loading import PROJECT_ROOT

    texts = scan.read_texts(PROJECT_ROOT / "resources" / "texts" / "scan_sample.txt")
    assert len(texts) >= 200 and len(set(texts)) == len(texts)
    result = scan.scan_texts(tiny_model, texts, max_texts=20)
    assert result.n_texts == 20


def test_compare_batched_reports_both_speeds(tiny_model):
    lines = ["The cat sat on the mat because it was tired."] * 20
    texts = scan.texts_of_length(tiny_model, lines, 16, 6)
    assert len(texts) == 6
    assert all(14 <= len(tiny_model.tokenizer(t, add_special_tokens=False)["input_ids"]) <= 18 for t in texts)
    report = scan.compare_batched(tiny_model, texts, batch_size=3, repeats=1)
    assert report["texts"] == 6 and report["batch_size"] == 3
    assert report["ratio"] == pytest.approx(report["batched_tokens_per_second"]
                                            / report["one_at_a_time_tokens_per_second"])
    assert report["max_abs_diff"] < 1e-5
