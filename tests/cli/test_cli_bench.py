"""``attnscope bench``: the ``--json`` target is checked before anything is measured and written whole; the
scan's speeds and the batching ceiling are reported as they are computed; peak memory comes from a fresh
process. The measurements themselves are replaced where only the command around them is tested."""
import json
import os

import pytest

from helpers import one_error_line, run_main as run


# ----------------------------------------------------------------------------- the JSON
def fake_measurements(monkeypatch, calls):
    from cli.bench import command

    def bench_model(name, folder, ns, repeats, **kwargs):
        calls.append((name, ns, repeats))
        return [{"model": name, "n": n} for n in ns]

    monkeypatch.setattr(command, "bench_model", bench_model)
    monkeypatch.setattr(command, "print_header", lambda: None)
    # the figures measured after the rows (minutes on the real model): recorded, not measured
    monkeypatch.setattr(command, "bench_real_stall", lambda ns: calls.append(("real_stall", ns)) or {n: 1.0 for n in ns})
    monkeypatch.setattr("cli.bench.importance.bench_importance", lambda: calls.append("importance") or {"x": 1})
    monkeypatch.setattr("cli.bench.head_view.bench_head_view", lambda: calls.append("head_view") or {"y": 2})
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)  # bench takes every core: not in the test process


@pytest.mark.parametrize("target, words", [("folder", "is a folder"), ("under a file", "is a file, not a folder")])
def test_bench_json_target_is_checked_before_measuring(target, words, tmp_path, capsys, monkeypatch):
    calls = []
    fake_measurements(monkeypatch, calls)
    (tmp_path / "file").write_text("x")
    path = tmp_path if target == "folder" else tmp_path / "file" / "b.json"
    code, _, err = run(capsys, "bench", "--models", "bundled", "--ns", "16", "--no-scan", "--json", path)
    assert code == 2 and words in one_error_line(err) and calls == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_bench_json_in_a_read_only_folder_is_refused_before_measuring(tmp_path, capsys, monkeypatch):
    calls = []
    fake_measurements(monkeypatch, calls)
    (tmp_path / "ro").mkdir(mode=0o555)
    code, _, err = run(capsys, "bench", "--models", "bundled", "--ns", "16", "--no-scan", "--json", tmp_path / "ro" / "b.json")
    assert code == 2 and "permission denied" in one_error_line(err) and calls == []


def test_bench_json_is_written_whole(tmp_path, capsys, monkeypatch):
    calls = []
    fake_measurements(monkeypatch, calls)
    target = tmp_path / "b.json"
    target.write_text("earlier")
    code, stdout, err = run(capsys, "bench", "--models", "bundled", "--ns", "16,32", "--repeats", "1", "--no-scan",
                            "--json", target)
    assert code == 0, err
    assert calls == [("bundled", [16, 32], 1), "head_view"]
    data = json.loads(target.read_text(encoding="utf-8"))
    assert data["head_view"] == {"y": 2} and data["importance"] is None and data["real_gui_stall_ms"] is None
    assert data["rows"] == [{"model": "bundled", "n": 16}, {"model": "bundled", "n": 32}] and data["repeats"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]  # no temporary file left
    # a failure while writing: one line, and the earlier file is as it was
    import analysis.export.folders

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(analysis.export.folders.os, "replace", full_disk)
    code, _, err = run(capsys, "bench", "--models", "bundled", "--ns", "16", "--no-scan", "--json", target)
    assert code == 2 and "the disk is full" in one_error_line(err)
    assert json.loads(target.read_text(encoding="utf-8"))["rows"][1]["n"] == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


