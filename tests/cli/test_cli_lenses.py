"""The command line of the lenses: export's value norms, rollout and sink rate; ``scan``; ``ablate``.

Everything runs in this process through ``main.main([...])``; each number is checked against the
analysis functions called directly (or a count by hand), never against itself.
"""
import csv
import json
import signal

import numpy as np
import pytest

from analysis.measures import ablation, lenses, scan
from helpers import one_error_line, run_main as run

TEXT = "The server rejected the request because it was overloaded. The server"
TEXTS = ["The cat sat on the mat because it was tired. The cat sat on the mat.", "Hello world",
         "one two three one two three", "The server rejected the request.", "x = [1, 2]; y = [1, 2]"]


# ----------------------------------------------------------------------------- export
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


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "half"])
def test_a_bad_sink_epsilon_is_refused_before_anything_runs(value, tmp_path, capsys):
    code, _, err = run(capsys, "export", "--text", "a", "--out", tmp_path / "x", "--sink-epsilon", value)
    assert code == 2 and "between 0 and 1" in err and not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------- scan
@pytest.fixture()
def texts_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS) + "\n\n", encoding="utf-8")
    return path


def read_table(path):
    with open(path, encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


@pytest.mark.slow
def test_scan_writes_the_scores_over_the_texts(tiny_model_dir, tiny_model, texts_file, tmp_path, capsys):
    from analysis.export.contents import SCAN_FILES
    from analysis.export.names import MARKER
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
    sample = scan.read_texts(scan.SAMPLE_TEXTS)
    assert len(sample) >= 200
    code, _, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", "sample", "--out", tmp_path / "s",
                       "--max-texts", "3")
    assert code == 0, err
    assert json.loads((tmp_path / "s" / "summary.json").read_text())["texts"] == 3


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


@pytest.mark.parametrize("args, words", [(("--batch", "0"), "at least 1"), (("--max-texts", "x"), "at least 1")])
def test_scan_counts_must_be_positive(args, words, tmp_path, capsys):
    code, _, err = run(capsys, "scan", "--out", tmp_path / "o", *args)
    assert code == 2 and words in err


def test_scan_refuses_a_folder_of_other_files(tiny_model_dir, texts_file, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, _, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", texts_file, "--out", out)
    assert code == 2 and "not an AttnScope export" in one_error_line(err)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


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


# ----------------------------------------------------------------------------- ablate
ABLATE_TEXT = "The cat sat on the mat because it was tired. The cat sat on the mat."


def direct_n_tokens(loaded, text: str) -> int:
    """The tokens of ``text`` with BOS in front, counted by the tokenizer itself."""
    return 1 + len(loaded.tokenizer(text, add_special_tokens=False)["input_ids"])


def test_ablate_prints_the_documented_json(tiny_model_dir, tiny_model, tmp_path, capsys):
    target = tmp_path / "sub" / "ablation.json"
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", ABLATE_TEXT,
                            "--heads", "1.0,2.3", "--mode", "mean", "--bos", "--json", target)
    assert code == 0, err
    data = json.loads(stdout)
    assert set(data) == {"mode", "n_tokens", "truncated", "heads", "baseline", "ablated"}
    assert data["mode"] == "mean" and data["heads"] == [[1, 0], [2, 3]]
    assert data["n_tokens"] == direct_n_tokens(tiny_model, ABLATE_TEXT) and data["truncated"] is False
    direct = ablation.ablate(tiny_model, ABLATE_TEXT, [(1, 0), (2, 3)], mode="mean", bos=True)
    for key, outcome in (("baseline", direct.baseline), ("ablated", direct.ablated)):
        assert set(data[key]) == {"loss", "top"}
        assert data[key]["loss"] == pytest.approx(outcome.loss, abs=1e-9)
        assert [tuple(t) for t in data[key]["top"]] == [(t, pytest.approx(p, abs=1e-12)) for t, p in outcome.top]
    assert json.loads(target.read_text(encoding="utf-8")) == data


@pytest.mark.slow
def test_ablate_importance_lists_the_heads_that_matter(tiny_model_dir, tiny_model, capsys):
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", ABLATE_TEXT, "--importance",
                            "--bos")
    assert code == 0, err
    data = json.loads(stdout)
    assert set(data) == {"mode", "n_tokens", "truncated", "importance"} and data["mode"] == "zero"
    assert data["n_tokens"] == direct_n_tokens(tiny_model, ABLATE_TEXT) and data["truncated"] is False
    direct = ablation.importance_map(tiny_model, ABLATE_TEXT, "zero", bos=True)
    assert data["importance"]["baseline_loss"] == pytest.approx(direct.baseline_loss, abs=1e-9)
    np.testing.assert_allclose(data["importance"]["loss_change"], direct.loss_change, atol=1e-9)
    assert [(l, h) for l, h, _ in data["importance"]["top"]] == [(l, h) for l, h, _ in direct.top(5)]


