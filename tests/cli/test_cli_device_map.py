"""``--device-map auto --max-memory …`` on the command line: the export of a model split onto the disk holds the
same numbers as the unsplit export, and says nothing more on stderr."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import one_error_line, run_main as run


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from analysis.model.synthetic import save_random_family

    return save_random_family(tmp_path_factory.mktemp("llama"), "llama")


@pytest.mark.slow
def test_a_split_export_equals_the_whole_one(llama_dir, tmp_path, capsys):
    text = "The cat sat on the mat. The cat sat."
    code, _, err = run(capsys, "export", "--model", llama_dir, "--text", text, "--out", tmp_path / "whole",
                       "--no-head-images")
    assert code == 0, err
    code, out, err = run(capsys, "export", "--model", llama_dir, "--text", text, "--out", tmp_path / "split",
                         "--no-head-images", "--device-map", "auto", "--max-memory", "cpu=60000")
    assert code == 0 and "meta device" not in err, err
    with np.load(tmp_path / "whole" / "attention.npz") as a, np.load(tmp_path / "split" / "attention.npz") as b:
        np.testing.assert_allclose(b["attentions"], a["attentions"], atol=1e-6)
    assert "passed" in out


def test_a_bad_memory_limit_is_one_line(llama_dir, tmp_path, capsys):
    code, _, err = run(capsys, "export", "--model", llama_dir, "--text", "A cat.", "--out", tmp_path / "x",
                       "--device-map", "auto", "--max-memory", "cpu:3GB")
    assert code == 2 and "is not a memory limit" in one_error_line(err)
    assert not (tmp_path / "x").exists()