# ----------------------------------------------------------------------------- the scan and the batching ceiling
@pytest.mark.slow
def test_bench_scan_reports_both_speeds_and_their_ratio(tiny_model_dir, capsys):
    from cli.bench.scan import bench_scan

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

    from cli.bench import scan

    seen = []

    class Model:
        config = type("Config", (), {"vocab_size": 10})()

        def __call__(self, input_ids, output_attentions):
            seen.append((input_ids.shape[0], torch.get_num_threads()))

    monkeypatch.setattr(scan, "median_time", lambda fn, repeats: (fn(), {1: 0.1, 4: 0.8}[seen[-1][0]])[1])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ceiling = scan.batching_ceiling(Model(), batch_size=4, n_tokens=5)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert {(b, t) for b, t in seen} == {(1, 2), (4, 1)}
    # one text: 0.1 s; one thread, batch 4: 0.2 s a text → two cores 0.1 s a text → ratio 1
    assert ceiling["one_text_s"] == pytest.approx(0.1) and ceiling["one_thread_batched_s"] == pytest.approx(0.2)
    assert ceiling["ratio"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- peak memory
@pytest.mark.slow
def test_peak_memory_is_measured_in_a_fresh_process(tiny_model_dir):
    """``python -m cli.bench.memory`` runs on its own and reports MB above the model."""
    from cli.bench.memory import peak_rss_above_model

    mb = peak_rss_above_model(tiny_model_dir, 16)
    assert isinstance(mb, float) and 0 <= mb < 1000
    with pytest.raises(RuntimeError, match="Model folder not found"):  # the fresh process's own error
        peak_rss_above_model(tiny_model_dir / "missing", 16)


# ----------------------------------------------------------------------------- the real model's table
def test_bench_real_runs_the_real_table_alone_and_writes_it(tmp_path, capsys, monkeypatch):
    calls, real = [], []
    fake_measurements(monkeypatch, calls)
    from cli.bench import command

    monkeypatch.setattr(command, "bench_real", lambda ns, **kw: real.append((ns, kw)) or [{"n": n} for n in ns])
    code, _, _ = run(capsys, "bench", "--real", "--real-ns", "512,8192", "--json", tmp_path / "b.json")
    assert code == 0 and real == [([512, 8192], {"repeats": 1, "memory": True})]
    assert calls == [("real_stall", [512, 8192]), "importance", "head_view"]  # no GPT-2 rows, no scan
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["real"] == [{"n": 512}, {"n": 8192}] and data["real_gui_stall_ms"] == {"512": 1.0, "8192": 1.0}
    assert data["importance"] == {"x": 1}


@pytest.mark.parametrize("ns", ["9000", "512,x", ""])
def test_bench_real_ns_outside_the_context_is_refused(ns, capsys):
    code, _, err = run(capsys, "bench", "--real", "--real-ns", ns)
    assert code == 2 and "from 2 to 8,192 (SmolLM2's context)" in one_error_line(err)


def test_bench_real_without_smollm2_says_so_and_measures_nothing(monkeypatch, capsys):
    from analysis.model import catalogue
    from cli.bench.real import bench_real

    monkeypatch.setattr(catalogue, "smollm2_file", lambda: None)
    assert bench_real([512]) == []
    assert "SmolLM2 is not installed (make smollm2)" in capsys.readouterr().err


@pytest.mark.slow  # a whole export in a fresh process (~7 s)
def test_bench_export_figures_are_those_of_a_real_export(tiny_model_dir):
    """The export column runs main.py export in a fresh process: its bytes are the folder's, its parity the file's."""
    from cli.bench.real import export_figures

    figures = export_figures("The cat sat on the mat. The cat sat on the mat.", 20, model=str(tiny_model_dir))
    assert figures["export_s"] > 0 and figures["export_mb"] > 0
    assert figures["parity"] == "pass all rows" and figures["export_summary"]["passed"] is True


def test_the_floor_is_the_sdpa_forward_and_the_model_keeps_its_attention(tiny_model):
    import torch

    from cli.bench.real import _sdpa_forward

    seen = []
    hook = tiny_model.model.register_forward_pre_hook(lambda m, a: seen.append(m.config._attn_implementation))
    try:
        _sdpa_forward(tiny_model, torch.tensor([[1, 2, 3]]))
    finally:
        hook.remove()
    assert seen == ["sdpa"] and tiny_model.model.config._attn_implementation == "eager"