@pytest.mark.parametrize("args, words", [
    (("--heads", "3.0"), "does not exist"),
    (("--heads", "1"), "LAYER.HEAD"),
    ((), "--heads"),
    (("--heads", "0.0", "--text-file", "/nonexistent/t.txt"), "Cannot read"),
])
def test_ablate_bad_input_is_one_sentence(args, words, tiny_model_dir, capsys):
    source = () if "--text-file" in args else ("--text", ABLATE_TEXT)
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, *source, *args)
    assert code == 2 and words in one_error_line(err) and stdout == ""


def test_ablate_a_one_token_text_is_a_sentence(tiny_model_dir, capsys):
    code, _, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", "a", "--no-bos", "--heads", "0.0")
    assert code == 2 and "2 tokens" in one_error_line(err)


# ----------------------------------------------------------------------------- bench
@pytest.mark.slow
def test_bench_scan_reports_both_speeds_and_their_ratio(tiny_model_dir, capsys):
    from gui.bench import bench_scan

    report = bench_scan(tiny_model_dir, n_texts=6, batch_sizes=(3, 6), repeats=1)
    assert report["texts"] == 6 and [row["batch_size"] for row in report["batched"]] == [3, 6]
    for row in report["batched"]:
        assert row["ratio"] == pytest.approx(row["tokens_per_second"] / report["one_at_a_time_tokens_per_second"])
        assert row["max_abs_diff"] < 1e-5  # batched scores equal one at a time
    assert report["ratio"] == max(row["ratio"] for row in report["batched"])
    printed = capsys.readouterr().out
    assert "scan ratio" in printed and "one at a time" in printed
    ceiling = report["ceiling"]  # t₁ / (t_B¹ / T), at the largest batch size
    assert ceiling["batch_size"] == 6
    assert ceiling["ratio"] == pytest.approx(ceiling["one_text_s"] * ceiling["threads"] / ceiling["one_thread_batched_s"])
    assert "batching ceiling here" in printed


def test_batching_ceiling_times_one_thread_then_gives_the_threads_back(monkeypatch):
    """The batched forward runs on one thread (the per-core rate), batch 1 on all; the count is restored."""
    import torch

    from gui import bench

    seen = []

    class Model:
        config = type("Config", (), {"vocab_size": 10})()

        def __call__(self, input_ids, output_attentions):
            seen.append((input_ids.shape[0], torch.get_num_threads()))

    monkeypatch.setattr(bench, "median_time", lambda fn, repeats: (fn(), {1: 0.1, 4: 0.8}[seen[-1][0]])[1])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ceiling = bench.batching_ceiling(Model(), batch_size=4, n_tokens=5)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert {(b, t) for b, t in seen} == {(1, 2), (4, 1)}
    # one text: 0.1 s; one thread, batch 4: 0.2 s a text → two cores 0.1 s a text → ratio 1
    assert ceiling["one_text_s"] == pytest.approx(0.1) and ceiling["one_thread_batched_s"] == pytest.approx(0.2)
    assert ceiling["ratio"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- other families
@pytest.fixture(scope="module")
def family_folders(tmp_path_factory):
    from analysis.model.synthetic import save_random_family

    root = tmp_path_factory.mktemp("lens-families")
    return {t: save_random_family(root / t, t, seed=5) for t in ("llama", "gpt_neox", "bert")}


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["llama", "gpt_neox", "bert"])
def test_export_and_scan_work_for_every_family(model_type, family_folders, tmp_path, capsys):
    """Grouped-query attention (llama), fused per-head QKV with a parallel residual (NeoX), an encoder (BERT)."""
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model

    folder = family_folders[model_type]
    code, _, err = run(capsys, "export", "--model", folder, "--text", ABLATE_TEXT, "--out", tmp_path / "x",
                       "--no-head-images")
    assert code == 0, err
    loaded = load_model(str(folder), device="cpu")
    result = run_text(loaded, ABLATE_TEXT)
    with np.load(tmp_path / "x" / "attention.npz") as data:
        np.testing.assert_allclose(data["value_norms"], lenses.value_norms(loaded, result).value_norms, rtol=1e-5,
                                   atol=1e-7)
        np.testing.assert_allclose(data["rollout"], lenses.rollout(result.attentions), rtol=1e-5, atol=1e-7)
    code, _, err = run(capsys, "scan", "--model", folder, "--out", tmp_path / "s", "--max-texts", "6", "--batch", "3")
    assert code == 0, err
    alone = scan.scan_texts(loaded, scan.read_texts(scan.SAMPLE_TEXTS)[:6], batch_size=1)
    assert scan.max_abs_diff(alone, scan.scan_texts(loaded, scan.read_texts(scan.SAMPLE_TEXTS)[:6], batch_size=3)) < 1e-5
    header, rows = read_table(tmp_path / "s" / "scores_mean.csv")
    encoder = model_type == "bert"
    assert (rows[0][header.index("induction")] == "n/a") is encoder  # the induction scores are for decoders only
    code, stdout, err = run(capsys, "ablate", "--model", folder, "--text", ABLATE_TEXT, "--heads", "1.1")
    if encoder:
        assert code == 2 and "encoder" in one_error_line(err) and stdout == ""
    else:
        assert code == 0, err
        direct = ablation.ablate(loaded, ABLATE_TEXT, [(1, 1)])
        assert json.loads(stdout)["ablated"]["loss"] == pytest.approx(direct.ablated.loss, abs=1e-9)
