"""``attnscope export`` at any length: --max-export-mb, --heads and --all-maps on a result whose maps are computed
on demand (ATTNSCOPE_KEEP_MAPS_MB=0), and their refusals: one line, exit 2, nothing written."""
import json

import numpy as np
import pytest

from helpers import one_error_line, run_main as run

TEXT = "The server rejected the request because it was overloaded. The server"


@pytest.fixture
def on_demand(monkeypatch):
    from analysis.run import memory

    monkeypatch.setenv(memory.KEEP_MAPS_ENV, "0")


@pytest.mark.slow
def test_above_the_budget_the_export_says_what_it_left_out_and_writes_the_heads_asked_for(
        tiny_model_dir, tmp_path, capsys, on_demand):
    out = tmp_path / "x"
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--bos", "--out", out,
                       "--max-export-mb", "0.001", "--heads", "2.1,L0H3")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "attention.npz leaves out" in line]
    assert len(warnings) == 1 and warnings[0].startswith("attnscope: warning: attention.npz leaves out attentions (")
    with np.load(out / "attention.npz") as data:
        assert data.files == ["head_maps", "head_value_norms", "head_index", "layer_rollout", "layer_index",
                              "tokens", "token_ids"]
        assert data["head_index"].tolist() == [[2, 1], [0, 3]] and data["layer_index"].tolist() == [0, 2]
    assert sorted(p.name for p in (out / "heads").iterdir()) == ["L0H3.json", "L0H3.png", "L2H1.json",
                                                                   "L2H1.png"]  # the heads asked for, with options
    entry = json.loads((out / "summary.json").read_text(encoding="utf-8"))["export"]
    assert entry["heads"] == [[2, 1], [0, 3]] and set(entry["left_out"]) == {"attentions", "value_norms", "rollout"}


@pytest.mark.slow
def test_all_maps_writes_npy_files_beside_the_npz(tiny_model_dir, tiny_model, tmp_path, capsys, on_demand):
    from analysis.run.inference import run_text

    out = tmp_path / "x"
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--bos", "--out", out,
                       "--all-maps", "--no-head-images")
    assert code == 0, err
    assert "leaves out" not in err
    kept = run_text(tiny_model, TEXT, bos=True, keep_maps=True)
    maps = np.load(out / "attentions.npy", mmap_mode="r")
    np.testing.assert_allclose(maps[1, 2], kept.attentions[1, 2], atol=1e-5, rtol=0)
    assert np.load(out / "rollout.npy", mmap_mode="r").shape == (3, kept.n_tokens, kept.n_tokens)
    with np.load(out / "attention.npz") as data:
        assert data.files == ["tokens", "token_ids"]


@pytest.mark.parametrize("case", ["unknown_head", "bad_heads", "bad_budget", "negative_budget", "disk_too_small"])
def test_export_layout_refusals_are_one_line_exit_2_and_write_nothing(tiny_model_dir, tmp_path, capsys, on_demand,
                                                                      monkeypatch, case):
    options = {"unknown_head": ["--heads", "1.0,3.0"], "bad_heads": ["--heads", "1,0"],
               "bad_budget": ["--max-export-mb", "lots"], "negative_budget": ["--max-export-mb", "-1"],
               "disk_too_small": ["--all-maps"]}[case]
    if case == "disk_too_small":
        import shutil

        from analysis.export import layout

        real = shutil.disk_usage
        monkeypatch.setattr(layout.shutil, "disk_usage", lambda path: real(path)._replace(free=1000))
    code, out, err = run(capsys, "export", "--model", tiny_model_dir, "--text", TEXT, "--out", tmp_path / "x",
                         "--no-head-images", *options)
    line = one_error_line(err)
    assert code == 2 and "wrote" not in out
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing beside it
    expected = {"unknown_head": "L3H0 does not exist: the model has layers 0–2 and heads 0–3.",
                "bad_heads": "'1' is not a head", "bad_budget": "'lots' is not a number of megabytes",
                "negative_budget": "'-1' is not a number of megabytes", "disk_too_small": "free on "}[case]
    assert expected in line
